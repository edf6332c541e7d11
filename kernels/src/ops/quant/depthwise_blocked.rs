//! The int8 depthwise convolution of 2-D planes on AVX-512 (hot path):
//! sixteen channels at a time, one channel per vector lane.
//!
//! Along rows ([`super::depthwise`]) a plane's width is cut into vectors
//! of sixteen with a tail, and every plane is copied and requantized on
//! its own; mobilenet-style networks are mostly planes of 112x112 down to
//! 7x7, by the hundred. Here sixteen planes are copied, as they are, into
//! one channels-last block of bytes bordered with the zero point (the copy
//! transposes bytes in registers), so that each output pixel of the
//! sixteen channels is one vector: every tap one widening load and one
//! multiply-add against the sixteen channels' `w - zw`, the zero point's
//! share (`zx` times the sum of the taps) taken off at the start. A large
//! plane goes in bands of output rows whose block stays within
//! [`BLOCK_BYTES`]. Every sixteen pixels' sums go to the image's sink as
//! they are, the channels in lanes: the 8-bit output stage requantizes
//! them there, one multiplier per lane, and turns the bytes around into
//! the channels' rows.

use std::arch::x86_64::*;

use super::depthwise::Depthwise;
use super::qgemm::sink::Sink;
use crate::ParallelFor;
use crate::ops::conv::geometry::Geometry3;

/// Channels of a block (one per lane).
pub(super) const LANES: usize = 16;

/// The largest block (padded rows of a band, [`LANES`] bytes a pixel):
/// one that stays in the first-level cache while its taps are read.
/// Single 3x3 nodes: 96 channels at 56x56 (a 53 KB block) 0.145 -> 0.098
/// ms against the row path; 96 channels stride 2 from 112x112 in bands
/// 0.26 -> 0.14 ms, as one 204 KB block 0.52 ms.
const BLOCK_BYTES: usize = 64 << 10;

/// The padded plane of `g`: rows and columns.
fn padded(g: &Geometry3) -> [usize; 2] {
    let ([_, ih, iw], [_, oh, ow], [_, kh, kw]) = (g.input, g.output, g.kernel);
    let ([_, sh, sw], [_, dh, dw], [_, pt, pl]) = (g.stride, g.dilation, g.pad);
    [
        (pt + ih).max((oh - 1) * sh + (kh - 1) * dh + 1),
        (pl + iw).max((ow - 1) * sw + (kw - 1) * dw + 1),
    ]
}

/// Whether [`run`] takes a plane of this geometry: 2-D (flat).
pub(super) fn applies(dw: &Depthwise<'_>) -> bool {
    let g = dw.s.geometry.as_3d();
    g.input[0] == 1 && g.output[0] == 1 && g.kernel[0] == 1
}

/// Every image's channels in blocks of [`LANES`], image `b`'s channels
/// into the rows of `sinks[b]`, the blocks split across `par`'s threads.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL; [`applies`] holds.
pub(super) unsafe fn run_all<S: Sink>(dw: &Depthwise<'_>, sinks: &[S], par: &dyn ParallelFor) {
    let per_image = dw.s.channels.div_ceil(LANES);
    let blocks = dw.s.batch * per_image;
    let tasks = blocks.min(par.threads().max(1) * 4);
    let task = |t: usize| {
        let mut scratch = Scratch::default();
        for i in crate::par::chunk(blocks, tasks, 1, t) {
            let (b, c0) = (i / per_image, i % per_image * LANES);
            // SAFETY: the caller's guarantees are `run`'s.
            unsafe { run(dw, &sinks[b], b, c0, &mut scratch) };
        }
    };
    if tasks <= 1 {
        task(0);
    } else {
        par.run(tasks, &task);
    }
}

/// The buffers of one task, reused across its blocks.
#[derive(Default)]
pub(super) struct Scratch {
    xs: Vec<u8>,
    /// A block's filters and four bytes of zeros.
    filters: Vec<u8>,
    taps: Vec<__m512i>,
    offsets: Vec<usize>,
}

