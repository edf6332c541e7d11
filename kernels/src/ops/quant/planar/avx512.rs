//! The AVX-512 VNNI micro-kernel of the channel-major convolution (hot
//! path): [`ROWS`] output channels times [`STRIP`] pixels of raw sums,
//! sixteen accumulators, each quad of `k` one broadcast weight word per
//! row against two vectors of sixteen pixels.

use std::arch::x86_64::*;

use super::{ROWS, STRIP};

/// Bytes of one quad of a strip panel.
const QUAD: usize = STRIP * 4;

/// The bytes of one quad of a packed strip panel: the stride between the
/// quads of a packed panel.
pub(super) const PACKED: usize = QUAD;

/// Bytes `panel` must hold for `quads` quads `stride` apart.
fn reach(quads: usize, stride: usize) -> usize {
    if quads == 0 {
        0
    } else {
        (quads - 1) * stride + QUAD
    }
}

/// Sums `start[r] + sum_k w[r][k] * panel[k][j]` over the `kp / 4` quads
/// of `panel` (quad `q` at `q * stride`: [`PACKED`] for a packed panel),
/// for the [`ROWS`] rows of `w` (`kp` bytes each): row `r`'s pixels
/// `0..16` and `16..32` in the two vectors of element `r`.
///
/// # Safety
/// The CPU has AVX-512 F and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
pub(super) unsafe fn block(
    panel: &[u8],
    stride: usize,
    w: &[u8],
    kp: usize,
    start: [__m512i; ROWS],
) -> [[__m512i; 2]; ROWS] {
    let quads = kp / 4;
    assert!(
        panel.len() >= reach(quads, stride) && w.len() >= ROWS * kp,
        "operands shorter than the reduction"
    );
    let (bp, wp) = (panel.as_ptr(), w.as_ptr());
    let mut acc = start.map(|v| [v; 2]);
    for q in 0..quads {
        // SAFETY: quad q of the panel (QUAD bytes) lies inside it (the
        // assertion); unaligned loads.
        let (b0, b1) = unsafe {
            (
                _mm512_loadu_si512(bp.add(q * stride).cast()),
                _mm512_loadu_si512(bp.add(q * stride + 64).cast()),
            )
        };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: bytes 4 q .. 4 q + 4 of row r lie inside `w` (the
            // assertion); an unaligned read.
            let word = unsafe { wp.add(r * kp + 4 * q).cast::<i32>().read_unaligned() };
            let a = _mm512_set1_epi32(word);
            acc[0] = _mm512_dpbusd_epi32(acc[0], b0, a);
            acc[1] = _mm512_dpbusd_epi32(acc[1], b1, a);
        }
    }
    acc
}

/// Per pixel of the strip, the sum of its `quads * 4` bytes (quad `q` at
/// `q * stride`).
///
/// # Safety
/// The CPU has AVX-512 F and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn column_sums(
    panel: &[u8],
    stride: usize,
    quads: usize,
    out: &mut [i32; STRIP],
) {
    assert!(
        panel.len() >= reach(quads, stride),
        "panel shorter than the reduction"
    );
    let ones = _mm512_set1_epi8(1);
    let (mut s0, mut s1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    let bp = panel.as_ptr();
    for q in 0..quads {
        // SAFETY: quad q of the panel lies inside it (the assertion).
        let (b0, b1) = unsafe {
            (
                _mm512_loadu_si512(bp.add(q * stride).cast()),
                _mm512_loadu_si512(bp.add(q * stride + 64).cast()),
            )
        };
        s0 = _mm512_dpbusd_epi32(s0, b0, ones);
        s1 = _mm512_dpbusd_epi32(s1, b1, ones);
    }
    // SAFETY: `out` holds two vectors of i32.
    unsafe {
        _mm512_storeu_si512(out.as_mut_ptr().cast(), s0);
        _mm512_storeu_si512(out.as_mut_ptr().add(16).cast(), s1);
    }
}
