//! `com.microsoft` GatherBlockQuantized: Gather on block-quantized data,
//! dequantized while copying, as ONNX Runtime's contrib operator defines it.
//!
//! * `data` uint8 (ORT-GenAI's quantized embeddings): `bits` (2, 4 or 8)
//!   values per byte, low bits first, packed along the last axis, which
//!   must be `quantize_axis`; `gather_axis` must be 0. Zero points are
//!   packed the same way along `quantize_axis` and default to
//!   `2^(bits-1)`.
//! * `data` INT4 (arrives unpacked as int8, `bits` = 4): any axes; zero
//!   points have the shape of `scales` and default to 0.
//!
//! UINT4 `data` also arrives as uint8 and cannot be told from the packed
//! uint8 form here: uint8 data is always read as packed.
//!
//! `scales` (f32 or f16, the output type) has the rank of `data`, with
//! `ceil(dim / block_size)` along `quantize_axis`. Indices (int32/int64) in
//! `[-s, s)` select along `gather_axis`; out-of-range indices give zeros, as
//! the contrib-op documentation specifies.
//!
//! Cold path: attributes and geometry; hot path: one loop per gathered
//! slice with the scale index stepped, not divided, per element.

use half::f16;

use super::common::OutFloat;
use crate::ops::basic::common::{
    Attrs, Ints, check_len, input, normalize_axis, optional, output, required, typed, typed_mut,
};
use crate::par::{for_each_chunk_mut, rows_chunk};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const OP: &str = "GatherBlockQuantized";

/// GatherBlockQuantized.
#[derive(Debug)]
pub(crate) struct GatherBlockQuantized {
    gather_axis: i64,
    quantize_axis: i64,
    block_size: usize,
    bits: u32,
}

/// Sizes of one call, from the shapes.
#[derive(Debug, Clone, Copy)]
struct Geo {
    /// Values per data byte (uint8 data; 1 for INT4).
    comps: usize,
    bits: u32,
    /// Product of the logical dimensions before `gather_axis`.
    gather_m: usize,
    /// Logical `data` dimension at `gather_axis`.
    gather_dim: usize,
    /// Product of the logical dimensions after `gather_axis`.
    gather_block: usize,
    /// Logical `data` dimension at `quantize_axis`.
    q_dim: usize,
    /// Product of the logical dimensions after `quantize_axis`.
    q_inner: usize,
    /// Blocks along `quantize_axis`.
    blocks: usize,
    /// `log2(block_size)`.
    shift: u32,
    /// Zero-point bytes per scale row (packed uint8 zero points).
    zp_row: usize,
}

