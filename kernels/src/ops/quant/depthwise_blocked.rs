//! The int8 depthwise convolution on small planes (hot path, AVX-512):
//! sixteen channels at a time, one channel per vector lane.
//!
//! A plane narrower than a vector leaves most of each row's lanes unused
//! ([`super::depthwise`] works along rows), and mobilenet-style networks
//! end in hundreds of 14x14 and 7x7 planes. Here sixteen planes are
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

/// Whether [`run`] takes a plane of this geometry: 2-D (flat), narrower
/// than a vector.
pub(super) fn applies(dw: &Depthwise<'_>) -> bool {
    let g = dw.s.geometry.as_3d();
    g.input[0] == 1 && g.output[0] == 1 && g.kernel[0] == 1 && g.output[2] < LANES
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
    sums: Vec<i32>,
    row: Vec<i32>,
    taps: Vec<__m512i>,
    offsets: Vec<usize>,
}

/// Channels `c0..c0 + LANES` (fewer at the end) of image `b` into their
/// sinks (`sinks[b * channels + c]`).
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
    // The block, channels-last: padding is 0 (`x - zx` of the zero point).
    let xs = &mut scratch.xs;
    xs.clear();
    xs.resize(hp * wp * LANES, 0);
    // The taps, per tap one vector of the channels' `w - zw`.
    let taps = &mut scratch.taps;
    taps.clear();
    taps.resize(klen, _mm512_setzero_si512());
    for l in 0..lanes {
        let c = c0 + l;
        let plane = &dw.x[(b * s.channels + c) * in_len..][..in_len];
        for iy in 0..ih {
            let dst = ((iy + pt) * wp + pl) * LANES + l;
            for (ix, &v) in plane[iy * iw..(iy + 1) * iw].iter().enumerate() {
                let v = if dw.x_signed {
                    v as i8 as i32
                } else {
                    v as i32
                };
                xs[dst + ix * LANES] = v - dw.zx;
            }
        }
    }
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
    let sums = &mut scratch.sums;
    sums.clear();
    sums.resize(pixels * LANES, 0);
    let last = offsets.iter().max().copied().unwrap_or(0)
        + (((oh - 1) * sh * wp + (ow - 1) * sw) * LANES)
        + LANES;
    assert!(last <= xs.len(), "a tap reads outside the block");
    let base = xs.as_ptr();
    for y in 0..oh {
        for x in 0..ow {
            let at = (y * sh * wp + x * sw) * LANES;
            let mut acc = _mm512_setzero_si512();
            for (&o, &w) in offsets.iter().zip(taps.iter()) {
                // SAFETY: at + o + LANES <= last <= xs.len() (asserted).
                let v = unsafe { _mm512_loadu_si512(base.add(at + o).cast()) };
                acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(v, w));
            }
            let out = &mut sums[(y * ow + x) * LANES..][..LANES];
            // SAFETY: `out` holds sixteen i32.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), acc) };
        }
    }
    let row = &mut scratch.row;
    row.resize(pixels, 0);
    for l in 0..lanes {
        for (p, r) in row.iter_mut().enumerate() {
            *r = sums[p * LANES + l];
        }
        sinks[b * s.channels + c0 + l].put(0, 0, row);
    }
}
