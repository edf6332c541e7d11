//! AVX-512 VNNI micro-kernels of the integer product (hot path): one
//! [`MR`] x [`NR`] tile of raw sums, one vector of sixteen columns per row,
//! over the byte layout (per quad of `k`, per column, four bytes).
//!
//! `vpdpbusd` multiplies four unsigned bytes of `A` by four signed bytes
//! of `B` and adds the four products to each i32 lane exactly, so these
//! kernels compute [`super::Arith::Dot4`]. Two sets of accumulators take
//! the even and odd quads, so that eight independent chains hide the
//! instruction's latency.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{MR, NR};

/// Raw sums, `A` packed as broadcast words (per quad, per row).
///
/// # Safety
/// The CPU has AVX-512 F and VNNI; `panel` holds `kquads * NR * 4` bytes
/// and `quads` `kquads * MR` words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn dot4(panel: &[u8], quads: &[u32], kquads: usize, tile: &mut [i32; MR * NR]) {
    assert!(
        panel.len() >= kquads * NR * 4 && quads.len() >= kquads * MR,
        "operands shorter than the reduction"
    );
    let ap = quads.as_ptr();
    // SAFETY: word `q * MR + r` lies inside `quads` for every q < kquads
    // (asserted above).
    let word = |q: usize, r: usize| unsafe { *ap.add(q * MR + r) as i32 };
    // SAFETY: the CPU has the features (the caller); the panel's size is
    // asserted above.
    unsafe { run(panel, kquads, word, tile) }
}

/// Raw sums reading the rows of `A` in place: per quad of `k`, the four
/// bytes at `4 q` of each row broadcast as one word.
///
/// # Safety
/// The CPU has AVX-512 F and VNNI; `panel` holds `kquads * NR * 4` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn dot4_rows(
    panel: &[u8],
    rows: &[&[u8]; MR],
    kquads: usize,
    tile: &mut [i32; MR * NR],
) {
    assert!(
        panel.len() >= kquads * NR * 4 && rows.iter().all(|r| r.len() >= kquads * 4),
        "operands shorter than the reduction"
    );
    let ap = rows.map(|r| r.as_ptr());
    // SAFETY: bytes 4 q .. 4 q + 4 lie inside each row for q < kquads
    // (asserted above); an unaligned read.
    let word = |q: usize, r: usize| unsafe { ap[r].add(4 * q).cast::<i32>().read_unaligned() };
    // SAFETY: the CPU has the features (the caller); the panel's size is
    // asserted above.
    unsafe { run(panel, kquads, word, tile) }
}

/// The loop of both kernels; `word(q, r)` is row `r`'s four bytes of quad
/// `q`.
///
/// # Safety
/// The CPU has AVX-512 F and VNNI; `panel` holds `kquads * NR * 4` bytes
/// (every caller asserts it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn run(
    panel: &[u8],
    kquads: usize,
    word: impl Fn(usize, usize) -> i32,
    tile: &mut [i32; MR * NR],
) {
    let mut even = [_mm512_setzero_si512(); MR];
    let mut odd = [_mm512_setzero_si512(); MR];
    let bp = panel.as_ptr();
    let mut q = 0;
    while q + 2 <= kquads {
        // SAFETY: quads q and q + 1 of the panel (64 bytes each) lie inside
        // it (the caller's size); unaligned loads.
        let (b0, b1) = unsafe {
            (
                _mm512_loadu_si512(bp.add(q * NR * 4).cast()),
                _mm512_loadu_si512(bp.add((q + 1) * NR * 4).cast()),
            )
        };
        for r in 0..MR {
            even[r] = _mm512_dpbusd_epi32(even[r], _mm512_set1_epi32(word(q, r)), b0);
            odd[r] = _mm512_dpbusd_epi32(odd[r], _mm512_set1_epi32(word(q + 1, r)), b1);
        }
        q += 2;
    }
    if q < kquads {
        // SAFETY: as above, quad q.
        let b0 = unsafe { _mm512_loadu_si512(bp.add(q * NR * 4).cast()) };
        for (r, e) in even.iter_mut().enumerate() {
            *e = _mm512_dpbusd_epi32(*e, _mm512_set1_epi32(word(q, r)), b0);
        }
    }
    for r in 0..MR {
        let sum = _mm512_add_epi32(even[r], odd[r]);
        // SAFETY: row r of the tile is NR = 16 i32, one vector.
        unsafe { _mm512_storeu_si512(tile.as_mut_ptr().add(r * NR).cast(), sum) };
    }
}
