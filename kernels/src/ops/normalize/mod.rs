//! Normalizations over channels and spatial axes (BatchNormalization,
//! InstanceNormalization, GroupNormalization, LRN, LpNormalization,
//! MeanVarianceNormalization).
//!
//! Files: `common` (the float trait, f64 statistics, parameter views and
//! checks, also used by the `detect` family), `batch`
//! (BatchNormalization), `group` (InstanceNormalization,
//! GroupNormalization), `lrn` (LRN, LpNormalization), `mvn`
//! (MeanVarianceNormalization).

mod batch;
pub(crate) mod common;
mod group;
mod lrn;
mod mvn;

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
        _ => return None,
    })
}
