//! Normalization over the trailing axes `[axis, rank)`: LayerNormalization
//! (opset 17), RMSNormalization (opset 23) and ONNX Runtime's
//! SimplifiedLayerNormalization (RMS norm with an optional `inv_std_var`
//! output). Row kernels are hot path; statistics accumulate in the input's
//! float type (stash_type 1 = float for f32 inputs).

use super::broadcast::{Plan, unidirectional};
use super::common::{
    Attrs, check_inputs, check_len, input, normalize_axis, numel, optional, required, typed,
    typed_mut,
};
use super::real::{Real, sum_by};
use crate::par::{for_len, rows_chunk};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Which normalization a [`Norm`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NormKind {
    /// `(x - mean) / sqrt(var + eps) * scale + bias`; outputs Y, Mean, InvStdDev.
    Layer,
    /// `x / sqrt(mean(x^2) + eps) * scale`; output Y.
    Rms,
    /// As `Rms`; outputs Y, inv_std_var.
    SimplifiedLayer,
}

impl NormKind {
    fn name(self) -> &'static str {
        match self {
            Self::Layer => "LayerNormalization",
            Self::Rms => "RMSNormalization",
            Self::SimplifiedLayer => "SimplifiedLayerNormalization",
        }
    }

    fn max_outputs(self) -> usize {
        match self {
            Self::Layer => 3,
            Self::Rms => 1,
            Self::SimplifiedLayer => 2,
        }
    }
}

/// A normalization operator.
#[derive(Debug)]
pub(crate) struct Norm {
    kind: NormKind,
    axis: i64,
    epsilon: f32,
    outputs: usize,
}

impl Norm {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: NormKind) -> Result<Self, KernelError> {
        let op = kind.name();
        let attrs = Attrs::new(spec, op, &["axis", "epsilon", "stash_type"])?;
        attrs.stash_type()?;
        let axis = attrs.int_or("axis", -1)?;
        let epsilon = attrs.float("epsilon")?.unwrap_or(1e-5);
        if !epsilon.is_finite() || epsilon < 0.0 {
            return Err(attrs.error("epsilon", format!("{epsilon} is not a finite value >= 0")));
        }
        if spec.outputs == 0 || spec.outputs > kind.max_outputs() {
            return Err(KernelError::Shape(format!(
                "{op}: {} outputs requested, at most {} supported",
                spec.outputs,
                kind.max_outputs()
            )));
        }
        Ok(Self {
            kind,
            axis,
            epsilon,
            outputs: spec.outputs,
        })
    }

    fn stat_dtype(&self, x: ElementType) -> ElementType {
        match self.kind {
            // U is constrained by stash_type = 1 (float).
            NormKind::Layer => ElementType::F32,
            _ => x,
        }
    }
}

/// How a scale or bias applies within a row.
#[derive(Clone, Copy)]
enum Param<'a, T> {
    Absent,
    /// One value per element of the normalized block.
    Row(&'a [T]),
    /// One value for everything.
    Scalar(T),
    /// Another broadcast: applied after the rows with the strided engine.
    Deferred,
}

fn param<'a, T: Real>(
    p: Option<&'a [T]>,
    shape: &[usize],
    norm_shape: &[usize],
    n: usize,
) -> Param<'a, T> {
    match p {
        None => Param::Absent,
        Some(v) if v.len() == 1 => Param::Scalar(v[0]),
        Some(v) if v.len() == n && unidirectional(shape, norm_shape) => Param::Row(v),
        Some(_) => Param::Deferred,
    }
}

#[derive(Clone, Copy)]
struct Inputs<'a, T> {
    x: &'a [T],
    n: usize,
    eps: T,
    scale: Param<'a, T>,
    bias: Param<'a, T>,
}