impl GatherBlockQuantized {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(
            spec,
            OP,
            &["gather_axis", "quantize_axis", "block_size", "bits"],
        )?;
        if !(3..=4).contains(&spec.inputs) || spec.outputs != 1 {
            return Err(KernelError::Shape(format!(
                "{OP}: takes 3 or 4 inputs and 1 output, got {} and {}",
                spec.inputs, spec.outputs
            )));
        }
        let block_size = attrs.int_or("block_size", 128)?;
        if block_size < 16 || block_size.count_ones() != 1 {
            return Err(attrs.error(
                "block_size",
                format!("must be a power of 2 and at least 16, got {block_size}"),
            ));
        }
        let bits = attrs.int_or("bits", 4)?;
        if !matches!(bits, 2 | 4 | 8) {
            return Err(attrs.error("bits", format!("must be 2, 4 or 8, got {bits}")));
        }
        Ok(Self {
            gather_axis: attrs.int_or("gather_axis", 0)?,
            quantize_axis: attrs.int_or("quantize_axis", 1)?,
            block_size: block_size as usize,
            bits: bits as u32,
        })
    }

    /// Sizes of a call; checks every shape and type.
    fn geometry(
        &self,
        data: (ElementType, &[usize]),
        indices: (ElementType, &[usize]),
        scales: (ElementType, &[usize]),
        zp: Option<(ElementType, &[usize])>,
    ) -> Result<Geo, KernelError> {
        let (dtype, shape) = data;
        let rank = shape.len();
        if rank == 0 {
            return Err(KernelError::Shape(format!(
                "{OP}: data must have rank >= 1"
            )));
        }
        let g = normalize_axis(OP, "gather_axis", self.gather_axis, rank)?;
        let q = normalize_axis(OP, "quantize_axis", self.quantize_axis, rank)?;
        let comps = match dtype {
            ElementType::U8 => {
                if g != 0 || q != rank - 1 || g == q {
                    return Err(KernelError::Attribute {
                        op: OP,
                        name: "quantize_axis",
                        detail: format!(
                            "uint8 data needs gather_axis 0 and quantize_axis the last axis ({}) of a rank >= 2 tensor, got {g} and {q} for rank {rank}",
                            rank - 1
                        ),
                    });
                }
                8 / self.bits as usize
            }
            ElementType::I8 => {
                if self.bits != 4 {
                    return Err(KernelError::Attribute {
                        op: OP,
                        name: "bits",
                        detail: format!("INT4 data needs bits 4, got {}", self.bits),
                    });
                }
                1
            }
            dtype => return Err(KernelError::UnsupportedType { op: OP, dtype }),
        };
        if !matches!(indices.0, ElementType::I32 | ElementType::I64) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: indices.0,
            });
        }
        if !matches!(scales.0, ElementType::F32 | ElementType::F16) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: scales.0,
            });
        }
        let last = shape[rank - 1]
            .checked_mul(comps)
            .ok_or_else(|| KernelError::Overflow {
                op: OP,
                what: format!("the unpacked size of data {shape:?}"),
            })?;
        // The logical (unpacked) dimensions.
        let ld = |i: usize| if i == rank - 1 { last } else { shape[i] };
        let lprod = |r: std::ops::Range<usize>| {
            r.map(ld)
                .try_fold(1usize, usize::checked_mul)
                .ok_or_else(|| KernelError::Overflow {
                    op: OP,
                    what: format!("the unpacked size of data {shape:?}"),
                })
        };
        let blocks = ld(q).div_ceil(self.block_size);
        let s = scales.1;
        let scales_ok =
            s.len() == rank && (0..rank).all(|i| s[i] == if i == q { blocks } else { ld(i) });
        if !scales_ok {
            let want: Vec<usize> = (0..rank)
                .map(|i| if i == q { blocks } else { ld(i) })
                .collect();
            return Err(KernelError::Shape(format!(
                "{OP}: scales {s:?} must be {want:?} for data {shape:?} ({} values per byte, quantize_axis {q}, block_size {})",
                comps, self.block_size
            )));
        }
        let zp_row = blocks.div_ceil(comps);
        if let Some((zt, z)) = zp {
            if zt != dtype {
                return Err(KernelError::Shape(format!(
                    "{OP}: zero_points type {zt} differs from data type {dtype}"
                )));
            }
            let ok =
                z.len() == rank && (0..rank).all(|i| z[i] == if i == q { zp_row } else { s[i] });
            if !ok {
                return Err(KernelError::Shape(format!(
                    "{OP}: zero_points {z:?} do not fit scales {s:?} ({comps} values per byte)"
                )));
            }
        }
        Ok(Geo {
            comps,
            bits: self.bits,
            gather_m: lprod(0..g)?,
            gather_dim: ld(g),
            gather_block: lprod(g + 1..rank)?,
            q_dim: ld(q),
            q_inner: lprod(q + 1..rank)?,
            blocks,
            shift: self.block_size.trailing_zeros(),
            zp_row,
        })
    }
}

/// Dequantizes the gathered slices into `y`: `val(i)` is the quantized
/// value at logical data index `i`, `zp(s)` the zero point of scale `s`.
fn run<O, V, Z>(
    geo: &Geo,
    indices: Ints<'_>,
    scales: &[O],
    val: V,
    zp: Z,
    y: &mut [O],
    par: &dyn ParallelFor,
) where
    O: OutFloat,
    V: Fn(usize) -> i32 + Sync,
    Z: Fn(usize) -> i32 + Sync,
{
    let block = geo.gather_block;
    let slices = y.len() / block;
    let n_idx = indices.len();
    let chunk = if par.threads() > 1 && y.len() >= crate::par::PARALLEL_MIN_ELEMENTS {
        rows_chunk(par, slices, block)
    } else {
        y.len()
    };
    let q_full = geo.q_dim * geo.q_inner;
    let s_full = geo.blocks * geo.q_inner;
    let dim = geo.gather_dim as i64;
    for_each_chunk_mut(par, y, chunk, &|off, out| {
        for (i, ys) in out.chunks_exact_mut(block).enumerate() {
            let slice = off / block + i;
            let (m, k) = (slice / n_idx, slice % n_idx);
            let index = indices.get(k);
            let index = if index < 0 { index + dim } else { index };
            if !(0..dim).contains(&index) {
                ys.fill(O::from_f32(0.0));
                continue;
            }
            let base = (m * geo.gather_dim + index as usize) * block;
            let (mut x, rem) = (base / q_full, base % q_full);
            let (mut j, mut z) = (rem / geo.q_inner, rem % geo.q_inner);
            for (d, o) in (base..).zip(ys.iter_mut()) {
                let s = x * s_full + (j >> geo.shift) * geo.q_inner + z;
                *o = O::from_f32((val(d) - zp(s)) as f32 * scales[s].to_f32());
                z += 1;
                if z == geo.q_inner {
                    z = 0;
                    j += 1;
                    if j == geo.q_dim {
                        j = 0;
                        x += 1;
                    }
                }
            }
        }
    });
}

