//! GridSample (opsets 16, 20, 22): samples `X [N, C, D1..Dk]` at the
//! normalized coordinates of `grid [N, O1..Ok, k]` (last axis x first),
//! nearest, linear or cubic, with zeros, border or reflection padding.
//! Opset 16 takes 4-D inputs (modes bilinear, nearest, bicubic); 20+
//! any k (linear, nearest, cubic). Hot path: per output position the
//! taps (offset, weight) are computed once and applied to every channel
//! of the task's planes.

use super::common::{Real, Widen};
use crate::ops::basic::common::{
    Attrs, MAX_RANK, check_inputs, input, numel, output, required, typed, typed_mut,
};
use crate::ops::index::common::strides;
use crate::par::{for_len, rows_chunk};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// The interpolation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// What lies outside the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// GridSample.
#[derive(Debug)]
pub(crate) struct GridSample {
    mode: Mode,
    padding: Padding,
    align_corners: bool,
    /// Opset 16: 4-D only.
    only_2d: bool,
}

/// One axis's taps for one position: input offsets (`None` outside, in
/// zeros padding) and weights.
#[derive(Debug, Clone, Copy, Default)]
struct Taps {
    n: usize,
    off: [Option<usize>; 4],
    w: [f64; 4],
}

/// The geometry of one spatial axis.
#[derive(Debug, Clone, Copy)]
struct Axis {
    len: usize,
    stride: usize,
    /// The padding's reflection borders.
    lo: f64,
    hi: f64,
}

impl GridSample {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(
            spec,
            "GridSample",
            &["align_corners", "mode", "padding_mode"],
        )?;
        let old = spec.opset < 20;
        let mode = match (attrs.string("mode")?.as_deref(), old) {
            (None, true) | (Some("bilinear"), true) => Mode::Linear,
            (None, false) | (Some("linear"), false) => Mode::Linear,
            (Some("bicubic"), true) | (Some("cubic"), false) => Mode::Cubic,
            (Some("nearest"), _) => Mode::Nearest,
            (Some(m), _) => {
                let known = if old {
                    "bilinear, nearest, bicubic"
                } else {
                    "linear, nearest, cubic"
                };
                return Err(attrs.error(
                    "mode",
                    format!("`{m}` is not a mode of GridSample-{} ({known})", spec.opset),
                ));
            }
        };
        let padding = match attrs.string("padding_mode")?.as_deref() {
            None | Some("zeros") => Padding::Zeros,
            Some("border") => Padding::Border,
            Some("reflection") => Padding::Reflection,
            Some(p) => {
                return Err(attrs.error(
                    "padding_mode",
                    format!("`{p}` is not one of zeros, border, reflection"),
                ));
            }
        };
        Ok(Self {
            mode,
            padding,
            align_corners: attrs.int_or("align_corners", 0)? != 0,
            only_2d: old,
        })
    }

    fn axis(&self, len: usize, stride: usize) -> Axis {
        let (lo, hi) = if self.align_corners {
            (0.0, len as f64 - 1.0)
        } else {
            (-0.5, len as f64 - 0.5)
        };
        Axis {
            len,
            stride,
            lo,
            hi,
        }
    }

    /// The input offset of integer index `i` on `a` under the padding.
    #[inline]
    fn pixel(&self, a: &Axis, i: i64) -> Option<usize> {
        let last = a.len as i64 - 1;
        let i = match self.padding {
            Padding::Zeros if !(0..=last).contains(&i) => return None,
            Padding::Zeros => i,
            Padding::Border => i.clamp(0, last),
            Padding::Reflection => (reflect(i as f64, a.lo, a.hi) as i64).clamp(0, last),
        };
        Some(i as usize * a.stride)
    }

    /// The taps of normalized coordinate `g` on axis `a`.
    #[inline]
    fn taps(&self, a: &Axis, g: f64) -> Taps {
        let len = a.len as f64;
        let mut v = if self.align_corners {
            (g + 1.0) / 2.0 * (len - 1.0)
        } else {
            ((g + 1.0) * len - 1.0) / 2.0
        };
        if self.mode == Mode::Nearest {
            v = v.round_ties_even();
        }
        if !(a.lo..=a.hi).contains(&v) {
            match self.padding {
                Padding::Zeros => {}
                Padding::Border => v = v.clamp(0.0, len - 1.0),
                Padding::Reflection => v = reflect(v, a.lo, a.hi),
            }
        }
        let mut t = Taps::default();
        let base = v.floor();
        let r = v - base;
        // `as` saturates (NaN to 0); far-off taps stay far off.
        let b = base as i64;
        match self.mode {
            Mode::Nearest => {
                t.n = 1;
                t.off[0] = self.pixel(a, v as i64);
                t.w[0] = 1.0;
            }
            Mode::Linear => {
                t.n = 2;
                t.w[..2].copy_from_slice(&[1.0 - r, r]);
                for k in 0..2 {
                    t.off[k] = self.pixel(a, b.saturating_add(k as i64));
                }
            }
            Mode::Cubic => {
                t.n = 4;
                t.w = cubic(r);
                for k in 0..4 {
                    t.off[k] = self.pixel(a, b.saturating_add(k as i64 - 1));
                }
            }
        }
        t
    }
}

