//! Matrix products: MatMul, Gemm and `com.microsoft` MatMulNBits, with their
//! packed layouts and SIMD kernels (cold path: lookup, shape inference and
//! packing; hot path: `execute` and the kernels).
//!
//! Files:
//! * `matmul.rs`, `gemm.rs`, `nbits.rs`: the operators (attributes, shapes,
//!   prepack offers, dispatch);
//! * [`reference`](mod@reference): scalar loops, the oracle for every fast kernel and the
//!   path for element types without one;
//! * `sgemm/`: the f32 GEMM driver and its micro-kernels (`avx512.rs`
//!   `12 x 32`, `avx2.rs` `6 x 16`, `portable.rs` `4 x 16`);
//! * `q4/`: the 4-bit packed layout, its packing and matrix-vector kernels,
//!   and the opt-in int8-activation kernels on the same layout (`q4/int8*`);
//! * `isa.rs`: kernel-family selection from [`CpuFeatures`]; `shape.rs`:
//!   numpy.matmul shapes and allocation-free batch indexing.
//!
//! # Packed layouts
//!
//! | key | parts |
//! |---|---|
//! | `matmul-f32-v1-nr{NR}-{isa}` | header, `B` panels `[ceil(N/NR)][K][NR]` |
//! | `gemm-f32-v1-transB{0,1}-nr{NR}-{isa}` | same; `transB` is normalized away but named, since the source bytes are read differently |
//! | `matmul-nbits-q4-v1-b{bs}-zp{0,u8,f32,f16}-t{T}-{isa}` | header, weights regrouped into column tiles, scales, `-zp * scale` (layout in `q4/mod.rs`) |
//!
//! `NR` is 32 for AVX-512 and 16 for AVX2 and portable. Every packed weight
//! starts with a `U64` header naming its kernel family and dimensions;
//! `execute` dispatches on it and refuses a family this CPU lacks. Padding is
//! zero, so packing is deterministic.
//!
//! Dependency direction: operators -> `sgemm`/`q4` -> `isa`; kernels know
//! nothing of tensors or ONNX.

mod fused_matmul;
mod gemm;
pub(crate) mod isa;
mod matmul;
mod nbits;
pub(crate) mod q4;
pub mod reference;
pub(crate) mod sgemm;
pub(crate) mod shape;

use isa::Isa;

use crate::{
    CpuFeatures, ElementType, KernelError, KernelOptions, NodeSpec, Operator, PackedWeight,
    Prepack, Tensor, TensorData,
};

/// A borrowed view of a packed 4-bit weight: what `q4` packs and the f32
/// GEMM (`sgemm`) dequantizes panel by panel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Q4View<'a> {
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) block_size: usize,
    pub(crate) blocks: usize,
    /// Columns per tile.
    pub(crate) tile: usize,
    pub(crate) tiles: usize,
    pub(crate) weights: &'a [u8],
    pub(crate) scales: &'a [f32],
    /// `-zero_point * scale` when zero points were given.
    pub(crate) nzs: Option<&'a [f32]>,
}

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    lookup_with_cpu(spec, CpuFeatures::detect())
}

/// [`lookup`] with the kernels of unpacked inputs limited to `cpu`
/// (intersected with what this CPU has). Packed inputs always run the
/// kernels their layout names. For tests and benchmarks of every family.
pub fn lookup_with_cpu(
    spec: &NodeSpec<'_>,
    cpu: CpuFeatures,
) -> Option<Result<Box<dyn Operator>, KernelError>> {
    lookup_with(spec, cpu, KernelOptions::default())
}

/// [`lookup_with_cpu`] with the caller's [`KernelOptions`].
pub fn lookup_with(
    spec: &NodeSpec<'_>,
    cpu: CpuFeatures,
    options: KernelOptions,
) -> Option<Result<Box<dyn Operator>, KernelError>> {
    let isa = Isa::select(cpu);
    let op = match (spec.domain, spec.op_type) {
        ("" | "ai.onnx", "MatMul") => matmul::MatMul::create(spec, isa),
        ("" | "ai.onnx", "Gemm") => gemm::Gemm::create(spec, isa),
        ("com.microsoft", "MatMulNBits") => nbits::MatMulNBits::create(spec, isa, options),
        ("com.microsoft", "FusedMatMul") => fused_matmul::FusedMatMul::create(spec, isa),
        _ => return None,
    };
    Some(op)
}

