//! The Resize sampling kernels (hot path): per-axis tables of input
//! offsets and weights, built once per execute from the coordinate
//! transformation, then one pass over the output rows. Nearest copies one
//! element per output; linear and cubic (optionally antialiased) sum the
//! tensor product of each axis's taps, as ONNX's separable definition.

use super::common::{Real, Widen};
use crate::ops::basic::common::{Elem, MAX_RANK, typed, typed_mut};
use crate::ops::index::common::{FromF64, by_rows, strides};
use crate::{KernelError, ParallelFor, Tensor};

/// How a fractional coordinate picks its nearest input element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nearest {
    /// Round, halves down.
    RoundPreferFloor,
    /// Round, halves up.
    RoundPreferCeil,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// Upsample and Resize-10: down when enlarging, up when shrinking.
    Simple,
}

/// The interpolation filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Filter {
    /// Nearest element.
    Nearest(Nearest),
    /// Linear (2 taps per axis, more with antialias).
    Linear,
    /// Cubic convolution with coefficient `a` (4 taps, more with antialias).
    Cubic(f64),
}

/// `coordinate_transformation_mode`: output coordinate to input coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coord {
    /// `(y + 0.5) / scale - 0.5`.
    HalfPixel,
    /// Half pixel about the centre of the sampled extent.
    HalfPixelSymmetric,
    /// Half pixel, but `-0.5` when the output has length 1.
    PytorchHalfPixel,
    /// Corners of input and output aligned.
    AlignCorners,
    /// `y / scale`.
    Asymmetric,
    /// `(y + 0.5) / scale` (Resize-11 only).
    TfHalfPixelForNn,
    /// Sampling the `roi` box; outside the input is `extrapolation_value`.
    TfCropAndResize,
}

/// The attributes the kernel reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Params {
    /// Interpolation filter.
    pub(crate) filter: Filter,
    /// Coordinate transformation.
    pub(crate) coord: Coord,
    /// Weights of taps outside the input are zeroed and the rest renormalized.
    pub(crate) exclude_outside: bool,
    /// The value outside the input in `tf_crop_and_resize`.
    pub(crate) extrapolation: f64,
    /// Widen linear/cubic filters by `1 / scale` when shrinking.
    pub(crate) antialias: bool,
}

/// Output shape and per-axis geometry for one input shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Output dims.
    pub(crate) out: Vec<usize>,
    /// Scale of every axis (1 for axes not resized).
    pub(crate) scales: Vec<f64>,
    /// Roi starts of every axis then ends (0 and 1 when not given).
    pub(crate) roi: Vec<f64>,
}

/// One axis's sampling: for output coordinate `o`, taps `o * taps ..` of
/// `offset` (input index times the axis's stride) and `weight`.
#[derive(Debug)]
struct AxisTable<A> {
    taps: usize,
    offset: Vec<usize>,
    weight: Vec<A>,
    /// Per output coordinate: outside the input (tf_crop_and_resize);
    /// empty when no coordinate is.
    outside: Vec<bool>,
}

/// The geometry of one axis.
#[derive(Debug, Clone, Copy)]
struct AxisGeom {
    input: usize,
    output: usize,
    scale: f64,
    roi: (f64, f64),
    stride: usize,
}

