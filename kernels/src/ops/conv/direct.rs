//! Direct convolution loops: the depthwise kernel (one input and one
//! output channel per group, hot path) and the scalar reference of every
//! convolution (f64 accumulation), the oracle of the fast paths and the
//! path of f64, f16 and bf16.

use super::flat::Flat;
use super::geometry::{Geometry3, valid_range};
use super::shape::ConvShape;
use crate::vector::{self, Width};
use crate::{KernelError, ParallelFor, for_each_chunk_mut};

/// Depthwise convolution: each plane of `y` receives its products, then
/// `finish(plane, y)` while it is in cache; planes split across `par`,
/// each task with its own scratch (allocated up front, so a refusal is an
/// error and not an abort).
pub(crate) fn depthwise(
    s: &ConvShape,
    width: Width,
    x: &[f32],
    w: &[f32],
    y: &mut [f32],
    finish: &(dyn Fn(usize, &mut [f32]) + Sync),
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let g = s.geometry.as_3d();
    let (pin, pout) = (s.geometry.input_len(), s.geometry.output_len());
    let taps = s.geometry.kernel_len();
    let planes = s.batch * s.maps;
    let per_task = planes.div_ceil((par.threads() * 4).max(1)).max(1);
    let par = crate::par::for_len(par, y.len());
    let flat = Flat::of(&g);
    let len = depthwise_scratch(s).max(1);
    let tasks = planes.div_ceil(per_task);
    let mut scratch = crate::scratch::filled("Conv", tasks * len, 0.0f32)?;
    let mut work = crate::scratch::with_capacity("Conv", tasks)?;
    work.extend(y.chunks_mut(per_task * pout).zip(scratch.chunks_mut(len)));
    for_each_chunk_mut(par, &mut work, 1, &|task, pair| {
        let (ys, scratch) = &mut pair[0];
        for (i, out) in ys.chunks_exact_mut(pout).enumerate() {
            let plane = task * per_task + i;
            let c = plane % s.maps;
            let (xp, wc) = (&x[plane * pin..][..pin], &w[c * taps..][..taps]);
            match flat {
                Some(f) => vector::run(
                    width,
                    #[inline(always)]
                    || flat_plane(f, &g, xp, wc, out, scratch),
                ),
                None => {
                    out.fill(0.0);
                    vector::run(
                        width,
                        #[inline(always)]
                        || plane_kernel(&g, xp, wc, out, scratch),
                    )
                }
            }
            finish(plane, out);
        }
    });
    Ok(())
}

/// Floats of one task's scratch of [`depthwise`].
pub(crate) fn depthwise_scratch(s: &ConvShape) -> usize {
    let g = s.geometry.as_3d();
    let phase_len = if g.stride[2] == 2 { g.input[2] } else { 0 };
    Flat::of(&g).map_or(phase_len, |f| f.scratch_len())
}

/// One 1-D or 2-D depthwise plane on [`Flat`] phases, written to `y`.
#[inline(always)]
fn flat_plane(f: Flat, g: &Geometry3, x: &[f32], w: &[f32], y: &mut [f32], scratch: &mut [f32]) {
    let (phases, acc) = scratch.split_at_mut(f.phases_len());
    // The task's scratch starts at zero, the padding's value, and only
    // the image's elements are ever written over it.
    f.copy(g, x, phases);
    acc.fill(0.0);
    let [_, kh, kw] = g.kernel;
    for b in 0..kh {
        for e in 0..kw {
            let wv = w[b * kw + e];
            for (o, &v) in acc.iter_mut().zip(f.tap(g, b, e, phases)) {
                *o += wv * v;
            }
        }
    }
    for (out, row) in y.chunks_exact_mut(f.ow).zip(f.rows(acc)) {
        out.copy_from_slice(row);
    }
}

