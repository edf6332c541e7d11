//! `com.microsoft` SkipLayerNormalization and SkipSimplifiedLayerNormalization
//! (ONNX Runtime contrib operators): the last axis of `s = input + skip
//! (+ bias)` normalized (layer: `(s - mean) / sqrt(var + eps) * gamma
//! (+ beta)`; simplified: `s / sqrt(mean(s^2) + eps) * gamma`).
//!
//! Inputs: layer `input, skip, gamma, beta?, bias?`; simplified `input,
//! skip, gamma, bias?`. `skip` has the input's shape or a suffix of it
//! (`[1, S, H]`, `[S, H]`), repeated over the leading rows; gamma, beta and
//! bias hold `H` values. Outputs: `output`, `mean` (f32, 0 for the
//! simplified form), `inv_std_var` (f32) — both shaped like the input with
//! the last dimension 1 — and `input_skip_bias_sum`. f32, f64, f16 and bf16;
//! sums and statistics accumulate in f32 (f64 for f64), the variance over
//! deviations from the mean (two passes).
//!
//! Hot path: per row, the sum is recomputed in each pass rather than stored
//! in a scratch buffer; the statistics' sums run in sixteen lanes so they
//! vectorize. Parallel runs split rows, one pass per requested output.

use half::{bf16, f16};

use super::common::{Attrs, check_len, input, typed, typed_mut};
use super::real::{Real, Widen};
use crate::par::{PARALLEL_MIN_ELEMENTS, for_each_chunk_mut, rows_chunk};
use crate::vector::{self, Width};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// A SkipLayerNormalization or SkipSimplifiedLayerNormalization node.
#[derive(Debug)]
pub(crate) struct SkipNorm {
    simplified: bool,
    epsilon: f32,
    outputs: usize,
}

/// Output positions (3 is `input_skip_bias_sum`).
const MEAN: usize = 1;
const INV_STD: usize = 2;

impl SkipNorm {
    pub(crate) fn new(spec: &NodeSpec<'_>, simplified: bool) -> Result<Self, KernelError> {
        let op = Self::op_name(simplified);
        let attrs = Attrs::new(spec, op, &["epsilon"])?;
        let epsilon = attrs.float("epsilon")?.unwrap_or(1e-12);
        if !epsilon.is_finite() || epsilon < 0.0 {
            return Err(attrs.error("epsilon", format!("{epsilon} is not a finite value >= 0")));
        }
        let max_inputs = if simplified { 4 } else { 5 };
        if !(3..=max_inputs).contains(&spec.inputs) || !(1..=4).contains(&spec.outputs) {
            return Err(KernelError::Shape(format!(
                "{op}: takes 3 to {max_inputs} inputs and 1 to 4 outputs, got {} and {}",
                spec.inputs, spec.outputs
            )));
        }
        Ok(Self {
            simplified,
            epsilon,
            outputs: spec.outputs,
        })
    }

