//! AVX2 + FMA f32 micro-kernels (hot path): `6 x 16` register tiles (12
//! `ymm` accumulators) and the dequantization of 4-bit panels.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{Arch, Tile, a_index};
use crate::ops::linalg::Q4View;

/// The AVX2 family.
#[derive(Debug)]
pub(crate) struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Arch for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;

    unsafe fn tile(t: &Tile) {
        // SAFETY: forwarded caller contract (features present, Tile contract).
        unsafe { tile(t) }
    }

    unsafe fn q4_panel(v: &Q4View<'_>, panel: usize, k0: usize, kl: usize, out: *mut f32) {
        // SAFETY: forwarded caller contract.
        unsafe { q4_panel(v, panel, k0, kl, out) }
    }
}

#[cfg(not(target_arch = "x86_64"))]
impl Arch for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;

    unsafe fn tile(_: &Tile) {
        unreachable!("AVX2 is never selected off x86_64")
    }

    unsafe fn q4_panel(_: &Q4View<'_>, _: usize, _: usize, _: usize, _: *mut f32) {
        unreachable!("AVX2 is never selected off x86_64")
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile(t: &Tile) {
    // SAFETY: (all arms) forwarded caller contract; `MASKED` when B rows
    // are short, `PANEL` the `A` panel height when A is packed (`a_step`).
    unsafe {
        match (t.b_cols == 16, t.a_step == 1) {
            (true, true) => tile_rows::<false, 0>(t),
            (false, true) => tile_rows::<true, 0>(t),
            (true, false) => tile_rows::<false, 6>(t),
            (false, false) => tile_rows::<true, 6>(t),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn tile_rows<const MASKED: bool, const PANEL: usize>(t: &Tile) {
    // SAFETY: (all arms) forwarded caller contract; `mr` selects the
    // instantiation with exactly `mr` rows.
    unsafe {
        match t.mr {
            1 => tile_m1::<MASKED, PANEL>(t),
            2 => tile_mr::<2, MASKED, PANEL>(t),
            3 => tile_mr::<3, MASKED, PANEL>(t),
            4 => tile_mr::<4, MASKED, PANEL>(t),
            5 => tile_mr::<5, MASKED, PANEL>(t),
            _ => tile_mr::<6, MASKED, PANEL>(t),
        }
    }
}

/// Lane masks for the first `cols` of 16 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn masks(cols: usize) -> (__m256i, __m256i) {
    let n = _mm256_set1_epi32(cols.min(16) as i32);
    let lo = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let hi = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
    (_mm256_cmpgt_epi32(n, lo), _mm256_cmpgt_epi32(n, hi))
}

/// Loads the two halves of a `B` row, masked to the valid columns when `MASKED`.
///
/// # Safety
/// `b..b + 16` (or the lanes set in `m` when `MASKED`) is readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn load_b<const MASKED: bool>(b: *const f32, m: (__m256i, __m256i)) -> (__m256, __m256) {
    // SAFETY: the caller's bound; masked-off lanes are not accessed.
    unsafe {
        if MASKED {
            (
                _mm256_maskload_ps(b, m.0),
                _mm256_maskload_ps(b.add(8), m.1),
            )
        } else {
            (_mm256_loadu_ps(b), _mm256_loadu_ps(b.add(8)))
        }
    }
}

/// Writes one row of results: `c (+)= alpha * (v0, v1)`.
///
/// # Safety
/// `c..c + nvalid` is writable (readable when `accumulate`); AVX2 and FMA present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn store_row(
    c: *mut f32,
    v0: __m256,
    v1: __m256,
    alpha: __m256,
    accumulate: bool,
    nvalid: usize,
) {
    let (r0, r1) = (_mm256_mul_ps(v0, alpha), _mm256_mul_ps(v1, alpha));
    if nvalid == 16 {
        // SAFETY: a full row: c..c+16 is in bounds.
        unsafe {
            if accumulate {
                _mm256_storeu_ps(c, _mm256_add_ps(r0, _mm256_loadu_ps(c)));
                _mm256_storeu_ps(c.add(8), _mm256_add_ps(r1, _mm256_loadu_ps(c.add(8))));
            } else {
                _mm256_storeu_ps(c, r0);
                _mm256_storeu_ps(c.add(8), r1);
            }
        }
    } else {
        let mut tmp = [0f32; 16];
        // SAFETY: tmp holds 16 floats.
        unsafe {
            _mm256_storeu_ps(tmp.as_mut_ptr(), r0);
            _mm256_storeu_ps(tmp.as_mut_ptr().add(8), r1);
        }
        for (j, &x) in tmp[..nvalid].iter().enumerate() {
            // SAFETY: j < nvalid: inside the caller's row.
            unsafe {
                let p = c.add(j);
                *p = if accumulate { *p + x } else { x };
            }
        }
    }
}

/// `MR` rows by 16 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_mr<const MR: usize, const MASKED: bool, const PANEL: usize>(t: &Tile) {
    debug_assert!(t.mr == MR && t.nvalid >= 1 && t.nvalid <= 16 && t.b_cols >= t.nvalid);
    let bm = masks(t.b_cols);
    let mut c0 = [_mm256_setzero_ps(); MR];
    let mut c1 = [_mm256_setzero_ps(); MR];
    let (a, lda) = (t.a, t.lda);
    let mut b = t.b;
    for p in 0..t.k {
        // SAFETY: p < k, so B row p (b_cols floats at b) and A[i][p] for
        // i < MR are readable (Tile contract).
        unsafe {
            let (b0, b1) = load_b::<MASKED>(b, bm);
            for i in 0..MR {
                let av = _mm256_broadcast_ss(&*a.add(a_index::<PANEL>(i, p, lda)));
                c0[i] = _mm256_fmadd_ps(av, b0, c0[i]);
                c1[i] = _mm256_fmadd_ps(av, b1, c1[i]);
            }
            b = b.add(t.ldb);
        }
    }
    let alpha = _mm256_set1_ps(t.alpha);
    for i in 0..MR {
        // SAFETY: row i < mr of C has nvalid writable columns (Tile contract).
        unsafe {
            store_row(
                t.c.add(i * t.ldc),
                c0[i],
                c1[i],
                alpha,
                t.accumulate,
                t.nvalid,
            )
        };
    }
}

