//! The im2col gather (hot path): a tile of output columns of one group,
//! written straight into the GEMM's packed `B` panels, so no copy of the
//! whole image's patches is ever made.

use super::geometry::Geometry3;

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
    for (p, panel) in panels
        .chunks_mut(k * nr)
        .take(cols.div_ceil(nr))
        .enumerate()
    {
        let jn = nr.min(cols - p * nr);
        let mut base = [[0isize; 3]; NR_MAX];
        for (j, b) in base.iter_mut().enumerate().take(jn) {
            let q = col0 + p * nr + j;
            let o = [q / (oh * ow), q / ow % oh, q % ow];
            for a in 0..3 {
                b[a] = g.coord(a, o[a], 0);
            }
        }
        let mut rows = panel.chunks_exact_mut(nr);
        for c in 0..cg {
            let xc = &x[c * plane..][..plane];
            for a in 0..kd {
                for b in 0..kh {
                    for e in 0..kw {
                        let Some(row) = rows.next() else { return };
                        let d = [
                            (a * g.dilation[0]) as isize,
                            (b * g.dilation[1]) as isize,
                            (e * g.dilation[2]) as isize,
                        ];
                        for (v, bj) in row.iter_mut().zip(&base[..jn]) {
                            // A negative coordinate wraps to a huge one and
                            // fails its bound like one past the end.
                            let (z, y, xx) = (
                                (bj[0] + d[0]) as usize,
                                (bj[1] + d[1]) as usize,
                                (bj[2] + d[2]) as usize,
                            );
                            *v = if z < id && y < ih && xx < iw {
                                xc[(z * ih + y) * iw + xx]
                            } else {
                                0.0
                            };
                        }
                        row[jn..].fill(0.0);
                    }
                }
            }
        }
    }
}
