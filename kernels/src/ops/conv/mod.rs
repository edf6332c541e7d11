//! Convolution and pooling over `[N, C, spatial...]` tensors: Conv,
//! ConvTranspose, MaxPool, AveragePool and LpPool (cold path: attributes,
//! shapes and packing; hot path: `execute` and the kernels).

mod convolution;
mod direct;
mod flat;
mod geometry;
mod im2col;
mod pool;
mod shape;
mod transpose;

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
        "Conv" => boxed(convolution::Conv::new(spec)),
        "ConvTranspose" => boxed(transpose::ConvTranspose::new(spec)),
        op @ ("MaxPool" | "AveragePool" | "LpPool") => boxed(pool::Pool::new(spec, op_name(op))),
        _ => return None,
    })
}

/// The static name of a pooling op type.
fn op_name(op: &str) -> &'static str {
    match op {
        "MaxPool" => "MaxPool",
        "AveragePool" => "AveragePool",
        _ => "LpPool",
    }
}