/// One row by 16 columns, `K` split four ways to hide the FMA latency.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_m1<const MASKED: bool, const PANEL: usize>(t: &Tile) {
    let bm = masks(t.b_cols);
    let mut acc = [_mm256_setzero_ps(); 8];
    let (a, ldb) = (t.a, t.ldb);
    let mut b = t.b;
    let mut p = 0;
    while p + 4 <= t.k {
        // SAFETY: rows p..p+4 < k of B and A[0][p..p+4] are readable.
        unsafe {
            for u in 0..4 {
                let av = _mm256_broadcast_ss(&*a.add(a_index::<PANEL>(0, p + u, 0)));
                let (b0, b1) = load_b::<MASKED>(b.add(u * ldb), bm);
                acc[2 * u] = _mm256_fmadd_ps(av, b0, acc[2 * u]);
                acc[2 * u + 1] = _mm256_fmadd_ps(av, b1, acc[2 * u + 1]);
            }
            b = b.add(4 * ldb);
        }
        p += 4;
    }
    while p < t.k {
        // SAFETY: row p < k of B and A[0][p] are readable.
        unsafe {
            let av = _mm256_broadcast_ss(&*a.add(a_index::<PANEL>(0, p, 0)));
            let (b0, b1) = load_b::<MASKED>(b, bm);
            acc[0] = _mm256_fmadd_ps(av, b0, acc[0]);
            acc[1] = _mm256_fmadd_ps(av, b1, acc[1]);
            b = b.add(ldb);
        }
        p += 1;
    }
    let v0 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[4], acc[6]));
    let v1 = _mm256_add_ps(_mm256_add_ps(acc[1], acc[3]), _mm256_add_ps(acc[5], acc[7]));
    // SAFETY: row 0 of C has nvalid writable columns.
    unsafe { store_row(t.c, v0, v1, _mm256_set1_ps(t.alpha), t.accumulate, t.nvalid) };
}

/// Dequantizes a `ceil8(kl) x 16` panel (two 8-column tiles) of 4-bit weights.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn q4_panel(v: &Q4View<'_>, panel: usize, k0: usize, kl: usize, out: *mut f32) {
    debug_assert!(v.tile == 8 && k0.is_multiple_of(v.block_size));
    let groups = v.block_size / 8;
    let kgroups = kl.div_ceil(8);
    let low = _mm256_set1_epi32(15);
    for half in 0..2 {
        let tile = panel * 2 + half;
        if tile >= v.tiles {
            for r in 0..kgroups * 8 {
                // SAFETY: out holds ceil8(kl) * 16 floats.
                unsafe { _mm256_storeu_ps(out.add(r * 16 + half * 8), _mm256_setzero_ps()) };
            }
            continue;
        }
        for kg in 0..kgroups {
            let kk = k0 + kg * 8;
            let (blk, g) = (kk / v.block_size, (kk % v.block_size) / 8);
            let sidx = (tile * v.blocks + blk) * 8;
            let widx = ((tile * v.blocks + blk) * groups + g) * 32;
            debug_assert!(widx + 32 <= v.weights.len() && sidx + 8 <= v.scales.len());
            // SAFETY: tile < tiles and blk < blocks (kk < K), so the 32
            // weight bytes and 8 scales (and zero terms) lie inside the
            // packed parts; out rows kg*8..kg*8+8 are inside the panel.
            unsafe {
                let s = _mm256_loadu_ps(v.scales.as_ptr().add(sidx));
                let z = match v.nzs {
                    Some(z) => _mm256_loadu_ps(z.as_ptr().add(sidx)),
                    None => _mm256_mul_ps(s, _mm256_set1_ps(-8.0)),
                };
                let w = _mm256_loadu_si256(v.weights.as_ptr().add(widx).cast());
                let dst = out.add(kg * 8 * 16 + half * 8);
                macro_rules! row {
                    ($j:literal) => {{
                        let q = _mm256_and_si256(_mm256_srli_epi32::<{ 4 * $j }>(w), low);
                        let q = _mm256_cvtepi32_ps(q);
                        _mm256_storeu_ps(dst.add($j * 16), _mm256_fmadd_ps(q, s, z));
                    }};
                }
                row!(0);
                row!(1);
                row!(2);
                row!(3);
                row!(4);
                row!(5);
                row!(6);
                row!(7);
            }
        }
    }
}