impl AxisGeom {
    /// Whether the axis samples its input unchanged (skipped, as ONNX does).
    fn identity(&self, coord: Coord) -> bool {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs());
        self.output == self.input
            && close(self.scale, 1.0)
            && (coord != Coord::TfCropAndResize
                || (self.roi.0.abs() <= 1e-9 && close(self.roi.1, 1.0)))
    }

    /// The input coordinate of output coordinate `y`.
    fn source(&self, coord: Coord, y: f64) -> f64 {
        let (inp, s) = (self.input as f64, self.scale);
        let width = s * inp;
        match coord {
            Coord::HalfPixel => (y + 0.5) / s - 0.5,
            Coord::HalfPixelSymmetric => {
                let adjustment = self.output as f64 / width;
                inp / 2.0 * (1.0 - adjustment) + (y + 0.5) / s - 0.5
            }
            Coord::PytorchHalfPixel if width == 1.0 => -0.5,
            Coord::PytorchHalfPixel => (y + 0.5) / s - 0.5,
            Coord::AlignCorners if width == 1.0 => 0.0,
            Coord::AlignCorners => y * (inp - 1.0) / (width - 1.0),
            Coord::Asymmetric => y / s,
            Coord::TfHalfPixelForNn => (y + 0.5) / s,
            Coord::TfCropAndResize => {
                let (r0, r1) = self.roi;
                let x = if width == 1.0 {
                    (r1 - r0) * (inp - 1.0) / 2.0
                } else {
                    y * (r1 - r0) * (inp - 1.0) / (width - 1.0)
                };
                x + r0 * (inp - 1.0)
            }
        }
    }

    /// The input index `i` clamped into the axis, times the stride.
    #[inline]
    fn at(&self, i: i64) -> usize {
        (i.clamp(0, self.input as i64 - 1) as usize) * self.stride
    }
}

/// The nearest-element table of an axis (weights empty).
fn nearest_table<A>(g: &AxisGeom, coord: Coord, mode: Nearest) -> AxisTable<A> {
    let mut t = AxisTable {
        taps: 1,
        offset: Vec::with_capacity(g.output),
        weight: Vec::new(),
        outside: Vec::new(),
    };
    if g.identity(coord) {
        t.offset.extend((0..g.output).map(|o| o * g.stride));
        return t;
    }
    let tf = coord == Coord::TfCropAndResize;
    for o in 0..g.output {
        let x = g.source(coord, o as f64);
        if tf && !(0.0..=g.input as f64 - 1.0).contains(&x) {
            t.outside.resize(g.output, false);
            t.outside[o] = true;
        }
        let p = x.floor();
        let r = x - p;
        let up = match mode {
            _ if r == 0.0 => false,
            Nearest::RoundPreferFloor => r > 0.5,
            Nearest::RoundPreferCeil => r >= 0.5,
            Nearest::Floor => false,
            Nearest::Ceil => true,
            Nearest::Simple => g.scale < 1.0,
        };
        t.offset.push(g.at(p as i64 + i64::from(up)));
    }
    t
}

/// The filter weight at distance `d` (in filter units).
#[inline]
fn kernel(filter: Filter, d: f64) -> f64 {
    let x = d.abs();
    match filter {
        Filter::Nearest(_) | Filter::Linear => (1.0 - x).clamp(0.0, 1.0),
        Filter::Cubic(a) if x <= 1.0 => ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
        Filter::Cubic(a) if x < 2.0 => ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a,
        Filter::Cubic(_) => 0.0,
    }
}

