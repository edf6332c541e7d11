//! Quantization operators: QuantizeLinear, DequantizeLinear and
//! DynamicQuantizeLinear, the int8 operators on an integer matrix product
//! (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv and the
//! `com.microsoft` QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul), the
//! `com.microsoft` QLinear elementwise, pooling, softmax and concatenation
//! operators, GatherBlockQuantized and the prepacked
//! DequantizeLinear(4-bit) -> MatMul pattern ([`qdq_matmul`]).
//!
//! Files: `quantize` (QuantizeLinear, DynamicQuantizeLinear), `dequantize`
//! (DequantizeLinear), `qgemm` (the integer product: packing, AVX2 and
//! scalar kernels, output stages), `operand` (8-bit operands, the packed
//! `B`, the batch loop), `qmatmul` and `qconv` (the product's operators;
//! `qconv_pack` packs the convolution weights), `planar` (the
//! channel-major convolution on AVX-512 VNNI), `conv_loops` (im2col and
//! depthwise loops), `qlinear` (the QLinear elementwise family),
//! `gather_block` (GatherBlockQuantized), `qdq_matmul` (the fused 4-bit
//! pattern over the MatMulNBits kernels of `linalg::q4`), `common`
//! (f32-computed float outputs, quantized element
//! access, the scale geometry, rounding).

mod common;
mod conv_loops;
mod depthwise;
#[cfg(target_arch = "x86_64")]
mod depthwise_blocked;
mod dequantize;
mod gather_block;
mod operand;
mod planar;
mod qconv;
mod qconv_pack;
mod qdq_matmul;
mod qgemm;
mod qlinear;
mod qmatmul;
mod quantize;

pub use qdq_matmul::{qdq_matmul, qdq_matmul_with_cpu};

use crate::{CpuFeatures, KernelError, NodeSpec, Operator};

fn boxed<O: Operator + 'static>(
    op: Result<O, KernelError>,
) -> Result<Box<dyn Operator>, KernelError> {
    op.map(|o| Box::new(o) as Box<dyn Operator>)
}

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(
    spec: &NodeSpec<'_>,
    cpu: CpuFeatures,
) -> Option<Result<Box<dyn Operator>, KernelError>> {
    if let Some(op) = qmatmul::lookup(spec, cpu) {
        return Some(op);
    }
    if let Some(op) = qconv::lookup(spec, cpu) {
        return Some(op);
    }
    if let Some(op) = qlinear::lookup(spec) {
        return Some(op);
    }
    Some(match (spec.domain, spec.op_type) {
        ("" | "com.microsoft", "DequantizeLinear") => {
            boxed(dequantize::DequantizeLinear::new(spec))
        }
        ("" | "com.microsoft", "QuantizeLinear") => boxed(quantize::QuantizeLinear::new(spec)),
        ("", "DynamicQuantizeLinear") => boxed(quantize::DynamicQuantizeLinear::new(spec)),
        ("com.microsoft", "GatherBlockQuantized") => {
            boxed(gather_block::GatherBlockQuantized::new(spec))
        }
        _ => return None,
    })
}
