//! Shape and indexing operators (Shape, Size, ConstantOfShape, Range, Expand,
//! Tile, Flatten, GatherND, GatherElements, ScatterND, ScatterElements, Trilu,
//! CumSum, Where, Pad).
//!
//! Lookup and attribute parsing are cold path; each `execute` is hot path
//! (strides in fixed arrays of `MAX_RANK`, no allocation).
//!
//! Files: `shape` (Shape, Size, Flatten), `generate` (ConstantOfShape,
//! Range), `expand` (Expand, Tile, Where), `gather` (GatherND,
//! GatherElements), `scatter` (ScatterND, ScatterElements), `trilu` (Trilu,
//! CumSum), `pad` (Pad). `common` holds index wrapping, the numeric trait
//! and the strided broadcast walk.

pub(crate) mod common;
mod expand;
mod gather;
mod generate;
mod pad;
mod scatter;
mod shape;
mod trilu;

use crate::{KernelError, NodeSpec, Operator};

fn boxed<O: Operator + 'static>(
    op: Result<O, KernelError>,
) -> Result<Box<dyn Operator>, KernelError> {
    op.map(|o| Box::new(o) as Box<dyn Operator>)
}

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    if !spec.domain.is_empty() {
        return None;
    }
    Some(match spec.op_type {
        "Shape" => boxed(shape::Shape::new(spec)),
        "Size" => boxed(shape::Size::new(spec)),
        "Flatten" => boxed(shape::Flatten::new(spec)),
        "ConstantOfShape" => boxed(generate::ConstantOfShape::new(spec)),
        "Range" => boxed(generate::Range::new(spec)),
        "Expand" => boxed(expand::Expand::new(spec)),
        "Tile" => boxed(expand::Tile::new(spec)),
        "Where" => boxed(expand::Where::new(spec)),
        "GatherND" => boxed(gather::GatherNd::new(spec)),
        "GatherElements" => boxed(gather::GatherElements::new(spec)),
        "ScatterND" => boxed(scatter::ScatterNd::new(spec)),
        "ScatterElements" => boxed(scatter::ScatterElements::new(spec)),
        "Trilu" => boxed(trilu::Trilu::new(spec)),
        "CumSum" => boxed(trilu::CumSum::new(spec)),
        "Pad" => boxed(pad::Pad::new(spec)),
        _ => return None,
    })
}
