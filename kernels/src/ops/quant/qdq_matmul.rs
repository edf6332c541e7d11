//! The QDQ 4-bit MatMul pattern as one prepacked operator.
//!
//! ONNX Runtime's `MatMulNBitsQuantizer` (QDQ format) writes
//! `DequantizeLinear(W: INT4|UINT4 [K, N], scale [ceil(K/bs), N],
//! zero_point? same shape, axis = 0, block_size = bs) -> MatMul(A, W')`.
//! The runtime's resolver replaces the pair by [`qdq_matmul`], whose inputs
//! are `[A, W, scale, zero_point?]` (W unpacked one value per byte: int8 for
//! INT4, uint8 for UINT4) and whose output is `A * dequantize(W)`.
//!
//! # Packing (cold path)
//!
//! `prepack` consumes inputs 1, 2 and 3 (when present) and writes the
//! `com.microsoft` MatMulNBits 4-bit layout of `linalg::q4` (the same
//! header, tiles and kernels: AVX-512, AVX2 or portable by `CpuFeatures`).
//! `W` is transposed to MatMulNBits' `[N, blocks, bs/2]` nibbles; INT4
//! values and zero points are offset by +8 into the unsigned nibble range
//! (`(q + 8) - (zp + 8) = q - zp`), so INT4 without zero points is exactly
//! MatMulNBits' default zero point 8, and UINT4 without zero points packs
//! explicit zero points 0. The dequantized values are identical.
//!
//! The q4 kernels take blocks of 16, 32, 64 or 128. A QDQ `block_size`
//! that is a multiple of 16 runs on them with the largest of those that
//! divides it (each scale repeated over the kernel blocks of its block);
//! any other `block_size` is not packed and runs a scalar loop.
//!
//! Layout key: `qdq-{s4|u4}-bs{block_size}-` followed by the q4 key.
//!
//! # Execution (hot path)
//!
//! Packed: the q4 products. Not packed (weights that are not constants):
//! packs for the call (as MatMulNBits does) when the block size allows,
//! else the scalar loop.

use super::common::QElem;
use crate::ops::linalg::isa::Isa;
use crate::ops::linalg::q4;
use crate::ops::linalg::reference::NBitsParams;
use crate::par::{for_each_chunk_mut, rows_chunk};
use crate::{
    CpuFeatures, DataRef, ElementType, InputInfo, KernelError, Operator, OutputInfo, PackedWeight,
    ParallelFor, Prepack, Tensor, TensorData,
};

const OP: &str = "QdqMatMulNBits";
/// Input positions.
const A: usize = 0;
const W: usize = 1;
const SCALE: usize = 2;
const ZERO_POINT: usize = 3;

/// The operator replacing `DequantizeLinear(W 4-bit [K, N], axis 0,
/// block_size) -> MatMul(A, .)`. `signed`: W (and its zero point) is INT4,
/// arriving as int8; else UINT4, arriving as uint8. Inputs `[A (f32, [..., K]),
/// W ([K, N]), scale (f32, [ceil(K / block_size), N]), zero_point? (W's
/// type, scale's shape)]`; output f32 `[..., N]`.
///
/// Errors: `block_size`, `k` or `n` of 0.
pub fn qdq_matmul(
    block_size: usize,
    k: usize,
    n: usize,
    signed: bool,
) -> Result<Box<dyn Operator>, KernelError> {
    qdq_matmul_with_cpu(block_size, k, n, signed, CpuFeatures::detect())
}

/// [`qdq_matmul`] whose unpacked path runs the kernels of `cpu`
/// (intersected with this CPU's), for tests of every family.
pub fn qdq_matmul_with_cpu(
    block_size: usize,
    k: usize,
    n: usize,
    signed: bool,
    cpu: CpuFeatures,
) -> Result<Box<dyn Operator>, KernelError> {
    for (name, v) in [("block_size", block_size), ("K", k), ("N", n)] {
        if v == 0 {
            return Err(KernelError::Attribute {
                op: OP,
                name,
                detail: "must be positive".into(),
            });
        }
    }
    let kernel_block = [128, 64, 32, 16]
        .into_iter()
        .find(|b| block_size.is_multiple_of(*b));
    Ok(Box::new(QdqMatMul {
        block_size,
        k,
        n,
        signed,
        kernel_block,
        isa: Isa::select(cpu),
    }))
}

#[derive(Debug, Clone, Copy)]
struct QdqMatMul {
    block_size: usize,
    k: usize,
    n: usize,
    signed: bool,
    /// The q4 block size that runs this block size, if any.
    kernel_block: Option<usize>,
    /// Kernel family of the unpacked path.
    isa: Isa,
}

