//! Convolution and pooling over `[N, C, spatial...]` tensors: Conv,
//! ConvTranspose, MaxPool, AveragePool and LpPool (cold path: attributes,
//! shapes and packing; hot path: `execute` and the kernels).

use crate::{KernelError, NodeSpec, Operator};

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    if !spec.domain.is_empty() {
        return None;
    }
    None
}
