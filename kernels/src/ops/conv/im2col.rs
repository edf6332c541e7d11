//! The im2col gather (hot path): a tile of output columns of one group,
//! written straight into the GEMM's packed `B` panels, so no copy of the
//! whole image's patches is ever made.

use super::geometry::{Geometry3, valid_range};

/// Widest panel of any ISA (the per-column coordinates live on the stack).
const NR_MAX: usize = 32;

/// Writes, for output positions `col0..col0 + cols` of one group (its `cg`
/// input channels in `x`), the patch matrix `[k = cg * taps][cols]` as
/// panels `[ceil(cols / nr)][k][nr]` into `panels` (columns past `cols`
/// zero). Row `(c, a, b, e)` is tap `(a, b, e)` of channel `c`, the order
/// of the weight's `[cg, kd, kh, kw]`; taps in the padding read 0.
pub(crate) fn gather(
    g: &Geometry3,
    cg: usize,
    x: &[f32],
    col0: usize,
    cols: usize,
    nr: usize,
    panels: &mut [f32],
) {
    debug_assert!(nr <= NR_MAX);
    let [kd, kh, kw] = g.kernel;
    let [id, ih, iw] = g.input;
    let [_, oh, ow] = g.output;
    let plane = id * ih * iw;
    let k = cg * kd * kh * kw;
    let sw = g.stride[2];
    for (p, panel) in panels
        .chunks_mut(k * nr)
        .take(cols.div_ceil(nr))
        .enumerate()
    {
        let jn = nr.min(cols - p * nr);
        // The panel's columns as runs along one output row: `(first
        // column, columns, output depth, output row, first output x)`.
        let mut runs = [(0usize, 0usize, 0usize, 0usize, 0usize); NR_MAX];
        let mut nruns = 0;
        let mut j = 0;
        while j < jn {
            let q = col0 + p * nr + j;
            let (o0, o1, o2) = (q / (oh * ow), q / ow % oh, q % ow);
            let len = (ow - o2).min(jn - j);
            runs[nruns] = (j, len, o0, o1, o2);
            nruns += 1;
            j += len;
        }
        let runs = &runs[..nruns];
        let mut rows = panel.chunks_exact_mut(nr);
        for c in 0..cg {
            let xc = &x[c * plane..][..plane];
            for a in 0..kd {
                for b in 0..kh {
                    for e in 0..kw {
                        let Some(row) = rows.next() else { return };
                        for &(j0, len, o0, o1, o2) in runs {
                            let out = &mut row[j0..j0 + len];
                            // A negative coordinate wraps to a huge one and
                            // fails its bound like one past the end.
                            let z = g.coord(0, o0, a) as usize;
                            let y = g.coord(1, o1, b) as usize;
                            if z >= id || y >= ih {
                                out.fill(0.0);
                                continue;
                            }
                            let src = &xc[(z * ih + y) * iw..][..iw];
                            let off = g.coord(2, o2, e);
                            let (lo, hi) = valid_range(len, sw, off, iw);
                            out[..lo].fill(0.0);
                            out[hi..].fill(0.0);
                            if lo == hi {
                                continue;
                            }
                            let start = (lo as isize * sw as isize + off) as usize;
                            if sw == 1 {
                                out[lo..hi].copy_from_slice(&src[start..start + (hi - lo)]);
                            } else {
                                for (v, &s) in
                                    out[lo..hi].iter_mut().zip(src[start..].iter().step_by(sw))
                                {
                                    *v = s;
                                }
                            }
                        }
                        row[jn..].fill(0.0);
                    }
                }
            }
        }
    }
}
