//! The int8 depthwise convolution on small planes (hot path, AVX-512):
//! sixteen channels at a time, one channel per vector lane.
//!
//! A plane narrower than two vectors leaves many of each row's lanes
//! unused ([`super::depthwise`] works along rows), and mobilenet-style
//! networks end in hundreds of 28x28, 14x14 and 7x7 planes. Here sixteen
//! planes are
//! copied as `x - zx` into one zero-bordered channels-last block, so that
//! each output pixel of the sixteen channels is one vector: every tap one
//! load and one multiply-add against the sixteen channels' weights. The
//! sums are then read back plane by plane into each plane's sink.

use std::arch::x86_64::*;

use super::depthwise::Depthwise;
use super::qgemm::sink::Sink;
use crate::ParallelFor;

/// Channels of a block (one per lane).
pub(super) const LANES: usize = 16;

/// Output rows narrower than this go [`LANES`] channels at a time: a
/// 28-wide row fills 28 of 32 lanes along the row, yet runs 25 % faster
/// here (mobilenet_v2's 144 and 192 channel 28x28 layers); at 56 the
/// block's copy costs more than the row path's tails.
const NARROWER: usize = 2 * LANES;

/// Whether [`run`] takes a plane of this geometry: 2-D (flat), output rows
/// narrower than [`NARROWER`].
pub(super) fn applies(dw: &Depthwise<'_>) -> bool {
    let g = dw.s.geometry.as_3d();
    g.input[0] == 1 && g.output[0] == 1 && g.kernel[0] == 1 && g.output[2] < NARROWER
}

/// Every image's channels in blocks of [`LANES`], each plane `i` into
/// `sinks[i]`, the blocks split across `par`'s threads.
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
            unsafe { run(dw, sinks, b, c0, &mut scratch) };
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
    xs: Vec<i32>,
    /// The sums, lane-major: lane `l`'s plane at `l * pixels`.
    rows: Vec<i32>,
    taps: Vec<__m512i>,
    offsets: Vec<usize>,
}

/// Channels `c0..c0 + LANES` (fewer at the end) of image `b` into their
/// sinks (`sinks[b * channels + c]`).
///
/// Both turns between planes and the channels-last block are sixteen by
/// sixteen transposes in registers: sixteen pixels of each channel's row
/// into sixteen pixel vectors on the way in, sixteen pixels' sums into
/// sixteen channel rows on the way out.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL; [`applies`] holds.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn run<S: Sink>(
    dw: &Depthwise<'_>,
    sinks: &[S],
    b: usize,
    c0: usize,
    scratch: &mut Scratch,
) {
    let s = dw.s;
    let g = s.geometry.as_3d();
    let ([_, ih, iw], [_, oh, ow], [_, kh, kw]) = (g.input, g.output, g.kernel);
    let ([_, sh, sw], [_, dh, dwl], [_, pt, pl]) = (g.stride, g.dilation, g.pad);
    let hp = (pt + ih).max((oh - 1) * sh + (kh - 1) * dh + 1);
    let wp = (pl + iw).max((ow - 1) * sw + (kw - 1) * dwl + 1);
    let (in_len, klen) = (ih * iw, kh * kw);
    let lanes = LANES.min(s.channels - c0);
    let planes: Vec<&[u8]> = (0..lanes)
        .map(|l| &dw.x[(b * s.channels + c0 + l) * in_len..][..in_len])
        .collect();
    // The block, channels-last: padding is 0 (`x - zx` of the zero point).
    // Only the border is zeroed: `fill_block` writes every pixel inside.
    let xs = &mut scratch.xs;
    xs.resize(hp * wp * LANES, 0);
    let pitch = wp * LANES;
    xs[..pt * pitch].fill(0);
    xs[(pt + ih) * pitch..].fill(0);
    for row in xs[pt * pitch..(pt + ih) * pitch].chunks_exact_mut(pitch) {
        row[..pl * LANES].fill(0);
        row[(pl + iw) * LANES..].fill(0);
    }
    // SAFETY: the CPU has the features (this function's contract); each
    // plane holds `ih * iw` bytes and the block `hp * wp` pixels, with
    // `pt + ih <= hp` and `pl + iw <= wp`.
    unsafe { fill_block(&planes, dw, [ih, iw], [pt, pl, wp], xs) };
    // The taps, per tap one vector of the channels' `w - zw`.
    let taps = &mut scratch.taps;
    taps.clear();
    taps.resize(klen, _mm512_setzero_si512());
    for (t, tap) in taps.iter_mut().enumerate() {
        let mut w = [0i32; LANES];
        for (l, w) in w.iter_mut().enumerate().take(lanes) {
            let c = c0 + l;
            let v = dw.w[c * klen + t];
            let zw = dw.zw[if dw.zw.len() == 1 { 0 } else { c }];
            *w = if dw.w_signed {
                v as i8 as i32
            } else {
                v as i32
            } - zw;
        }
        // SAFETY: `w` holds sixteen i32.
        *tap = unsafe { _mm512_loadu_si512(w.as_ptr().cast()) };
    }
    let offsets = &mut scratch.offsets;
    offsets.clear();
    offsets.extend((0..klen).map(|t| ((t / kw) * dh * wp + (t % kw) * dwl) * LANES));
    let pixels = oh * ow;
    let last = offsets.iter().max().copied().unwrap_or(0)
        + (((oh - 1) * sh * wp + (ow - 1) * sw) * LANES)
        + LANES;
    assert!(last <= xs.len(), "a tap reads outside the block");
    // Every value is written by `Sums::rows` (no zeroing pass).
    let rows = &mut scratch.rows;
    rows.resize(LANES * pixels, 0);
    let sums = Sums {
        xs,
        ow,
        steps: [sh * wp * LANES, sw * LANES],
        pixels,
    };
    // SAFETY: the CPU has the features; every pixel's taps lie inside the
    // block (the assertion above), `rows` holds LANES planes of `pixels`.
    unsafe {
        if klen == 9 {
            sums.rows::<9>(offsets, taps, rows);
        } else {
            sums.rows::<0>(offsets, taps, rows);
        }
    }
    for (l, row) in rows.chunks_exact(pixels).take(lanes).enumerate() {
        // SAFETY: the CPU has the features (this function's contract).
        unsafe { sinks[b * s.channels + c0 + l].put_avx512(0, 0, row) };
    }
}

