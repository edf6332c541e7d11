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
