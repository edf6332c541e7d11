//! AVX-512 int8-activation kernels on the 16-column 4-bit layout (hot
//! path): `vpdpbusd` (VNNI) or `vpmaddubsw` + `vpmaddwd` (BW). One pass
//! covers up to 4 rows and up to 4 tiles (one tile for a single row, see
//! [`prefetch`]); the scheme and the order of float
//! operations are those of [`super::int8`].

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{Q4View, QuantRows, prefetch_scales};

/// Bytes ahead of the weight stream(s) that a group of `G` tiles
/// prefetches (the hardware prefetchers run less far ahead than a decode
/// step's GEMV needs to keep memory busy from one core).
///
/// A single row (a decode step) reads one tile per pass, so the pass
/// follows one weight stream and one scale stream, prefetched 8 KiB ahead:
/// on a Zen 5 core, 85 MB of weights from memory went from 31 GB/s (four
/// tiles a pass, 1 KiB ahead) to 43-49 GB/s, about what a plain
/// sequential reader gets; from the last-level cache, 90 to 97 GB/s. With
/// several tiles a pass (several rows, where each weight load serves every
/// row) the streams are several and a far prefetch loses (8 KiB: 28 GB/s).
const fn prefetch(tiles_per_pass: usize) -> usize {
    if tiles_per_pass == 1 {
        super::STREAM_PREFETCH
    } else {
        1024
    }
}

/// See [`super::int8::gemm`]; `VNNI` picks `vpdpbusd`.
///
/// # Safety
/// AVX-512 F/BW/DQ/VL (and VNNI with `VNNI`) present; `v` is a 16-column
/// layout; the rest as [`super::int8::gemm`], which checked `qa`'s shapes.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn gemm<const VNNI: bool>(
    v: &Q4View<'_>,
    qa: &QuantRows<'_>,
    rows: usize,
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) {
    debug_assert!(v.tile == 16);
    // SAFETY: forwarded contract.
    unsafe {
        if VNNI {
            vnni::gemm(v, qa, rows, y, tiles, accumulate)
        } else {
            bw::gemm(v, qa, rows, y, tiles, accumulate)
        }
    }
}

/// `acc + lo . ae + hi . ao` (u8 x i8 dot products of 4 bytes per lane).
///
/// # Safety
/// AVX-512 F/BW and VNNI present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn dot2_vnni(acc: __m512i, lo: __m512i, ae: __m512i, hi: __m512i, ao: __m512i) -> __m512i {
    _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc, lo, ae), hi, ao)
}

/// As [`dot2_vnni`] without VNNI: pairs of `u8 x i8` to `i16` (at most
/// `2 * 15 * 127` each, no saturation), the two halves added (at most
/// 7620), then pairs to `i32`.
///
/// # Safety
/// AVX-512 F/BW present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn dot2_bw(acc: __m512i, lo: __m512i, ae: __m512i, hi: __m512i, ao: __m512i) -> __m512i {
    let p = _mm512_add_epi16(_mm512_maddubs_epi16(lo, ae), _mm512_maddubs_epi16(hi, ao));
    _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)))
}