    fn op_name(simplified: bool) -> &'static str {
        if simplified {
            "SkipSimplifiedLayerNormalization"
        } else {
            "SkipLayerNormalization"
        }
    }

    fn op(&self) -> &'static str {
        Self::op_name(self.simplified)
    }

    /// Input positions of beta and bias.
    fn beta_bias(&self) -> (Option<usize>, usize) {
        if self.simplified {
            (None, 3)
        } else {
            (Some(3), 4)
        }
    }

    /// Checks shapes and types; returns the hidden size.
    fn check(
        &self,
        x: (ElementType, &[usize]),
        skip: (ElementType, &[usize]),
        params: [Option<(ElementType, &[usize])>; 3],
    ) -> Result<usize, KernelError> {
        let op = self.op();
        if !matches!(
            x.0,
            ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16
        ) {
            return Err(KernelError::UnsupportedType { op, dtype: x.0 });
        }
        let Some(&hidden) = x.1.last() else {
            return Err(KernelError::Shape(format!(
                "{op}: input must have rank >= 1"
            )));
        };
        let stripped = {
            let lead = skip.1.iter().take_while(|&&d| d == 1).count();
            let rest = &skip.1[lead..];
            // Keep at least the hidden axis (a skip of [1] for hidden 1).
            if rest.is_empty() && !skip.1.is_empty() {
                &skip.1[skip.1.len() - 1..]
            } else {
                rest
            }
        };
        if skip.0 != x.0
            || stripped.len() > x.1.len()
            || stripped != &x.1[x.1.len() - stripped.len()..]
            || stripped.is_empty()
        {
            return Err(KernelError::Shape(format!(
                "{op}: skip {} {:?} must be {} with the input's shape {:?} or a suffix of it",
                skip.0, skip.1, x.0, x.1
            )));
        }
        for (name, p) in ["gamma", "beta", "bias"].into_iter().zip(params) {
            let Some((t, shape)) = p else { continue };
            let ok = t == x.0
                && shape.last() == Some(&hidden)
                && shape[..shape.len() - 1].iter().all(|&d| d == 1);
            if !ok {
                return Err(KernelError::Shape(format!(
                    "{op}: {name} {t} {shape:?} must be {} [{hidden}]",
                    x.0
                )));
            }
        }
        Ok(hidden)
    }
}

/// The operands of one call.
struct Rows<'a, T: Widen> {
    x: &'a [T],
    skip: &'a [T],
    gamma: &'a [T],
    beta: Option<&'a [T]>,
    bias: Option<&'a [T]>,
    n: usize,
    eps: T::Acc,
    simplified: bool,
}

impl<T: Widen> Rows<'_, T> {
    /// Row `r` of `input + skip (+ bias)`, element by element.
    #[inline(always)]
    fn sums(&self, r: usize) -> impl Iterator<Item = T::Acc> + '_ {
        let row = self.row(r);
        (0..self.n).map(move |h| row.at(h))
    }

    /// The operands of row `r`.
    #[inline(always)]
    fn row(&self, r: usize) -> Row<'_, T> {
        let n = self.n;
        Row {
            x: &self.x[r * n..][..n],
            skip: &self.skip[(r * n) % self.skip.len()..][..n],
            bias: self.bias.map(|b| &b[..n]),
        }
    }

    /// `sum(f(v))` over row `r`'s sums `v`, in sixteen lanes (vectorizes).
    #[inline(always)]
    fn fold(&self, r: usize, f: impl Fn(T::Acc) -> T::Acc) -> T::Acc {
        let row = self.row(r);
        let zero = <T::Acc as Real>::ZERO;
        let mut lanes = [zero; 16];
        let mut h = 0;
        while h + 16 <= self.n {
            for (k, lane) in lanes.iter_mut().enumerate() {
                *lane = *lane + f(row.at(h + k));
            }
            h += 16;
        }
        let tail = (h..self.n).fold(zero, |a, h| a + f(row.at(h)));
        lanes.iter().fold(tail, |a, &l| a + l)
    }

    /// `(mean, 1 / std)` of row `r` (mean 0 for the simplified form).
    #[inline(always)]
    fn stats(&self, r: usize) -> (T::Acc, T::Acc) {
        let count = <T::Acc as Real>::from_usize(self.n);
        let zero = <T::Acc as Real>::ZERO;
        let one = <T::Acc as Real>::ONE;
        if self.simplified {
            let ms = self.fold(r, |v| v * v) / count;
            return (zero, one / (ms + self.eps).sqrt());
        }
        let mean = self.fold(r, |v| v) / count;
        let var = self.fold(r, |v| (v - mean) * (v - mean)) / count;
        (mean, one / (var + self.eps).sqrt())
    }

    /// Writes the normalized row `r`.
    #[inline(always)]
    fn normalize(&self, r: usize, y: &mut [T]) {
        let (mean, inv) = self.stats(r);
        let row = self.row(r);
        let n = self.n;
        let (g, y) = (&self.gamma[..n], &mut y[..n]);
        match self.beta {
            Some(beta) => {
                let beta = &beta[..n];
                for h in 0..n {
                    y[h] = T::store((row.at(h) - mean) * inv * g[h].load() + beta[h].load());
                }
            }
            None => {
                for h in 0..n {
                    y[h] = T::store((row.at(h) - mean) * inv * g[h].load());
                }
            }
        }
    }

    /// Writes the requested outputs for rows `first..first + count`
    /// (each slice covers exactly those rows), compiled for the CPU's
    /// vectors.
    fn run(&self, first: usize, count: usize, out: Outs<'_, T>) {
        vector::run(
            Width::detect(),
            #[inline(always)]
            move || self.rows(first, count, out),
        )
    }

    #[inline(always)]
    fn rows(&self, first: usize, count: usize, mut out: Outs<'_, T>) {
        for i in 0..count {
            let r = first + i;
            if let Some(y) = out.y.as_deref_mut() {
                self.normalize(r, &mut y[i * self.n..][..self.n]);
            }
            if let Some(s) = out.sum.as_deref_mut() {
                for (o, v) in s[i * self.n..][..self.n].iter_mut().zip(self.sums(r)) {
                    *o = T::store(v);
                }
            }
            if out.mean.is_some() || out.inv.is_some() {
                let (mean, inv) = self.stats(r);
                if let Some(m) = out.mean.as_deref_mut() {
                    m[i] = mean.to_f32();
                }
                if let Some(v) = out.inv.as_deref_mut() {
                    v[i] = inv.to_f32();
                }
            }
        }
    }
}