impl GatherBlockQuantized {
    fn execute_typed<O: OutFloat>(
        &self,
        geo: &Geo,
        (data, indices, scales, zp): (&Tensor, Ints<'_>, &Tensor, Option<&Tensor>),
        y: &mut [O],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let scales = typed::<O>(OP, scales)?;
        if y.is_empty() {
            return Ok(());
        }
        match data.dtype() {
            ElementType::U8 => {
                let v = typed::<u8>(OP, data)?;
                let (comps, bits) = (geo.comps, geo.bits);
                let mask = ((1u32 << bits) - 1) as u8;
                let val = |i: usize| ((v[i / comps] >> ((i % comps) as u32 * bits)) & mask) as i32;
                match zp {
                    Some(z) => {
                        let z = typed::<u8>(OP, z)?;
                        let (blocks, row) = (geo.blocks, geo.zp_row);
                        let zpf = |s: usize| {
                            let (r, c) = (s / blocks, s % blocks);
                            ((z[r * row + c / comps] >> ((c % comps) as u32 * bits)) & mask) as i32
                        };
                        run(geo, indices, scales, val, zpf, y, par);
                    }
                    None => {
                        let default = 1i32 << (bits - 1);
                        run(geo, indices, scales, val, |_| default, y, par);
                    }
                }
            }
            ElementType::I8 => {
                let v = typed::<i8>(OP, data)?;
                let val = |i: usize| v[i] as i32;
                match zp {
                    Some(z) => {
                        let z = typed::<i8>(OP, z)?;
                        run(geo, indices, scales, val, |s| z[s] as i32, y, par);
                    }
                    None => run(geo, indices, scales, val, |_| 0, y, par),
                }
            }
            dtype => return Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
        Ok(())
    }
}

impl Operator for GatherBlockQuantized {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        if !(3..=4).contains(&inputs.len()) {
            return Err(KernelError::Shape(format!(
                "{OP}: expected 3 or 4 inputs, got {}",
                inputs.len()
            )));
        }
        let data = required(OP, inputs, 0)?;
        let indices = required(OP, inputs, 1)?;
        let scales = required(OP, inputs, 2)?;
        let zp = optional(inputs, 3);
        let geo = self.geometry(
            (data.dtype, data.shape),
            (indices.dtype, indices.shape),
            (scales.dtype, scales.shape),
            zp.map(|z| (z.dtype, z.shape)),
        )?;
        let g = normalize_axis(OP, "gather_axis", self.gather_axis, data.shape.len())?;
        let mut shape = data.shape[..g].to_vec();
        shape.extend_from_slice(indices.shape);
        shape.extend_from_slice(&data.shape[g + 1..]);
        if let Some(last) = shape.last_mut()
            && g + 1 < data.shape.len()
        {
            *last *= geo.comps;
        }
        crate::element_count(&shape)
            .ok_or_else(|| KernelError::Shape(format!("{OP}: output {shape:?} is too large")))?;
        Ok(vec![OutputInfo {
            dtype: scales.dtype,
            shape,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let data = input(OP, inputs, 0)?;
        let indices = input(OP, inputs, 1)?;
        let scales = input(OP, inputs, 2)?;
        let zp = inputs.get(3).copied().flatten();
        let geo = self.geometry(
            (data.dtype(), data.shape()),
            (indices.dtype(), indices.shape()),
            (scales.dtype(), scales.shape()),
            zp.map(|z| (z.dtype(), z.shape())),
        )?;
        let idx = Ints::of(OP, indices)?;
        let out = output(OP, outputs, 0)?;
        let want = geo.gather_m * idx.len() * geo.gather_block;
        match scales.dtype() {
            ElementType::F32 => {
                let y = typed_mut::<f32>(OP, out)?;
                check_len(OP, "output", y.len(), want)?;
                self.execute_typed(&geo, (data, idx, scales, zp), y, par)
            }
            ElementType::F16 => {
                let y = typed_mut::<f16>(OP, out)?;
                check_len(OP, "output", y.len(), want)?;
                self.execute_typed(&geo, (data, idx, scales, zp), y, par)
            }
            dtype => Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
    }
}
