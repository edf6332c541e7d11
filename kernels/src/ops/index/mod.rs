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

/// Runs `$body` with `$T` bound to the Rust type of `$dtype`, for every
/// type with a compute representation; `$err` otherwise.
macro_rules! dispatch_all {
    ($dtype:expr, $T:ident => $body:expr, else $err:expr) => {{
        use $crate::ElementType as E;
        match $dtype {
            E::F32 => {
                type $T = f32;
                $body
            }
            E::F64 => {
                type $T = f64;
                $body
            }
            E::F16 => {
                type $T = ::half::f16;
                $body
            }
            E::BF16 => {
                type $T = ::half::bf16;
                $body
            }
            E::I8 => {
                type $T = i8;
                $body
            }
            E::I16 => {
                type $T = i16;
                $body
            }
            E::I32 => {
                type $T = i32;
                $body
            }
            E::I64 => {
                type $T = i64;
                $body
            }
            E::U8 => {
                type $T = u8;
                $body
            }
            E::U16 => {
                type $T = u16;
                $body
            }
            E::U32 => {
                type $T = u32;
                $body
            }
            E::U64 => {
                type $T = u64;
                $body
            }
            E::Bool => {
                type $T = bool;
                $body
            }
            _ => $err,
        }
    }};
}

/// Like `dispatch_all!` for the numeric types (no bool).
macro_rules! dispatch_num {
    ($dtype:expr, $T:ident => $body:expr, else $err:expr) => {{
        use $crate::ElementType as E;
        match $dtype {
            E::F32 => {
                type $T = f32;
                $body
            }
            E::F64 => {
                type $T = f64;
                $body
            }
            E::F16 => {
                type $T = ::half::f16;
                $body
            }
            E::BF16 => {
                type $T = ::half::bf16;
                $body
            }
            E::I8 => {
                type $T = i8;
                $body
            }
            E::I16 => {
                type $T = i16;
                $body
            }
            E::I32 => {
                type $T = i32;
                $body
            }
            E::I64 => {
                type $T = i64;
                $body
            }
            E::U8 => {
                type $T = u8;
                $body
            }
            E::U16 => {
                type $T = u16;
                $body
            }
            E::U32 => {
                type $T = u32;
                $body
            }
            E::U64 => {
                type $T = u64;
                $body
            }
            _ => $err,
        }
    }};
}

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
