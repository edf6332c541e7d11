//! Softmax (hot path kernel: numerically stable, subtracting the maximum).
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

/// Softmax.
#[derive(Debug)]
pub(crate) struct Softmax {
    axis: i64,
    /// Opset < 13: normalize over all dimensions from `axis` on.
    flatten: bool,
}

impl Softmax {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "Softmax", &["axis"])?;
        let flatten = spec.opset < 13;
        let axis = attrs.int_or("axis", if flatten { 1 } else { -1 })?;
        Ok(Self { axis, flatten })
    }

    /// (outer, n, inner): rows of `n` elements `inner` apart.
    fn layout(&self, shape: &[usize]) -> Result<(usize, usize, usize), KernelError> {
        let rank = shape.len();
        if rank == 0 {
            return Err(KernelError::Shape(
                "Softmax: the input must have rank >= 1".into(),
            ));
        }
        let axis = normalize_axis("Softmax", "axis", self.axis, rank)?;
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

fn softmax<T: Real + Send + Sync>(
    x: &Tensor,
    y: &mut Tensor,
    (outer, n, inner): (usize, usize, usize),
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let (x, y) = (typed::<T>("Softmax", x)?, typed_mut::<T>("Softmax", y)?);
    check_len("Softmax", "output", y.len(), x.len())?;
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
                        softmax_row(xr, yr);
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
            let mut m = T::NEG_INFINITY;
            for k in 0..n {
                m = m.max(xb[k * inner + j]);
            }
            let mut sum = T::ZERO;
            for k in 0..n {
                let e = (xb[k * inner + j] - m).exp();
                yb[k * inner + j] = e;
                sum = sum + e;
            }
            let inv = T::ONE / sum;
            for k in 0..n {
                yb[k * inner + j] = yb[k * inner + j] * inv;
            }
        }
    }
    Ok(())
}

impl Operator for Softmax {
    fn name(&self) -> &'static str {
        "Softmax"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Softmax", inputs, 1, 1)?;
        let x = required("Softmax", inputs, 0)?;
        if !matches!(x.dtype, ElementType::F32 | ElementType::F64) {
            return Err(KernelError::UnsupportedType {
                op: "Softmax",
                dtype: x.dtype,
            });
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
        let x = input("Softmax", inputs, 0)?;
        let y = output("Softmax", outputs, 0)?;
        let layout = self.layout(x.shape())?;
        match x.dtype() {
            ElementType::F32 => softmax::<f32>(x, y, layout, par),
            ElementType::F64 => softmax::<f64>(x, y, layout, par),
            dtype => Err(KernelError::UnsupportedType {
                op: "Softmax",
                dtype,
            }),
        }
    }
}
