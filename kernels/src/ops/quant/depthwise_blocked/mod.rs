//! The int8 depthwise convolution of 2-D planes on AVX-512 (hot path):
//! sixteen channels at a time, one channel per vector lane.
//!
//! Along rows ([`super::depthwise`]) a plane's width is cut into vectors
//! of sixteen with a tail, and every plane is copied and requantized on
//! its own; mobilenet-style networks are mostly planes of 112x112 down to
//! 7x7, by the hundred. Here sixteen planes are copied, as they are, into
//! one channels-last block of bytes bordered with the zero point (the copy
//! transposes bytes in registers, [`fill`]), so that each output pixel of
//! the sixteen channels is one vector of sums, the zero point's share
//! (`zx` times the sum of the taps) taken off at the start. With int8
//! weights and no weight zero point (what ONNX Runtime's quantizer
//! writes), four taps along a filter row are one load of four pixels, one
//! byte permute (VBMI) that gives each channel its four pixels in a word,
//! and one VNNI dot product: a 3x3 filter is three of them. Otherwise
//! every tap is one widening load and one multiply-add against the
//! sixteen channels' `w - zw`. A large plane goes in bands of output rows
//! whose block stays within [`BLOCK_BYTES`]. Every sixteen pixels' sums
//! go to the image's sink as they are, the channels in lanes: the 8-bit
//! output stage requantizes them there, one multiplier per lane, and turns
//! the bytes around into the channels' rows.

use std::arch::x86_64::*;

use super::depthwise::Depthwise;
use super::qgemm::sink::Sink;
use crate::ParallelFor;
use crate::ops::conv::geometry::Geometry3;

mod fill;