/// Rejects attributes outside `allowed`.
fn check_attributes(
    spec: &NodeSpec<'_>,
    op: &'static str,
    allowed: &[&str],
) -> Result<(), KernelError> {
    match spec
        .attributes
        .names()
        .into_iter()
        .find(|n| !allowed.contains(&n.as_str()))
    {
        Some(name) => Err(KernelError::Attribute {
            op,
            name: "(unknown)",
            detail: format!("attribute `{name}` is not supported"),
        }),
        None => Ok(()),
    }
}

/// Checks the input and output counts of a node.
fn check_arity(
    spec: &NodeSpec<'_>,
    op: &'static str,
    inputs: std::ops::RangeInclusive<usize>,
) -> Result<(), KernelError> {
    if !inputs.contains(&spec.inputs) || spec.outputs != 1 {
        return Err(KernelError::Shape(format!(
            "{op}: takes {}..={} inputs and 1 output, got {} and {}",
            inputs.start(),
            inputs.end(),
            spec.inputs,
            spec.outputs
        )));
    }
    Ok(())
}

/// The single f32 output of `op`, checked against the expected length.
fn output_f32<'a>(
    outputs: &'a mut [Tensor],
    op: &'static str,
    len: usize,
) -> Result<&'a mut [f32], KernelError> {
    let out = outputs
        .first_mut()
        .ok_or_else(|| KernelError::Shape(format!("{op}: no output tensor")))?;
    let dtype = out.dtype();
    let data = out
        .as_f32_mut()
        .ok_or(KernelError::UnsupportedType { op, dtype })?;
    if data.len() != len {
        return Err(KernelError::Shape(format!(
            "{op}: output holds {} elements, the product has {len}",
            data.len()
        )));
    }
    Ok(data)
}

/// Copies a reference result into the preallocated output.
/// Bytes of a temporary of `dtype` and `shape` (saturating: a size that
/// overflows is refused by whoever charges it).
fn scratch_of(dtype: ElementType, shape: &[usize]) -> usize {
    crate::element_count(shape)
        .and_then(|n| dtype.compute().byte_len(n as u64))
        .and_then(|b| usize::try_from(b).ok())
        .unwrap_or(usize::MAX)
}

fn store_result(
    outputs: &mut [Tensor],
    op: &'static str,
    result: Tensor,
) -> Result<(), KernelError> {
    let out = outputs
        .first_mut()
        .ok_or_else(|| KernelError::Shape(format!("{op}: no output tensor")))?;
    if out.shape() != result.shape() || out.dtype() != result.dtype() {
        return Err(KernelError::Shape(format!(
            "{op}: output is {} {:?}, the product is {} {:?}",
            out.dtype(),
            out.shape(),
            result.dtype(),
            result.shape()
        )));
    }
    out.set_data(result.into_parts().1)
}

/// First header word of an f32 panel packing.
const F32_MAGIC: u64 = 0x6632_7061_6e65_6c01;

/// The version of the f32 panel format, part of every layout key: a change
/// to what the packing writes raises it.
const F32_PACK_VERSION: u32 = 1;

/// Words of an f32 panel packing's `U64` header.
const F32_HEADER_WORDS: usize = 6;

/// Packs a constant f32 `B` into `B` panels for one kernel family.
#[derive(Debug)]
struct F32PanelPrepack {
    layout: String,
    trans_b: bool,
    isa: Isa,
}

impl F32PanelPrepack {
    fn new(prefix: &str, trans_b: Option<bool>, isa: Isa) -> Self {
        let trans = trans_b.map_or(String::new(), |t| format!("-transB{}", t as u8));
        Self {
            layout: format!(
                "{prefix}-f32-v{F32_PACK_VERSION}{trans}-nr{}-{}",
                isa.f32_nr(),
                isa.name()
            ),
            trans_b: trans_b.unwrap_or(false),
            isa,
        }
    }
}

impl Prepack for F32PanelPrepack {
    fn layout(&self) -> &str {
        &self.layout
    }

    fn consumes(&self) -> &[usize] {
        &[1]
    }

    fn prepare(
        &self,
        sources: &[&Tensor],
        _par: &dyn crate::ParallelFor,
    ) -> Result<PackedWeight, KernelError> {
        let b = sources
            .first()
            .ok_or_else(|| KernelError::Shape("f32 panel packing needs B".into()))?;
        let data = b.as_f32().ok_or_else(|| KernelError::UnsupportedType {
            op: "MatMul",
            dtype: b.dtype(),
        })?;
        let &[r, c] = b.shape() else {
            return Err(KernelError::Shape(format!(
                "packed B must be 2-D, got {:?}",
                b.shape()
            )));
        };
        let (k, n) = if self.trans_b { (c, r) } else { (r, c) };
        let nr = self.isa.f32_nr();
        let panels = sgemm::pack_b(data, k, n, self.trans_b, nr)?;
        let header = vec![
            F32_MAGIC,
            self.isa.code(),
            k as u64,
            n as u64,
            nr as u64,
            self.trans_b as u64,
        ];
        Ok(PackedWeight {
            layout: self.layout.clone(),
            parts: vec![TensorData::U64(header).into(), panels],
        })
    }