/// One row's operands, each `n` long.
struct Row<'a, T> {
    x: &'a [T],
    skip: &'a [T],
    bias: Option<&'a [T]>,
}

impl<T: Widen> Row<'_, T> {
    /// Element `h` of `input + skip (+ bias)`.
    #[inline(always)]
    fn at(&self, h: usize) -> T::Acc {
        let v = self.x[h].load() + self.skip[h].load();
        match self.bias {
            Some(b) => v + b[h].load(),
            None => v,
        }
    }
}

/// The output slices one `run` call writes.
struct Outs<'a, T> {
    y: Option<&'a mut [T]>,
    mean: Option<&'a mut [f32]>,
    inv: Option<&'a mut [f32]>,
    sum: Option<&'a mut [T]>,
}

impl<T> Default for Outs<'_, T> {
    fn default() -> Self {
        Self {
            y: None,
            mean: None,
            inv: None,
            sum: None,
        }
    }
}

impl SkipNorm {
    fn execute_typed<T: Widen>(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.op();
        let get = |i: usize| inputs.get(i).copied().flatten();
        let x_t = input(op, inputs, 0)?;
        let skip_t = input(op, inputs, 1)?;
        let gamma_t = input(op, inputs, 2)?;
        let (beta_at, bias_at) = self.beta_bias();
        let beta_t = beta_at.and_then(get);
        let bias_t = get(bias_at);
        let n = self.check(
            (x_t.dtype(), x_t.shape()),
            (skip_t.dtype(), skip_t.shape()),
            [
                tensor_info(Some(gamma_t)),
                tensor_info(beta_t),
                tensor_info(bias_t),
            ],
        )?;
        let p = Rows {
            x: typed::<T>(op, x_t)?,
            skip: typed::<T>(op, skip_t)?,
            gamma: typed::<T>(op, gamma_t)?,
            beta: beta_t.map(|t| typed::<T>(op, t)).transpose()?,
            bias: bias_t.map(|t| typed::<T>(op, t)).transpose()?,
            n,
            eps: <T::Acc as Real>::from_f32(self.epsilon),
            simplified: self.simplified,
        };
        let total = p.x.len();
        if n == 0 || total == 0 {
            return Ok(());
        }
        let rows = total / n;
        let mut outs = Outs::<T>::default();
        let count = outputs.len().min(4);
        for (i, t) in outputs[..count].iter_mut().enumerate() {
            match i {
                0 => {
                    let y = typed_mut::<T>(op, t)?;
                    check_len(op, "output", y.len(), total)?;
                    outs.y = Some(y);
                }
                MEAN | INV_STD => {
                    let v = typed_mut::<f32>(op, t)?;
                    check_len(op, "mean/inv_std_var", v.len(), rows)?;
                    if i == MEAN {
                        outs.mean = Some(v);
                    } else {
                        outs.inv = Some(v);
                    }
                }
                _ => {
                    let s = typed_mut::<T>(op, t)?;
                    check_len(op, "input_skip_bias_sum", s.len(), total)?;
                    outs.sum = Some(s);
                }
            }
        }
        if par.threads() <= 1 || total < PARALLEL_MIN_ELEMENTS {
            p.run(0, rows, outs);
            return Ok(());
        }
        // One parallel pass per output, split by rows.
        let chunk = rows_chunk(par, rows, n);
        if let Some(y) = outs.y {
            for_each_chunk_mut(par, y, chunk, &|off, c| {
                let count = c.len() / n;
                let o = Outs {
                    y: Some(c),
                    ..Outs::default()
                };
                p.run(off / n, count, o);
            });
        }
        if let Some(s) = outs.sum {
            for_each_chunk_mut(par, s, chunk, &|off, c| {
                let count = c.len() / n;
                let o = Outs {
                    sum: Some(c),
                    ..Outs::default()
                };
                p.run(off / n, count, o);
            });
        }
        let stat_chunk = chunk / n;
        for (which, v) in [(MEAN, outs.mean), (INV_STD, outs.inv)] {
            let Some(v) = v else { continue };
            for_each_chunk_mut(par, v, stat_chunk, &|off, c| {
                let len = c.len();
                let o = if which == MEAN {
                    Outs {
                        mean: Some(c),
                        ..Outs::default()
                    }
                } else {
                    Outs {
                        inv: Some(c),
                        ..Outs::default()
                    }
                };
                p.run(off, len, o);
            });
        }
        Ok(())
    }
}