/// Normalizes every row of `n` elements; `stat(row, mean, inv)` receives the
/// statistics.
fn rows<T: Real>(
    kind: NormKind,
    p: &Inputs<'_, T>,
    y: &mut [T],
    mut stat: impl FnMut(usize, T, T),
) {
    let n = p.n;
    let count = T::from_usize(n);
    for (r, (xr, yr)) in p.x.chunks_exact(n).zip(y.chunks_exact_mut(n)).enumerate() {
        let (mean, inv) = if kind == NormKind::Layer {
            let mean = sum_by(xr, |v| v) / count;
            let var = sum_by(xr, |v| (v - mean) * (v - mean)) / count;
            (mean, T::ONE / (var + p.eps).sqrt())
        } else {
            let ms = sum_by(xr, |v| v * v) / count;
            (T::ZERO, T::ONE / (ms + p.eps).sqrt())
        };
        stat(r, mean, inv);
        match p.scale {
            Param::Row(s) => {
                for ((o, &v), &s) in yr.iter_mut().zip(xr).zip(s) {
                    *o = (v - mean) * inv * s;
                }
            }
            Param::Scalar(s) => {
                let k = inv * s;
                for (o, &v) in yr.iter_mut().zip(xr) {
                    *o = (v - mean) * k;
                }
            }
            Param::Absent | Param::Deferred => {
                for (o, &v) in yr.iter_mut().zip(xr) {
                    *o = (v - mean) * inv;
                }
            }
        }
        match p.bias {
            Param::Row(b) => {
                for (o, &b) in yr.iter_mut().zip(b) {
                    *o = *o + b;
                }
            }
            Param::Scalar(b) => {
                for o in yr.iter_mut() {
                    *o = *o + b;
                }
            }
            Param::Absent | Param::Deferred => {}
        }
    }
}

impl Norm {
    fn execute_typed<T: Real + Send + Sync>(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.kind.name();
        let x_t = input(op, inputs, 0)?;
        let s_t = input(op, inputs, 1)?;
        let b_t = if self.kind == NormKind::Layer {
            inputs.get(2).copied().flatten()
        } else {
            None
        };
        let shape = x_t.shape();
        if shape.is_empty() {
            return Err(KernelError::Invalid {
                op,
                detail: "X must have rank >= 1".into(),
            });
        }
        let axis = normalize_axis(op, "axis", self.axis, shape.len())?;
        let norm_shape = &shape[axis..];
        let n = numel(norm_shape);
        let rows_n = numel(&shape[..axis]);
        for t in [Some(s_t), b_t].into_iter().flatten() {
            if !unidirectional(t.shape(), shape) {
                return Err(KernelError::Invalid {
                    op,
                    detail: format!(
                        "scale/bias shape {:?} does not broadcast to {shape:?}",
                        t.shape()
                    ),
                });
            }
        }
        let x = typed::<T>(op, x_t)?;
        let scale_v = typed::<T>(op, s_t)?;
        let bias_v = b_t.map(|b| typed::<T>(op, b)).transpose()?;
        let scale = param(Some(scale_v), s_t.shape(), norm_shape, n);
        let mut bias = param(bias_v, b_t.map_or(&[][..], |b| b.shape()), norm_shape, n);
        if matches!(scale, Param::Deferred) && bias_v.is_some() {
            // The bias must follow the scale.
            bias = Param::Deferred;
        }
        let p = Inputs {
            x,
            n,
            eps: T::from_f32(self.epsilon),
            scale,
            bias,
        };
        let (first, stats) = outputs
            .split_first_mut()
            .ok_or_else(|| KernelError::Invalid {
                op,
                detail: "no output given".into(),
            })?;
        let y = typed_mut::<T>(op, first)?;
        check_len(op, "Y", y.len(), x.len())?;
        if n == 0 {
            return Ok(());
        }
        match self.kind {
            NormKind::Layer => {
                let (mut mean_out, mut inv_out) = (None, None);
                let mut it = stats.iter_mut();
                if let Some(t) = it.next() {
                    let m = typed_mut::<f32>(op, t)?;
                    check_len(op, "Mean", m.len(), rows_n)?;
                    mean_out = Some(m);
                }
                if let Some(t) = it.next() {
                    let v = typed_mut::<f32>(op, t)?;
                    check_len(op, "InvStdDev", v.len(), rows_n)?;
                    inv_out = Some(v);
                }
                rows(self.kind, &p, y, |r, mean, inv| {
                    if let Some(m) = mean_out.as_deref_mut() {
                        m[r] = mean.to_f32();
                    }
                    if let Some(v) = inv_out.as_deref_mut() {
                        v[r] = inv.to_f32();
                    }
                });
            }
            NormKind::SimplifiedLayer if !stats.is_empty() => {
                let v = typed_mut::<T>(op, &mut stats[0])?;
                check_len(op, "inv_std_var", v.len(), rows_n)?;
                rows(self.kind, &p, y, |r, _, inv| v[r] = inv);
            }
            _ => {
                // No statistics out: rows split across `par` when large.
                let par = for_len(par, y.len());
                let chunk = rows_chunk(par, rows_n, n);
                for_each_chunk_mut(par, y, chunk, &|offset, part: &mut [T]| {
                    let p = Inputs {
                        x: &p.x[offset..offset + part.len()],
                        ..p
                    };
                    rows(self.kind, &p, part, |_, _, _| {});
                });
            }
        }
        if matches!(scale, Param::Deferred) {
            Plan::new(op, shape, s_t.shape())?.run_in_place(op, y, scale_v, |a, b| a * b)?;
        }
        if let (Param::Deferred, Some(b_t), Some(bias_v)) = (bias, b_t, bias_v) {
            Plan::new(op, shape, b_t.shape())?.run_in_place(op, y, bias_v, |a, b| a + b)?;
        }
        Ok(())
    }
}