macro_rules! family {
    ($module:ident, $features:literal, $dot2:ident) => {
        #[cfg(target_arch = "x86_64")]
        mod $module {
            use super::*;

            /// # Safety
            /// As [`super::gemm`].
            #[target_feature(enable = $features)]
            pub(super) unsafe fn gemm(
                v: &Q4View<'_>,
                qa: &QuantRows<'_>,
                rows: usize,
                y: *mut f32,
                tiles: std::ops::Range<usize>,
                accumulate: bool,
            ) {
                let mut r = 0;
                while r < rows {
                    let left = rows - r;
                    // SAFETY: (all arms) forwarded contract; rows r.. are in range.
                    unsafe {
                        r += if left >= 4 {
                            pass::<4, 2>(v, qa, r, y, tiles.clone(), accumulate)
                        } else if left >= 2 {
                            pass::<2, 4>(v, qa, r, y, tiles.clone(), accumulate)
                        } else {
                            pass::<1, 1>(v, qa, r, y, tiles.clone(), accumulate)
                        };
                    }
                }
            }

            /// Rows `r0..r0 + R` over `tiles`, `G` tiles at a time; returns `R`.
            ///
            /// # Safety
            /// As [`super::gemm`], with rows `r0..r0 + R` in range.
            #[target_feature(enable = $features)]
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
                    // SAFETY: (all arms) forwarded contract; tiles t..t + G
                    // (or t) are in range.
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

            /// Rows `r0..r0 + R`, tiles `t0..t0 + G`. With `ZP`, part 3
            /// holds `-zp * scale`.
            ///
            /// # Safety
            /// As [`pass`], with tiles `t0..t0 + G` in range and, with
            /// `ZP`, zero points present.
            #[target_feature(enable = $features)]
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
                let nib = _mm512_set1_epi8(0x0f);
                let wbase = v.weights.as_ptr();
                let nzs = v.nzs.map_or(std::ptr::null(), |z| z.as_ptr());
                let mut total = [[_mm512_setzero_ps(); G]; R];
                for blk in 0..blocks {
                    let mut acc = [[_mm512_setzero_si512(); G]; R];
                    for g in 0..gpb {
                        // SAFETY: tiles t0..t0 + G < tiles, blk < blocks,
                        // g < gpb: each 64-byte group is inside the weights
                        // part; rows r0..r0 + R of `qa` hold blocks * bs bytes.
                        unsafe {
                            let mut lo = [_mm512_setzero_si512(); G];
                            let mut hi = [_mm512_setzero_si512(); G];
                            for t in 0..G {
                                let at = (((t0 + t) * blocks + blk) * gpb + g) * 64;
                                // A hint only: never dereferenced, may point
                                // past the weights.
                                _mm_prefetch::<_MM_HINT_T0>(
                                    wbase.wrapping_add(at + prefetch(G)).cast(),
                                );
                                let w = _mm512_loadu_si512(wbase.add(at).cast());
                                lo[t] = _mm512_and_si512(w, nib);
                                hi[t] = _mm512_and_si512(_mm512_srli_epi32::<4>(w), nib);
                            }
                            for r in 0..R {
                                let qp =
                                    qa.q.as_ptr()
                                        .add((r0 + r) * qa.stride + (blk * gpb + g) * 8);
                                let ae = _mm512_set1_epi32(qp.cast::<i32>().read_unaligned());
                                let ao =
                                    _mm512_set1_epi32(qp.add(4).cast::<i32>().read_unaligned());
                                for t in 0..G {
                                    acc[r][t] = super::$dot2(acc[r][t], lo[t], ae, hi[t], ao);
                                }
                            }
                        }
                    }
                    for r in 0..R {
                        let ri = (r0 + r) * blocks + blk;
                        let a_scale = _mm512_set1_ps(qa.scales[ri]);
                        let sum = qa.sums[ri];
                        for t in 0..G {
                            let sidx = ((t0 + t) * blocks + blk) * 16;
                            // SAFETY: (tile, block) < (tiles, blocks): 16
                            // scales (and zero terms, with ZP) are inside
                            // their parts.
                            unsafe {
                                if r == 0 {
                                    prefetch_scales(v, sidx, prefetch(G));
                                }
                                let s = _mm512_loadu_ps(v.scales.as_ptr().add(sidx));
                                let x = if ZP {
                                    let z = _mm512_loadu_ps(nzs.add(sidx));
                                    let d = _mm512_mul_ps(s, _mm512_cvtepi32_ps(acc[r][t]));
                                    let e = _mm512_mul_ps(z, _mm512_set1_ps(sum as f32));
                                    _mm512_mul_ps(a_scale, _mm512_add_ps(d, e))
                                } else {
                                    let d = _mm512_sub_epi32(acc[r][t], _mm512_set1_epi32(8 * sum));
                                    _mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(s, a_scale))
                                };
                                total[r][t] = _mm512_add_ps(total[r][t], x);
                            }
                        }
                    }
                }
                for (r, row) in total.iter().enumerate() {
                    for (t, &tot) in row.iter().enumerate() {
                        let col = (t0 + t) * 16;
                        let nvalid = (v.n - col).min(16);
                        let mask = ((1u32 << nvalid) - 1) as u16;
                        // SAFETY: columns col..col + nvalid < N of row r0 + r
                        // are this task's; masked-off lanes are not accessed.
                        unsafe {
                            let p = y.add((r0 + r) * v.n + col);
                            let out = if accumulate {
                                _mm512_add_ps(_mm512_maskz_loadu_ps(mask, p), tot)
                            } else {
                                tot
                            };
                            _mm512_mask_storeu_ps(p, mask, out);
                        }
                    }
                }
            }
        }
    };
}

family!(
    vnni,
    "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma",
    dot2_vnni
);
family!(bw, "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma", dot2_bw);

/// Never called: AVX-512 is never selected off x86_64.
///
/// # Safety
/// None needed; it panics.
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn gemm<const VNNI: bool>(
    _: &Q4View<'_>,
    _: &QuantRows<'_>,
    _: usize,
    _: *mut f32,
    _: std::ops::Range<usize>,
    _: bool,
) {
    unreachable!("AVX-512 is never selected off x86_64")
}
