//! BatchNormalization: inference with the given statistics (every opset),
//! and opset 14+ `training_mode = 1` with batch statistics and the
//! `running_mean` / `running_var` outputs. Per-channel coefficients, then
//! one fused scale-and-shift pass over `[N, C]` planes split across
//! threads (hot path); batch statistics are f64, per channel in parallel.

use super::common::{
    Float, FloatView, affine, check_param, dispatch_float, epsilon, flag, nc_layout, sum_f64,
};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_len, input, required, typed, typed_mut,
};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
    for_each_chunk_mut,
};

const OP: &str = "BatchNormalization";

/// BatchNormalization.
#[derive(Debug)]
pub(crate) struct BatchNorm {
    epsilon: f64,
    momentum: f64,
    /// Batch statistics, with running statistics as outputs 1 and 2.
    training: bool,
    outputs: usize,
}

impl BatchNorm {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = match spec.opset {
            ..6 => &[
                "epsilon",
                "is_test",
                "momentum",
                "spatial",
                "consumed_inputs",
            ],
            6 => &["epsilon", "is_test", "momentum", "spatial"],
            7..=8 => &["epsilon", "momentum", "spatial"],
            9..=13 => &["epsilon", "momentum"],
            _ => &["epsilon", "momentum", "training_mode"],
        };
        let attrs = Attrs::new(spec, OP, allowed)?;
        // `is_test` (opset <= 6) only told whether the training outputs
        // exist; they are refused below, as ONNX Runtime refuses them.
        attrs.int("is_test")?;
        if !flag(&attrs, "spatial", true)? {
            return Err(attrs.error(
                "spatial",
                "0 (statistics per element instead of per channel) is not supported",
            ));
        }
        let momentum = f64::from(attrs.float("momentum")?.unwrap_or(0.9));
        if !momentum.is_finite() {
            return Err(attrs.error("momentum", format!("{momentum} is not finite")));
        }
        let training = flag(&attrs, "training_mode", false)?;
        let max_outputs = if training { 3 } else { 1 };
        if spec.outputs == 0 || spec.outputs > max_outputs {
            return Err(KernelError::Attribute {
                op: OP,
                name: "training_mode",
                detail: format!(
                    "{} outputs requested: training statistics outputs are supported only with \
                     training_mode = 1 (opset 14+), which has at most 3; at opset {} with \
                     training_mode = {} the node has exactly 1",
                    spec.outputs,
                    spec.opset,
                    i64::from(training)
                ),
            });
        }
        Ok(Self {
            epsilon: epsilon(&attrs, 1e-5)?,
            momentum,
            training,
            outputs: spec.outputs,
        })
    }
}

/// `y = x * a(c) + b(c)` over every `[n, c]` plane of `plane` elements,
/// planes split across `par`.
fn apply<T: Float + Send + Sync>(
    x: &[T],
    y: &mut [T],
    (channels, plane): (usize, usize),
    coef: &(dyn Fn(usize) -> (f64, f64) + Sync),
    par: &dyn ParallelFor,
) {
    if plane == 0 || y.is_empty() {
        return;
    }
    let chunk = if y.len() < PARALLEL_MIN_ELEMENTS {
        y.len()
    } else {
        rows_chunk(par, y.len() / plane, plane)
    };
    for_each_chunk_mut(par, y, chunk, &|offset, part: &mut [T]| {
        for (i, yp) in part.chunks_exact_mut(plane).enumerate() {
            let p = offset / plane + i;
            let (a, b) = coef(p % channels);
            affine(&x[p * plane..(p + 1) * plane], yp, a, b);
        }
    });
}

