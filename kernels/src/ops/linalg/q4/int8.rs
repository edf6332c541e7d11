//! 4-bit weights times int8-quantized activations (`accuracy_level = 4`,
//! opt-in): ONNX Runtime's default CPU scheme, on the packed layout of
//! [`super`] as is (no second packing).
//!
//! # Scheme
//!
//! Each row of `A` is quantized per K-block of `block_size`: symmetric,
//! `scale = max|a| / 127`, `qa = round_ties_even(a / scale)` in `-127..=127`
//! (a block of zeros has scale 0; a block holding a NaN or an infinity gets
//! scale NaN, so its products are NaN as in f32). Past `K` the row is padded
//! with zeros to whole blocks. Within each group of 8 `k` the bytes are
//! stored permuted, even `k` first: `[q0 q2 q4 q6 q1 q3 q5 q7]`, matching the
//! packed weight word, whose low nibbles of the 4 bytes (`w & 0x0F0F0F0F`)
//! are the even `k` and whose high nibbles (`(w >> 4) & 0x0F0F0F0F`) the odd
//! `k`. A `u8 x i8` dot product of each against the broadcast 32-bit half
//! gives `D = sum q * qa` exactly, and per block and column:
//!
//! * without zero points (zero point 8): `y += (D - 8 * sum qa) * (s * as)`,
//!   the bracket an exact integer;
//! * with zero points (part 3 holds `nz = -zp * s`):
//!   `y += as * (s * D + nz * sum qa)`.
//!
//! Every ISA does these float operations in this order with separate
//! multiplies and adds (no FMA), and integer sums are exact, so all kernels
//! give bit-identical results, on either tile width.
//!
//! # Kernels
//!
//! [`Int8Isa`]: AVX-512 with VNNI (`vpdpbusd`) or with BW only
//! (`vpmaddubsw` then `vpmaddwd`) on the 16-column layout, AVX2
//! (`vpmaddubsw` then `vpmaddwd`) on the 8-column layout, and portable Rust
//! on either. Each processes a few rows against a few tiles per pass so that every weight
//! load serves several rows. Threads split the tiles as the f32 GEMV does.

use super::int8_avx2 as avx2;
use super::int8_avx512 as avx512;
use super::{Q4View, QuantRows};
use crate::ops::linalg::isa::Isa;
use crate::ops::linalg::sgemm::OutPtr;
use crate::{CpuFeatures, KernelError, ParallelFor};

const OP: &str = "MatMulNBits";

/// Largest quantized row set kept on the stack (bytes of `qa`).
const STACK_Q: usize = 8192;
/// Largest number of (row, block) scalars kept on the stack.
const STACK_BLOCKS: usize = 256;
/// Tiles one task covers at least (alignment of the task split).
const TASK_TILES: usize = 4;

/// The int8 kernel family for a packed weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Int8Isa {
    /// Plain Rust, any tile width.
    Portable,
    /// AVX2 on the 8-column layout.
    Avx2,
    /// AVX-512 BW on the 16-column layout (`vpmaddubsw` + `vpmaddwd`).
    Avx512Bw,
    /// AVX-512 VNNI on the 16-column layout (`vpdpbusd`).
    Avx512Vnni,
}

impl Int8Isa {
    /// The fastest family for the layout of `isa` on this CPU (`isa` is
    /// one this CPU runs: the [`Isa`] invariant).
    pub(crate) fn for_layout(isa: Isa) -> Self {
        match isa {
            Isa::Avx512 if CpuFeatures::detect().avx512vnni => Self::Avx512Vnni,
            Isa::Avx512 => Self::Avx512Bw,
            Isa::Avx2 => Self::Avx2,
            Isa::Portable => Self::Portable,
        }
    }

    /// Whether this family runs on a layout of `tile` columns on this CPU.
    pub(crate) fn runs_on(self, tile: usize) -> bool {
        let have = CpuFeatures::detect();
        match self {
            Self::Portable => true,
            Self::Avx2 => tile == 8 && have.avx2,
            Self::Avx512Bw => tile == 16 && have.avx512,
            Self::Avx512Vnni => tile == 16 && have.avx512vnni,
        }
    }
}

/// Position of `k % 8` in the permuted group.
const PERM: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];

