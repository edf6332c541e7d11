//! Normalizations over channels and spatial axes (BatchNormalization,
//! InstanceNormalization, GroupNormalization, LRN, LpNormalization,
//! MeanVarianceNormalization) and the detection post-processing operators
//! whose output shapes follow from their input shapes.
//!
//! Files: `common` (the float trait, f64 statistics, parameter views and
//! checks), `batch` (BatchNormalization), `group` (InstanceNormalization,
//! GroupNormalization), `lrn` (LRN, LpNormalization), `mvn`
//! (MeanVarianceNormalization), `detect` (TopK, OneHot), `roi_align`
//! (RoiAlign).

mod batch;
mod common;
mod detect;
mod group;
mod lrn;
mod mvn;
mod roi_align;

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
        "BatchNormalization" => boxed(batch::BatchNorm::new(spec)),
        "InstanceNormalization" => boxed(group::GroupNorm::instance(spec)),
        "GroupNormalization" => boxed(group::GroupNorm::group(spec)),
        "LRN" => boxed(lrn::Lrn::new(spec)),
        "LpNormalization" => boxed(lrn::LpNorm::new(spec)),
        "MeanVarianceNormalization" => boxed(mvn::Mvn::new(spec)),
        "TopK" => boxed(detect::TopK::new(spec)),
        "OneHot" => boxed(detect::OneHot::new(spec)),
        "RoiAlign" => boxed(roi_align::RoiAlign::new(spec)),
        _ => return None,
    })
}
