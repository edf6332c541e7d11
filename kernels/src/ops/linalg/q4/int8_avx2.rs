//! AVX2 int8-activation kernel on the 8-column 4-bit layout (hot path):
//! `vpmaddubsw` + `vpmaddwd`, one pass covering 1 row x 4 tiles (1 tile for
//! a weight of [`STREAMED_WEIGHT`] bytes or more) or 2 rows x 2 tiles; the
//! scheme and the order of float operations are those of [`super::int8`].

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{Q4View, QuantRows, STREAM_PREFETCH, STREAMED_WEIGHT, prefetch_scales};

/// See [`super::int8::gemm`].
///
/// # Safety
/// AVX2 and FMA present; `v` is an 8-column layout; the rest as
/// [`super::int8::gemm`], which checked `qa`'s shapes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn gemm(
    v: &Q4View<'_>,
    qa: &QuantRows<'_>,
    rows: usize,
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) {
    debug_assert!(v.tile == 8);
    let mut r = 0;
    while r < rows {
        // SAFETY: (both arms) forwarded contract; rows r.. are in range.
        unsafe {
            r += if rows - r >= 2 {
                pass::<2, 2>(v, qa, r, y, tiles.clone(), accumulate)
            } else if v.weights.len() >= STREAMED_WEIGHT {
                pass::<1, 1>(v, qa, r, y, tiles.clone(), accumulate)
            } else {
                pass::<1, 4>(v, qa, r, y, tiles.clone(), accumulate)
            };
        }
    }
}

/// Rows `r0..r0 + R` over `tiles`, `G` tiles at a time; returns `R`.
///
/// # Safety
/// As [`gemm`], with rows `r0..r0 + R` in range.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pass<const R: usize, const G: usize>(
    v: &Q4View<'_>,
    qa: &QuantRows<'_>,
    r0: usize,
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) -> usize {
    let mut t = tiles.start;
    while t < tiles.end {
        let whole = tiles.end - t >= G;
        // SAFETY: (all arms) forwarded contract; tiles t..t + G (or t) are
        // in range.
        unsafe {
            match (whole, v.nzs.is_some()) {
                (true, false) => group::<R, G, false>(v, qa, r0, y, t, accumulate),
                (true, true) => group::<R, G, true>(v, qa, r0, y, t, accumulate),
                (false, false) => group::<R, 1, false>(v, qa, r0, y, t, accumulate),
                (false, true) => group::<R, 1, true>(v, qa, r0, y, t, accumulate),
            }
        }
        t += if whole { G } else { 1 };
    }
    R
}

/// Rows `r0..r0 + R`, tiles `t0..t0 + G`. With `ZP`, part 3 holds
/// `-zp * scale`.
///
/// # Safety
/// As [`pass`], with tiles `t0..t0 + G` in range and, with `ZP`, zero
/// points present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group<const R: usize, const G: usize, const ZP: bool>(
    v: &Q4View<'_>,
    qa: &QuantRows<'_>,
    r0: usize,
    y: *mut f32,
    t0: usize,
    accumulate: bool,
) {
    let (bs, blocks) = (v.block_size, v.blocks);
    let gpb = bs / 8;
    let nib = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let wbase = v.weights.as_ptr();
    let nzs = v.nzs.map_or(std::ptr::null(), |z| z.as_ptr());
    let mut total = [[_mm256_setzero_ps(); G]; R];
    for blk in 0..blocks {
        let mut acc = [[_mm256_setzero_si256(); G]; R];
        for g in 0..gpb {
            // SAFETY: tiles t0..t0 + G < tiles, blk < blocks, g < gpb: each
            // 32-byte group is inside the weights part; rows r0..r0 + R of
            // `qa` hold blocks * bs bytes.
            unsafe {
                let mut lo = [_mm256_setzero_si256(); G];
                let mut hi = [_mm256_setzero_si256(); G];
                for t in 0..G {
                    let at = (((t0 + t) * blocks + blk) * gpb + g) * 32;
                    if G == 1 {
                        // A hint only: never dereferenced, may point past
                        // the weights.
                        _mm_prefetch::<_MM_HINT_T0>(
                            wbase.wrapping_add(at + STREAM_PREFETCH).cast(),
                        );
                    }
                    let w = _mm256_loadu_si256(wbase.add(at).cast());
                    lo[t] = _mm256_and_si256(w, nib);
                    hi[t] = _mm256_and_si256(_mm256_srli_epi32::<4>(w), nib);
                }
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    let qp =
                        qa.q.as_ptr()
                            .add((r0 + r) * qa.stride + (blk * gpb + g) * 8);
                    let ae = _mm256_set1_epi32(qp.cast::<i32>().read_unaligned());
                    let ao = _mm256_set1_epi32(qp.add(4).cast::<i32>().read_unaligned());
                    for ((a, &l), &h) in acc_r.iter_mut().zip(&lo).zip(&hi) {
                        // Pairs of u8 x i8 to i16 (at most 2 * 15 * 127, no
                        // saturation), halves added (at most 7620), pairs to i32.
                        let p = _mm256_add_epi16(
                            _mm256_maddubs_epi16(l, ae),
                            _mm256_maddubs_epi16(h, ao),
                        );
                        *a = _mm256_add_epi32(*a, _mm256_madd_epi16(p, ones));
                    }
                }
            }
        }
        for r in 0..R {
            let ri = (r0 + r) * blocks + blk;
            let a_scale = _mm256_set1_ps(qa.scales[ri]);
            let sum = qa.sums[ri];
            for t in 0..G {
                let sidx = ((t0 + t) * blocks + blk) * 8;
                // SAFETY: (tile, block) < (tiles, blocks): 8 scales (and zero
                // terms, with ZP) are inside their parts.
                unsafe {
                    if G == 1 && r == 0 {
                        prefetch_scales(v, sidx, STREAM_PREFETCH);
                    }
                    let s = _mm256_loadu_ps(v.scales.as_ptr().add(sidx));
                    let x = if ZP {
                        let z = _mm256_loadu_ps(nzs.add(sidx));
                        let d = _mm256_mul_ps(s, _mm256_cvtepi32_ps(acc[r][t]));
                        let e = _mm256_mul_ps(z, _mm256_set1_ps(sum as f32));
                        _mm256_mul_ps(a_scale, _mm256_add_ps(d, e))
                    } else {
                        let d = _mm256_sub_epi32(acc[r][t], _mm256_set1_epi32(8 * sum));
                        _mm256_mul_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(s, a_scale))
                    };
                    total[r][t] = _mm256_add_ps(total[r][t], x);
                }
            }
        }
    }
    for (r, row) in total.iter().enumerate() {
        for (t, &tot) in row.iter().enumerate() {
            let col = (t0 + t) * 8;
            let nvalid = (v.n - col).min(8);
            let mut tmp = [0f32; 8];
            // SAFETY: tmp holds 8 floats.
            unsafe { _mm256_storeu_ps(tmp.as_mut_ptr(), tot) };
            for (j, &x) in tmp[..nvalid].iter().enumerate() {
                // SAFETY: column col + j < N of row r0 + r belongs to this task.
                unsafe {
                    let p = y.add((r0 + r) * v.n + col + j);
                    *p = if accumulate { *p + x } else { x };
                }
            }
        }
    }
}

/// Never called: AVX2 is never selected off x86_64.
///
/// # Safety
/// None needed; it panics.
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn gemm(
    _: &Q4View<'_>,
    _: &QuantRows<'_>,
    _: usize,
    _: *mut f32,
    _: std::ops::Range<usize>,
    _: bool,
) {
    unreachable!("AVX2 is never selected off x86_64")
}
