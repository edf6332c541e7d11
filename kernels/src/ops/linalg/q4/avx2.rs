//! AVX2 4-bit matrix-vector product (hot path): four 8-column tiles at a
//! time; nibbles become floats with shift, mask and convert, the zero point
//! enters once per block as `-zp * scale * sum(a over the block)`.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::Q4View;

/// See [`super::gemv`]; `pad` holds the zero-padded last partial block of `a`.
///
/// # Safety
/// AVX2 and FMA present; `a` readable for the full blocks, `pad` for one
/// block; `y` writable for the columns of `tiles`, which are in range.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn gemv(
    v: &Q4View<'_>,
    a: *const f32,
    pad: *const f32,
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) {
    debug_assert!(v.tile == 8 && tiles.end <= v.tiles);
    let mut t = tiles.start;
    while t < tiles.end {
        let g = (tiles.end - t).min(4);
        // SAFETY: (all arms) forwarded contract; tiles t..t+g are in range.
        unsafe {
            match g {
                4 => group::<4>(v, a, pad, y, t, accumulate),
                3 => group::<3>(v, a, pad, y, t, accumulate),
                2 => group::<2>(v, a, pad, y, t, accumulate),
                _ => group::<1>(v, a, pad, y, t, accumulate),
            }
        }
        t += g;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group<const G: usize>(
    v: &Q4View<'_>,
    a: *const f32,
    pad: *const f32,
    y: *mut f32,
    t0: usize,
    accumulate: bool,
) {
    let bs = v.block_size;
    let gpb = bs / 8;
    let blocks = v.blocks;
    let low = _mm256_set1_epi32(15);
    let mut total = [_mm256_setzero_ps(); G];
    let wbase = v.weights.as_ptr();
    for blk in 0..blocks {
        let ab = if (blk + 1) * bs <= v.k {
            // SAFETY: block blk is a full block of `a`.
            unsafe { a.add(blk * bs) }
        } else {
            pad
        };
        let mut acc = [[_mm256_setzero_ps(); 2]; G];
        let mut asum = _mm256_setzero_ps();
        for g in 0..gpb {
            // SAFETY: tiles t0..t0+G < tiles, blk < blocks, g < gpb: each 32-byte
            // group lies inside the weights part; ab[g*8..g*8+8] is inside the
            // block of `a` (or of `pad`).
            unsafe {
                let mut w = [_mm256_setzero_si256(); G];
                for (t, wt) in w.iter_mut().enumerate() {
                    let at = (((t0 + t) * blocks + blk) * gpb + g) * 32;
                    *wt = _mm256_loadu_si256(wbase.add(at).cast());
                }
                let ap = ab.add(g * 8);
                asum = _mm256_add_ps(asum, _mm256_loadu_ps(ap));
                macro_rules! step {
                    ($j:literal, $par:literal) => {{
                        let aj = _mm256_broadcast_ss(&*ap.add($j));
                        for t in 0..G {
                            let q = _mm256_srli_epi32::<{ 4 * $j }>(w[t]);
                            let q = if $j < 7 { _mm256_and_si256(q, low) } else { q };
                            acc[t][$par] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), aj, acc[t][$par]);
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
        // Horizontal sum of the block of `a`, broadcast.
        let h = _mm_add_ps(
            _mm256_castps256_ps128(asum),
            _mm256_extractf128_ps::<1>(asum),
        );
        let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        let h = _mm_add_ss(h, _mm_shuffle_ps::<1>(h, h));
        let asum = _mm256_broadcastss_ps(h);
        for t in 0..G {
            let sidx = ((t0 + t) * blocks + blk) * 8;
            // SAFETY: (tile, block) < (tiles, blocks): 8 scales (and zero
            // terms) are inside their parts.
            unsafe {
                let s = _mm256_loadu_ps(v.scales.as_ptr().add(sidx));
                let z = match v.nzs {
                    Some(z) => _mm256_loadu_ps(z.as_ptr().add(sidx)),
                    None => _mm256_mul_ps(s, _mm256_set1_ps(-8.0)),
                };
                total[t] = _mm256_fmadd_ps(_mm256_add_ps(acc[t][0], acc[t][1]), s, total[t]);
                total[t] = _mm256_fmadd_ps(z, asum, total[t]);
            }
        }
    }
    for (t, &tot) in total.iter().enumerate() {
        let col = (t0 + t) * 8;
        let nvalid = (v.n - col).min(8);
        let mut tmp = [0f32; 8];
        // SAFETY: tmp holds 8 floats.
        unsafe { _mm256_storeu_ps(tmp.as_mut_ptr(), tot) };
        for (j, &x) in tmp[..nvalid].iter().enumerate() {
            // SAFETY: column col + j < N of y belongs to this task.
            unsafe {
                let p = y.add(col + j);
                *p = if accumulate { *p + x } else { x };
            }
        }
    }
}

/// Never called: AVX2 is never selected off x86_64.
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
    unreachable!("AVX2 is never selected off x86_64")
}
