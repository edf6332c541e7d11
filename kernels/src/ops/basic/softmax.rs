//! Softmax, LogSoftmax and Hardmax (hot path kernels: numerically stable,
//! subtracting the maximum; Hardmax marks the first maximum of each row).
//!
//! Opset 13+ normalizes along one axis (default -1); opsets 1-12 flatten the
//! input to 2-D at `axis` (default 1) and normalize each row.

use super::common::{
    Attrs, check_inputs, check_len, input, normalize_axis, numel, output, required, typed,
    typed_mut,
};
use super::real::{Real, max_of, sum_by};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::vector::{self, Width};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Which function a [`Softmax`] computes along its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SoftmaxKind {
    /// `e^(x - max) / sum`.
    Softmax,
    /// `x - max - ln(sum e^(x - max))`.
    LogSoftmax,
    /// 1 at the first maximum of each row, 0 elsewhere.
    Hardmax,
}

impl SoftmaxKind {
    fn name(self) -> &'static str {
        match self {
            Self::Softmax => "Softmax",
            Self::LogSoftmax => "LogSoftmax",
            Self::Hardmax => "Hardmax",
        }
    }
}

/// Softmax, LogSoftmax or Hardmax.
#[derive(Debug)]
pub(crate) struct Softmax {
    kind: SoftmaxKind,
    axis: i64,
    /// Opset < 13: normalize over all dimensions from `axis` on.
    flatten: bool,
}

impl Softmax {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: SoftmaxKind) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, kind.name(), &["axis"])?;
        let flatten = spec.opset < 13;
        let axis = attrs.int_or("axis", if flatten { 1 } else { -1 })?;
        Ok(Self {
            kind,
            axis,
            flatten,
        })
    }

    /// (outer, n, inner): rows of `n` elements `inner` apart.
    fn layout(&self, shape: &[usize]) -> Result<(usize, usize, usize), KernelError> {
        let rank = shape.len();
        let op = self.kind.name();
        if rank == 0 {
            return Err(KernelError::Shape(format!(
                "{op}: the input must have rank >= 1"
            )));
        }
        let axis = normalize_axis(op, "axis", self.axis, rank)?;
        let outer = numel(&shape[..axis]);
        Ok(if self.flatten {
            (outer, numel(&shape[axis..]), 1)
        } else {
            (outer, shape[axis], numel(&shape[axis + 1..]))
        })
    }
}

/// One contiguous row, in three vectorizable passes: max, exp, scale.
#[inline(always)]
fn softmax_row<T: Real>(x: &[T], y: &mut [T]) {
    let m = max_of(x);
    for (o, &v) in y.iter_mut().zip(x) {
        *o = (v - m).exp();
    }
    let sum = sum_by(y, |v| v);
    let inv = T::ONE / sum;
    for o in y.iter_mut() {
        *o = *o * inv;
    }
}

/// One contiguous row of LogSoftmax: max, sum of exponentials, shift.
#[inline(always)]
fn log_softmax_row<T: Real>(x: &[T], y: &mut [T]) {
    let m = max_of(x);
    let sum = sum_by(x, |v| (v - m).exp());
    let shift = m + sum.ln();
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v - shift;
    }
}

/// One row of Hardmax, `n` elements `stride` apart: 1 at the first
/// maximum (the first NaN, if any), 0 elsewhere.
#[inline(always)]
fn hardmax_row<T: Real>(x: &[T], y: &mut [T], n: usize, stride: usize) {
    let mut best = 0;
    for k in 1..n {
        let (v, b) = (x[k * stride], x[best * stride]);
        if !b.is_nan() && (v > b || v.is_nan()) {
            best = k;
        }
    }
    for k in 0..n {
        y[k * stride] = if k == best { T::ONE } else { T::ZERO };
    }
}

/// One row of `n` elements `stride` apart (stride > 1).
#[inline(always)]
fn strided_row<T: Real>(kind: SoftmaxKind, x: &[T], y: &mut [T], n: usize, stride: usize) {
    if kind == SoftmaxKind::Hardmax {
        return hardmax_row(x, y, n, stride);
    }
    let mut m = T::NEG_INFINITY;
    for k in 0..n {
        m = m.max(x[k * stride]);
    }
    let mut sum = T::ZERO;
    for k in 0..n {
        let e = (x[k * stride] - m).exp();
        if kind == SoftmaxKind::Softmax {
            y[k * stride] = e;
        }
        sum = sum + e;
    }
    if kind == SoftmaxKind::Softmax {
        let inv = T::ONE / sum;
        for k in 0..n {
            y[k * stride] = y[k * stride] * inv;
        }
    } else {
        let shift = m + sum.ln();
        for k in 0..n {
            y[k * stride] = x[k * stride] - shift;
        }
    }
}

fn softmax<T: Real + Send + Sync>(
    kind: SoftmaxKind,
    x: &Tensor,
    y: &mut Tensor,
    (outer, n, inner): (usize, usize, usize),
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let op = kind.name();
    let (x, y) = (typed::<T>(op, x)?, typed_mut::<T>(op, y)?);
    check_len(op, "output", y.len(), x.len())?;
    if x.is_empty() {
        return Ok(());
    }
    if inner == 1 {
        // Rows are independent: split whole rows across threads when large.
        let chunk = if y.len() < PARALLEL_MIN_ELEMENTS {
            y.len()
        } else {
            rows_chunk(par, outer, n)
        };
        let width = Width::detect();
        for_each_chunk_mut(par, y, chunk, &|offset, rows| {
            let x = &x[offset..offset + rows.len()];
            vector::run(
                width,
                #[inline(always)]
                || {
                    for (xr, yr) in x.chunks_exact(n).zip(rows.chunks_exact_mut(n)) {
                        match kind {
                            SoftmaxKind::Softmax => softmax_row(xr, yr),
                            SoftmaxKind::LogSoftmax => log_softmax_row(xr, yr),
                            SoftmaxKind::Hardmax => hardmax_row(xr, yr, n, 1),
                        }
                    }
                },
            )
        });
        return Ok(());
    }
    let block = n * inner;
    for o in 0..outer {
        let xb = &x[o * block..(o + 1) * block];
        let yb = &mut y[o * block..(o + 1) * block];
        for j in 0..inner {
            strided_row(kind, &xb[j..], &mut yb[j..], n, inner);
        }
    }
    Ok(())
}

impl Operator for Softmax {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.kind.name();
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        if !matches!(x.dtype, ElementType::F32 | ElementType::F64) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        self.layout(x.shape)?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.kind.name();
        let x = input(op, inputs, 0)?;
        let y = output(op, outputs, 0)?;
        let layout = self.layout(x.shape())?;
        let k = self.kind;
        match x.dtype() {
            ElementType::F32 => softmax::<f32>(k, x, y, layout, par),
            ElementType::F64 => softmax::<f64>(k, x, y, layout, par),
            dtype => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}