/// Channels `c0..c0 + LANES` (fewer at the end) of image `b` into rows
/// `c0..` of `sink`.
///
/// The way in is a transpose of bytes in registers (sixteen pixels of
/// each channel into sixteen pixel vectors); the sums go out as they are,
/// sixteen pixels at a time ([`Sink::put_lanes_avx512`]).
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL; [`applies`] holds.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn run<S: Sink>(dw: &Depthwise<'_>, sink: &S, b: usize, c0: usize, scratch: &mut Scratch) {
    let s = dw.s;
    let g = s.geometry.as_3d();
    let ([_, ih, iw], [_, oh, ow], [_, kh, kw]) = (g.input, g.output, g.kernel);
    let ([_, sh, sw], [_, dh, dwl], [_, pt, pl]) = (g.stride, g.dilation, g.pad);
    let [hp, wp] = padded(&g);
    let (in_len, klen) = (ih * iw, kh * kw);
    let lanes = LANES.min(s.channels - c0);
    let mut planes: [&[u8]; LANES] = [&[]; LANES];
    for (l, p) in planes.iter_mut().enumerate().take(lanes) {
        *p = &dw.x[(b * s.channels + c0 + l) * in_len..][..in_len];
    }
    let planes = &planes[..lanes];
    // The taps, per tap one vector of the channels' `w - zw`.
    // SAFETY: the CPU has the features (this function's contract).
    unsafe { gather_taps(dw, c0, lanes, klen, scratch) };
    let taps = &scratch.taps;
    // sum (w - zw)(x - zx) = sum (w - zw) x - zx sum (w - zw): each
    // channel's sums start at minus the second term.
    let mut start = _mm512_setzero_si512();
    for &tap in taps.iter() {
        start = _mm512_sub_epi32(start, _mm512_mullo_epi32(tap, _mm512_set1_epi32(dw.zx)));
    }
    let offsets = &mut scratch.offsets;
    offsets.clear();
    offsets.extend((0..klen).map(|t| ((t / kw) * dh * wp + (t % kw) * dwl) * LANES));
    // Bands of output rows: the block of the padded rows they read at
    // most BLOCK_BYTES, and their sums (LANES i32 a pixel) too; at least
    // one row.
    let reach = (kh - 1) * dh + 1;
    let pitch = wp * LANES;
    let band = ((BLOCK_BYTES / pitch).saturating_sub(reach) / sh + 1).clamp(1, oh);
    let pad = dw.zx as u8;
    for y0 in (0..oh).step_by(band) {
        let y1 = (y0 + band).min(oh);
        // Padded rows py0 .. py1 (within hp), block row py - py0.
        let py0 = y0 * sh;
        let py1 = ((y1 - 1) * sh + reach).min(hp);
        let xs = &mut scratch.xs;
        xs.resize((py1 - py0) * pitch, pad);
        // SAFETY: the CPU has the features (this function's contract);
        // each plane holds `ih * iw` bytes, the block `py1 - py0` padded
        // rows of `wp >= pl + iw` pixels.
        unsafe { fill_block(planes, [ih, iw], [pt, pl, wp], py0..py1, pad, xs) };
        let last = offsets.iter().max().copied().unwrap_or(0)
            + (((y1 - 1 - y0) * sh * wp + (ow - 1) * sw) * LANES)
            + LANES;
        assert!(last <= xs.len(), "a tap reads outside the block");
        let sums = Sums {
            xs,
            ow,
            steps: [sh * wp * LANES, sw * LANES],
            pixels: (y1 - y0) * ow,
        };
        let out = Rows {
            sink,
            c0,
            lanes,
            n0: y0 * ow,
        };
        // SAFETY: the CPU has the features; every pixel's taps lie inside
        // the block (the assertion above).
        unsafe {
            match (klen, dw.x_signed) {
                (9, false) => sums.put::<9, false, S>(offsets, taps, start, &out),
                (9, true) => sums.put::<9, true, S>(offsets, taps, start, &out),
                (_, false) => sums.put::<0, false, S>(offsets, taps, start, &out),
                (_, true) => sums.put::<0, true, S>(offsets, taps, start, &out),
            }
        }
    }
}

