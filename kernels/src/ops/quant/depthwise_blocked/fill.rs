//! The block of a depthwise convolution's sixteen channels: their planes
//! copied, as they are, into padded channels-last rows of bytes (the copy
//! transposes bytes in registers), bordered with the zero point.

use std::arch::x86_64::*;

use super::LANES;

/// `xs` (the block: padded rows `band`, `[py - band.start][px][LANES]`
/// bytes) written whole: input pixel `(iy, ix)` at padded `(iy + pt, ix +
/// pl)`, `pad` around the image; the lanes of missing planes (fewer than
/// [`LANES`]) read 0 inside it.
///
/// Sixty-four bytes of each plane at a time, the band's image rows taken
/// back to back (a 7x7 plane is one step): the sixteen planes' bytes are
/// transposed within each 128-bit lane (sixteen pixels of sixteen
/// channels, four rounds of unpacks), then four pixels' lanes are gathered
/// into one store, split where an image row ends.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL; each plane holds `ih * iw`
/// bytes; `xs` holds `band.len() * wp` pixels and `pl + iw <= wp`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub(super) unsafe fn fill_block(
    planes: &[&[u8]],
    [ih, iw]: [usize; 2],
    [pt, pl, wp]: [usize; 3],
    band: std::ops::Range<usize>,
    pad: u8,
    xs: &mut [u8],
) {
    let pitch = wp * LANES;
    assert!(
        planes.len() <= LANES
            && planes.iter().all(|p| p.len() >= ih * iw)
            && pl + iw <= wp
            && band.len() * pitch <= xs.len(),
        "the block does not hold the planes"
    );
    // The image's rows in the band.
    let inside = band.start.max(pt).min(pt + ih)..band.end.max(pt).min(pt + ih);
    for (r, row) in xs[..band.len() * pitch].chunks_exact_mut(pitch).enumerate() {
        if inside.contains(&(band.start + r)) {
            row[..pl * LANES].fill(pad);
            row[(pl + iw) * LANES..].fill(pad);
        } else {
            row.fill(pad);
        }
    }
    let place = Place {
        pitch,
        pt,
        pl,
        first_row: band.start,
    };
    let image_rows = inside.start - pt..inside.end - pt;
    if iw <= FLAT_WIDTH {
        // SAFETY: the CPU has the features (this function's contract); the
        // assertion above is the helper's.
        unsafe { fill_flat(planes, iw, image_rows, &place, xs) };
    } else {
        // SAFETY: as above.
        unsafe { fill_rows(planes, iw, image_rows, &place, xs) };
    }
}

/// The widest image row [`fill_block`] copies as part of one run of bytes
/// (several rows per 64-byte step) rather than row by row. A 7x7 block,
/// 960 channels: 0.040 -> 0.036 ms; from 28 columns up, row by row is
/// faster.
const FLAT_WIDTH: usize = 16;

/// Where image pixel `(iy, ix)` lies in a block: byte `((iy + pt -
/// first_row) * wp + pl + ix) * LANES`, `pitch` = `wp * LANES`.
struct Place {
    pitch: usize,
    pt: usize,
    pl: usize,
    first_row: usize,
}

impl Place {
    fn at(&self, iy: usize, ix: usize) -> usize {
        (iy + self.pt - self.first_row) * self.pitch + (self.pl + ix) * LANES
    }
}

/// Sixty-four pixels of the sixteen planes from byte `at` (`n` of them,
/// at most 64, inside every plane), handed to `emit(g, v)` as sixteen
/// vectors of four pixels' lanes: `v` holds pixels `4 g .. 4 g + 4`,
/// sixteen bytes each (emitted as they are made, not in order: a caller
/// that stores them at once keeps none of them live).
///
/// # Safety
/// The CPU has AVX-512 F and BW; bytes `at .. at + n` lie inside every
/// plane.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn pixels64(planes: &[&[u8]], at: usize, n: usize, mut emit: impl FnMut(usize, __m512i)) {
    let load: __mmask64 = if n >= 64 { !0 } else { (1u64 << n) - 1 };
    let mut a = [_mm512_setzero_si512(); LANES];
    for (v, plane) in a.iter_mut().zip(planes) {
        // SAFETY: bytes at .. at + n lie inside the plane (the caller); the
        // mask reads no more.
        *v = unsafe { _mm512_maskz_loadu_epi8(load, plane.as_ptr().add(at).cast()) };
        // Sixteen planes are sixteen streams: each is fetched four lines
        // ahead (stride-2 layers 5 % faster in a model).
        _mm_prefetch::<_MM_HINT_T0>(plane.as_ptr().wrapping_add(at + 256).cast());
    }
    transpose_bytes(&a, |g, v| {
        if 4 * g < n {
            emit(g, v)
        }
    });
}

/// Stores pixels `i .. i + k` of `q` (sixteen bytes each) at byte `at` of
/// `xs`, pixel `i` first.
///
/// # Safety
/// The CPU has AVX-512 F and BW; `i + k <= 4`, `k >= 1`, and bytes `at ..
/// at + 16 k` lie inside `xs`.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn store_pixels(xs: &mut [u8], at: usize, q: __m512i, i: usize, k: usize) {
    let bytes: u64 = if k >= 4 { !0 } else { (1u64 << (16 * k)) - 1 };
    // SAFETY: the mask writes bytes 16 i .. 16 (i + k) of the vector, which
    // the pointer moved back by 16 i puts at `at ..` inside `xs` (the
    // caller), and touches no other byte.
    unsafe {
        _mm512_mask_storeu_epi8(
            xs.as_mut_ptr().add(at).wrapping_sub(16 * i).cast(),
            bytes << (16 * i),
            q,
        )
    };
}

