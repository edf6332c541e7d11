//! The operators. Each family owns its lookup; each operator has a scalar
//! reference path that is the oracle for its fast kernels.
//!
//! Families: `basic` (elementwise, normalization, data movement), `linalg`
//! (Gemm, MatMul, MatMulNBits), `index` (shape and indexing: Shape, Range,
//! Expand, Gather/Scatter forms, Where, Pad...), `math` (comparison, logic,
//! unary math, reductions), `attention` (fused attention, rotary
//! embeddings, skip normalizations, quantized gathers), `quant`
//! (DequantizeLinear and quantized MatMul patterns), `conv` (convolution
//! and pooling), `image` (resampling and spatial rearrangement),
//! `normalize` (channel and spatial normalizations) and `detect`
//! (detection post-processing: TopK, OneHot, RoiAlign, and NonZero,
//! Compress, Unique and NonMaxSuppression, whose output shapes follow
//! input values).

pub mod attention;
pub mod basic;
pub mod conv;
pub mod detect;
pub mod image;
pub mod index;
pub mod linalg;
pub mod math;
pub mod normalize;
pub mod quant;

use crate::{KernelError, PackedWeight};

/// Checks a packed weight of any layout this crate packs against its own
/// header: the parts and their sizes agree with what the header says, and
/// this CPU runs the layout's kernels — what a kernel would otherwise find
/// wrong only when it runs. Without the sources at hand (a cache being
/// verified on its own) this is what can be checked;
/// [`Prepack::validate`](crate::Prepack::validate) also checks the object
/// against the sources' shapes.
///
/// # Errors
/// [`KernelError::Invalid`] saying what does not match, or a layout this
/// crate does not pack.
pub fn check_packed(packed: &PackedWeight) -> Result<(), KernelError> {
    if let Some(result) = linalg::check_self_consistent(packed) {
        return result;
    }
    if let Some(result) = conv::check_self_consistent(packed) {
        return result;
    }
    Err(KernelError::Invalid {
        op: "Prepack",
        detail: format!(
            "packed weight `{}`: not a layout this build packs",
            packed.layout
        ),
    })
}