/// Keys' cubic weights (a = -0.75) of taps -1, 0, 1, 2 at fraction `r`.
fn cubic(r: f64) -> [f64; 4] {
    const A: f64 = -0.75;
    let far = |x: f64| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    let near = |x: f64| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    [far(r + 1.0), near(r), near(1.0 - r), far(2.0 - r)]
}

/// Reflects `x` by the borders until it lies within `[lo, hi]`.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let (dx, from_lo) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / range).trunc();
    let r = dx - n * range;
    let even = n % 2.0 == 0.0;
    if even == from_lo { lo + r } else { hi - r }
}

/// The taps of every axis at one output position, combined: `(offset in
/// the plane, weight)` for each in-bounds product tap (reused buffers).
struct Combined<A> {
    cur: Vec<(usize, A)>,
    next: Vec<(usize, A)>,
}

impl<A: Real> Combined<A> {
    fn new(k: usize) -> Self {
        let combos = 4usize.pow(k as u32);
        Self {
            cur: Vec::with_capacity(combos),
            next: Vec::with_capacity(combos),
        }
    }

    /// The product taps at normalized coordinates `g` (x, the last axis,
    /// first).
    fn at<G: Widen>(&mut self, gs: &GridSample, axes: &[Axis], g: &[G]) -> &[(usize, A)] {
        let k = axes.len();
        self.cur.clear();
        self.cur.push((0, A::from_f64(1.0)));
        for (d, a) in axes.iter().enumerate() {
            let t = gs.taps(a, g[k - 1 - d].load().to_f64());
            self.next.clear();
            for &(b, w) in &self.cur {
                for j in 0..t.n {
                    if let Some(off) = t.off[j] {
                        self.next.push((b + off, w * A::from_f64(t.w[j])));
                    }
                }
            }
            std::mem::swap(&mut self.cur, &mut self.next);
        }
        &self.cur
    }
}

/// The weighted sum of `plane` at `taps`.
#[inline]
fn apply<T: Widen>(plane: &[T], taps: &[(usize, T::Acc)]) -> T {
    let mut acc = T::Acc::ZERO;
    for &(off, w) in taps {
        acc = acc + w * plane[off].load();
    }
    T::store(acc)
}