/// `xs` (the block, `[py][px][LANES]`) filled inside from the planes as
/// `x - zx`, input pixel `(iy, ix)` at padded `(iy + pt, ix + pl)`.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ and VL; each plane holds `ih * iw`
/// bytes; `xs` holds `(pt + ih) * wp` pixels and `pl + iw <= wp`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
unsafe fn fill_block(
    planes: &[&[u8]],
    dw: &Depthwise<'_>,
    [ih, iw]: [usize; 2],
    [pt, pl, wp]: [usize; 3],
    xs: &mut [i32],
) {
    assert!(
        planes.len() <= LANES
            && planes.iter().all(|p| p.len() >= ih * iw)
            && pl + iw <= wp
            && (pt + ih) * wp * LANES <= xs.len(),
        "the block does not hold the planes"
    );
    let zx = _mm512_set1_epi32(dw.zx);
    for iy in 0..ih {
        let mut ix0 = 0;
        while ix0 < iw {
            let n = (iw - ix0).min(LANES);
            let mask: __mmask16 = if n == LANES { !0 } else { (1u16 << n) - 1 };
            let mut m = [_mm512_setzero_si512(); LANES];
            for (v, plane) in m.iter_mut().zip(planes) {
                // SAFETY: bytes iy * iw + ix0 .. + n lie inside the plane
                // (the assertion); the mask reads no more.
                let bytes =
                    unsafe { _mm_maskz_loadu_epi8(mask, plane.as_ptr().add(iy * iw + ix0).cast()) };
                let wide = if dw.x_signed {
                    _mm512_cvtepi8_epi32(bytes)
                } else {
                    _mm512_cvtepu8_epi32(bytes)
                };
                *v = _mm512_sub_epi32(wide, zx);
            }
            transpose(&mut m);
            let at = ((iy + pt) * wp + pl + ix0) * LANES;
            for (j, v) in m.iter().take(n).enumerate() {
                // SAFETY: pixel (iy + pt, pl + ix0 + j) lies inside the
                // block (the assertion: pl + iw <= wp).
                unsafe { _mm512_storeu_si512(xs.as_mut_ptr().add(at + j * LANES).cast(), *v) };
            }
            ix0 += n;
        }
    }
}

