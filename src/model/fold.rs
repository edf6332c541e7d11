//! Constant folding, shared by resolution (values that depend only on
//! initializers) and lowering (values that depend only on input shapes):
//! one node evaluated on known inputs, its outputs sized first and a kernel
//! panic turned into an error naming the node.

use std::panic::AssertUnwindSafe;

use onnx_prepared_kernels::{
    ElementType, KernelError, Operator, OutputInfo, PackedWeight, ParallelFor, Sequential, Tensor,
    element_count,
};

/// A kernel failed or panicked while evaluating a node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelFailure {
    /// The kernel returned an error.
    #[error("node `{node}` failed: {source}")]
    Failed {
        /// The node.
        node: String,
        /// What the kernel reported.
        source: KernelError,
    },
    /// The kernel panicked; the panic was caught at the node boundary.
    #[error("node `{node}` panicked: {detail}")]
    Panicked {
        /// The node.
        node: String,
        /// The panic message.
        detail: String,
    },
}

/// Bytes a tensor of `dtype` and `shape` holds in memory; `usize::MAX` when
/// the size overflows.
pub(crate) fn tensor_bytes(dtype: ElementType, shape: &[usize]) -> usize {
    element_count(shape)
        .and_then(|n| dtype.compute().byte_len(n as u64))
        .and_then(|b| usize::try_from(b).ok())
        .unwrap_or(usize::MAX)
}

/// Bytes the outputs `outs` of one folded node hold.
pub(crate) fn folded_bytes(outs: &[OutputInfo]) -> usize {
    outs.iter().fold(0usize, |n, o| {
        n.saturating_add(tensor_bytes(o.dtype, &o.shape))
    })
}

/// Evaluates a node whose inputs are all known on the calling thread: its
/// outputs (inferred as `outs`, already budgeted by the caller) are
/// allocated and computed.
pub(crate) fn fold_node(
    op: &dyn Operator,
    node: &str,
    inputs: &[Option<&Tensor>],
    outs: &[OutputInfo],
) -> Result<Vec<Tensor>, KernelFailure> {
    let mut tensors = Vec::with_capacity(outs.len());
    for o in outs {
        let t =
            Tensor::zeros(o.dtype, o.shape.clone()).map_err(|source| KernelFailure::Failed {
                node: node.to_owned(),
                source,
            })?;
        tensors.push(t);
    }
    execute_caught(op, node, (inputs, None, false), &mut tensors, &Sequential)?;
    Ok(tensors)
}

/// Executes one operator, turning a panic into an error naming the node.
/// A node whose outputs are all empty has nothing to compute and is not
/// executed (its inputs may be valid empty tensors with huge other dims).
/// With `in_place` the outputs the operator computes in place already hold
/// their inputs, and [`Operator::execute_in_place`] runs.
pub(crate) fn execute_caught(
    op: &dyn Operator,
    node: &str,
    (inputs, packed, in_place): (&[Option<&Tensor>], Option<&PackedWeight>, bool),
    outputs: &mut [Tensor],
    par: &dyn ParallelFor,
) -> Result<(), KernelFailure> {
    if !outputs.is_empty() && outputs.iter().all(Tensor::is_empty) {
        return Ok(());
    }
    match std::panic::catch_unwind(AssertUnwindSafe(|| {
        if in_place {
            op.execute_in_place(inputs, packed, outputs, par)
        } else {
            op.execute(inputs, packed, outputs, par)
        }
    })) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(KernelFailure::Failed {
            node: node.to_owned(),
            source,
        }),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(KernelFailure::Panicked {
                node: node.to_owned(),
                detail,
            })
        }
    }
}