impl Operator for Norm {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.kind.name();
        let max_inputs = if self.kind == NormKind::Layer { 3 } else { 2 };
        let inputs = check_inputs(op, inputs, 2, max_inputs)?;
        let x = required(op, inputs, 0)?;
        if !matches!(x.dtype, ElementType::F32 | ElementType::F64) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        if x.shape.is_empty() {
            return Err(KernelError::Shape(format!("{op}: X must have rank >= 1")));
        }
        let axis = normalize_axis(op, "axis", self.axis, x.shape.len())?;
        let scale = Some(required(op, inputs, 1)?);
        let bias = optional(inputs, 2);
        for (what, p) in [("scale", scale), ("bias", bias)] {
            let Some(p) = p else { continue };
            if p.dtype != x.dtype {
                return Err(KernelError::Shape(format!(
                    "{op}: {what} type {} differs from X type {}",
                    p.dtype, x.dtype
                )));
            }
            if !unidirectional(p.shape, x.shape) {
                return Err(KernelError::Shape(format!(
                    "{op}: {what} shape {:?} does not broadcast to X shape {:?}",
                    p.shape, x.shape
                )));
            }
            if !(numel(p.shape) == 1
                || (numel(p.shape) == numel(&x.shape[axis..])
                    && unidirectional(p.shape, &x.shape[axis..])))
            {
                Plan::new(op, x.shape, p.shape)?;
            }
        }
        let mut out = vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
        }];
        let stat_shape: Vec<usize> = x
            .shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if i < axis { d } else { 1 })
            .collect();
        for _ in 1..self.outputs {
            out.push(OutputInfo {
                dtype: self.stat_dtype(x.dtype),
                shape: stat_shape.clone(),
            });
        }
        Ok(out)
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.kind.name();
        match input(op, inputs, 0)?.dtype() {
            ElementType::F32 => self.execute_typed::<f32>(inputs, outputs, par),
            ElementType::F64 => self.execute_typed::<f64>(inputs, outputs, par),
            dtype => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}
