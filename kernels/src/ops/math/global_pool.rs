//! GlobalAveragePool and GlobalMaxPool: `[N, C, d1, ..]` to `[N, C, 1, ..]`,
//! the mean or maximum of each channel's spatial values (accumulated in
//! f64 for the mean; f16/bf16 computed in f32 and rounded once).

use half::{bf16, f16};

use crate::ops::basic::common::{Attrs, check_inputs, input, output, required, typed, typed_mut};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// A global pool over every axis after the first two.
#[derive(Debug)]
pub(crate) struct GlobalPool {
    max: bool,
}

impl GlobalPool {
    pub(crate) fn new(spec: &NodeSpec<'_>, max: bool) -> Result<Self, KernelError> {
        let op = if max {
            "GlobalMaxPool"
        } else {
            "GlobalAveragePool"
        };
        Attrs::new(spec, op, &[])?;
        Ok(Self { max })
    }

    /// Reduces each of `out.len()` channels of `plane` values of `x`.
    fn pool<T: crate::ops::basic::common::Elem>(
        &self,
        x: &[T],
        out: &mut [T],
        plane: usize,
        par: &dyn ParallelFor,
        to: impl Fn(T) -> f64 + Sync,
        from: impl Fn(f64) -> T + Sync,
    ) {
        let max = self.max;
        let chunk = out.len().div_ceil(par.threads().max(1)).max(1);
        for_each_chunk_mut(par, out, chunk, &|first, ys| {
            for (i, y) in ys.iter_mut().enumerate() {
                let c = &x[(first + i) * plane..(first + i + 1) * plane];
                let v = if max {
                    c.iter().map(|&v| to(v)).fold(f64::NEG_INFINITY, |m, v| {
                        if v > m || v.is_nan() { v } else { m }
                    })
                } else {
                    c.iter().map(|&v| to(v)).sum::<f64>() / plane as f64
                };
                *y = from(v);
            }
        });
    }
}

impl Operator for GlobalPool {
    fn name(&self) -> &'static str {
        if self.max {
            "GlobalMaxPool"
        } else {
            "GlobalAveragePool"
        }
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        if !matches!(
            x.dtype,
            ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16
        ) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        if x.shape.len() < 3 || x.shape[2..].contains(&0) {
            return Err(KernelError::Shape(format!(
                "{op}: X {:?} must be [N, C, spatial...] with non-empty spatial axes",
                x.shape
            )));
        }
        let mut shape = x.shape.to_vec();
        shape[2..].fill(1);
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        use ElementType as E;
        let op = self.name();
        let (x, y) = (input(op, inputs, 0)?, output(op, outputs, 0)?);
        let plane: usize = x.shape().iter().skip(2).product();
        let channels: usize = x.shape().iter().take(2).product();
        if plane == 0 || y.len() != channels || x.len() != channels * plane {
            return Err(KernelError::Shape(format!(
                "{op}: X {:?}, output of {} elements",
                x.shape(),
                y.len()
            )));
        }
        match x.dtype() {
            E::F32 => self.pool(
                typed::<f32>(op, x)?,
                typed_mut::<f32>(op, y)?,
                plane,
                par,
                f64::from,
                |v| v as f32,
            ),
            E::F64 => self.pool(
                typed::<f64>(op, x)?,
                typed_mut::<f64>(op, y)?,
                plane,
                par,
                |v| v,
                |v| v,
            ),
            E::F16 => self.pool(
                typed::<f16>(op, x)?,
                typed_mut::<f16>(op, y)?,
                plane,
                par,
                f16::to_f64,
                f16::from_f64,
            ),
            E::BF16 => self.pool(
                typed::<bf16>(op, x)?,
                typed_mut::<bf16>(op, y)?,
                plane,
                par,
                bf16::to_f64,
                bf16::from_f64,
            ),
            dtype => return Err(KernelError::UnsupportedType { op, dtype }),
        }
        Ok(())
    }
}
