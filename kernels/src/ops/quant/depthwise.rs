//! The direct depthwise quantized convolution (channel multiplier 1; hot
//! path), exact in i32, one NCHW plane at a time, planes split across
//! threads.
//!
//! A 2-D plane with a column stride of 1 or 2 is first copied as `x - zx`
//! into a zero-bordered padded plane (padding reads the zero point, which
//! adds nothing), so that every tap is one contiguous multiply-add:
//!
//! * stride 1 in both axes: the output is computed on the padded plane's
//!   grid (row pitch = padded width), each tap one multiply-add over the
//!   whole plane at once, and the rows are read off without the border
//!   columns;
//! * column stride 2: each padded row is stored even columns first, then
//!   odd ones, so that a tap's inputs for consecutive outputs are
//!   consecutive; each output row accumulates its taps.
//!
//! On AVX-512 every 2-D plane goes to `depthwise_blocked` instead
//! (sixteen channels per vector, in bands of rows); this module serves the
//! AVX2 and portable families, and 3-D planes on every family.
//!
//! Anything else (3-D, other strides) takes the general loop: per output
//! row, per tap, the output columns whose input is inside.

use super::qgemm::QIsa;
use super::qgemm::sink::Sink;
use crate::ParallelFor;
use crate::ops::conv::geometry::{Geometry3, valid_range};
use crate::ops::conv::shape::ConvShape;

/// The planes of a depthwise convolution: image `b`, channel `c` is plane
/// `b * channels + c`.
pub(super) struct Depthwise<'a> {
    pub s: &'a ConvShape,
    pub x: &'a [u8],
    pub x_signed: bool,
    pub zx: i32,
    pub w: &'a [u8],
    pub w_signed: bool,
    /// One zero point, or one per channel.
    pub zw: &'a [i32],
}

/// One plane's operands.
struct Plane<'a> {
    g3: Geometry3,
    img: &'a [u8],
    x_signed: bool,
    zx: i32,
    /// The taps as `w - zw`.
    taps: &'a [i32],
    /// The row of the image's sink (the channel).
    row: usize,
}

impl Depthwise<'_> {
    /// Every plane into its image's sink (image `b`, channel `c`: row `c`
    /// of `sinks[b]`), the planes split across `par`'s threads; compiled
    /// for the vector extensions of `isa` (which the CPU has:
    /// QIsa::select).
    pub(super) fn run<S: Sink>(&self, sinks: &[S], isa: QIsa, par: &dyn ParallelFor) {
        let avx2 = isa.avx2();
        let planes = self.s.batch * self.s.channels;
        let tasks = if par.threads() > 1 {
            planes.min(par.threads() * 4)
        } else {
            1
        };
        let task = |t: usize| {
            let (mut xs, mut acc, mut taps) = (Vec::new(), Vec::new(), Vec::new());
            for i in crate::par::chunk(planes, tasks, 1, t) {
                let p = self.plane(i, &mut taps);
                #[cfg(target_arch = "x86_64")]
                if avx2 {
                    // SAFETY: every family but the portable one is selected
                    // only on a CPU with AVX2.
                    unsafe { p.run_avx2(&sinks[i / self.s.channels], &mut xs, &mut acc) };
                    continue;
                }
                let _ = avx2;
                // SAFETY: AVX2 = false asks nothing of the CPU.
                unsafe { p.run::<false, S>(&sinks[i / self.s.channels], &mut xs, &mut acc) };
            }
        };
        if tasks <= 1 {
            task(0);
        } else {
            par.run(tasks, &task);
        }
    }

    /// Plane `i`, its taps written into `taps` (scratch).
    fn plane<'a>(&'a self, i: usize, taps: &'a mut Vec<i32>) -> Plane<'a> {
        let s = self.s;
        let c = i % s.channels;
        let (in_len, klen) = (s.geometry.input_len(), s.geometry.kernel_len());
        let zw = self.zw[if self.zw.len() == 1 { 0 } else { c }];
        let w_signed = self.w_signed;
        taps.clear();
        taps.extend(
            self.w[c * klen..][..klen]
                .iter()
                .map(|&t| if w_signed { t as i8 as i32 } else { t as i32 } - zw),
        );
        Plane {
            g3: s.geometry.as_3d(),
            img: &self.x[i * in_len..][..in_len],
            x_signed: self.x_signed,
            zx: self.zx,
            taps,
            row: c,
        }
    }
}

