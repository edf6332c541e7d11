//! AVX-512 f32 micro-kernels (hot path): `12 x 32` register tiles (24 `zmm`
//! accumulators, `B` rows as two vectors, `A` broadcast from memory) and the
//! dequantization of 4-bit panels.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{Arch, Tile, a_index};
use crate::ops::linalg::Q4View;

/// The AVX-512 family.
#[derive(Debug)]
pub(crate) struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Arch for Avx512 {
    const MR: usize = 12;
    const NR: usize = 32;

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
impl Arch for Avx512 {
    const MR: usize = 12;
    const NR: usize = 32;

    unsafe fn tile(_: &Tile) {
        unreachable!("AVX-512 is never selected off x86_64")
    }

    unsafe fn q4_panel(_: &Q4View<'_>, _: usize, _: usize, _: usize, _: *mut f32) {
        unreachable!("AVX-512 is never selected off x86_64")
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn tile(t: &Tile) {
    // SAFETY: (all arms) forwarded caller contract; `MASKED` when B rows
    // are short, `PANEL` the `A` panel height when A is packed (`a_step`).
    unsafe {
        match (t.b_cols == 32, t.a_step == 1) {
            (true, true) => tile_rows::<false, 0>(t),
            (false, true) => tile_rows::<true, 0>(t),
            (true, false) => tile_rows::<false, 12>(t),
            (false, false) => tile_rows::<true, 12>(t),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
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
            6 => tile_mr::<6, MASKED, PANEL>(t),
            7 => tile_mr::<7, MASKED, PANEL>(t),
            8 => tile_mr::<8, MASKED, PANEL>(t),
            9 => tile_mr::<9, MASKED, PANEL>(t),
            10 => tile_mr::<10, MASKED, PANEL>(t),
            11 => tile_mr::<11, MASKED, PANEL>(t),
            _ => tile_mr::<12, MASKED, PANEL>(t),
        }
    }
}

/// Loads the two halves of a `B` row, masked to `b_cols` when `MASKED`.
///
/// # Safety
/// `b..b + 32` (or `b..b + b_cols` when `MASKED`) is readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
#[inline]
unsafe fn load_b<const MASKED: bool>(b: *const f32, m: (__mmask16, __mmask16)) -> (__m512, __m512) {
    // SAFETY: the caller's bound; masked-off lanes are not accessed.
    unsafe {
        if MASKED {
            (
                _mm512_maskz_loadu_ps(m.0, b),
                _mm512_maskz_loadu_ps(m.1, b.add(16)),
            )
        } else {
            (_mm512_loadu_ps(b), _mm512_loadu_ps(b.add(16)))
        }
    }
}

/// Masks of the valid lanes of the two halves of a 32-column row.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn masks(nvalid: usize) -> (__mmask16, __mmask16) {
    let lo = nvalid.min(16);
    let hi = nvalid.saturating_sub(16).min(16);
    (((1u32 << lo) - 1) as u16, ((1u32 << hi) - 1) as u16)
}

/// Writes one row of results: `c (+)= alpha * (v0, v1)`.
///
/// # Safety
/// `c..c + nvalid` is writable (readable when `accumulate`); AVX-512F present.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
#[inline]
unsafe fn store_row(
    c: *mut f32,
    v0: __m512,
    v1: __m512,
    alpha: __m512,
    accumulate: bool,
    nvalid: usize,
) {
    // SAFETY: full rows touch c..c+32 (nvalid == 32); masked accesses touch
    // only the lanes below nvalid, and masked-off lanes never fault.
    unsafe {
        if nvalid == 32 {
            let (mut r0, mut r1) = (_mm512_mul_ps(v0, alpha), _mm512_mul_ps(v1, alpha));
            if accumulate {
                r0 = _mm512_add_ps(r0, _mm512_loadu_ps(c));
                r1 = _mm512_add_ps(r1, _mm512_loadu_ps(c.add(16)));
            }
            _mm512_storeu_ps(c, r0);
            _mm512_storeu_ps(c.add(16), r1);
        } else {
            let (m0, m1) = masks(nvalid);
            let (mut r0, mut r1) = (_mm512_mul_ps(v0, alpha), _mm512_mul_ps(v1, alpha));
            if accumulate {
                r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(m0, c));
                r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(m1, c.add(16)));
            }
            _mm512_mask_storeu_ps(c, m0, r0);
            _mm512_mask_storeu_ps(c.add(16), m1, r1);
        }
    }
}

