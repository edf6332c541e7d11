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
    }
    let px = transpose_bytes(&a);
    // Pixels 16 l + 4 j .. + 4: lane l of px[4 j .. 4 j + 4].
    for j in 0..4 {
        let (p0, p1, p2, p3) = (px[4 * j], px[4 * j + 1], px[4 * j + 2], px[4 * j + 3]);
        let (lo01, hi01) = (
            _mm512_shuffle_i32x4::<0x44>(p0, p1),
            _mm512_shuffle_i32x4::<0xEE>(p0, p1),
        );
        let (lo23, hi23) = (
            _mm512_shuffle_i32x4::<0x44>(p2, p3),
            _mm512_shuffle_i32x4::<0xEE>(p2, p3),
        );
        let groups = [
            _mm512_shuffle_i32x4::<0x88>(lo01, lo23),
            _mm512_shuffle_i32x4::<0xDD>(lo01, lo23),
            _mm512_shuffle_i32x4::<0x88>(hi01, hi23),
            _mm512_shuffle_i32x4::<0xDD>(hi01, hi23),
        ];
        for (l, v) in groups.into_iter().enumerate() {
            if 16 * l + 4 * j < n {
                emit(4 * l + j, v);
            }
        }
    }
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

/// Within each 128-bit lane `l`, rows `a` (sixteen bytes of each of sixteen
/// planes: pixels `16 l ..`) transposed: lane `l` of `out[c]` holds pixel
/// `16 l + c`'s sixteen bytes, plane by plane.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn transpose_bytes(a: &[__m512i; LANES]) -> [__m512i; LANES] {
    // Byte pairs of rows (2 i, 2 i + 1): columns 0-7, then 8-15.
    let mut t = [_mm512_setzero_si512(); LANES];
    for i in 0..LANES / 2 {
        t[2 * i] = _mm512_unpacklo_epi8(a[2 * i], a[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi8(a[2 * i], a[2 * i + 1]);
    }
    // Rows 4 g .. 4 g + 4 per 32-bit word: columns 0-3, 4-7, 8-11, 12-15.
    let mut u = [_mm512_setzero_si512(); LANES];
    for g in 0..LANES / 4 {
        u[4 * g] = _mm512_unpacklo_epi16(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi16(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi16(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi16(t[4 * g + 1], t[4 * g + 3]);
    }
    // Rows 8 h .. 8 h + 8 per 64-bit word: v[h][2 q] columns 4 q and
    // 4 q + 1, v[h][2 q + 1] columns 4 q + 2 and 4 q + 3.
    let mut v = [[_mm512_setzero_si512(); 8]; 2];
    for (h, v) in v.iter_mut().enumerate() {
        for q in 0..4 {
            let (x, y) = (u[8 * h + q], u[8 * h + 4 + q]);
            v[2 * q] = _mm512_unpacklo_epi32(x, y);
            v[2 * q + 1] = _mm512_unpackhi_epi32(x, y);
        }
    }
    // All sixteen rows of each column.
    let mut out = [_mm512_setzero_si512(); LANES];
    for q in 0..4 {
        let (lo, hi) = (v[0][2 * q], v[1][2 * q]);
        out[4 * q] = _mm512_unpacklo_epi64(lo, hi);
        out[4 * q + 1] = _mm512_unpackhi_epi64(lo, hi);
        let (lo, hi) = (v[0][2 * q + 1], v[1][2 * q + 1]);
        out[4 * q + 2] = _mm512_unpacklo_epi64(lo, hi);
        out[4 * q + 3] = _mm512_unpackhi_epi64(lo, hi);
    }
    out
}
