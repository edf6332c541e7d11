//! MeanVarianceNormalization: `(x - mean) / (sqrt(var) + 1e-9)` with the
//! statistics taken over `axes` (default `[0, 2, 3]`). The shape is
//! collapsed into alternating kept and reduced groups; f64 statistics are
//! computed per kept index (split across threads), then one fused
//! scale-and-shift pass walks the output in memory order, whole rows per
//! chunk (hot path). Construction and inference are cold path.

use super::common::{Float, dispatch_float, is_float, sum_f64};
use crate::ops::basic::common::{
    Attrs, MAX_RANK, check_inputs, check_len, input, numel, output, required, typed, typed_mut,
};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
    for_each_chunk_mut,
};

const OP: &str = "MeanVarianceNormalization";

/// The epsilon ONNX's function body adds to the standard deviation.
const EPSILON: f64 = 1e-9;

/// MeanVarianceNormalization.
#[derive(Debug)]
pub(crate) struct Mvn {
    axes: Vec<i64>,
}

impl Mvn {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, OP, &["axes"])?;
        Ok(Self {
            axes: attrs.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]),
        })
    }

    /// Which dimensions of a rank-`rank` input are reduced.
    fn reduced(&self, rank: usize) -> Result<[bool; MAX_RANK], KernelError> {
        if rank > MAX_RANK {
            return Err(KernelError::Shape(format!(
                "{OP}: rank {rank} exceeds the supported maximum of {MAX_RANK}"
            )));
        }
        let mut red = [false; MAX_RANK];
        for &a in &self.axes {
            let r = rank as i64;
            if a < -r || a >= r {
                return Err(KernelError::Shape(format!(
                    "{OP}: axis {a} is out of range for rank {rank}"
                )));
            }
            let d = if a < 0 { a + r } else { a } as usize;
            if red[d] {
                return Err(KernelError::Shape(format!("{OP}: axis {a} is repeated")));
            }
            red[d] = true;
        }
        Ok(red)
    }
}

/// Collapsed groups of one kind (kept or reduced): dims and input strides,
/// outermost first.
#[derive(Debug, Clone, Copy, Default)]
struct Walk {
    n: usize,
    dims: [usize; MAX_RANK],
    strides: [usize; MAX_RANK],
}

impl Walk {
    fn push(&mut self, dim: usize, stride: usize) {
        self.dims[self.n] = dim;
        self.strides[self.n] = stride;
        self.n += 1;
    }

    /// The input offset of flat index `i` of this walk's index space.
    fn offset(&self, mut i: usize) -> usize {
        let mut off = 0;
        for d in (0..self.n).rev() {
            off += (i % self.dims[d]) * self.strides[d];
            i /= self.dims[d];
        }
        off
    }
}

/// The collapsed layout: kept and reduced walks, and every group in
/// memory order with its kept-space stride (0 when reduced).
#[derive(Debug, Clone, Copy, Default)]
struct Layout {
    kept: Walk,
    reduced: Walk,
    all: Walk,
    kept_len: usize,
    reduced_len: usize,
}

fn layout(shape: &[usize], red: &[bool; MAX_RANK]) -> Layout {
    // Groups in memory order: (dim, reduced), size-1 dims dropped.
    let mut groups: Vec<(usize, bool)> = Vec::with_capacity(MAX_RANK);
    for (d, &dim) in shape.iter().enumerate() {
        if dim == 1 {
            continue;
        }
        match groups.last_mut() {
            Some(g) if g.1 == red[d] => g.0 *= dim,
            _ => groups.push((dim, red[d])),
        }
    }
    let mut l = Layout {
        kept_len: 1,
        reduced_len: 1,
        ..Layout::default()
    };
    let mut stride = 1;
    let mut kept_stride = 1;
    let mut strides = vec![(0, 0); groups.len()];
    for (g, s) in groups.iter().zip(strides.iter_mut()).rev() {
        *s = (stride, if g.1 { 0 } else { kept_stride });
        stride *= g.0;
        if !g.1 {
            kept_stride *= g.0;
        }
    }
    for (&(dim, r), &(s, ks)) in groups.iter().zip(&strides) {
        if r {
            l.reduced.push(dim, s);
            l.reduced_len *= dim;
        } else {
            l.kept.push(dim, s);
            l.kept_len *= dim;
        }
        l.all.push(dim, ks);
    }
    l
}

