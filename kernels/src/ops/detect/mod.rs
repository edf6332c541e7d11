//! Detection and classification post-processing: selection (TopK),
//! encoding (OneHot), region pooling (RoiAlign).
//!
//! Files: `topk` (TopK, OneHot), `roi_align` (RoiAlign).

mod roi_align;
mod topk;

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
        "TopK" => boxed(topk::TopK::new(spec)),
        "OneHot" => boxed(topk::OneHot::new(spec)),
        "RoiAlign" => boxed(roi_align::RoiAlign::new(spec)),
        _ => return None,
    })
}
