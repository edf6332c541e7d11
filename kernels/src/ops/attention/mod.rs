//! Transformer operators: fused attention (ONNX Attention, com.microsoft
//! GroupQueryAttention) and rotary embeddings (ONNX and com.microsoft
//! RotaryEmbedding).
//!
//! Files: `core` (the fused attention kernel both attention operators
//! share), `panels` (keys transposed for rows that share them), `attention` (ONNX Attention's front end), `gqa`
//! (GroupQueryAttention's front end: packed QKV, KV cache buffers, rotary),
//! `rotary` (the row rotation and both RotaryEmbedding operators).

#[allow(clippy::module_inception)]
mod attention;
mod core;
mod gqa;
mod panels;
mod rotary;

use rotary::RotaryKind;

use crate::{KernelError, NodeSpec, Operator};

fn boxed<O: Operator + 'static>(
    op: Result<O, KernelError>,
) -> Result<Box<dyn Operator>, KernelError> {
    op.map(|o| Box::new(o) as Box<dyn Operator>)
}

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    Some(match (spec.domain, spec.op_type) {
        ("", "Attention") => boxed(attention::Attention::new(spec)),
        ("", "RotaryEmbedding") => boxed(rotary::RotaryEmbedding::new(spec, RotaryKind::Onnx)),
        ("com.microsoft", "RotaryEmbedding") => {
            boxed(rotary::RotaryEmbedding::new(spec, RotaryKind::Microsoft))
        }
        ("com.microsoft", "GroupQueryAttention") => boxed(gqa::GroupQueryAttention::new(spec)),
        _ => return None,
    })
}
