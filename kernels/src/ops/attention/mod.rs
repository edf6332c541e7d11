//! Transformer operators: fused attention (ONNX Attention, com.microsoft
//! GroupQueryAttention) and rotary embeddings (ONNX and com.microsoft
//! RotaryEmbedding).
//!
//! Files: `problem` (what one attention call computes: layouts, key
//! ranges, mask), `core` (the fused attention kernel both attention
//! operators share), `panels` (keys transposed for rows that share them),
//! `attention` (ONNX Attention's front end), `gqa`
//! (GroupQueryAttention's front end: packed QKV, KV cache buffers, rotary),
//! `rotary` (the row rotation and both RotaryEmbedding operators).

#[allow(clippy::module_inception)]
mod attention;
mod core;
mod gqa;
mod panels;
mod problem;
mod rotary;
mod windowed;

use rotary::RotaryKind;

use crate::ops::basic::common::Elem;
use crate::{KernelError, NodeSpec, Operator};

/// The float element types attention and rotary embeddings compute on
/// (in f32).
pub(crate) trait Float: Elem + Default {
    /// To f32.
    fn to_f32(self) -> f32;
    /// From f32 (rounded).
    fn from_f32(v: f32) -> Self;
    /// The slice as f32, when this is f32 (accumulate in place).
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]>;
}

impl Float for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn as_f32_mut(s: &mut [Self]) -> Option<&mut [f32]> {
        Some(s)
    }
}

impl Float for half::f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    #[inline(always)]
    fn as_f32_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

impl Float for half::bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    #[inline(always)]
    fn as_f32_mut(_: &mut [Self]) -> Option<&mut [f32]> {
        None
    }
}

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
