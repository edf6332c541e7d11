//! The loops of the quantized convolutions around the integer product
//! (hot path): the channels-last im2col rows of a group, and the direct
//! exact depthwise convolution of one channel.

use super::qgemm::sink::Sink;
use crate::ops::conv::geometry::valid_range;
use crate::ops::conv::shape::ConvShape;

/// Group `g`'s rows of the channels-last im2col matrix: per output pixel,
/// per tap, the group's input channels (`pad` outside the input).
pub(super) fn im2col(s: &ConvShape, nhwc: &[u8], g: usize, pad: u8, cols: &mut [u8]) {
    let g3 = s.geometry.as_3d();
    let (cg, c_all) = (s.cg(), s.channels);
    let k = s.k();
    let [id, ih, iw] = g3.input;
    let [od, oh, ow] = g3.output;
    let [kd, kh, kw] = g3.kernel;
    let mut p = 0;
    for z in 0..od {
        for yy in 0..oh {
            for xx in 0..ow {
                let row = &mut cols[p * k..(p + 1) * k];
                let mut t = 0;
                for a in 0..kd {
                    let iz = g3.coord(0, z, a);
                    for bb in 0..kh {
                        let iy = g3.coord(1, yy, bb);
                        for cc in 0..kw {
                            let ix = g3.coord(2, xx, cc);
                            let dst = &mut row[t * cg..(t + 1) * cg];
                            let inside = (0..id as isize).contains(&iz)
                                && (0..ih as isize).contains(&iy)
                                && (0..iw as isize).contains(&ix);
                            if inside {
                                let pos = (iz as usize * ih + iy as usize) * iw + ix as usize;
                                dst.copy_from_slice(&nhwc[pos * c_all + g * cg..][..cg]);
                            } else {
                                dst.fill(pad);
                            }
                            t += 1;
                        }
                    }
                }
                p += 1;
            }
        }
    }
}

/// A direct depthwise convolution of one channel, exact in i32: `xs`
/// (scratch) takes `x - zx` of the plane, each output row accumulates tap
/// by tap over the output columns whose input is inside (taps in the
/// padding read the zero point: they add nothing), and goes to the sink as
/// row 0, columns `pixel..`.
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise<S: Sink>(
    s: &ConvShape,
    img: &[u8],
    x_signed: bool,
    zx: i32,
    taps: &[u8],
    w_signed: bool,
    zw: i32,
    sink: &S,
    xs: &mut Vec<i32>,
    acc: &mut Vec<i32>,
) {
    let g3 = s.geometry.as_3d();
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
                    for c in 0..kw {
                        let w = wv((a * kh + b) * kw + c);
                        let off = (c * g3.dilation[2]) as isize - g3.pad[2] as isize;
                        let (lo, hi) = valid_range(ow, sx, off, iw);
                        let start = ((lo * sx) as isize + off) as usize;
                        if sx == 1 {
                            let src = &row[start..start + (hi - lo)];
                            for (o, &x) in acc[lo..hi].iter_mut().zip(src) {
                                *o = o.wrapping_add(x * w);
                            }
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
