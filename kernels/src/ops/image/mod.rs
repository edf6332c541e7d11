//! Image geometry: resampling and rearranging spatial axes (Resize,
//! Upsample, DepthToSpace, SpaceToDepth, CenterCropPad, GridSample,
//! AffineGrid, Col2Im).

use crate::{KernelError, NodeSpec, Operator};

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    if !spec.domain.is_empty() {
        return None;
    }
    None
}
