//! The loops of the quantized convolutions around the integer product
//! (hot path): the channels-last image and the im2col rows of a group.

use crate::ParallelFor;
use crate::ops::conv::shape::ConvShape;

/// Group `g`'s rows of the channels-last im2col matrix, replacing the
/// contents of `cols`: per output pixel, per tap, the group's input
/// channels (`pad` outside the input). Blocks of output pixels are filled
/// across `par`.
pub(super) fn im2col(
    s: &ConvShape,
    nhwc: &[u8],
    g: usize,
    pad: u8,
    cols: &mut Vec<u8>,
    par: &dyn ParallelFor,
) {
    let k = s.k();
    let pixels = s.geometry.output_len();
    cols.clear();
    cols.resize(pixels * k, 0);
    // Whole pixels per task, a few tasks per thread.
    let per_task = pixels.div_ceil(par.threads().max(1) * 4).max(64);
    crate::for_each_chunk_mut(par, cols, per_task * k, &|start, chunk| {
        im2col_pixels(s, nhwc, g, pad, start / k, chunk);
    });
}

/// The im2col rows of output pixels `first..first + out.len() / k`.
fn im2col_pixels(s: &ConvShape, nhwc: &[u8], g: usize, pad: u8, first: usize, out: &mut [u8]) {
    let g3 = s.geometry.as_3d();
    let (cg, c_all) = (s.cg(), s.channels);
    let [id, ih, iw] = g3.input;
    let [_, oh, ow] = g3.output;
    let [kd, kh, kw] = g3.kernel;
    let mut at = 0;
    for p in first..first + out.len() / s.k() {
        let (z, yy, xx) = (p / (oh * ow), p / ow % oh, p % ow);
        for a in 0..kd {
            let iz = g3.coord(0, z, a);
            for bb in 0..kh {
                let iy = g3.coord(1, yy, bb);
                for cc in 0..kw {
                    let ix = g3.coord(2, xx, cc);
                    let dst = &mut out[at..at + cg];
                    at += cg;
                    let inside = (0..id as isize).contains(&iz)
                        && (0..ih as isize).contains(&iy)
                        && (0..iw as isize).contains(&ix);
                    if inside {
                        let pos = (iz as usize * ih + iy as usize) * iw + ix as usize;
                        dst.copy_from_slice(&nhwc[pos * c_all + g * cg..][..cg]);
                    } else {
                        dst.fill(pad);
                    }
                }
            }
        }
    }
}

/// `img` (`channels` planes of `len` values) channels-last, replacing the
/// contents of `out`; blocks of pixels across `par`.
pub(super) fn to_channels_last(
    img: &[u8],
    channels: usize,
    len: usize,
    out: &mut Vec<u8>,
    par: &dyn ParallelFor,
) {
    out.clear();
    if channels == 1 {
        out.extend_from_slice(&img[..len]);
        return;
    }
    out.resize(channels * len, 0);
    let per_task = len.div_ceil(par.threads().max(1) * 4).max(256);
    crate::for_each_chunk_mut(par, out, per_task * channels, &|start, chunk| {
        let p0 = start / channels;
        for (i, px) in chunk.chunks_exact_mut(channels).enumerate() {
            for (c, v) in px.iter_mut().enumerate() {
                *v = img[c * len + p0 + i];
            }
        }
    });
}