use fill::fill_block;

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
/// The CPU has AVX-512 F, BW, DQ, VL and VNNI; [`applies`] holds.
pub(super) unsafe fn run_all<S: Sink>(dw: &Depthwise<'_>, sinks: &[S], par: &dyn ParallelFor) {
    let per_image = dw.s.channels.div_ceil(LANES);
    let blocks = dw.s.batch * per_image;
    let tasks = blocks.min(par.threads().max(1) * 4);
    let vbmi = std::is_x86_feature_detected!("avx512vbmi");
    // Once per node: lifting the geometry to three axes copies its arrays.
    let g = dw.s.geometry.as_3d();
    let task = |t: usize| {
        let mut scratch = Scratch::default();
        for i in crate::par::chunk(blocks, tasks, 1, t) {
            let (b, c0) = (i / per_image, i % per_image * LANES);
            // SAFETY: the caller's guarantees are `run`'s; `vbmi` is the
            // CPU's.
            unsafe { run((dw, &g), &sinks[b], [b, c0], vbmi, &mut scratch) };
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
/// The CPU has AVX-512 F, BW, DQ, VL and VNNI, and VBMI if `vbmi`;
/// [`applies`] holds.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
unsafe fn run<S: Sink>(
    (dw, g): (&Depthwise<'_>, &Geometry3),
    sink: &S,
    [b, c0]: [usize; 2],
    vbmi: bool,
    scratch: &mut Scratch,
) {
    let s = dw.s;
    let ([_, ih, iw], [_, oh, ow], [_, kh, kw]) = (g.input, g.output, g.kernel);
    let ([_, sh, sw], [_, dh, dwl], [_, pt, pl]) = (g.stride, g.dilation, g.pad);
    let [hp, wp] = padded(g);
    let (in_len, klen) = (ih * iw, kh * kw);
    let lanes = LANES.min(s.channels - c0);
    let mut planes: [&[u8]; LANES] = [&[]; LANES];
    for (l, p) in planes.iter_mut().enumerate().take(lanes) {
        *p = &dw.x[(b * s.channels + c0 + l) * in_len..][..in_len];
    }
    let planes = &planes[..lanes];
    // With int8 weights and no weight zero point, four taps along a row
    // are one VNNI dot product per channel (the bytes turned around by
    // VBMI's permute, [`Sums::put_quads`]); otherwise every tap is a
    // multiply-add of the channels' `w - zw`.
    let zw = if dw.zw.len() == 1 {
        Some(dw.zw)
    } else {
        dw.zw.get(c0..c0 + lanes)
    };
    let no_zw = zw.is_some_and(|z| z.iter().all(|&z| z == 0));
    let quads = vbmi && dw.w_signed && no_zw && dwl == 1;
    // SAFETY: the CPU has the features (this function's contract).
    let start = unsafe {
        if quads {
            gather_quads(dw, c0, lanes, [kh, kw], scratch)
        } else {
            gather_taps(dw, c0, lanes, scratch)
        }
    };
    let taps = &scratch.taps;
    let offsets = &mut scratch.offsets;
    offsets.clear();
    if quads {
        let per_row = kw.div_ceil(4);
        offsets
            .extend((0..kh * per_row).map(|t| ((t / per_row) * dh * wp + t % per_row * 4) * LANES));
    } else {
        offsets.extend((0..klen).map(|t| ((t / kw) * dh * wp + (t % kw) * dwl) * LANES));
    }
    // What a tap reads from its offset on: one pixel, or a quad's four.
    let read = if quads { 4 * LANES } else { LANES };
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
        // A quad's last pixels may lie past the band (their weights are 0).
        xs.resize((py1 - py0) * pitch + read - LANES, pad);
        // SAFETY: the CPU has the features (this function's contract);
        // each plane holds `ih * iw` bytes, the block `py1 - py0` padded
        // rows of `wp >= pl + iw` pixels.
        unsafe { fill_block(planes, [ih, iw], [pt, pl, wp], py0..py1, pad, xs) };
        let last = offsets.iter().max().copied().unwrap_or(0)
            + (((y1 - 1 - y0) * sh * wp + (ow - 1) * sw) * LANES)
            + read;
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
        // SAFETY: the CPU has the features, VBMI where `quads`; every
        // pixel's taps lie inside the block (the assertion above).
        unsafe {
            match (quads, offsets.len(), dw.x_signed) {
                (true, 3, false) => sums.put_quads::<3, false, S>((offsets, taps), start, &out),
                (true, 3, true) => sums.put_quads::<3, true, S>((offsets, taps), start, &out),
                (true, _, false) => sums.put_quads::<0, false, S>((offsets, taps), start, &out),
                (true, _, true) => sums.put_quads::<0, true, S>((offsets, taps), start, &out),
                (false, 9, false) => sums.put::<9, false, S>((offsets, taps), start, &out),
                (false, 9, true) => sums.put::<9, true, S>((offsets, taps), start, &out),
                (false, _, false) => sums.put::<0, false, S>((offsets, taps), start, &out),
                (false, _, true) => sums.put::<0, true, S>((offsets, taps), start, &out),
            }
        }
    }
}

/// A block's filters (`lanes * klen` bytes, channel-major) copied beside
/// four bytes of zeros, read one 32-bit word per lane: gathered, where a
/// lane at a time had made 960 channels of 3x3 taps a sixth of a 7x7
/// convolution.
struct Filters<'a> {
    bytes: &'a [u8],
    klen: usize,
    /// The lanes of real channels.
    live: __mmask16,
}

impl<'a> Filters<'a> {
    /// Channels `c0..c0 + lanes` of `dw`, copied into `bytes`.
    fn copy(dw: &Depthwise<'_>, c0: usize, lanes: usize, bytes: &'a mut Vec<u8>) -> Self {
        let klen = dw.s.geometry.kernel_len();
        bytes.clear();
        bytes.extend_from_slice(&dw.w[c0 * klen..(c0 + lanes) * klen]);
        bytes.extend_from_slice(&[0; 4]);
        let live = if lanes >= LANES {
            !0
        } else {
            (1u16 << lanes) - 1
        };
        Self { bytes, klen, live }
    }

    /// Lane `l`: the four filter bytes of channel `c0 + l` from tap `t`
    /// on (bytes past its filter included); 0 in lanes past `lanes`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn word(&self, t: usize) -> __m512i {
        assert!(t < self.klen, "a tap outside the filter");
        let at = _mm512_add_epi32(
            _mm512_mullo_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                _mm512_set1_epi32(self.klen as i32),
            ),
            _mm512_set1_epi32(t as i32),
        );
        // SAFETY: live lane l reads bytes l * klen + t .. + 4, at most
        // (lanes - 1) * klen + klen - 1 + 4 < bytes.len() (t < klen, the
        // assertion); other lanes read nothing.
        unsafe {
            _mm512_mask_i32gather_epi32::<1>(
                _mm512_setzero_si512(),
                self.live,
                at,
                self.bytes.as_ptr().cast(),
            )
        }
    }
}