/// `scratch.taps` for channels `c0..c0 + lanes`: per tap `t`, lane `l`
/// holds `w - zw` of channel `c0 + l` (0 in lanes past `lanes`). The
/// block's filters (`lanes * klen` bytes, channel-major) are copied
/// beside four bytes of zeros and each tap gathered from them, one
/// 32-bit read per lane (its low byte); a lane at a time, 960 channels of
/// 3x3 took a sixth of a 7x7 convolution.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn gather_taps(
    dw: &Depthwise<'_>,
    c0: usize,
    lanes: usize,
    klen: usize,
    scratch: &mut Scratch,
) {
    let bytes = &mut scratch.filters;
    bytes.clear();
    bytes.extend_from_slice(&dw.w[c0 * klen..(c0 + lanes) * klen]);
    bytes.extend_from_slice(&[0; 4]);
    let live: __mmask16 = if lanes >= LANES {
        !0
    } else {
        (1u16 << lanes) - 1
    };
    let zw = if dw.zw.len() == 1 {
        _mm512_set1_epi32(dw.zw[0])
    } else {
        assert!(
            dw.zw.len() >= c0 + lanes,
            "fewer weight zero points than channels"
        );
        // SAFETY: the mask reads zero points c0 .. c0 + lanes (the
        // assertion).
        unsafe { _mm512_maskz_loadu_epi32(live, dw.zw.as_ptr().add(c0).cast()) }
    };
    let first = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(klen as i32),
    );
    scratch.taps.clear();
    for t in 0..klen {
        let at = _mm512_add_epi32(first, _mm512_set1_epi32(t as i32));
        // SAFETY: live lane l reads bytes l * klen + t .. + 4, at most
        // lanes * klen + 2 < bytes.len(); other lanes read nothing.
        let word = unsafe {
            _mm512_mask_i32gather_epi32::<1>(
                _mm512_setzero_si512(),
                live,
                at,
                bytes.as_ptr().cast(),
            )
        };
        let v = if dw.w_signed {
            _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(word))
        } else {
            _mm512_and_si512(word, _mm512_set1_epi32(0xFF))
        };
        scratch.taps.push(_mm512_maskz_sub_epi32(live, v, zw));
    }
}

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
unsafe fn fill_block(
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

/// Where a band's sums go: rows `c0..c0 + lanes` of `sink`, the band's
/// pixel `p` at column `n0 + p`.
struct Rows<'a, S> {
    sink: &'a S,
    c0: usize,
    lanes: usize,
    n0: usize,
}

/// The sums of a block's output pixels: pixel `p = y * ow + x`'s taps
/// read the block from `at(p) = y * steps[0] + x * steps[1]` on.
struct Sums<'a> {
    xs: &'a [u8],
    ow: usize,
    steps: [usize; 2],
    /// The band's pixels (whole output rows).
    pixels: usize,
}

impl Sums<'_> {
    /// Sixteen pixels at a time, each a vector of the channels' sums
    /// (from `start`, each tap's sixteen bytes widened as `SIGNED` says),
    /// handed to `out` as they are. `K` taps (unrolled), or as many as
    /// `offsets` holds when `K` is 0.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, DQ and VL; every pixel's taps lie inside
    /// `xs` (`at(p) + offsets[t] + LANES <= xs.len()`).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    #[inline]
    unsafe fn put<const K: usize, const SIGNED: bool, S: Sink>(
        &self,
        offsets: &[usize],
        taps: &[__m512i],
        start: __m512i,
        out: &Rows<'_, S>,
    ) {
        let pixels = self.pixels;
        let k = if K == 0 { offsets.len() } else { K };
        let (offsets, taps) = (&offsets[..k], &taps[..k]);
        let base = self.xs.as_ptr();
        // Pixel (y, x) and its `at`, stepped along (no division per pixel).
        let (mut y, mut x, mut at) = (0, 0, 0);
        let mut p0 = 0;
        while p0 < pixels {
            let n = (pixels - p0).min(LANES);
            let mut acc = [start; LANES];
            for acc in acc.iter_mut().take(n) {
                let here = at;
                x += 1;
                at += self.steps[1];
                if x == self.ow {
                    (y, x) = (y + 1, 0);
                    at = y * self.steps[0];
                }
                for (&o, &w) in offsets.iter().zip(taps) {
                    // SAFETY: at(p) + o + LANES <= xs.len() (this
                    // function's contract; `here` is at(p)).
                    let b = unsafe { _mm_loadu_si128(base.add(here + o).cast()) };
                    let v = if SIGNED {
                        _mm512_cvtepi8_epi32(b)
                    } else {
                        _mm512_cvtepu8_epi32(b)
                    };
                    *acc = _mm512_add_epi32(*acc, _mm512_mullo_epi32(v, w));
                }
            }
            // SAFETY: the CPU has the features (this function's contract).
            unsafe {
                out.sink
                    .put_lanes_avx512(out.c0, out.lanes, out.n0 + p0, &acc, n)
            };
            p0 += n;
        }
    }
}
