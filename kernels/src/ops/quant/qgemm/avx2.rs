//! AVX2 micro-kernels of the integer product (hot path): one [`MR`] x
//! [`NR`] tile of raw sums, two vectors of eight columns per row.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{MR, NR};

/// Raw sums over the byte layout with saturating pairs: per quad of `k`,
/// `vpmaddubsw` (unsigned `A` bytes times signed `B` bytes, each pair
/// summed and saturated to i16), then `vpmaddwd` by ones (the two pairs
/// summed exactly into i32).
///
/// # Safety
/// The CPU has AVX2; `panel` holds `kquads * NR * 4` bytes and `quads`
/// `kquads * MR` words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sat_pairs(
    panel: &[u8],
    quads: &[u32],
    kquads: usize,
    tile: &mut [i32; MR * NR],
) {
    debug_assert!(panel.len() >= kquads * NR * 4 && quads.len() >= kquads * MR);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); 2 * MR];
    let (bp, ap) = (panel.as_ptr(), quads.as_ptr());
    for q in 0..kquads {
        // SAFETY: quad q of the panel (64 bytes) and of the rows (MR words)
        // lie inside the slices (the caller's sizes); unaligned loads.
        unsafe {
            let b0 = _mm256_loadu_si256(bp.add(q * NR * 4).cast());
            let b1 = _mm256_loadu_si256(bp.add(q * NR * 4 + 32).cast());
            for r in 0..MR {
                let a = _mm256_set1_epi32(*ap.add(q * MR + r) as i32);
                let t0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b0), ones);
                let t1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b1), ones);
                acc[2 * r] = _mm256_add_epi32(acc[2 * r], t0);
                acc[2 * r + 1] = _mm256_add_epi32(acc[2 * r + 1], t1);
            }
        }
    }
    store(&acc, tile);
}

/// [`sat_pairs`] reading the rows of `A` in place: per quad of `k`, the
/// four bytes at `4 q` of each row broadcast as one word.
///
/// # Safety
/// The CPU has AVX2; `panel` holds `kquads * NR * 4` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn sat_pairs_rows(
    panel: &[u8],
    rows: &[&[u8]; MR],
    kquads: usize,
    tile: &mut [i32; MR * NR],
) {
    debug_assert!(panel.len() >= kquads * NR * 4);
    assert!(
        rows.iter().all(|r| r.len() >= kquads * 4),
        "rows shorter than the reduction"
    );
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); 2 * MR];
    let bp = panel.as_ptr();
    let ap = rows.map(|r| r.as_ptr());
    for q in 0..kquads {
        // SAFETY: quad q of the panel (64 bytes) lies inside it (the
        // caller's size), bytes 4 q .. 4 q + 4 inside each row (asserted
        // above); unaligned loads.
        unsafe {
            let b0 = _mm256_loadu_si256(bp.add(q * NR * 4).cast());
            let b1 = _mm256_loadu_si256(bp.add(q * NR * 4 + 32).cast());
            for r in 0..MR {
                let w = ap[r].add(4 * q).cast::<i32>().read_unaligned();
                let a = _mm256_set1_epi32(w);
                let t0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b0), ones);
                let t1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a, b1), ones);
                acc[2 * r] = _mm256_add_epi32(acc[2 * r], t0);
                acc[2 * r + 1] = _mm256_add_epi32(acc[2 * r + 1], t1);
            }
        }
    }
    store(&acc, tile);
}

/// Exact raw sums over the pair layout: per pair of `k`, `vpmaddwd` of the
/// broadcast pair of `A` values against the pairs of eight columns.
///
/// # Safety
/// The CPU has AVX2; `panel` holds `kpairs * NR * 2` little-endian i16
/// values and `pairs` `kpairs * MR` words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn exact(panel: &[u8], pairs: &[u32], kpairs: usize, tile: &mut [i32; MR * NR]) {
    debug_assert!(panel.len() >= kpairs * NR * 4 && pairs.len() >= kpairs * MR);
    let mut acc = [_mm256_setzero_si256(); 2 * MR];
    let (bp, ap) = (panel.as_ptr(), pairs.as_ptr());
    for q in 0..kpairs {
        // SAFETY: pair q of the panel (64 bytes) and of the rows (MR
        // words) lie inside the slices (the caller's sizes).
        unsafe {
            let b0 = _mm256_loadu_si256(bp.add(q * NR * 4).cast());
            let b1 = _mm256_loadu_si256(bp.add(q * NR * 4 + 32).cast());
            for r in 0..MR {
                let a = _mm256_set1_epi32(*ap.add(q * MR + r) as i32);
                acc[2 * r] = _mm256_add_epi32(acc[2 * r], _mm256_madd_epi16(a, b0));
                acc[2 * r + 1] = _mm256_add_epi32(acc[2 * r + 1], _mm256_madd_epi16(a, b1));
            }
        }
    }
    store(&acc, tile);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn store(acc: &[__m256i; 2 * MR], tile: &mut [i32; MR * NR]) {
    for (i, v) in acc.iter().enumerate() {
        // SAFETY: vector i covers tile[8 i .. 8 i + 8], inside the MR * NR
        // tile (2 MR vectors of 8).
        unsafe { _mm256_storeu_si256(tile.as_mut_ptr().add(8 * i).cast(), *v) };
    }
}