/// `MR` rows by 32 columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn tile_mr<const MR: usize, const MASKED: bool, const PANEL: usize>(t: &Tile) {
    debug_assert!(t.mr == MR && t.nvalid >= 1 && t.nvalid <= 32 && t.b_cols >= t.nvalid);
    let bm = masks(t.b_cols);
    let mut c0 = [_mm512_setzero_ps(); MR];
    let mut c1 = [_mm512_setzero_ps(); MR];
    let (a, lda) = (t.a, t.lda);
    let mut b = t.b;
    for p in 0..t.k {
        // SAFETY: p < k, so B row p (b_cols floats at b) and A[i][p] for
        // i < MR are readable (Tile contract).
        unsafe {
            let (b0, b1) = load_b::<MASKED>(b, bm);
            for i in 0..MR {
                let av = _mm512_set1_ps(*a.add(a_index::<PANEL>(i, p, lda)));
                c0[i] = _mm512_fmadd_ps(av, b0, c0[i]);
                c1[i] = _mm512_fmadd_ps(av, b1, c1[i]);
            }
            b = b.add(t.ldb);
        }
    }
    let alpha = _mm512_set1_ps(t.alpha);
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

/// One row by 32 columns, `K` split four ways to hide the FMA latency.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn tile_m1<const MASKED: bool, const PANEL: usize>(t: &Tile) {
    let bm = masks(t.b_cols);
    let mut acc = [_mm512_setzero_ps(); 8];
    let (a, ldb) = (t.a, t.ldb);
    let mut b = t.b;
    let mut p = 0;
    while p + 4 <= t.k {
        // SAFETY: rows p..p+4 < k of B and A[0][p..p+4] are readable.
        unsafe {
            for u in 0..4 {
                let av = _mm512_set1_ps(*a.add(a_index::<PANEL>(0, p + u, 0)));
                let (b0, b1) = load_b::<MASKED>(b.add(u * ldb), bm);
                acc[2 * u] = _mm512_fmadd_ps(av, b0, acc[2 * u]);
                acc[2 * u + 1] = _mm512_fmadd_ps(av, b1, acc[2 * u + 1]);
            }
            b = b.add(4 * ldb);
        }
        p += 4;
    }
    while p < t.k {
        // SAFETY: row p < k of B and A[0][p] are readable.
        unsafe {
            let av = _mm512_set1_ps(*a.add(a_index::<PANEL>(0, p, 0)));
            let (b0, b1) = load_b::<MASKED>(b, bm);
            acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
            acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
            b = b.add(ldb);
        }
        p += 1;
    }
    let v0 = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[4], acc[6]));
    let v1 = _mm512_add_ps(_mm512_add_ps(acc[1], acc[3]), _mm512_add_ps(acc[5], acc[7]));
    // SAFETY: row 0 of C has nvalid writable columns.
    unsafe { store_row(t.c, v0, v1, _mm512_set1_ps(t.alpha), t.accumulate, t.nvalid) };
}

/// Dequantizes a `ceil8(kl) x 32` panel (two 16-column tiles) of 4-bit weights.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn q4_panel(v: &Q4View<'_>, panel: usize, k0: usize, kl: usize, out: *mut f32) {
    debug_assert!(v.tile == 16 && k0.is_multiple_of(v.block_size));
    let lut = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    );
    let groups = v.block_size / 8;
    let kgroups = kl.div_ceil(8);
    for half in 0..2 {
        let tile = panel * 2 + half;
        if tile >= v.tiles {
            for r in 0..kgroups * 8 {
                // SAFETY: out holds ceil8(kl) * 32 floats.
                unsafe { _mm512_storeu_ps(out.add(r * 32 + half * 16), _mm512_setzero_ps()) };
            }
            continue;
        }
        for kg in 0..kgroups {
            let kk = k0 + kg * 8;
            let (blk, g) = (kk / v.block_size, (kk % v.block_size) / 8);
            let sidx = (tile * v.blocks + blk) * 16;
            let widx = ((tile * v.blocks + blk) * groups + g) * 64;
            debug_assert!(widx + 64 <= v.weights.len() && sidx + 16 <= v.scales.len());
            // SAFETY: tile < tiles and blk < blocks (kk < K), so the 64
            // weight bytes and 16 scales (and zero terms) lie inside the
            // packed parts; out rows kg*8..kg*8+8 are inside the panel.
            unsafe {
                let s = _mm512_loadu_ps(v.scales.as_ptr().add(sidx));
                let z = match v.nzs {
                    Some(z) => _mm512_loadu_ps(z.as_ptr().add(sidx)),
                    None => _mm512_mul_ps(s, _mm512_set1_ps(-8.0)),
                };
                let w = _mm512_loadu_si512(v.weights.as_ptr().add(widx).cast());
                let dst = out.add(kg * 8 * 32 + half * 16);
                macro_rules! row {
                    ($j:literal) => {{
                        let q = _mm512_permutexvar_ps(_mm512_srli_epi32::<{ 4 * $j }>(w), lut);
                        _mm512_storeu_ps(dst.add($j * 32), _mm512_fmadd_ps(q, s, z));
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
