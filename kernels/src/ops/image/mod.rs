//! Image geometry: resampling and rearranging spatial axes (Resize,
//! Upsample, DepthToSpace, SpaceToDepth, CenterCropPad, GridSample,
//! AffineGrid, Col2Im).
//!
//! Lookup and attribute parsing are cold path; `execute` is hot path (one
//! type dispatch outside the element loops, per-axis tables built once per
//! execute). Files: `resize` (Resize and Upsample operands and shapes),
//! `resample` (their sampling kernels), `common` (interpolation arithmetic
//! and float operands), `space` (DepthToSpace, SpaceToDepth), `crop`
//! (CenterCropPad), `grid` (GridSample), `affine` (AffineGrid), `col2im`
//! (Col2Im).

mod affine;
mod col2im;
mod common;
mod crop;
mod grid;
mod resample;
mod resize;
mod space;

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
        "Resize" => boxed(resize::Resize::new(spec, false)),
        "Upsample" => boxed(resize::Resize::new(spec, true)),
        "DepthToSpace" => boxed(space::Space::new(spec, true)),
        "SpaceToDepth" => boxed(space::Space::new(spec, false)),
        "CenterCropPad" => boxed(crop::CenterCropPad::new(spec)),
        "GridSample" => boxed(grid::GridSample::new(spec)),
        "AffineGrid" => boxed(affine::AffineGrid::new(spec)),
        "Col2Im" => boxed(col2im::Col2Im::new(spec)),
        _ => return None,
    })
}