fn tensor_info(t: Option<&Tensor>) -> Option<(ElementType, &[usize])> {
    t.map(|t| (t.dtype(), t.shape()))
}

fn input_info<'a>(t: Option<InputInfo<'a>>) -> Option<(ElementType, &'a [usize])> {
    t.map(|t| (t.dtype, t.shape))
}

impl Operator for SkipNorm {
    fn name(&self) -> &'static str {
        self.op()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.op();
        let max = if self.simplified { 4 } else { 5 };
        if !(3..=max).contains(&inputs.len()) {
            return Err(KernelError::Shape(format!(
                "{op}: expected 3 to {max} inputs, got {}",
                inputs.len()
            )));
        }
        let get = |i: usize| inputs.get(i).copied().flatten();
        let (Some(x), Some(skip), Some(gamma)) = (get(0), get(1), get(2)) else {
            return Err(KernelError::Shape(format!(
                "{op}: input, skip and gamma are required"
            )));
        };
        let (beta_at, bias_at) = self.beta_bias();
        let beta = beta_at.and_then(get);
        let bias = get(bias_at);
        self.check(
            (x.dtype, x.shape),
            (skip.dtype, skip.shape),
            [input_info(Some(gamma)), input_info(beta), input_info(bias)],
        )?;
        let mut stat_shape = x.shape.to_vec();
        *stat_shape.last_mut().expect("rank >= 1 checked") = 1;
        let mut out = Vec::with_capacity(self.outputs);
        for i in 0..self.outputs {
            out.push(match i {
                MEAN | INV_STD => OutputInfo {
                    dtype: ElementType::F32,
                    shape: stat_shape.clone(),
                },
                _ => OutputInfo {
                    dtype: x.dtype,
                    shape: x.shape.to_vec(),
                },
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
        let op = self.op();
        match input(op, inputs, 0)?.dtype() {
            ElementType::F32 => self.execute_typed::<f32>(inputs, outputs, par),
            ElementType::F64 => self.execute_typed::<f64>(inputs, outputs, par),
            ElementType::F16 => self.execute_typed::<f16>(inputs, outputs, par),
            ElementType::BF16 => self.execute_typed::<bf16>(inputs, outputs, par),
            dtype => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}