/// The image rows `rows` into the block row by row, 64 pixels at a time.
///
/// # Safety
/// As [`fill_block`]'s, whose assertion holds.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn fill_rows(
    planes: &[&[u8]],
    iw: usize,
    rows: std::ops::Range<usize>,
    place: &Place,
    xs: &mut [u8],
) {
    for iy in rows {
        let mut ix0 = 0;
        while ix0 < iw {
            let n = (iw - ix0).min(64);
            // SAFETY: the CPU has the features; bytes iy * iw + ix0 .. + n
            // lie inside each plane (the caller).
            unsafe {
                pixels64(planes, iy * iw + ix0, n, |g, q| {
                    let k = (n - 4 * g).min(4);
                    // SAFETY: pixels (iy, ix0 + 4 g .. + k) lie inside the
                    // block (the caller).
                    store_pixels(xs, place.at(iy, ix0 + 4 * g), q, 0, k)
                })
            };
            ix0 += n;
        }
    }
}

/// The image rows `rows` into the block as one run of each plane's bytes,
/// 64 at a time whatever the width; every four pixels are stored at once,
/// or in runs that stay within an image row.
///
/// # Safety
/// As [`fill_block`]'s, whose assertion holds.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn fill_flat(
    planes: &[&[u8]],
    iw: usize,
    rows: std::ops::Range<usize>,
    place: &Place,
    xs: &mut [u8],
) {
    let (f0, f1) = (rows.start * iw, rows.end * iw);
    let mut f = f0;
    while f < f1 {
        let n = (f1 - f).min(64);
        let mut groups = [_mm512_setzero_si512(); LANES];
        // SAFETY: the CPU has the features; bytes f .. f + n lie inside
        // each plane (the caller).
        unsafe { pixels64(planes, f, n, |g, q| groups[g] = q) };
        let (mut iy, mut ix) = (f / iw, f % iw);
        for (g, q) in groups.iter().enumerate().take(n.div_ceil(4)) {
            let valid = (n - 4 * g).min(4);
            let mut i = 0;
            while i < valid {
                let k = (valid - i).min(iw - ix);
                // SAFETY: pixels (iy, ix .. ix + k) lie inside the block
                // (the caller).
                unsafe { store_pixels(xs, place.at(iy, ix), *q, i, k) };
                i += k;
                ix += k;
                if ix == iw {
                    (iy, ix) = (iy + 1, 0);
                }
            }
        }
        f += n;
    }
}

/// Rows `a` (sixty-four bytes of each of sixteen planes) transposed into
/// groups of four pixels: `emit(g, v)` with lane `i` of `v` pixel
/// `4 g + i`'s sixteen bytes, plane by plane. Four rounds of sixteen
/// two-vector steps: bytes, words and quads of planes paired within each
/// 128-bit lane, then pairs of pixel groups gathered across lanes by a
/// dword permute (two lanes' groups per vector), which leaves every group
/// in place for the last round's unpacks.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn transpose_bytes(a: &[__m512i; LANES], mut emit: impl FnMut(usize, __m512i)) {
    // Byte pairs of planes (2 i, 2 i + 1): per lane l, pixels 16 l + 0-7,
    // then 16 l + 8-15.
    let mut t = [_mm512_setzero_si512(); LANES];
    for i in 0..LANES / 2 {
        t[2 * i] = _mm512_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
    }
    // u[4 q + j]: planes 4 q .. 4 q + 4 per 32-bit word, lane l holding
    // pixels 16 l + 4 j + 0-3 (group 4 l + j).
    let mut u = [_mm512_setzero_si512(); LANES];
    for q in 0..LANES / 4 {
        u[4 * q] = _mm512_unpacklo_epi16(t[4 * q], t[4 * q + 2]);
        u[4 * q + 1] = _mm512_unpackhi_epi16(t[4 * q], t[4 * q + 2]);
        u[4 * q + 2] = _mm512_unpacklo_epi16(t[4 * q + 1], t[4 * q + 3]);
        u[4 * q + 3] = _mm512_unpackhi_epi16(t[4 * q + 1], t[4 * q + 3]);
    }
    // Eight planes per 64-bit word from two quads of planes: word 2 i + s
    // pixel i of the group in lane s (`LOW`) or 2 + s (`HIGH`).
    const LOW: [i32; 16] = [0, 16, 4, 20, 1, 17, 5, 21, 2, 18, 6, 22, 3, 19, 7, 23];
    // SAFETY: sixteen i32 make one vector.
    let low = unsafe { _mm512_loadu_si512(LOW.as_ptr().cast()) };
    let high = _mm512_add_epi32(low, _mm512_set1_epi32(8));
    for j in 0..4 {
        // Planes 0-7 and 8-15 of groups j and 4 + j (low), 8 + j and
        // 12 + j (high).
        for (k, idx) in [(0, low), (1, high)] {
            let v0 = _mm512_permutex2var_epi32(u[j], idx, u[4 + j]);
            let v1 = _mm512_permutex2var_epi32(u[8 + j], idx, u[12 + j]);
            emit(8 * k + j, _mm512_unpacklo_epi64(v0, v1));
            emit(8 * k + 4 + j, _mm512_unpackhi_epi64(v0, v1));
        }
    }
}