/// Quantizes one row `a` (`K` floats) into `q` (`blocks * bs` bytes),
/// `scales` and `sums` (`blocks` each). With AVX2 the same code is compiled
/// for AVX2 (vectorized; every step is exact IEEE arithmetic, so the bytes
/// are the same).
pub(crate) fn quantize_row(
    a: &[f32],
    bs: usize,
    q: &mut [i8],
    scales: &mut [f32],
    sums: &mut [i32],
) {
    #[cfg(target_arch = "x86_64")]
    if CpuFeatures::detect().avx2 {
        // SAFETY: AVX2 and FMA are present (just checked).
        unsafe { quantize_row_avx2(a, bs, q, scales, sums) };
        return;
    }
    quantize_row_body(a, bs, q, scales, sums);
}

/// [`quantize_row_body`] compiled for AVX2.
///
/// # Safety
/// AVX2 and FMA present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_row_avx2(
    a: &[f32],
    bs: usize,
    q: &mut [i8],
    scales: &mut [f32],
    sums: &mut [i32],
) {
    quantize_row_body(a, bs, q, scales, sums);
}

#[inline(always)]
fn quantize_row_body(a: &[f32], bs: usize, q: &mut [i8], scales: &mut [f32], sums: &mut [i32]) {
    let k = a.len();
    for (blk, ((qb, s), sum)) in q
        .chunks_exact_mut(bs)
        .zip(scales.iter_mut())
        .zip(sums.iter_mut())
        .enumerate()
    {
        let start = (blk * bs).min(k);
        let src = &a[start..(start + bs).min(k)];
        // |a| ordered as the bits of positive floats; NaN sorts above
        // infinity, so one integer maximum also flags non-finite values.
        let amax = src
            .iter()
            .fold(0u32, |m, x| m.max(x.to_bits() & 0x7fff_ffff));
        let scale = if amax >= 0x7f80_0000 {
            f32::NAN
        } else {
            f32::from_bits(amax) / 127.0
        };
        *s = scale;
        let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
        let mut vals = [0i8; 128];
        let vals = &mut vals[..bs];
        for (v, &x) in vals.iter_mut().zip(src) {
            // Round half to even: adding and subtracting 1.5 * 2^23 leaves
            // the nearest integer (|x * inv| <= 127 + rounding).
            *v = (((x * inv) + 12_582_912.0) - 12_582_912.0).clamp(-127.0, 127.0) as i8;
        }
        *sum = vals.iter().map(|&v| v as i32).sum();
        for (dst, vs) in qb.chunks_exact_mut(8).zip(vals.chunks_exact(8)) {
            for (j, &v) in vs.iter().enumerate() {
                dst[PERM[j]] = v;
            }
        }
    }
}

/// Bytes [`matmul`] allocates for `rows` rows of `blocks` blocks of `bs`
/// (none while they fit its stack scratch).
pub(crate) fn scratch_bytes(rows: usize, blocks: usize, bs: usize) -> usize {
    let q = rows.saturating_mul(blocks).saturating_mul(bs);
    let s = rows.saturating_mul(blocks);
    if q <= STACK_Q && s <= STACK_BLOCKS {
        0
    } else {
        q.saturating_add(s.saturating_mul(8))
    }
}

/// `Y[m] (+)= A[m] * W` for `m < rows` with `A` quantized to int8 per block
/// (see the module docs); `A` row-major `[rows, K]`, `Y` `[rows, N]`.
pub(crate) fn matmul(
    isa: Int8Isa,
    v: &Q4View<'_>,
    a: &[f32],
    rows: usize,
    y: &mut [f32],
    accumulate: bool,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let (k, n, bs, blocks) = (v.k, v.n, v.block_size, v.blocks);
    assert!(
        a.len() >= rows * k && y.len() >= rows * n,
        "MatMulNBits operands too short"
    );
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let stride = blocks * bs;
    let (qlen, slen) = (rows * stride, rows * blocks);
    let mut q_stack = [0i8; STACK_Q];
    let mut s_stack = [0f32; STACK_BLOCKS];
    let mut d_stack = [0i32; STACK_BLOCKS];
    let (mut q_heap, mut s_heap, mut d_heap);
    let (q, scales, sums): (&mut [i8], &mut [f32], &mut [i32]) =
        if qlen <= STACK_Q && slen <= STACK_BLOCKS {
            (
                &mut q_stack[..qlen],
                &mut s_stack[..slen],
                &mut d_stack[..slen],
            )
        } else {
            q_heap = crate::scratch::filled(OP, qlen, 0i8)?;
            s_heap = crate::scratch::filled(OP, slen, 0f32)?;
            d_heap = crate::scratch::filled(OP, slen, 0i32)?;
            (&mut q_heap[..], &mut s_heap[..], &mut d_heap[..])
        };
    for r in 0..rows {
        quantize_row(
            &a[r * k..][..k],
            bs,
            &mut q[r * stride..][..stride],
            &mut scales[r * blocks..][..blocks],
            &mut sums[r * blocks..][..blocks],
        );
    }
    let qa = QuantRows {
        q,
        scales,
        sums,
        stride,
        blocks,
    };
    let out = OutPtr::new(y);
    let task = |tiles: std::ops::Range<usize>| {
        // SAFETY: `qa` holds `rows` quantized rows of this view's blocks
        // (and `gemm` checks it, and `isa` against the CPU); `Y` holds
        // `rows * N` floats (asserted) and this task writes only the
        // columns of its tiles.
        unsafe { gemm(isa, v, &qa, rows, out.ptr(), tiles, accumulate) };
    };
    let macs = rows.saturating_mul(k).saturating_mul(n);
    super::split_tiles(par, v.tiles, macs, TASK_TILES, &task);
    Ok(())
}

