//! Normalizations over channels and spatial axes (BatchNormalization,
//! InstanceNormalization, GroupNormalization, LRN, LpNormalization,
//! MeanVarianceNormalization) and the detection post-processing operators
//! whose output shapes follow from their input shapes.

use crate::{KernelError, NodeSpec, Operator};

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    if !spec.domain.is_empty() {
        return None;
    }
    None
}
