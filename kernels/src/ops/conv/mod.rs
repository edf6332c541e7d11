//! Convolution and pooling over `[N, C, spatial...]` tensors: Conv,
//! ConvTranspose, MaxPool, AveragePool and LpPool (cold path: attributes,
//! shapes and packing; hot path: `execute` and the kernels).

pub(crate) mod convolution;
mod direct;
mod epilogue;
mod flat;
pub(crate) mod geometry;
mod im2col;
mod packing;
pub(crate) mod pool;
pub(crate) mod shape;
mod transpose;

pub use epilogue::{ConvActivation, ConvFusion};

use crate::{CpuFeatures, KernelError, NodeSpec, Operator};

fn boxed<O: Operator + 'static>(
    op: Result<O, KernelError>,
) -> Result<Box<dyn Operator>, KernelError> {
    op.map(|o| Box::new(o) as Box<dyn Operator>)
}

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx), running the kernels of `cpu`'s best family
/// that this CPU has.
pub fn lookup(
    spec: &NodeSpec<'_>,
    cpu: CpuFeatures,
) -> Option<Result<Box<dyn Operator>, KernelError>> {
    if !spec.domain.is_empty() {
        return None;
    }
    Some(match spec.op_type {
        "Conv" => boxed(convolution::Conv::new(spec, cpu, ConvFusion::default())),
        "ConvTranspose" => boxed(transpose::ConvTranspose::new(spec, cpu)),
        op @ ("MaxPool" | "AveragePool" | "LpPool") => {
            boxed(pool::Pool::new(spec, op_name(op), cpu))
        }
        _ => return None,
    })
}

/// The Conv node `spec` with what `fusion` says follows it, as one
/// operator (named `FusedConv` when `fusion` is not empty): its inputs are
/// Conv's, then those [`ConvFusion`] lists. Resolution builds it when it
/// recognizes such a chain; its packed weights hold the normalization
/// folded.
///
/// # Errors
/// `spec` is not a valid Conv node.
pub fn fused(
    spec: &NodeSpec<'_>,
    fusion: ConvFusion,
    cpu: CpuFeatures,
) -> Result<Box<dyn Operator>, KernelError> {
    if !spec.domain.is_empty() || spec.op_type != "Conv" {
        return Err(KernelError::Invalid {
            op: "FusedConv",
            detail: format!("{} is not a Conv node", spec.op_type),
        });
    }
    boxed(convolution::Conv::new(spec, cpu, fusion))
}

/// [`crate::check_packed`] for convolution weights: `None` when `packed`
/// is not of this family's layout.
pub(crate) fn check_self_consistent(
    packed: &crate::PackedWeight,
) -> Option<Result<(), KernelError>> {
    packing::is_conv_layout(packed).then(|| packing::ConvPacked::of(packed).map(|_| ()))
}

/// The static name of a pooling op type.
fn op_name(op: &str) -> &'static str {
    match op {
        "MaxPool" => "MaxPool",
        "AveragePool" => "AveragePool",
        _ => "LpPool",
    }
}
