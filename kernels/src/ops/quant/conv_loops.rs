//! The loops of the quantized convolutions around the integer product
//! (hot path): the channels-last image and the im2col rows of a group.

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
