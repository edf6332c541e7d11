//! Operator lookup by (domain, op type, opset) (cold path).

use crate::{CpuFeatures, KernelError, KernelOptions, NodeSpec, Operator, ops};

/// The operator for `spec`, with its attributes parsed and checked.
///
/// Unknown operators are [`KernelError::UnsupportedOp`]; known operators
/// with an unsupported attribute or input combination return the operator's
/// own error.
pub fn operator(spec: &NodeSpec<'_>) -> Result<Box<dyn Operator>, KernelError> {
    operator_with(spec, KernelOptions::default())
}

/// [`operator`] with the caller's [`KernelOptions`].
pub fn operator_with(
    spec: &NodeSpec<'_>,
    options: KernelOptions,
) -> Result<Box<dyn Operator>, KernelError> {
    let domain = match spec.domain {
        "ai.onnx" => "",
        d => d,
    };
    let spec = NodeSpec { domain, ..*spec };
    if let Some(op) = ops::basic::lookup(&spec) {
        return op;
    }
    let cpu = options.cpu.unwrap_or_else(CpuFeatures::detect);
    if let Some(op) = ops::linalg::lookup_with(&spec, cpu, options) {
        return op;
    }
    if let Some(op) = ops::conv::lookup(&spec, cpu) {
        return op;
    }
    if let Some(op) = ops::quant::lookup(&spec, cpu) {
        return op;
    }
    let families = [
        ops::index::lookup,
        ops::math::lookup,
        ops::image::lookup,
        ops::normalize::lookup,
        ops::detect::lookup,
        ops::attention::lookup,
    ];
    for lookup in families {
        if let Some(op) = lookup(&spec) {
            return op;
        }
    }
    Err(KernelError::UnsupportedOp {
        domain: if domain.is_empty() {
            "ai.onnx".into()
        } else {
            domain.into()
        },
        op_type: spec.op_type.into(),
        opset: spec.opset,
    })
}