/// `scratch.taps` for channels `c0..c0 + lanes`: per tap `t`, lane `l`
/// holds `w - zw` of channel `c0 + l` (0 in lanes past `lanes`); returns
/// where the channels' sums start, `-zx * sum (w - zw)`.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn gather_taps(
    dw: &Depthwise<'_>,
    c0: usize,
    lanes: usize,
    scratch: &mut Scratch,
) -> __m512i {
    let filters = Filters::copy(dw, c0, lanes, &mut scratch.filters);
    let live = filters.live;
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
    scratch.taps.clear();
    for t in 0..filters.klen {
        // SAFETY: the CPU has the features (this function's contract).
        let word = unsafe { filters.word(t) };
        let v = if dw.w_signed {
            _mm512_srai_epi32::<24>(_mm512_slli_epi32::<24>(word))
        } else {
            _mm512_and_si512(word, _mm512_set1_epi32(0xFF))
        };
        scratch.taps.push(_mm512_maskz_sub_epi32(live, v, zw));
    }
    // sum (w - zw)(x - zx) = sum (w - zw) x - zx sum (w - zw): each
    // channel's sums start at minus the second term.
    let mut start = _mm512_setzero_si512();
    for &tap in &scratch.taps {
        start = _mm512_sub_epi32(start, _mm512_mullo_epi32(tap, _mm512_set1_epi32(dw.zx)));
    }
    start
}