/// The checked weight inputs.
#[derive(Clone, Copy)]
enum Quant<'a> {
    I8(&'a [i8]),
    U8(&'a [u8]),
}

impl QdqMatMul {
    fn blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    fn w_type(&self) -> ElementType {
        if self.signed {
            ElementType::I8
        } else {
            ElementType::U8
        }
    }

    fn params(&self, kernel_block: usize) -> NBitsParams {
        NBitsParams {
            k: self.k,
            n: self.n,
            bits: 4,
            block_size: kernel_block,
        }
    }

    /// Rows of A (the product of its leading dimensions).
    fn check_a(&self, dtype: ElementType, shape: &[usize]) -> Result<usize, KernelError> {
        if dtype != ElementType::F32 {
            return Err(KernelError::UnsupportedType { op: OP, dtype });
        }
        match shape.split_last() {
            Some((&k, rest)) if k == self.k => Ok(crate::element_count(rest).unwrap_or(0)),
            _ => Err(KernelError::Shape(format!(
                "{OP}: A {shape:?} must end in K = {}",
                self.k
            ))),
        }
    }

    fn check_weights(
        &self,
        w: (ElementType, &[usize]),
        scale: (ElementType, &[usize]),
        zp: Option<(ElementType, &[usize])>,
    ) -> Result<(), KernelError> {
        let (k, n, blocks) = (self.k, self.n, self.blocks());
        if w.0 != self.w_type() || w.1 != [k, n] {
            return Err(KernelError::Shape(format!(
                "{OP}: W is {} {:?}, expected {} [{k}, {n}]",
                w.0,
                w.1,
                self.w_type()
            )));
        }
        if scale.0 != ElementType::F32 {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: scale.0,
            });
        }
        if scale.1 != [blocks, n] {
            return Err(KernelError::Shape(format!(
                "{OP}: scale {:?} must be [{blocks}, {n}] (K = {k}, block_size = {})",
                scale.1, self.block_size
            )));
        }
        if let Some(z) = zp
            && (z.0 != self.w_type() || z.1 != [blocks, n])
        {
            return Err(KernelError::Shape(format!(
                "{OP}: zero_point is {} {:?}, expected {} [{blocks}, {n}]",
                z.0,
                z.1,
                self.w_type()
            )));
        }
        Ok(())
    }

    fn sources<'a>(
        &self,
        w: &'a Tensor,
        scale: &'a Tensor,
        zp: Option<&'a Tensor>,
    ) -> Result<(Quant<'a>, &'a [f32], Option<Quant<'a>>), KernelError> {
        self.check_weights(
            (w.dtype(), w.shape()),
            (scale.dtype(), scale.shape()),
            zp.map(|z| (z.dtype(), z.shape())),
        )?;
        let quant = |t: &'a Tensor| match t.data() {
            DataRef::I8(v) => Ok(Quant::I8(v)),
            DataRef::U8(v) => Ok(Quant::U8(v)),
            _ => Err(KernelError::UnsupportedType {
                op: OP,
                dtype: t.dtype(),
            }),
        };
        let s = scale.as_f32().ok_or(KernelError::UnsupportedType {
            op: OP,
            dtype: scale.dtype(),
        })?;
        Ok((quant(w)?, s, zp.map(quant).transpose()?))
    }

    /// MatMulNBits' `B`, `scales` and zero points (f32) for q4 blocks of
    /// `kb` weights, from the QDQ weights.
    fn nbits_sources(
        &self,
        kb: usize,
        w: Quant<'_>,
        scale: &[f32],
        zp: Option<Quant<'_>>,
    ) -> Result<NBitsSources, KernelError> {
        let (k, n, bs) = (self.k, self.n, self.block_size);
        let qblocks = k.div_ceil(kb);
        let offset = if self.signed { 8 } else { 0 };
        let nibble = |q: Quant<'_>, i: usize, what: &str| -> Result<u8, KernelError> {
            let v = match q {
                Quant::I8(v) => v[i] as i32,
                Quant::U8(v) => v[i] as i32,
            } + offset;
            u8::try_from(v).ok().filter(|v| *v < 16).ok_or_else(|| {
                let (lo, hi) = (-offset, 15 - offset);
                KernelError::Invalid {
                    op: OP,
                    detail: format!(
                        "{what} value {} at {i} is outside the 4-bit range [{lo}, {hi}]",
                        v - offset
                    ),
                }
            })
        };
        let mut b = crate::scratch::filled(OP, n * qblocks * kb / 2, 0u8)?;
        for kk in 0..k {
            let (blk, within) = (kk / kb, kk % kb);
            let shift = 4 * (within % 2);
            for col in 0..n {
                let q = nibble(w, kk * n + col, "W")?;
                b[(col * qblocks + blk) * kb / 2 + within / 2] |= q << shift;
            }
        }
        let mut scales = crate::scratch::filled(OP, n * qblocks, 0f32)?;
        let mut zps = match (zp, self.signed) {
            (None, true) => None,
            _ => Some(crate::scratch::filled(OP, n * qblocks, 0f32)?),
        };
        for blk in 0..qblocks {
            let src = blk * kb / bs;
            for col in 0..n {
                scales[col * qblocks + blk] = scale[src * n + col];
                if let (Some(z), Some(out)) = (zp, zps.as_mut()) {
                    out[col * qblocks + blk] = nibble(z, src * n + col, "zero_point")? as f32;
                }
            }
        }
        Ok((b, scales, zps.map(TensorData::F32)))
    }

    fn layout(&self, kb: usize, zero_points: bool, isa: Isa) -> String {
        // UINT4 without zero points packs explicit zeros.
        let zp = (zero_points || !self.signed).then_some(ElementType::F32);
        format!(
            "qdq-{}4-bs{}-{}",
            if self.signed { "s" } else { "u" },
            self.block_size,
            q4::layout(kb, zp, isa)
        )
    }

    fn pack(
        &self,
        kb: usize,
        isa: Isa,
        w: Quant<'_>,
        scale: &[f32],
        zp: Option<Quant<'_>>,
        par: &dyn ParallelFor,
    ) -> Result<PackedWeight, KernelError> {
        let (b, scales, zps) = self.nbits_sources(kb, w, scale, zp)?;
        let layout = self.layout(kb, zp.is_some(), isa);
        q4::pack(
            &self.params(kb),
            isa,
            layout,
            &b,
            &scales,
            zps.as_ref().map(TensorData::view),
            par,
        )
    }
}