/// The linear or cubic table of an axis.
fn filter_table<A: Real>(g: &AxisGeom, p: &Params) -> Result<AxisTable<A>, KernelError> {
    if g.identity(p.coord) {
        return Ok(AxisTable {
            taps: 1,
            offset: (0..g.output).map(|o| o * g.stride).collect(),
            weight: vec![A::from_f64(1.0); g.output],
            outside: Vec::new(),
        });
    }
    let support = if matches!(p.filter, Filter::Cubic(_)) {
        2.0
    } else {
        1.0
    };
    let s = if p.antialias { g.scale.min(1.0) } else { 1.0 };
    // Taps `start .. start + n` about the coordinate, as ONNX's reference.
    let start = (-support / s).floor() + 1.0;
    let n = 2.0 - 2.0 * start;
    if !(n.is_finite() && n <= (4 * g.input + 8) as f64) {
        return Err(KernelError::Invalid {
            op: "Resize",
            detail: format!("scale {} gives a filter wider than the input", g.scale),
        });
    }
    let (start, n) = (start as i64, n as usize);
    let mut t = AxisTable {
        taps: n,
        offset: Vec::with_capacity(g.output * n),
        weight: Vec::with_capacity(g.output * n),
        outside: Vec::new(),
    };
    let mut w = vec![0.0f64; n];
    for o in 0..g.output {
        let x = g.source(p.coord, o as f64);
        if p.coord == Coord::TfCropAndResize && !(0.0..=g.input as f64 - 1.0).contains(&x) {
            t.outside.resize(g.output, false);
            t.outside[o] = true;
        }
        let mut base = x.floor();
        let mut r = x - base;
        if r == 0.0 {
            // The reference prefers the pixel left of an exact coordinate.
            (base, r) = (base - 1.0, 1.0);
        }
        let first = base as i64 + start;
        for (k, wk) in w.iter_mut().enumerate() {
            *wk = kernel(p.filter, (start as f64 + k as f64 - r) * s);
        }
        if p.antialias {
            normalize(&mut w);
        }
        if p.exclude_outside {
            for (k, wk) in w.iter_mut().enumerate() {
                let i = first + k as i64;
                if i < 0 || i >= g.input as i64 {
                    *wk = 0.0;
                }
            }
            normalize(&mut w);
        }
        for (k, &wk) in w.iter().enumerate() {
            t.offset.push(g.at(first + k as i64));
            t.weight.push(A::from_f64(wk));
        }
    }
    Ok(t)
}

/// Divides `w` by its sum (unless the sum is 0).
fn normalize(w: &mut [f64]) {
    let sum: f64 = w.iter().sum();
    if sum != 0.0 {
        w.iter_mut().for_each(|v| *v /= sum);
    }
}

/// The geometry of every axis of `x` under `plan`.
fn geometry(x: &[usize], plan: &Plan) -> Vec<AxisGeom> {
    let rank = x.len();
    let st = strides(x);
    (0..rank)
        .map(|d| AxisGeom {
            input: x[d],
            output: plan.out[d],
            scale: plan.scales[d],
            roi: (plan.roi[d], plan.roi[rank + d]),
            stride: st[d],
        })
        .collect()
}

/// Samples `x` into `y` (shape `plan.out`) with `params`.
pub(crate) fn resample(
    op: &'static str,
    x: &Tensor,
    y: &mut Tensor,
    plan: &Plan,
    params: &Params,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let rank = x.shape().len();
    if rank == 0 || rank > MAX_RANK || plan.out.len() != rank || y.is_empty() {
        return Ok(());
    }
    if x.is_empty() {
        return Err(KernelError::Invalid {
            op,
            detail: format!("cannot resample an empty X {:?}", x.shape()),
        });
    }
    let geom = geometry(x.shape(), plan);
    match params.filter {
        Filter::Nearest(mode) => dispatch_any!(x.dtype(), T => {
            let tables: Vec<AxisTable<()>> =
                geom.iter().map(|g| nearest_table(g, params.coord, mode)).collect();
            let e = <T as FromF64>::from_f64(params.extrapolation);
            nearest::<T>(typed::<T>(op, x)?, typed_mut::<T>(op, y)?, &plan.out, &tables, e, par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() })),
        _ => dispatch_num!(x.dtype(), T => {
            let tables = geom
                .iter()
                .map(|g| filter_table::<<T as Widen>::Acc>(g, params))
                .collect::<Result<Vec<_>, _>>()?;
            let e = T::store(<<T as Widen>::Acc as Real>::from_f64(params.extrapolation));
            filtered::<T>(typed::<T>(op, x)?, typed_mut::<T>(op, y)?, &plan.out, &tables, e, par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() })),
    }
}

/// Row coordinates of the outer axes for the first row `row`.
fn unravel(mut row: usize, out: &[usize]) -> [usize; MAX_RANK] {
    let mut idx = [0usize; MAX_RANK];
    for d in (0..out.len().saturating_sub(1)).rev() {
        idx[d] = row % out[d];
        row /= out[d];
    }
    idx
}

