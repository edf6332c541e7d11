//! AVX-512 VNNI micro-kernels of the integer product (hot path): [`MR`]
//! rows by `P` panels of [`NR`] columns of raw sums, one vector of sixteen
//! columns per row and panel, over the byte layout (per quad of `k`, per
//! column, four bytes).
//!
//! `vpdpbusd` multiplies four unsigned bytes of `A` by four signed bytes
//! of `B` and adds the four products to each i32 lane exactly, so these
//! kernels compute [`super::Arith::Dot4`]. One panel at a time, two sets
//! of accumulators take the even and odd quads, so that eight independent
//! chains hide the instruction's latency. [`GROUP`] panels at a time, each
//! broadcast word of `A` feeds one product per panel: sixteen chains, and
//! one load per product instead of two (a word and a vector per product).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::{MR, NR};

/// Panels the wide kernels run at once (4 x 16 columns, 16 accumulators).
pub(super) const GROUP: usize = 4;

/// One tile of raw sums per panel.
pub(super) type Tiles<const P: usize> = [[i32; MR * NR]; P];

/// Raw sums of `P` consecutive panels, `A` packed as broadcast words (per
/// quad, per row).
///
/// # Safety
/// The CPU has AVX-512 F and VNNI; `panels` holds `P` panels of
/// `kquads * NR * 4` bytes and `quads` `kquads * MR` words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn dot4<const P: usize>(
    panels: &[u8],
    quads: &[u32],
    kquads: usize,
    tiles: &mut Tiles<P>,
) {
    assert!(
        panels.len() >= P * kquads * NR * 4 && quads.len() >= kquads * MR,
        "operands shorter than the reduction"
    );
    let ap = quads.as_ptr();
    // SAFETY: word `q * MR + r` lies inside `quads` for every q < kquads
    // (asserted above).
    let word = |q: usize, r: usize| unsafe { *ap.add(q * MR + r) as i32 };
    // SAFETY: the CPU has the features (the caller); the panels' size is
    // asserted above.
    unsafe { run(panels, kquads, word, tiles) }
}

/// Raw sums of `P` consecutive panels reading the rows of `A` in place:
/// per quad of `k`, the four bytes at `4 q` of each row broadcast as one
/// word.
///
/// # Safety
/// The CPU has AVX-512 F and VNNI; `panels` holds `P` panels of
/// `kquads * NR * 4` bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn dot4_rows<const P: usize>(
    panels: &[u8],
    rows: &[&[u8]; MR],
    kquads: usize,
    tiles: &mut Tiles<P>,
) {
    assert!(
        panels.len() >= P * kquads * NR * 4 && rows.iter().all(|r| r.len() >= kquads * 4),
        "operands shorter than the reduction"
    );
    let ap = rows.map(|r| r.as_ptr());
    // SAFETY: bytes 4 q .. 4 q + 4 lie inside each row for q < kquads
    // (asserted above); an unaligned read.
    let word = |q: usize, r: usize| unsafe { ap[r].add(4 * q).cast::<i32>().read_unaligned() };
    // SAFETY: the CPU has the features (the caller); the panels' size is
    // asserted above.
    unsafe { run(panels, kquads, word, tiles) }
}

/// The loop of both kernels; `word(q, r)` is row `r`'s four bytes of quad
/// `q`.
///
/// # Safety
/// The CPU has AVX-512 F and VNNI; `panels` holds `P * kquads * NR * 4`
/// bytes (every caller asserts it).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
unsafe fn run<const P: usize>(
    panels: &[u8],
    kquads: usize,
    word: impl Fn(usize, usize) -> i32,
    tiles: &mut Tiles<P>,
) {
    let bp = panels.as_ptr();
    let stride = kquads * NR * 4;
    let load = |g: usize, q: usize| {
        // SAFETY: quad q of panel g starts at `g * stride + q * NR * 4` and
        // its 64 bytes lie inside `panels` for g < P and q < kquads (the
        // caller's size; every call below stays in those ranges); an
        // unaligned load.
        unsafe { _mm512_loadu_si512(bp.add(g * stride + q * NR * 4).cast()) }
    };
    if P == 1 {
        let mut even = [_mm512_setzero_si512(); MR];
        let mut odd = [_mm512_setzero_si512(); MR];
        let mut q = 0;
        while q + 2 <= kquads {
            let (b0, b1) = (load(0, q), load(0, q + 1));
            for r in 0..MR {
                even[r] = _mm512_dpbusd_epi32(even[r], _mm512_set1_epi32(word(q, r)), b0);
                odd[r] = _mm512_dpbusd_epi32(odd[r], _mm512_set1_epi32(word(q + 1, r)), b1);
            }
            q += 2;
        }
        if q < kquads {
            let b0 = load(0, q);
            for (r, e) in even.iter_mut().enumerate() {
                *e = _mm512_dpbusd_epi32(*e, _mm512_set1_epi32(word(q, r)), b0);
            }
        }
        for r in 0..MR {
            let sum = _mm512_add_epi32(even[r], odd[r]);
            // SAFETY: row r of the tile is NR = 16 i32, one vector.
            unsafe { _mm512_storeu_si512(tiles[0].as_mut_ptr().add(r * NR).cast(), sum) };
        }
        return;
    }
    let mut acc = [[_mm512_setzero_si512(); P]; MR];
    for q in 0..kquads {
        let b: [__m512i; P] = std::array::from_fn(|g| load(g, q));
        for (r, row) in acc.iter_mut().enumerate() {
            let a = _mm512_set1_epi32(word(q, r));
            for (g, c) in row.iter_mut().enumerate() {
                *c = _mm512_dpbusd_epi32(*c, a, b[g]);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (g, &c) in row.iter().enumerate() {
            // SAFETY: row r of tile g is NR = 16 i32, one vector.
            unsafe { _mm512_storeu_si512(tiles[g].as_mut_ptr().add(r * NR).cast(), c) };
        }
    }
}
