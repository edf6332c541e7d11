//! Shape and indexing operators (Shape, Size, ConstantOfShape, Range, Expand,
//! Tile, Flatten, GatherND, GatherElements, ScatterND, ScatterElements, Trilu,
//! CumSum, Where, Pad).

use crate::{KernelError, NodeSpec, Operator};

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    let _ = spec;
    None
}