/// The sums of a block's output pixels: pixel `p = y * ow + x`'s taps
/// read the block from `at(p) = y * steps[0] + x * steps[1]` on.
struct Sums<'a> {
    xs: &'a [i32],
    ow: usize,
    steps: [usize; 2],
    pixels: usize,
}

impl Sums<'_> {
    /// Sixteen pixels at a time, each a vector of the channels' sums, then
    /// turned into sixteen channel rows: lane `l`'s sums of pixels `p..`
    /// at `rows[l * pixels + p..]`. `K` taps (unrolled), or as many as
    /// `offsets` holds when `K` is 0.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, DQ and VL; every pixel's taps lie inside
    /// `xs` (`at(p) + offsets[t] + LANES <= xs.len()`), `rows` holds
    /// `LANES * pixels` values.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    #[inline]
    unsafe fn rows<const K: usize>(&self, offsets: &[usize], taps: &[__m512i], rows: &mut [i32]) {
        let pixels = self.pixels;
        assert!(rows.len() >= LANES * pixels, "rows shorter than the planes");
        let k = if K == 0 { offsets.len() } else { K };
        let (offsets, taps) = (&offsets[..k], &taps[..k]);
        let base = self.xs.as_ptr();
        let mut p0 = 0;
        while p0 < pixels {
            let n = (pixels - p0).min(LANES);
            let mut acc = [_mm512_setzero_si512(); LANES];
            for (j, acc) in acc.iter_mut().take(n).enumerate() {
                let p = p0 + j;
                let at = p / self.ow * self.steps[0] + p % self.ow * self.steps[1];
                for (&o, &w) in offsets.iter().zip(taps) {
                    // SAFETY: at + o + LANES <= xs.len() (this function's
                    // contract).
                    let v = unsafe { _mm512_loadu_si512(base.add(at + o).cast()) };
                    *acc = _mm512_add_epi32(*acc, _mm512_mullo_epi32(v, w));
                }
            }
            transpose(&mut acc);
            let mask: __mmask16 = if n == LANES { !0 } else { (1u16 << n) - 1 };
            for (l, v) in acc.iter().enumerate() {
                // SAFETY: the mask writes values l * pixels + p0 .. + n,
                // inside `rows` (the assertion).
                unsafe {
                    _mm512_mask_storeu_epi32(
                        rows.as_mut_ptr().add(l * pixels + p0).cast(),
                        mask,
                        *v,
                    )
                };
            }
            p0 += n;
        }
    }
}

/// `m` transposed as a sixteen by sixteen matrix of i32 (row `r` = vector
/// `r`): two rounds of unpacks within 128-bit lanes, two of lane
/// shuffles.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(m: &mut [__m512i; LANES]) {
    let mut t = [_mm512_setzero_si512(); LANES];
    for i in 0..LANES / 2 {
        let (a, b) = (m[2 * i], m[2 * i + 1]);
        t[2 * i] = _mm512_unpacklo_epi32(a, b);
        t[2 * i + 1] = _mm512_unpackhi_epi32(a, b);
    }
    // Per group of four rows, u[k]'s 128-bit lane j holds column 4 j + k.
    let mut u = [_mm512_setzero_si512(); LANES];
    for g in 0..LANES / 4 {
        let t = &t[4 * g..4 * g + 4];
        u[4 * g] = _mm512_unpacklo_epi64(t[0], t[2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[0], t[2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[1], t[3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[1], t[3]);
    }
    for k in 0..4 {
        let [g0, g1, g2, g3] = [0, 1, 2, 3].map(|g| u[4 * g + k]);
        let (v01, w01) = (
            _mm512_shuffle_i32x4::<0x88>(g0, g1),
            _mm512_shuffle_i32x4::<0xDD>(g0, g1),
        );
        let (v23, w23) = (
            _mm512_shuffle_i32x4::<0x88>(g2, g3),
            _mm512_shuffle_i32x4::<0xDD>(g2, g3),
        );
        m[k] = _mm512_shuffle_i32x4::<0x88>(v01, v23);
        m[8 + k] = _mm512_shuffle_i32x4::<0xDD>(v01, v23);
        m[4 + k] = _mm512_shuffle_i32x4::<0x88>(w01, w23);
        m[12 + k] = _mm512_shuffle_i32x4::<0xDD>(w01, w23);
    }
}