/// Rows `0..rows` of `Y` (row stride `N`) for the columns of `tiles`.
///
/// # Safety
/// `qa` holds `rows` rows for `v`'s blocks (checked); `isa` runs on `v`'s
/// tile width on this CPU (checked); `y` is writable for `rows * N` floats and nobody else
/// writes the columns of `tiles` meanwhile.
pub(crate) unsafe fn gemm(
    isa: Int8Isa,
    v: &Q4View<'_>,
    qa: &QuantRows<'_>,
    rows: usize,
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) {
    assert!(
        isa.runs_on(v.tile)
            && tiles.end <= v.tiles
            && qa.blocks == v.blocks
            && qa.stride == v.blocks * v.block_size
            && qa.q.len() >= rows * qa.stride
            && qa.scales.len() >= rows * qa.blocks
            && qa.sums.len() >= rows * qa.blocks,
        "MatMulNBits int8 operands inconsistent"
    );
    // SAFETY: forwarded contract; the shapes of `qa` are checked above.
    unsafe {
        match isa {
            Int8Isa::Avx512Vnni => avx512::gemm::<true>(v, qa, rows, y, tiles, accumulate),
            Int8Isa::Avx512Bw => avx512::gemm::<false>(v, qa, rows, y, tiles, accumulate),
            Int8Isa::Avx2 => avx2::gemm(v, qa, rows, y, tiles, accumulate),
            Int8Isa::Portable => portable(v, qa, rows, y, tiles, accumulate),
        }
    }
}

/// The portable kernel, on any tile width: the order of float operations
/// every SIMD kernel reproduces.
///
/// # Safety
/// As [`gemm`] (whose checks it relies on).
unsafe fn portable(
    v: &Q4View<'_>,
    qa: &QuantRows<'_>,
    rows: usize,
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) {
    let (t, bs, blocks) = (v.tile, v.block_size, v.blocks);
    let gpb = bs / 8;
    for r in 0..rows {
        let qrow = &qa.q[r * qa.stride..][..qa.stride];
        for tile in tiles.clone() {
            for c in 0..t {
                let col = tile * t + c;
                if col >= v.n {
                    break;
                }
                let mut total = 0f32;
                for blk in 0..blocks {
                    let mut dot = 0i32;
                    for g in 0..gpb {
                        let at = ((tile * blocks + blk) * gpb + g) * t * 4 + c * 4;
                        let word =
                            u32::from_le_bytes(v.weights[at..at + 4].try_into().expect("4 bytes"));
                        let qg = &qrow[(blk * gpb + g) * 8..][..8];
                        for b in 0..4 {
                            let lo = (word >> (8 * b)) & 15;
                            let hi = (word >> (8 * b + 4)) & 15;
                            dot += lo as i32 * qg[b] as i32 + hi as i32 * qg[4 + b] as i32;
                        }
                    }
                    let at = (tile * blocks + blk) * t + c;
                    let s = v.scales[at];
                    let a_scale = qa.scales[r * blocks + blk];
                    let sum = qa.sums[r * blocks + blk];
                    total += match v.nzs {
                        None => (dot - 8 * sum) as f32 * (s * a_scale),
                        Some(z) => a_scale * (s * dot as f32 + z[at] * sum as f32),
                    };
                }
                // SAFETY: column col < N of row r belongs to this task.
                unsafe {
                    let p = y.add(r * v.n + col);
                    *p = if accumulate { *p + total } else { total };
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "int8_tests.rs"]
mod tests;