/// Computes `(a, c)` per kept index so that `y = x * a + c`.
fn stats<T: Float>(x: &[T], l: &Layout, out: &mut [(f64, f64)], par: &dyn ParallelFor) {
    let count = l.reduced_len as f64;
    // The innermost reduced group, walked as a run; the rest by index.
    let (run_len, run_stride, outer) = match l.reduced.n {
        0 => (1, 1, Walk::default()),
        n => {
            let mut outer = l.reduced;
            outer.n -= 1;
            (l.reduced.dims[n - 1], l.reduced.strides[n - 1], outer)
        }
    };
    let outer_len = l.reduced_len / run_len.max(1);
    let chunk = if x.len() < PARALLEL_MIN_ELEMENTS {
        out.len()
    } else {
        rows_chunk(par, out.len(), 1)
    };
    for_each_chunk_mut(par, out, chunk, &|k0, part| {
        for (i, s) in part.iter_mut().enumerate() {
            let base = l.kept.offset(k0 + i);
            let runs = (0..outer_len).map(|r| base + outer.offset(r));
            let sum_run = |start: usize, f: &dyn Fn(f64) -> f64| -> f64 {
                if run_stride == 1 {
                    sum_f64(&x[start..start + run_len], f)
                } else {
                    (0..run_len)
                        .map(|j| f(x[start + j * run_stride].to_f64()))
                        .sum()
                }
            };
            let mean = runs.clone().map(|r| sum_run(r, &|v| v)).sum::<f64>() / count;
            let var = runs
                .map(|r| sum_run(r, &|v| (v - mean) * (v - mean)))
                .sum::<f64>()
                / count;
            let a = 1.0 / (var.sqrt() + EPSILON);
            *s = (a, -mean * a);
        }
    });
}

/// `y = x * a[k] + c[k]`, `k` the kept index of each element.
fn apply<T: Float + Send + Sync>(
    x: &[T],
    y: &mut [T],
    l: &Layout,
    coef: &[(f64, f64)],
    par: &dyn ParallelFor,
) {
    let last = l.all.n - 1;
    let inner = l.all.dims[last];
    let inner_stride = l.all.strides[last];
    let chunk = if y.len() < PARALLEL_MIN_ELEMENTS {
        y.len()
    } else {
        rows_chunk(par, y.len() / inner, inner)
    };
    let mut rows = l.all;
    rows.n -= 1;
    for_each_chunk_mut(par, y, chunk, &|offset, part: &mut [T]| {
        for (r, (yr, xr)) in part
            .chunks_exact_mut(inner)
            .zip(x[offset..].chunks_exact(inner))
            .enumerate()
        {
            let k = rows.offset(offset / inner + r);
            if inner_stride == 0 {
                let (a, c) = coef[k];
                super::common::affine(xr, yr, a, c);
            } else {
                for (j, (o, &v)) in yr.iter_mut().zip(xr).enumerate() {
                    let (a, c) = coef[k + j];
                    *o = v.affine(a, c);
                }
            }
        }
    });
}

impl Operator for Mvn {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 1, 1)?;
        let x = required(OP, inputs, 0)?;
        if !is_float(x.dtype) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: x.dtype,
            });
        }
        self.reduced(x.shape.len())?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
        }])
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let Some(x) = inputs.first().copied().flatten() else {
            return 0;
        };
        let Ok(red) = self.reduced(x.shape.len()) else {
            return 0;
        };
        let kept: Vec<usize> = (0..x.shape.len())
            .filter(|&d| !red[d])
            .map(|d| x.shape[d])
            .collect();
        numel(&kept).saturating_mul(16)
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input(OP, inputs, 0)?;
        let red = self.reduced(x.shape().len())?;
        let y = output(OP, outputs, 0)?;
        dispatch_float!(x.dtype(), T => {
            let (xs, ys) = (typed::<T>(OP, x)?, typed_mut::<T>(OP, y)?);
            check_len(OP, "Y", ys.len(), xs.len())?;
            if xs.is_empty() {
                return Ok(());
            }
            let l = layout(x.shape(), &red);
            if l.all.n == 0 {
                // A single element: its own mean, zero variance.
                ys[0] = T::from_f64(0.0);
                return Ok(());
            }
            let mut coef = Vec::new();
            coef.try_reserve_exact(l.kept_len).map_err(|_| KernelError::Allocation {
                op: OP,
                bytes: l.kept_len.saturating_mul(16),
            })?;
            coef.resize(l.kept_len, (0.0, 0.0));
            stats(xs, &l, &mut coef, par);
            apply(xs, ys, &l, &coef, par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op: OP, dtype: x.dtype() }))
    }
}