    fn validate(&self, packed: &PackedWeight, shapes: &[&[usize]]) -> Result<(), KernelError> {
        crate::validate_common(&self.layout, self.packed_bytes(shapes), packed)?;
        let view = f32_panels(packed, "MatMul")?;
        let expected = match *shapes {
            [&[r, c]] if self.trans_b => (c, r),
            [&[r, c]] => (r, c),
            _ => (usize::MAX, usize::MAX),
        };
        if view.isa != self.isa || view.trans_b != self.trans_b || (view.k, view.n) != expected {
            return Err(KernelError::Invalid {
                op: "MatMul",
                detail: format!(
                    "packed weight `{}`: packed for K = {}, N = {} on {}, not {expected:?} on {}",
                    packed.layout,
                    view.k,
                    view.n,
                    view.isa.name(),
                    self.isa.name()
                ),
            });
        }
        Ok(())
    }

    fn packed_bytes(&self, shapes: &[&[usize]]) -> Option<usize> {
        let &[&[r, c]] = shapes else {
            return None;
        };
        let (k, n) = if self.trans_b { (c, r) } else { (r, c) };
        let nr = self.isa.f32_nr();
        n.div_ceil(nr)
            .checked_mul(nr)?
            .checked_mul(k)?
            .checked_mul(4)?
            .checked_add(F32_HEADER_WORDS * 8)
    }
}

/// [`crate::check_packed`] for the layouts of this family: `None` when
/// `packed` is not one of them.
pub(crate) fn check_self_consistent(packed: &PackedWeight) -> Option<Result<(), KernelError>> {
    if let Some(result) = q4::check_self_consistent(packed) {
        return Some(result);
    }
    (packed
        .parts
        .first()
        .and_then(|p| p.as_u64())
        .and_then(|h| h.first())
        == Some(&F32_MAGIC))
    .then(|| f32_panels(packed, "MatMul").map(|_| ()))
}

/// A checked view of an f32 panel packing.
#[derive(Debug, Clone, Copy)]
struct F32Panels<'a> {
    isa: Isa,
    k: usize,
    n: usize,
    trans_b: bool,
    panels: &'a [f32],
}

fn f32_panels<'a>(
    packed: &'a PackedWeight,
    op: &'static str,
) -> Result<F32Panels<'a>, KernelError> {
    let bad = |detail: &str| KernelError::Invalid {
        op,
        detail: format!("packed weight `{}`: {detail}", packed.layout),
    };
    let (Some(header), Some(panels)) = (
        packed.parts.first().and_then(|p| p.as_u64()),
        packed.parts.get(1).and_then(|p| p.as_f32()),
    ) else {
        return Err(bad("not an f32 panel layout"));
    };
    if packed.parts.len() != 2 {
        return Err(bad("not an f32 panel layout"));
    }
    let &[magic, code, k, n, nr, trans_b] = header else {
        return Err(bad("bad header"));
    };
    if magic != F32_MAGIC {
        return Err(bad("not an f32 panel layout"));
    }
    let isa = Isa::from_code(code)
        .ok_or_else(|| bad("this CPU lacks the instructions of this layout"))?;
    let (k, n, nr) = (k as usize, n as usize, nr as usize);
    if nr != isa.f32_nr() || panels.len() != n.div_ceil(nr) * k * nr {
        return Err(bad("inconsistent parts"));
    }
    Ok(F32Panels {
        isa,
        k,
        n,
        trans_b: trans_b == 1,
        panels,
    })
}

/// The f32 data of an input, or a type error.
fn f32_input<'a>(t: &'a Tensor, op: &'static str) -> Result<&'a [f32], KernelError> {
    t.as_f32().ok_or_else(|| KernelError::UnsupportedType {
        op,
        dtype: t.dtype(),
    })
}

/// Whether a reference path exists for `dtype` in MatMul.
fn matmul_type_supported(dtype: ElementType) -> bool {
    use ElementType as T;
    matches!(
        dtype,
        T::F32 | T::F64 | T::F16 | T::BF16 | T::I32 | T::I64 | T::U32 | T::U64
    )
}