impl Plane<'_> {
    #[inline(always)]
    fn value(&self, v: u8) -> i32 {
        (if self.x_signed {
            v as i8 as i32
        } else {
            v as i32
        }) - self.zx
    }

    /// `dst[i] = value(src[i])`, the sign decided once.
    #[inline(always)]
    fn values(&self, dst: &mut [i32], src: &[u8]) {
        let zx = self.zx;
        if self.x_signed {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = v as i8 as i32 - zx;
            }
        } else {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = v as i32 - zx;
            }
        }
    }

    /// [`Self::run`] compiled for AVX2 (the `i32` products 8 wide).
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn run_avx2<S: Sink>(&self, sink: &S, xs: &mut Vec<i32>, acc: &mut Vec<i32>) {
        // SAFETY: the CPU has AVX2 (this function's contract).
        unsafe { self.run::<true, S>(sink, xs, acc) }
    }

    /// The plane into `sink` (row 0, columns `pixel..`), `xs` and `acc`
    /// scratch.
    ///
    /// # Safety
    /// `AVX2` only when the CPU has AVX2.
    #[inline(always)]
    unsafe fn run<const AVX2: bool, S: Sink>(
        &self,
        sink: &S,
        xs: &mut Vec<i32>,
        acc: &mut Vec<i32>,
    ) {
        let g = &self.g3;
        let flat = g.input[0] == 1 && g.output[0] == 1 && g.kernel[0] == 1;
        // SAFETY: passed on (this function's contract).
        unsafe {
            if flat && g.stride[2] <= 2 {
                self.padded::<AVX2, S>(sink, xs, acc);
            } else {
                self.general::<AVX2, S>(sink, xs, acc);
            }
        }
    }

    /// The padded-plane paths (see the module documentation).
    ///
    /// # Safety
    /// `AVX2` only when the CPU has AVX2.
    #[inline(always)]
    unsafe fn padded<const AVX2: bool, S: Sink>(
        &self,
        sink: &S,
        xs: &mut Vec<i32>,
        acc: &mut Vec<i32>,
    ) {
        let g = &self.g3;
        let ([_, ih, iw], [_, oh, ow], [_, kh, kw]) = (g.input, g.output, g.kernel);
        let ([_, sh, sw], [_, dh, dw], [_, pt, pl]) = (g.stride, g.dilation, g.pad);
        let hp = (oh - 1) * sh + (kh - 1) * dh + 1;
        let wp = (ow - 1) * sw + (kw - 1) * dw + 1;
        // Where padded column `px` is stored in its row.
        let half = wp.div_ceil(sw);
        let col = |px: usize| if sw == 1 { px } else { px % 2 * half + px / 2 };
        // Every element is written once: the border zeros, the inside the
        // values (no zeroing pass over the whole plane first).
        xs.resize(hp * wp, 0);
        let cols = iw.min(wp.saturating_sub(pl));
        for (py, dst) in xs[..hp * wp].chunks_exact_mut(wp).enumerate() {
            let Some(src) = py
                .checked_sub(pt)
                .filter(|&iy| iy < ih)
                .map(|iy| &self.img[iy * iw..][..cols])
            else {
                dst.fill(0);
                continue;
            };
            if sw == 1 {
                dst[..pl].fill(0);
                self.values(&mut dst[pl..pl + cols], src);
                dst[pl + cols..].fill(0);
            } else {
                for px in (0..pl).chain(pl + cols..wp) {
                    dst[col(px)] = 0;
                }
                // Input column `ix` is padded column `ix + pl`: the even
                // ones to the first half, the odd ones to the second.
                for (parity, base) in [(0, 0), (1, half)] {
                    let ix0 = (parity + pl) % 2;
                    let start = base + (ix0 + pl) / 2;
                    let inputs = src.iter().skip(ix0).step_by(2);
                    for (d, &v) in dst[start..].iter_mut().zip(inputs) {
                        *d = self.value(v);
                    }
                }
            }
        }
        if sh == 1 && sw == 1 {
            // The whole grid at once: output (y, x) at y * wp + x.
            let len = (oh - 1) * wp + ow;
            acc.resize(len, 0);
            let acc = &mut acc[..len];
            for a in 0..kh {
                for b in 0..kw {
                    let off = a * dh * wp + b * dw;
                    let (src, w) = (&xs[off..off + len], self.taps[a * kw + b]);
                    // SAFETY: passed on (this function's contract).
                    unsafe { tap::<AVX2>(a + b == 0, acc, src, w) };
                }
            }
            for y in 0..oh {
                sink.put(self.row, y * ow, &acc[y * wp..y * wp + ow]);
            }
            return;
        }
        acc.resize(ow, 0);
        let acc = &mut acc[..ow];
        for y in 0..oh {
            for a in 0..kh {
                let row = &xs[(y * sh + a * dh) * wp..][..wp];
                for b in 0..kw {
                    let start = col(b * dw);
                    let (src, w) = (&row[start..start + ow], self.taps[a * kw + b]);
                    // SAFETY: passed on (this function's contract).
                    unsafe { tap::<AVX2>(a + b == 0, acc, src, w) };
                }
            }
            sink.put(self.row, y * ow, acc);
        }
    }

    /// The general loop: per output row, per tap, the output columns whose
    /// input is inside (taps in the padding add nothing).
    ///
    /// # Safety
    /// `AVX2` only when the CPU has AVX2.
    #[inline(always)]
    unsafe fn general<const AVX2: bool, S: Sink>(
        &self,
        sink: &S,
        xs: &mut Vec<i32>,
        acc: &mut Vec<i32>,
    ) {
        let g = &self.g3;
        let ([id, ih, iw], [od, oh, ow], [kd, kh, kw]) = (g.input, g.output, g.kernel);
        xs.clear();
        xs.extend(self.img.iter().map(|&v| self.value(v)));
        acc.clear();
        acc.resize(ow, 0);
        let sx = g.stride[2];
        // Per kernel column: the output columns whose input is inside, and
        // the input column of the first.
        let spans: Vec<(usize, usize, usize)> = (0..kw)
            .map(|c| {
                let off = (c * g.dilation[2]) as isize - g.pad[2] as isize;
                let (lo, hi) = valid_range(ow, sx, off, iw);
                (lo, hi, ((lo * sx) as isize + off).max(0) as usize)
            })
            .collect();
        for z in 0..od {
            for yy in 0..oh {
                acc.fill(0);
                for a in 0..kd {
                    let iz = g.coord(0, z, a);
                    if !(0..id as isize).contains(&iz) {
                        continue;
                    }
                    for b in 0..kh {
                        let iy = g.coord(1, yy, b);
                        if !(0..ih as isize).contains(&iy) {
                            continue;
                        }
                        let row = &xs[(iz as usize * ih + iy as usize) * iw..][..iw];
                        for (c, &(lo, hi, start)) in spans.iter().enumerate() {
                            let w = self.taps[(a * kh + b) * kw + c];
                            if sx == 1 {
                                let x = &row[start..start + (hi - lo)];
                                // SAFETY: passed on (this function's contract).
                                unsafe { mac::<AVX2, false>(&mut acc[lo..hi], x, w) };
                            } else {
                                for (k, o) in acc[lo..hi].iter_mut().enumerate() {
                                    *o = o.wrapping_add(row[start + k * sx].wrapping_mul(w));
                                }
                            }
                        }
                    }
                }
                sink.put(self.row, (z * oh + yy) * ow, acc);
            }
        }
    }
}

