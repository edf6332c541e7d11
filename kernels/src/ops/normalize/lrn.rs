//! LRN (local response normalization across channels) and LpNormalization
//! (L1 or L2 norm along one axis). Both walk planes or rows with f64 sums
//! and split independent `[n, c]` planes or outer blocks across threads
//! (hot path); construction and inference are cold path.

use super::common::{Float, dispatch_float, is_float, nc_layout};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_len, input, normalize_axis, numel, output, required, typed,
    typed_mut,
};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
    for_each_chunk_mut,
};

/// A chunk length of whole blocks of `block` elements for an output of
/// `len` elements: everything when small.
fn block_chunk(par: &dyn ParallelFor, len: usize, block: usize) -> usize {
    if len < PARALLEL_MIN_ELEMENTS {
        len.max(1)
    } else {
        rows_chunk(par, len / block.max(1), block)
    }
}

/// LRN: `y = x / (bias + alpha / size * sum of x^2 over a window of
/// channels)^beta`.
#[derive(Debug)]
pub(crate) struct Lrn {
    alpha: f64,
    beta: f64,
    bias: f64,
    size: usize,
}

impl Lrn {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "LRN", &["alpha", "beta", "bias", "size"])?;
        let size = match attrs.int("size")? {
            Some(s) if s > 0 => s as usize,
            Some(s) => return Err(attrs.error("size", format!("{s} must be >= 1"))),
            None => return Err(attrs.error("size", "is required")),
        };
        let f = |n: &'static str, d: f32| -> Result<f64, KernelError> {
            let v = attrs.float(n)?.unwrap_or(d);
            if v.is_finite() {
                Ok(f64::from(v))
            } else {
                Err(attrs.error(n, format!("{v} is not finite")))
            }
        };
        Ok(Self {
            alpha: f("alpha", 1e-4)?,
            beta: f("beta", 0.75)?,
            bias: f("bias", 1.0)?,
            size,
        })
    }

    fn run<T: Float + Send + Sync>(
        &self,
        x: &[T],
        y: &mut [T],
        (channels, plane): (usize, usize),
        par: &dyn ParallelFor,
    ) {
        if plane == 0 || y.is_empty() {
            return;
        }
        let (before, after) = ((self.size - 1) / 2, self.size / 2);
        let k = self.alpha / self.size as f64;
        let chunk = block_chunk(par, y.len(), plane);
        for_each_chunk_mut(par, y, chunk, &|offset, part: &mut [T]| {
            for (i, yp) in part.chunks_exact_mut(plane).enumerate() {
                let p = offset / plane + i;
                let (n, c) = (p / channels, p % channels);
                let lo = c.saturating_sub(before);
                let hi = (c + after).min(channels - 1);
                let base = n * channels * plane;
                for (j, o) in yp.iter_mut().enumerate() {
                    let sum: f64 = (lo..=hi)
                        .map(|cc| {
                            let v = x[base + cc * plane + j].to_f64();
                            v * v
                        })
                        .sum();
                    let v = x[base + c * plane + j].to_f64();
                    *o = T::from_f64(v / (self.bias + k * sum).powf(self.beta));
                }
            }
        });
    }
}

impl Operator for Lrn {
    fn name(&self) -> &'static str {
        "LRN"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("LRN", inputs, 1, 1)?;
        let x = required("LRN", inputs, 0)?;
        nc_layout("LRN", x.dtype, x.shape, 2)?;
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
        let op = "LRN";
        let x = input(op, inputs, 0)?;
        let (_, channels, plane) = nc_layout(op, x.dtype(), x.shape(), 2)?;
        let y = output(op, outputs, 0)?;
        dispatch_float!(x.dtype(), T => {
            let (xs, ys) = (typed::<T>(op, x)?, typed_mut::<T>(op, y)?);
            check_len(op, "Y", ys.len(), xs.len())?;
            self.run(xs, ys, (channels, plane), par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}

/// LpNormalization: `x / ||x||_p` along `axis` (p = 1 or 2; a zero norm
/// gives 0).
#[derive(Debug)]
pub(crate) struct LpNorm {
    axis: i64,
    p: i64,
}

impl LpNorm {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "LpNormalization", &["axis", "p"])?;
        let p = attrs.int_or("p", 2)?;
        if p != 1 && p != 2 {
            return Err(attrs.error("p", format!("{p} is not 1 or 2")));
        }
        Ok(Self {
            axis: attrs.int_or("axis", -1)?,
            p,
        })
    }

    /// `(outer, n, inner)`: norms over `n` elements `inner` apart.
    fn layout(&self, shape: &[usize]) -> Result<(usize, usize, usize), KernelError> {
        if shape.is_empty() {
            return Err(KernelError::Shape(
                "LpNormalization: the input must have rank >= 1".into(),
            ));
        }
        let axis = normalize_axis("LpNormalization", "axis", self.axis, shape.len())?;
        Ok((
            numel(&shape[..axis]),
            shape[axis],
            numel(&shape[axis + 1..]),
        ))
    }

    fn run<T: Float + Send + Sync>(
        &self,
        x: &[T],
        y: &mut [T],
        (n, inner): (usize, usize),
        par: &dyn ParallelFor,
    ) {
        let block = n * inner;
        if block == 0 || y.is_empty() {
            return;
        }
        let l1 = self.p == 1;
        let chunk = block_chunk(par, y.len(), block);
        for_each_chunk_mut(par, y, chunk, &|offset, part: &mut [T]| {
            for (yb, xb) in part
                .chunks_exact_mut(block)
                .zip(x[offset..].chunks_exact(block))
            {
                for j in 0..inner {
                    let mut sum = 0.0f64;
                    for k in 0..n {
                        let v = xb[k * inner + j].to_f64();
                        sum += if l1 { v.abs() } else { v * v };
                    }
                    let norm = if l1 { sum } else { sum.sqrt() };
                    let inv = if norm == 0.0 { 0.0 } else { 1.0 / norm };
                    for k in 0..n {
                        let i = k * inner + j;
                        yb[i] = xb[i].affine(inv, 0.0);
                    }
                }
            }
        });
    }
}

impl Operator for LpNorm {
    fn name(&self) -> &'static str {
        "LpNormalization"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = "LpNormalization";
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        if !is_float(x.dtype) {
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
        let op = "LpNormalization";
        let x = input(op, inputs, 0)?;
        let (_, n, inner) = self.layout(x.shape())?;
        let y = output(op, outputs, 0)?;
        dispatch_float!(x.dtype(), T => {
            let (xs, ys) = (typed::<T>(op, x)?, typed_mut::<T>(op, y)?);
            check_len(op, "Y", ys.len(), xs.len())?;
            self.run(xs, ys, (n, inner), par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}