/// The sampling pass for X of type `T` (shape `xs`) and grid of type `G`
/// into `y`, `positions` outputs per plane. Tasks take whole planes when
/// there are enough to share (a run of planes of one batch item shares each
/// position's taps), otherwise spans of positions.
fn sample<T: Widen, G: Widen>(
    gs: &GridSample,
    (x, xs): (&[T], &[usize]),
    grid: &[G],
    y: &mut [T],
    positions: usize,
    par: &dyn ParallelFor,
) {
    let k = xs.len() - 2;
    let st = strides(&xs[2..]);
    let mut axes = [gs.axis(1, 0); MAX_RANK];
    for d in 0..k {
        axes[d] = gs.axis(xs[2 + d], st[d]);
    }
    let axes = &axes[..k];
    let (c, plane) = (xs[1], numel(&xs[2..]));
    let planes = y.len() / positions;
    let par = for_len(par, y.len());
    let chunk = if planes >= 4 * par.threads() {
        rows_chunk(par, planes, positions)
    } else {
        rows_chunk(par, y.len(), 1)
    };
    for_each_chunk_mut(par, y, chunk, &|first, out| {
        let mut taps = Combined::<T::Acc>::new(k);
        let end = first + out.len();
        let mut i = first;
        while i < end {
            let (p, pos0) = (i / positions, i % positions);
            let n = p / c;
            let grid_at = |pos: usize| &grid[(n * positions + pos) * k..][..k];
            let o = i - first;
            if pos0 == 0 && end - i >= positions {
                // Whole planes of batch item n.
                let run = (c - p % c).min((end - i) / positions);
                for pos in 0..positions {
                    let t = taps.at(gs, axes, grid_at(pos));
                    for q in 0..run {
                        let src = &x[(p + q) * plane..][..plane];
                        out[o + q * positions + pos] = apply(src, t);
                    }
                }
                i += run * positions;
            } else {
                let pos1 = positions.min(pos0 + (end - i));
                let src = &x[p * plane..][..plane];
                for pos in pos0..pos1 {
                    out[o + pos - pos0] = apply(src, taps.at(gs, axes, grid_at(pos)));
                }
                i += pos1 - pos0;
            }
        }
    });
}

impl Operator for GridSample {
    fn name(&self) -> &'static str {
        "GridSample"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = "GridSample";
        let inputs = check_inputs(op, inputs, 2, 2)?;
        let (x, g) = (required(op, inputs, 0)?, required(op, inputs, 1)?);
        for t in [x.dtype, g.dtype] {
            if !matches!(
                t,
                ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16
            ) {
                return Err(KernelError::UnsupportedType { op, dtype: t });
            }
        }
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: self.out_shape(x.shape, g.shape)?,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = "GridSample";
        let (x, g) = (input(op, inputs, 0)?, input(op, inputs, 1)?);
        let want = self.out_shape(x.shape(), g.shape())?;
        let y = output(op, outputs, 0)?;
        if y.shape() != want.as_slice() {
            return Err(KernelError::Invalid {
                op,
                detail: format!("output shape {:?} where {want:?} was computed", y.shape()),
            });
        }
        if y.is_empty() {
            return Ok(());
        }
        let positions: usize = want[2..].iter().product();
        dispatch_types!(x.dtype(), [F32 => f32, F64 => f64, F16 => ::half::f16, BF16 => ::half::bf16], T => {
            dispatch_types!(g.dtype(), [F32 => f32, F64 => f64, F16 => ::half::f16, BF16 => ::half::bf16], G => {
                sample::<T, G>(self, (typed::<T>(op, x)?, x.shape()), typed::<G>(op, g)?, typed_mut::<T>(op, y)?, positions, par);
                Ok(())
            }, else Err(KernelError::UnsupportedType { op, dtype: g.dtype() }))
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}

impl GridSample {
    /// `[N, C, O1..Ok]` for X `[N, C, D1..Dk]` and grid `[N, O1..Ok, k]`.
    fn out_shape(&self, x: &[usize], g: &[usize]) -> Result<Vec<usize>, KernelError> {
        let bad =
            |why: &str| KernelError::Shape(format!("GridSample: X {x:?} and grid {g:?}: {why}"));
        if x.len() < 3 || x.len() > MAX_RANK {
            return Err(bad("X must be [N, C, D1, ..] with 1 to 6 spatial axes"));
        }
        if self.only_2d && x.len() != 4 {
            return Err(bad("GridSample-16 takes 4-D X [N, C, H, W]"));
        }
        let k = x.len() - 2;
        if g.len() != k + 2 || g[0] != x[0] || g[k + 1] != k {
            return Err(bad("grid must be [N, O1..Ok, k] for k spatial axes of X"));
        }
        let mut out = vec![x[0], x[1]];
        out.extend_from_slice(&g[1..=k]);
        let count = crate::ops::basic::common::checked_count("GridSample", &out)?;
        if count > 0 && x[2..].contains(&0) {
            return Err(bad("cannot sample an empty spatial axis"));
        }
        Ok(out)
    }
}
