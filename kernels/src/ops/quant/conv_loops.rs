//! The loops of the quantized convolutions around the integer product
//! (hot path): the channels-last im2col rows of a group, and the direct
//! exact depthwise convolution of one channel.

use super::qgemm::sink::Sink;
use crate::ParallelFor;
use crate::ops::conv::geometry::valid_range;
use crate::ops::conv::shape::ConvShape;

/// Group `g`'s rows of the channels-last im2col matrix, replacing the
/// contents of `cols`: per output pixel, per tap, the group's input
/// channels (`pad` outside the input).
pub(super) fn im2col(s: &ConvShape, nhwc: &[u8], g: usize, pad: u8, cols: &mut Vec<u8>) {
    let g3 = s.geometry.as_3d();
    let (cg, c_all) = (s.cg(), s.channels);
    let [id, ih, iw] = g3.input;
    let [od, oh, ow] = g3.output;
    let [kd, kh, kw] = g3.kernel;
    cols.clear();
    for z in 0..od {
        for yy in 0..oh {
            for xx in 0..ow {
                for a in 0..kd {
                    let iz = g3.coord(0, z, a);
                    for bb in 0..kh {
                        let iy = g3.coord(1, yy, bb);
                        for cc in 0..kw {
                            let ix = g3.coord(2, xx, cc);
                            let inside = (0..id as isize).contains(&iz)
                                && (0..ih as isize).contains(&iy)
                                && (0..iw as isize).contains(&ix);
                            if inside {
                                let pos = (iz as usize * ih + iy as usize) * iw + ix as usize;
                                cols.extend_from_slice(&nhwc[pos * c_all + g * cg..][..cg]);
                            } else {
                                cols.resize(cols.len() + cg, pad);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `img` (`channels` planes of `len` values) channels-last, replacing the
/// contents of `out`.
pub(super) fn to_channels_last(img: &[u8], channels: usize, len: usize, out: &mut Vec<u8>) {
    out.clear();
    if channels == 1 {
        out.extend_from_slice(&img[..len]);
        return;
    }
    for p in 0..len {
        out.extend((0..channels).map(|c| img[c * len + p]));
    }
}

/// The planes of a depthwise convolution (channel multiplier 1): image
/// `b`, channel `c` is plane `b * channels + c`.
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

impl Depthwise<'_> {
    /// Every plane `i` into `sinks[i]`, the planes split across `par`'s
    /// threads; compiled for AVX2 when `avx2` (the CPU has it).
    pub(super) fn run<S: Sink>(&self, sinks: &[S], avx2: bool, par: &dyn ParallelFor) {
        let planes = sinks.len();
        let tasks = if par.threads() > 1 {
            planes.min(par.threads() * 4)
        } else {
            1
        };
        let task = |t: usize| {
            let (mut xs, mut acc) = (Vec::new(), Vec::new());
            for i in crate::par::chunk(planes, tasks, 1, t) {
                #[cfg(target_arch = "x86_64")]
                if avx2 {
                    // SAFETY: the caller's `avx2` says the CPU has it.
                    unsafe { self.plane_avx2(i, &sinks[i], &mut xs, &mut acc) };
                    continue;
                }
                let _ = avx2;
                self.plane::<false, S>(i, &sinks[i], &mut xs, &mut acc);
            }
        };
        if tasks <= 1 {
            task(0);
        } else {
            par.run(tasks, &task);
        }
    }

    /// [`Self::plane`] compiled for AVX2 (the `i32` products 8 wide).
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn plane_avx2<S: Sink>(
        &self,
        i: usize,
        sink: &S,
        xs: &mut Vec<i32>,
        acc: &mut Vec<i32>,
    ) {
        self.plane::<true, S>(i, sink, xs, acc);
    }

    /// Plane `i`, exact in i32: `xs` (scratch) takes `x - zx` of the
    /// plane, each output row accumulates tap by tap over the output
    /// columns whose input is inside (taps in the padding read the zero
    /// point: they add nothing), and goes to the sink as row 0, columns
    /// `pixel..`. `AVX2`: called from [`Self::plane_avx2`] only.
    #[inline(always)]
    fn plane<const AVX2: bool, S: Sink>(
        &self,
        i: usize,
        sink: &S,
        xs: &mut Vec<i32>,
        acc: &mut Vec<i32>,
    ) {
        let s = self.s;
        let g3 = s.geometry.as_3d();
        let c = i % s.channels;
        let (in_len, klen) = (s.geometry.input_len(), s.geometry.kernel_len());
        let img = &self.x[i * in_len..][..in_len];
        let taps = &self.w[c * klen..][..klen];
        let zw = self.zw[if self.zw.len() == 1 { 0 } else { c }];
        let (x_signed, w_signed, zx) = (self.x_signed, self.w_signed, self.zx);
        let [id, ih, iw] = g3.input;
        let [od, oh, ow] = g3.output;
        let [kd, kh, kw] = g3.kernel;
        xs.clear();
        xs.extend(
            img.iter()
                .map(|&v| if x_signed { v as i8 as i32 } else { v as i32 } - zx),
        );
        let wv = |t: usize| {
            (if w_signed {
                taps[t] as i8 as i32
            } else {
                taps[t] as i32
            }) - zw
        };
        acc.clear();
        acc.resize(ow, 0);
        let sx = g3.stride[2];
        // Per kernel column: the output columns whose input is inside, and
        // the input column of the first.
        let spans: Vec<(usize, usize, usize)> = (0..kw)
            .map(|c| {
                let off = (c * g3.dilation[2]) as isize - g3.pad[2] as isize;
                let (lo, hi) = valid_range(ow, sx, off, iw);
                (lo, hi, ((lo * sx) as isize + off).max(0) as usize)
            })
            .collect();
        for z in 0..od {
            for yy in 0..oh {
                acc.fill(0);
                for a in 0..kd {
                    let iz = g3.coord(0, z, a);
                    if !(0..id as isize).contains(&iz) {
                        continue;
                    }
                    for b in 0..kh {
                        let iy = g3.coord(1, yy, b);
                        if !(0..ih as isize).contains(&iy) {
                            continue;
                        }
                        let row = &xs[(iz as usize * ih + iy as usize) * iw..][..iw];
                        for (c, &(lo, hi, start)) in spans.iter().enumerate() {
                            let w = wv((a * kh + b) * kw + c);
                            if sx == 1 {
                                let (o, x) = (&mut acc[lo..hi], &row[start..start + (hi - lo)]);
                                #[cfg(target_arch = "x86_64")]
                                if AVX2 {
                                    // SAFETY: AVX2 is set only in plane_avx2,
                                    // whose caller checked the CPU has it.
                                    unsafe { mac_avx2(o, x, w) };
                                    continue;
                                }
                                mac(o, x, w);
                            } else {
                                for (k, o) in acc[lo..hi].iter_mut().enumerate() {
                                    *o = o.wrapping_add(row[start + k * sx] * w);
                                }
                            }
                        }
                    }
                }
                sink.put(0, (z * oh + yy) * ow, acc);
            }
        }
    }
}

/// `acc += src * w`.
#[inline(always)]
fn mac(acc: &mut [i32], src: &[i32], w: i32) {
    for (o, &x) in acc.iter_mut().zip(src) {
        *o = o.wrapping_add(x.wrapping_mul(w));
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
unsafe fn mac_avx2(acc: &mut [i32], src: &[i32], w: i32) {
    use std::arch::x86_64::*;
    let n = acc.len().min(src.len());
    let wv = _mm256_set1_epi32(w);
    let mut j = 0;
    while j + 8 <= n {
        // SAFETY: j + 8 <= n, inside both slices; unaligned loads and store.
        unsafe {
            let x = _mm256_loadu_si256(src.as_ptr().add(j).cast());
            let o = _mm256_loadu_si256(acc.as_ptr().add(j).cast());
            let y = _mm256_add_epi32(o, _mm256_mullo_epi32(x, wv));
            _mm256_storeu_si256(acc.as_mut_ptr().add(j).cast(), y);
        }
        j += 8;
    }
    mac(&mut acc[j..n], &src[j..n], w);
}