/// `scratch.taps` for channels `c0..c0 + lanes` of int8 filters with no
/// zero point, four taps of a filter row per lane: per filter row `dy`
/// and quad `q` (`kw.div_ceil(4)` a row), lane `l` holds the bytes
/// `w[c0 + l][dy][4 q .. 4 q + 4]`, 0 past the row's end and in lanes past
/// `lanes`. Returns where the channels' sums start: `-zx * sum w`, with
/// `zx + 128` for an int8 image (read as `x + 128`, [`Sums::put_quads`]).
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ, VL and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
unsafe fn gather_quads(
    dw: &Depthwise<'_>,
    c0: usize,
    lanes: usize,
    [kh, kw]: [usize; 2],
    scratch: &mut Scratch,
) -> __m512i {
    let filters = Filters::copy(dw, c0, lanes, &mut scratch.filters);
    scratch.taps.clear();
    let mut sum = _mm512_setzero_si512();
    for dy in 0..kh {
        for q in (0..kw).step_by(4) {
            // SAFETY: the CPU has the features (this function's contract).
            let word = unsafe { filters.word(dy * kw + q) };
            let keep = (kw - q).min(4);
            let mask = if keep == 4 {
                -1
            } else {
                ((1u32 << (8 * keep)) - 1) as i32
            };
            let quad = _mm512_and_si512(word, _mm512_set1_epi32(mask));
            sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), quad);
            scratch.taps.push(quad);
        }
    }
    let zx = if dw.x_signed { dw.zx + 128 } else { dw.zx };
    _mm512_sub_epi32(
        _mm512_setzero_si512(),
        _mm512_mullo_epi32(sum, _mm512_set1_epi32(zx)),
    )
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
    /// Sixteen pixels at a time, each a vector of the channels' sums from
    /// `start`, handed to `out` as they are: per tap `t` (`K` of them,
    /// unrolled, or as many as `offsets` holds when `K` is 0) the sums
    /// become `tap(sums, from, taps[t])`, `from` pointing at byte
    /// `at(p) + offsets[t]` of the block.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, DQ and VL; every pixel's taps read only
    /// inside `xs` (`tap` reads from `from` as far as the caller's contract
    /// allows).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    #[inline]
    unsafe fn walk<const K: usize, S: Sink>(
        &self,
        (offsets, taps): (&[usize], &[__m512i]),
        start: __m512i,
        out: &Rows<'_, S>,
        tap: impl Fn(__m512i, *const u8, __m512i) -> __m512i,
    ) {
        let k = if K == 0 { offsets.len() } else { K };
        let (offsets, taps) = (&offsets[..k], &taps[..k]);
        let base = self.xs.as_ptr();
        let pixels = self.pixels;
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
                    *acc = tap(*acc, base.wrapping_add(here + o), w);
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

    /// Every pixel's sums ([`Sums::walk`]), each tap's sixteen bytes
    /// widened as `SIGNED` says and multiplied by the channels' `w - zw`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, DQ and VL; every pixel's taps lie inside
    /// `xs` (`at(p) + offsets[t] + LANES <= xs.len()`).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    #[inline]
    unsafe fn put<const K: usize, const SIGNED: bool, S: Sink>(
        &self,
        taps: (&[usize], &[__m512i]),
        start: __m512i,
        out: &Rows<'_, S>,
    ) {
        let tap = |acc, from: *const u8, w| {
            // SAFETY: from .. from + LANES lies inside `xs` (this
            // function's contract).
            let b = unsafe { _mm_loadu_si128(from.cast()) };
            let v = if SIGNED {
                _mm512_cvtepi8_epi32(b)
            } else {
                _mm512_cvtepu8_epi32(b)
            };
            _mm512_add_epi32(acc, _mm512_mullo_epi32(v, w))
        };
        // SAFETY: the CPU has the features; `tap` reads inside `xs` (this
        // function's contract).
        unsafe { self.walk::<K, S>(taps, start, out, tap) };
    }

    /// [`Sums::put`] with four taps of a filter row at a time: the taps
    /// are quads ([`gather_quads`]). A quad's sixty-four bytes (four
    /// pixels of the sixteen channels) are turned into one four-byte word
    /// per channel and multiplied by its four weights in one VNNI dot
    /// product; an int8 image's bytes are read as `x + 128` (the start
    /// holds the difference).
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, DQ, VL, VNNI and VBMI; every pixel's
    /// quads lie inside `xs` (`at(p) + offsets[t] + 4 * LANES <= xs.len()`).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512vbmi,avx2,fma")]
    unsafe fn put_quads<const K: usize, const SIGNED: bool, S: Sink>(
        &self,
        taps: (&[usize], &[__m512i]),
        start: __m512i,
        out: &Rows<'_, S>,
    ) {
        // Byte 16 j + c (pixel j, channel c) to byte 4 c + j: lane c holds
        // channel c's four pixels.
        let words = _mm512_set_epi8(
            63, 47, 31, 15, 62, 46, 30, 14, 61, 45, 29, 13, 60, 44, 28, 12, 59, 43, 27, 11, 58, 42,
            26, 10, 57, 41, 25, 9, 56, 40, 24, 8, 55, 39, 23, 7, 54, 38, 22, 6, 53, 37, 21, 5, 52,
            36, 20, 4, 51, 35, 19, 3, 50, 34, 18, 2, 49, 33, 17, 1, 48, 32, 16, 0,
        );
        let flip = _mm512_set1_epi8(-128);
        let tap = |acc, from: *const u8, w| {
            // SAFETY: from .. from + 4 LANES lies inside `xs` (this
            // function's contract).
            let v = unsafe { _mm512_loadu_si512(from.cast()) };
            let v = _mm512_permutexvar_epi8(words, v);
            let v = if SIGNED { _mm512_xor_si512(v, flip) } else { v };
            _mm512_dpbusd_epi32(acc, v, w)
        };
        // SAFETY: the CPU has the features; `tap` reads inside `xs` (this
        // function's contract).
        unsafe { self.walk::<K, S>(taps, start, out, tap) };
    }
}