/// Advances the outer-axis coordinates to the next row.
#[inline]
fn next_row(idx: &mut [usize; MAX_RANK], out: &[usize]) {
    let mut d = out.len() - 1;
    while d > 0 {
        d -= 1;
        idx[d] += 1;
        if idx[d] < out[d] {
            return;
        }
        idx[d] = 0;
    }
}

/// Whether any outer axis of the row is outside the input.
#[inline]
fn row_outside<A>(tables: &[AxisTable<A>], idx: &[usize; MAX_RANK]) -> bool {
    let last = tables.len() - 1;
    tables[..last]
        .iter()
        .zip(idx)
        .any(|(t, &o)| !t.outside.is_empty() && t.outside[o])
}

/// Nearest sampling: one copy per output element.
fn nearest<T: Elem>(
    x: &[T],
    y: &mut [T],
    out: &[usize],
    tables: &[AxisTable<()>],
    e: T,
    par: &dyn ParallelFor,
) {
    let last = out.len() - 1;
    let lt = &tables[last];
    by_rows(par, y, out[last], &|first, rows| {
        let mut idx = unravel(first, out);
        for row in rows.chunks_exact_mut(out[last]) {
            if row_outside(tables, &idx) {
                row.fill(e);
            } else {
                let base: usize = (0..last).map(|d| tables[d].offset[idx[d]]).sum();
                if lt.outside.is_empty() {
                    for (v, &off) in row.iter_mut().zip(&lt.offset) {
                        *v = x[base + off];
                    }
                } else {
                    for ((v, &off), &out) in row.iter_mut().zip(&lt.offset).zip(&lt.outside) {
                        *v = if out { e } else { x[base + off] };
                    }
                }
            }
            next_row(&mut idx, out);
        }
    });
}

/// Linear or cubic sampling: per row, the outer axes' tap products
/// (offset, weight) are gathered once; each element then sums them with
/// the last axis's taps.
fn filtered<T: Widen>(
    x: &[T],
    y: &mut [T],
    out: &[usize],
    tables: &[AxisTable<T::Acc>],
    e: T,
    par: &dyn ParallelFor,
) {
    let last = out.len() - 1;
    let lt = &tables[last];
    let combos: usize = tables[..last].iter().map(|t| t.taps).product();
    by_rows(par, y, out[last], &|first, rows| {
        let mut idx = unravel(first, out);
        let mut cur: Vec<(usize, T::Acc)> = Vec::with_capacity(combos);
        let mut next: Vec<(usize, T::Acc)> = Vec::with_capacity(combos);
        for row in rows.chunks_exact_mut(out[last]) {
            if row_outside(tables, &idx) {
                row.fill(e);
                next_row(&mut idx, out);
                continue;
            }
            cur.clear();
            cur.push((0, T::Acc::from_f64(1.0)));
            for (t, &o) in tables[..last].iter().zip(&idx) {
                let (offs, ws) = (&t.offset[o * t.taps..][..t.taps], &t.weight[o * t.taps..]);
                next.clear();
                for &(b, w) in &cur {
                    next.extend(offs.iter().zip(ws).map(|(&off, &wk)| (b + off, w * wk)));
                }
                std::mem::swap(&mut cur, &mut next);
            }
            let n = lt.taps;
            for (j, v) in row.iter_mut().enumerate() {
                if !lt.outside.is_empty() && lt.outside[j] {
                    *v = e;
                    continue;
                }
                let (offs, ws) = (&lt.offset[j * n..][..n], &lt.weight[j * n..][..n]);
                let mut acc = T::Acc::ZERO;
                for &(b, w) in &cur {
                    let mut s = T::Acc::ZERO;
                    for (&off, &wk) in offs.iter().zip(ws) {
                        s = s + wk * x[b + off].load();
                    }
                    acc = acc + w * s;
                }
                *v = T::store(acc);
            }
            next_row(&mut idx, out);
        }
    });
}