/// Per-channel batch mean and biased variance over `N` and the spatial
/// axes, channels split across `par`.
fn batch_stats<T: Float>(
    x: &[T],
    (n, channels, plane): (usize, usize, usize),
    stats: &mut [(f64, f64)],
    par: &dyn ParallelFor,
) {
    let count = (n * plane) as f64;
    let chunk = if x.len() < PARALLEL_MIN_ELEMENTS {
        channels
    } else {
        rows_chunk(par, channels, 1)
    };
    for_each_chunk_mut(par, stats, chunk, &|c0, part| {
        for (i, s) in part.iter_mut().enumerate() {
            let planes = (0..n).map(|b| {
                let start = (b * channels + c0 + i) * plane;
                &x[start..start + plane]
            });
            let mean = planes.clone().map(|p| sum_f64(p, |v| v)).sum::<f64>() / count;
            let var = planes
                .map(|p| sum_f64(p, |v| (v - mean) * (v - mean)))
                .sum::<f64>()
                / count;
            *s = (mean, var);
        }
    });
}

/// Writes `f(i)` into every element of the float tensor `t`.
fn write_f64(t: &mut Tensor, f: impl Fn(usize) -> f64) -> Result<(), KernelError> {
    dispatch_float!(t.dtype(), T => {
        for (i, o) in typed_mut::<T>(OP, t)?.iter_mut().enumerate() {
            *o = T::from_f64(f(i));
        }
        Ok(())
    }, else Err(KernelError::UnsupportedType { op: OP, dtype: t.dtype() }))
}

impl Operator for BatchNorm {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 5, 5)?;
        let x = required(OP, inputs, 0)?;
        let (_, channels, _) = nc_layout(OP, x.dtype, x.shape, 2)?;
        let mut params = Vec::with_capacity(4);
        for (i, what) in [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")] {
            let p = required(OP, inputs, i)?;
            check_param(OP, what, p.dtype, p.shape, channels)?;
            params.push(p.dtype);
        }
        let mut out = vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
        }];
        for dtype in [params[2], params[3]].into_iter().take(self.outputs - 1) {
            out.push(OutputInfo {
                dtype,
                shape: vec![channels],
            });
        }
        Ok(out)
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        match inputs.first().copied().flatten() {
            Some(x) if self.training => x.shape.get(1).copied().unwrap_or(0) * 16,
            _ => 0,
        }
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input(OP, inputs, 0)?;
        let (n, channels, plane) = nc_layout(OP, x.dtype(), x.shape(), 2)?;
        let mut views = [FloatView::F32(&[]); 4];
        for (i, v) in views.iter_mut().enumerate() {
            *v = FloatView::of(OP, input(OP, inputs, i + 1)?)?;
            check_len(OP, "a parameter input", v.len(), channels)?;
        }
        let [scale, bias, mean, var] = views;
        let eps = self.epsilon;
        let (first, rest) = outputs
            .split_first_mut()
            .ok_or_else(|| KernelError::Invalid {
                op: OP,
                detail: "no output given".into(),
            })?;
        dispatch_float!(x.dtype(), T => {
            let (xs, ys) = (typed::<T>(OP, x)?, typed_mut::<T>(OP, first)?);
            check_len(OP, "Y", ys.len(), xs.len())?;
            if !self.training {
                let coef = |c: usize| {
                    let a = scale.get(c) / (var.get(c) + eps).sqrt();
                    (a, bias.get(c) - mean.get(c) * a)
                };
                apply(xs, ys, (channels, plane), &coef, par);
                return Ok(());
            }
            let mut stats = vec![(0.0, 0.0); channels];
            batch_stats(xs, (n, channels, plane), &mut stats, par);
            let coef = |c: usize| {
                let (m, v) = stats[c];
                let a = scale.get(c) / (v + eps).sqrt();
                (a, bias.get(c) - m * a)
            };
            apply(xs, ys, (channels, plane), &coef, par);
            let k = self.momentum;
            if let Some(t) = rest.get_mut(0) {
                check_len(OP, "running_mean", t.len(), channels)?;
                write_f64(t, |c| mean.get(c) * k + stats[c].0 * (1.0 - k))?;
            }
            if let Some(t) = rest.get_mut(1) {
                check_len(OP, "running_var", t.len(), channels)?;
                write_f64(t, |c| var.get(c) * k + stats[c].1 * (1.0 - k))?;
            }
            Ok(())
        }, else Err(KernelError::UnsupportedType { op: OP, dtype: x.dtype() }))
    }
}
