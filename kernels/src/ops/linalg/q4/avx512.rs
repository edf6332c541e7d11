//! AVX-512 4-bit matrix-vector product (hot path): four 16-column tiles at
//! a time (one for a large weight, see [`STREAMED_WEIGHT`]), one `vpermps` per 16
//! nibbles, two accumulators per tile.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{Q4View, STREAM_PREFETCH, STREAMED_WEIGHT, prefetch_scales};

/// See [`super::gemv`]; `pad` holds the zero-padded last partial block of `a`.
///
/// # Safety
/// AVX-512 F/BW/DQ/VL present; `a` readable for the full blocks, `pad` for
/// one block; `y` writable for the columns of `tiles`, which are in range.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub(super) unsafe fn gemv(
    v: &Q4View<'_>,
    a: *const f32,
    pad: *const f32,
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) {
    debug_assert!(v.tile == 16 && tiles.end <= v.tiles);
    let most = if v.weights.len() >= STREAMED_WEIGHT {
        1
    } else {
        4
    };
    let mut t = tiles.start;
    while t < tiles.end {
        let g = (tiles.end - t).min(most);
        // SAFETY: (all arms) forwarded contract; tiles t..t+g are in range.
        unsafe {
            match (g, v.nzs.is_some()) {
                (4, false) => group::<4, false>(v, a, pad, y, t, accumulate),
                (3, false) => group::<3, false>(v, a, pad, y, t, accumulate),
                (2, false) => group::<2, false>(v, a, pad, y, t, accumulate),
                (_, false) => group::<1, false>(v, a, pad, y, t, accumulate),
                (4, true) => group::<4, true>(v, a, pad, y, t, accumulate),
                (3, true) => group::<3, true>(v, a, pad, y, t, accumulate),
                (2, true) => group::<2, true>(v, a, pad, y, t, accumulate),
                (_, true) => group::<1, true>(v, a, pad, y, t, accumulate),
            }
        }
        t += g;
    }
}

/// Tiles `t0..t0 + G`. With `ZP` the nibble table is the identity and the
/// zero point enters as `-zp * scale * sum(a over the block)`; without, the
/// table holds `q - 8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn group<const G: usize, const ZP: bool>(
    v: &Q4View<'_>,
    a: *const f32,
    pad: *const f32,
    y: *mut f32,
    t0: usize,
    accumulate: bool,
) {
    let lut = if ZP {
        _mm512_setr_ps(
            0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
        )
    } else {
        _mm512_setr_ps(
            -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0,
        )
    };
    let bs = v.block_size;
    let gpb = bs / 8;
    let blocks = v.blocks;
    let mut total = [_mm512_setzero_ps(); G];
    let wbase = v.weights.as_ptr();
    for blk in 0..blocks {
        let ab = if (blk + 1) * bs <= v.k {
            // SAFETY: block blk is a full block of `a`.
            unsafe { a.add(blk * bs) }
        } else {
            pad
        };
        let mut acc = [[_mm512_setzero_ps(); 2]; G];
        for g in 0..gpb {
            // SAFETY: tiles t0..t0+G < tiles, blk < blocks, g < gpb: each 64-byte
            // group lies inside the weights part; ab[g*8..g*8+8] is inside the
            // block of `a` (or of `pad`).
            unsafe {
                let mut w = [_mm512_setzero_si512(); G];
                for (t, wt) in w.iter_mut().enumerate() {
                    let at = (((t0 + t) * blocks + blk) * gpb + g) * 64;
                    if G == 1 {
                        // A hint only: never dereferenced, may point past
                        // the weights.
                        _mm_prefetch::<_MM_HINT_T0>(
                            wbase.wrapping_add(at + STREAM_PREFETCH).cast(),
                        );
                    }
                    *wt = _mm512_loadu_si512(wbase.add(at).cast());
                }
                let ap = ab.add(g * 8);
                macro_rules! step {
                    ($j:literal, $par:literal) => {{
                        let aj = _mm512_set1_ps(*ap.add($j));
                        for t in 0..G {
                            let q =
                                _mm512_permutexvar_ps(_mm512_srli_epi32::<{ 4 * $j }>(w[t]), lut);
                            acc[t][$par] = _mm512_fmadd_ps(q, aj, acc[t][$par]);
                        }
                    }};
                }
                step!(0, 0);
                step!(1, 1);
                step!(2, 0);
                step!(3, 1);
                step!(4, 0);
                step!(5, 1);
                step!(6, 0);
                step!(7, 1);
            }
        }
        let asum = if ZP {
            let mut s = _mm512_setzero_ps();
            for i in 0..bs / 16 {
                // SAFETY: ab holds one block of bs floats.
                s = _mm512_add_ps(s, unsafe { _mm512_loadu_ps(ab.add(i * 16)) });
            }
            _mm512_set1_ps(_mm512_reduce_add_ps(s))
        } else {
            _mm512_setzero_ps()
        };
        for t in 0..G {
            let sidx = ((t0 + t) * blocks + blk) * 16;
            // SAFETY: (tile, block) < (tiles, blocks): 16 scales (and zero
            // terms) are inside their parts.
            unsafe {
                if G == 1 {
                    prefetch_scales(v, sidx, STREAM_PREFETCH);
                }
                let s = _mm512_loadu_ps(v.scales.as_ptr().add(sidx));
                total[t] = _mm512_fmadd_ps(_mm512_add_ps(acc[t][0], acc[t][1]), s, total[t]);
                if ZP && let Some(z) = v.nzs {
                    total[t] =
                        _mm512_fmadd_ps(_mm512_loadu_ps(z.as_ptr().add(sidx)), asum, total[t]);
                }
            }
        }
    }
    for (t, &tot) in total.iter().enumerate() {
        let col = (t0 + t) * 16;
        let nvalid = (v.n - col).min(16);
        let mask = ((1u32 << nvalid) - 1) as u16;
        // SAFETY: columns col..col+nvalid < N of y are this task's; masked-off
        // lanes are not accessed.
        unsafe {
            let p = y.add(col);
            let r = if accumulate {
                _mm512_add_ps(tot, _mm512_maskz_loadu_ps(mask, p))
            } else {
                tot
            };
            _mm512_mask_storeu_ps(p, mask, r);
        }
    }
}

/// Never called: AVX-512 is never selected off x86_64.
///
/// # Safety
/// None needed; it panics.
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn gemv(
    _: &Q4View<'_>,
    _: *const f32,
    _: *const f32,
    _: *mut f32,
    _: std::ops::Range<usize>,
    _: bool,
) {
    unreachable!("AVX-512 is never selected off x86_64")
}