/// One channel's plane of a depthwise convolution (inlined into
/// [`vector::run`]'s width).
#[inline(always)]
fn plane_kernel(g: &Geometry3, x: &[f32], w: &[f32], y: &mut [f32], phases: &mut [f32]) {
    let [od, oh, ow] = g.output;
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let sw = g.stride[2];
    for d in 0..od {
        for h in 0..oh {
            let row = &mut y[(d * oh + h) * ow..][..ow];
            for a in 0..kd {
                let z = g.coord(0, d, a) as usize;
                if z >= id {
                    continue;
                }
                for b in 0..kh {
                    let yy = g.coord(1, h, b) as usize;
                    if yy >= ih {
                        continue;
                    }
                    let src = &x[(z * ih + yy) * iw..][..iw];
                    if sw == 2 {
                        // Even and odd columns apart, so that each tap
                        // reads a contiguous run.
                        let (even, odd) = phases.split_at_mut(iw.div_ceil(2));
                        for (pair, (e, o)) in
                            src.chunks_exact(2).zip(even.iter_mut().zip(odd.iter_mut()))
                        {
                            *e = pair[0];
                            *o = pair[1];
                        }
                        if iw % 2 == 1 {
                            even[iw / 2] = src[iw - 1];
                        }
                    }
                    for e in 0..kw {
                        let wv = w[(a * kh + b) * kw + e];
                        let off = (e * g.dilation[2]) as isize - g.pad[2] as isize;
                        let (lo, hi) = valid_range(ow, sw, off, iw);
                        if lo == hi {
                            continue;
                        }
                        if sw == 1 {
                            let start = (lo as isize + off) as usize;
                            let xs = &src[start..start + (hi - lo)];
                            for (o, &v) in row[lo..hi].iter_mut().zip(xs) {
                                *o += wv * v;
                            }
                        } else if sw == 2 {
                            // Input column `2 j + off` is phase `off mod 2`,
                            // position `j + floor(off / 2)`.
                            let (even, odd) = phases.split_at(iw.div_ceil(2));
                            let phase = if off.rem_euclid(2) == 0 { even } else { odd };
                            let start = (lo as isize + off.div_euclid(2)) as usize;
                            let xs = &phase[start..start + (hi - lo)];
                            for (o, &v) in row[lo..hi].iter_mut().zip(xs) {
                                *o += wv * v;
                            }
                        } else {
                            let start = (lo as isize * sw as isize + off) as usize;
                            let xs = src[start..].chunks(sw);
                            for (o, v) in row[lo..hi].iter_mut().zip(xs) {
                                *o += wv * v[0];
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The scalar reference: `y(i, v)` receives every output element, computed
/// from `x(i)`, `w(i)` and `b(m)` (0 without a bias) in f64.
pub(crate) fn reference(
    s: &ConvShape,
    x: &dyn Fn(usize) -> f64,
    w: &dyn Fn(usize) -> f64,
    b: &dyn Fn(usize) -> f64,
    y: &mut dyn FnMut(usize, f64),
) {
    let g = s.geometry.as_3d();
    let (pin, pout) = (s.geometry.input_len(), s.geometry.output_len());
    let [od, oh, ow] = g.output;
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let (cg, mg) = (s.cg(), s.mg());
    for n in 0..s.batch {
        for m in 0..s.maps {
            let grp = m / mg;
            for q in 0..pout {
                let o = [q / (oh * ow), q / ow % oh, q % ow];
                debug_assert!(o[0] < od);
                let mut acc = b(m);
                for c in 0..cg {
                    let xc = (n * s.channels + grp * cg + c) * pin;
                    let wc = (m * cg + c) * kd * kh * kw;
                    for a in 0..kd {
                        for bb in 0..kh {
                            for e in 0..kw {
                                let z = g.coord(0, o[0], a) as usize;
                                let yy = g.coord(1, o[1], bb) as usize;
                                let xx = g.coord(2, o[2], e) as usize;
                                if z < id && yy < ih && xx < iw {
                                    acc += x(xc + (z * ih + yy) * iw + xx)
                                        * w(wc + (a * kh + bb) * kw + e);
                                }
                            }
                        }
                    }
                }
                y((n * s.maps + m) * pout + q, acc);
            }
        }
    }
}