/// MatMulNBits' `B` bytes, f32 scales and optional f32 zero points.
type NBitsSources = (Vec<u8>, Vec<f32>, Option<TensorData>);

/// Packs `W`, `scale` and the optional zero point.
#[derive(Debug)]
struct QdqPrepack {
    layout: String,
    consumes: Vec<usize>,
    op: QdqMatMul,
    kernel_block: usize,
    isa: Isa,
}

impl Prepack for QdqPrepack {
    fn layout(&self) -> &str {
        &self.layout
    }

    fn consumes(&self) -> &[usize] {
        &self.consumes
    }

    fn prepare(
        &self,
        sources: &[&Tensor],
        par: &dyn ParallelFor,
    ) -> Result<PackedWeight, KernelError> {
        let (w, s, z) = match sources {
            [w, s] => (*w, *s, None),
            [w, s, z] => (*w, *s, Some(*z)),
            _ => {
                return Err(KernelError::Shape(format!(
                    "{OP}: packing needs W, scale [, zero_point]"
                )));
            }
        };
        let (w, s, z) = self.op.sources(w, s, z)?;
        self.op.pack(self.kernel_block, self.isa, w, s, z, par)
    }

    fn packed_bytes(&self, shapes: &[&[usize]]) -> Option<usize> {
        (2..=3).contains(&shapes.len()).then(|| {
            q4::packed_object_bytes(
                &self.op.params(self.kernel_block),
                self.isa,
                // UINT4 without zero points packs explicit zeros.
                shapes.len() == 3 || !self.op.signed,
            )
        })
    }

    fn validate(&self, packed: &PackedWeight, shapes: &[&[usize]]) -> Result<(), KernelError> {
        crate::validate_common(&self.layout, self.packed_bytes(shapes), packed)?;
        q4::validate(packed, &self.op.params(self.kernel_block), self.isa)
    }
}

/// `y[r] = a[r] * dequantize(W)` with a scalar loop (block sizes the q4
/// kernels cannot run).
fn scalar_product<Q: QElem>(
    op: &QdqMatMul,
    a: &[f32],
    w: &[Q],
    scale: &[f32],
    zp: Option<&[Q]>,
    y: &mut [f32],
    par: &dyn ParallelFor,
) {
    let (k, n, bs) = (op.k, op.n, op.block_size);
    let rows = y.len() / n;
    let chunk = if par.threads() > 1 && rows * k * n >= (1 << 20) {
        rows_chunk(par, rows, n)
    } else {
        y.len()
    };
    for_each_chunk_mut(par, y, chunk, &|off, out| {
        for (i, yr) in out.chunks_exact_mut(n).enumerate() {
            let ar = &a[(off / n + i) * k..][..k];
            yr.fill(0.0);
            for (kk, &av) in ar.iter().enumerate() {
                let blk = kk / bs;
                let sr = &scale[blk * n..][..n];
                let wr = &w[kk * n..][..n];
                match zp {
                    Some(z) => {
                        let zr = &z[blk * n..][..n];
                        for (((o, &q), &z), &s) in yr.iter_mut().zip(wr).zip(zr).zip(sr) {
                            *o += av * (q.diff(z) * s);
                        }
                    }
                    None => {
                        for ((o, &q), &s) in yr.iter_mut().zip(wr).zip(sr) {
                            *o += av * (q.diff(Q::ZERO) * s);
                        }
                    }
                }
            }
        }
    });
}