/// One tap: `acc = src * w` for the `first`, `acc += src * w` after it
/// (no zeroing pass over `acc`).
///
/// # Safety
/// `AVX2` only when the CPU has AVX2.
#[inline(always)]
unsafe fn tap<const AVX2: bool>(first: bool, acc: &mut [i32], src: &[i32], w: i32) {
    // SAFETY: passed on (this function's contract).
    unsafe {
        if first {
            mac::<AVX2, true>(acc, src, w);
        } else {
            mac::<AVX2, false>(acc, src, w);
        }
    }
}

/// `acc += src * w`, or `acc = src * w` when `SET`.
///
/// # Safety
/// `AVX2` only when the CPU has AVX2.
#[inline(always)]
unsafe fn mac<const AVX2: bool, const SET: bool>(acc: &mut [i32], src: &[i32], w: i32) {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: the CPU has AVX2 (this function's contract).
        unsafe { mac_avx2::<SET>(acc, src, w) };
        return;
    }
    mac_scalar::<SET>(acc, src, w);
}

#[inline(always)]
fn mac_scalar<const SET: bool>(acc: &mut [i32], src: &[i32], w: i32) {
    for (o, &x) in acc.iter_mut().zip(src) {
        let p = x.wrapping_mul(w);
        *o = if SET { p } else { o.wrapping_add(p) };
    }
}

/// [`mac`] eight lanes at a time (rows are too short for the compiler's
/// vectorized loop, which wants 64 values).
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn mac_avx2<const SET: bool>(acc: &mut [i32], src: &[i32], w: i32) {
    use std::arch::x86_64::*;
    let n = acc.len().min(src.len());
    let wv = _mm256_set1_epi32(w);
    let mut j = 0;
    while j + 8 <= n {
        // SAFETY: lanes j .. j + 8 <= n lie inside both slices; unaligned
        // loads and store.
        unsafe {
            let p = _mm256_mullo_epi32(_mm256_loadu_si256(src.as_ptr().add(j).cast()), wv);
            let y = if SET {
                p
            } else {
                _mm256_add_epi32(_mm256_loadu_si256(acc.as_ptr().add(j).cast()), p)
            };
            _mm256_storeu_si256(acc.as_mut_ptr().add(j).cast(), y);
        }
        j += 8;
    }
    mac_scalar::<SET>(&mut acc[j..n], &src[j..n], w);
}