impl Operator for QdqMatMul {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        if !(3..=4).contains(&inputs.len()) {
            return Err(KernelError::Shape(format!(
                "{OP}: expected inputs A, W, scale [, zero_point], got {}",
                inputs.len()
            )));
        }
        let (Some(a), Some(w), Some(scale)) = (get(A), get(W), get(SCALE)) else {
            return Err(KernelError::Shape(format!(
                "{OP}: needs inputs A, W and scale"
            )));
        };
        self.check_a(a.dtype, a.shape)?;
        self.check_weights(
            (w.dtype, w.shape),
            (scale.dtype, scale.shape),
            get(ZERO_POINT).map(|z| (z.dtype, z.shape)),
        )?;
        let mut shape = a.shape.to_vec();
        *shape.last_mut().expect("A has rank >= 1") = self.n;
        Ok(vec![OutputInfo {
            dtype: ElementType::F32,
            shape,
        }])
    }

    fn prepack(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        cpu: CpuFeatures,
    ) -> Option<Box<dyn Prepack>> {
        let kernel_block = self.kernel_block?;
        let get = |i: usize| inputs.get(i).copied().flatten();
        let (w, scale, zp) = (get(W)?, get(SCALE)?, get(ZERO_POINT));
        if !w.constant || !scale.constant || zp.is_some_and(|z| !z.constant) {
            return None;
        }
        let isa = Isa::select(cpu);
        let consumes = if zp.is_some() {
            vec![W, SCALE, ZERO_POINT]
        } else {
            vec![W, SCALE]
        };
        Some(Box::new(QdqPrepack {
            layout: self.layout(kernel_block, zp.is_some(), isa),
            consumes,
            op: QdqMatMul { isa, ..*self },
            kernel_block,
            isa,
        }))
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let a = get(A).ok_or_else(|| KernelError::Shape(format!("{OP}: missing A")))?;
        let rows = self.check_a(a.dtype(), a.shape())?;
        let av = a.as_f32().expect("checked f32");
        let y = outputs
            .first_mut()
            .and_then(|t| t.as_f32_mut())
            .ok_or_else(|| KernelError::Invalid {
                op: OP,
                detail: "the output must be one f32 tensor".into(),
            })?;
        if y.len() != rows * self.n {
            return Err(KernelError::Invalid {
                op: OP,
                detail: format!(
                    "output holds {} elements, the product has {}",
                    y.len(),
                    rows * self.n
                ),
            });
        }
        if let Some(packed) = packed {
            let kb = self.kernel_block.ok_or_else(|| KernelError::Invalid {
                op: OP,
                detail: format!("block_size {} has no packed layout", self.block_size),
            })?;
            let (isa, view) = q4::view(packed, &self.params(kb))?;
            q4::matmul(isa, &view, av, rows, y, false, par);
            return Ok(());
        }
        let (Some(w), Some(scale)) = (get(W), get(SCALE)) else {
            return Err(KernelError::Shape(format!("{OP}: missing W or scale")));
        };
        let (w, scale, zp) = self.sources(w, scale, get(ZERO_POINT))?;
        match (self.kernel_block, w, zp) {
            (Some(kb), ..) => {
                // Weights that are not constants: pack for this call.
                let packed = self.pack(kb, self.isa, w, scale, zp, par)?;
                let (isa, view) = q4::view(&packed, &self.params(kb))?;
                q4::matmul(isa, &view, av, rows, y, false, par);
            }
            (None, Quant::I8(w), None) => scalar_product(self, av, w, scale, None, y, par),
            (None, Quant::I8(w), Some(Quant::I8(z))) => {
                scalar_product(self, av, w, scale, Some(z), y, par)
            }
            (None, Quant::U8(w), None) => scalar_product(self, av, w, scale, None, y, par),
            (None, Quant::U8(w), Some(Quant::U8(z))) => {
                scalar_product(self, av, w, scale, Some(z), y, par)
            }
            (None, ..) => {
                return Err(KernelError::Shape(format!(
                    "{OP}: zero_point type differs from W type"
                )));
            }
        }
        Ok(())
    }
}
