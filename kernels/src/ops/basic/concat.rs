//! Concat and Split along one axis (hot path: one contiguous copy per
//! input/output and outer index; large outputs split by outer index across
//! the caller's threads).

use super::common::{
    Attrs, Elem, check_inputs, checked_count, constant_ints, input, normalize_axis, numel,
    optional, overflow, required, typed, typed_mut,
};
use crate::par::{for_len, rows_chunk};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Concat.
#[derive(Debug)]
pub(crate) struct Concat {
    axis: i64,
}

impl Concat {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "Concat", &["axis"])?;
        let axis = match attrs.int("axis")? {
            Some(a) => a,
            // Concat-1 defaulted to axis 1; later versions require it.
            None if spec.opset < 4 => 1,
            None => return Err(attrs.error("axis", "is required")),
        };
        Ok(Self { axis })
    }
}

fn concat<T: Elem>(
    axis: usize,
    inputs: &[Option<&Tensor>],
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    // The shape outlives the mutable borrow of `out`: copied to the stack
    // (no allocation per run) unless the rank is unusually high.
    let mut inline = [0usize; 8];
    let spilled;
    let rank = out.shape().len();
    let out_shape: &[usize] = if rank <= inline.len() {
        inline[..rank].copy_from_slice(out.shape());
        &inline[..rank]
    } else {
        spilled = out.shape().to_vec();
        &spilled
    };
    let dst = typed_mut::<T>("Concat", out)?;
    if dst.is_empty() {
        // Nothing to copy (the other dims of an empty output may be huge).
        return Ok(());
    }
    let bad = |detail: String| KernelError::Invalid {
        op: "Concat",
        detail,
    };
    if out_shape.len() <= axis {
        return Err(bad(format!(
            "output shape {out_shape:?} has no axis {axis}"
        )));
    }
    let outer = numel(&out_shape[..axis]);
    let inner = numel(&out_shape[axis + 1..]);
    let row = numel(&[out_shape[axis], inner]);
    // Check every input against the output before copying.
    let mut total = 0;
    for (i, t) in inputs.iter().enumerate() {
        let t = t.ok_or_else(|| bad(format!("input {i} is missing")))?;
        let s = t.shape();
        let ok = s.len() == out_shape.len()
            && s.iter()
                .zip(out_shape)
                .enumerate()
                .all(|(d, (a, b))| d == axis || a == b);
        if !ok {
            return Err(bad(format!(
                "input {i} shape {s:?} does not fit output {out_shape:?}"
            )));
        }
        typed::<T>("Concat", t)?;
        total += s[axis];
    }
    if total != out_shape[axis] || dst.len() != outer * row {
        return Err(bad(format!(
            "inputs do not add up to output shape {out_shape:?}"
        )));
    }
    if dst.is_empty() {
        return Ok(());
    }
    // Each input's elements and its share of a row (on the stack for up
    // to eight inputs).
    let mut inline_srcs = [(&[] as &[T], 0usize); 8];
    let spilled_srcs: Vec<(&[T], usize)>;
    let count = inputs.iter().flatten().count();
    let srcs: &[(&[T], usize)] = if count <= inline_srcs.len() {
        for (slot, t) in inline_srcs.iter_mut().zip(inputs.iter().flatten()) {
            *slot = (typed::<T>("Concat", t)?, t.shape()[axis] * inner);
        }
        &inline_srcs[..count]
    } else {
        spilled_srcs = inputs
            .iter()
            .flatten()
            .map(|t| Ok((typed::<T>("Concat", t)?, t.shape()[axis] * inner)))
            .collect::<Result<_, KernelError>>()?;
        &spilled_srcs
    };
    let par = for_len(par, dst.len());
    let chunk = rows_chunk(par, outer, row);
    for_each_chunk_mut(par, dst, chunk, &|offset, rows: &mut [T]| {
        for (i, dst_row) in rows.chunks_exact_mut(row).enumerate() {
            let o = offset / row + i;
            let mut at = 0;
            for &(src, n) in srcs {
                dst_row[at..at + n].copy_from_slice(&src[o * n..(o + 1) * n]);
                at += n;
            }
        }
    });
    Ok(())
}

impl Operator for Concat {
    fn name(&self) -> &'static str {
        "Concat"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Concat", inputs, 1, usize::MAX)?;
        let first = required("Concat", inputs, 0)?;
        if matches!(first.dtype, ElementType::I4 | ElementType::U4) {
            return Err(KernelError::UnsupportedType {
                op: "Concat",
                dtype: first.dtype,
            });
        }
        let rank = first.shape.len();
        if rank == 0 {
            return Err(KernelError::Shape(
                "Concat: inputs must have rank >= 1".into(),
            ));
        }
        let axis = normalize_axis("Concat", "axis", self.axis, rank)?;
        let mut shape = first.shape.to_vec();
        shape[axis] = 0;
        for i in 0..inputs.len() {
            let t = required("Concat", inputs, i)?;
            if t.dtype != first.dtype {
                return Err(KernelError::Shape(format!(
                    "Concat: input {i} has type {} but input 0 has {}",
                    t.dtype, first.dtype
                )));
            }
            let ok = t.shape.len() == rank
                && (0..rank).all(|d| d == axis || t.shape[d] == first.shape[d]);
            if !ok {
                return Err(KernelError::Shape(format!(
                    "Concat: input {i} shape {:?} differs from input 0 shape {:?} outside axis {axis}",
                    t.shape, first.shape
                )));
            }
            shape[axis] = shape[axis]
                .checked_add(t.shape[axis])
                .ok_or_else(|| overflow("Concat", format!("the sum of sizes along axis {axis}")))?;
        }
        checked_count("Concat", &shape)?;
        Ok(vec![OutputInfo {
            dtype: first.dtype,
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
        let first = input("Concat", inputs, 0)?;
        let out = outputs.first_mut().ok_or_else(|| KernelError::Invalid {
            op: "Concat",
            detail: "no output given".into(),
        })?;
        let axis = normalize_axis("Concat", "axis", self.axis, first.shape().len())?;
        dispatch_any!(first.dtype(), T => concat::<T>(axis, inputs, out, par),
            else Err(KernelError::UnsupportedType { op: "Concat", dtype: first.dtype() }))
    }
}

/// Where Split's chunk sizes come from.
#[derive(Debug)]
enum Sizes {
    /// Opset < 13: the `split` attribute (or equal parts when absent).
    Attribute(Option<Vec<i64>>),
    /// Opset 13+: the optional constant `split` input, else equal parts.
    Input,
    /// Opset 18+: `num_outputs` parts of ceil(dim / n), the last smaller.
    NumOutputs(usize),
}

/// Split.
#[derive(Debug)]
pub(crate) struct Split {
    axis: i64,
    outputs: usize,
    sizes: Sizes,
}

impl Split {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = match spec.opset {
            ..13 => &["axis", "split"],
            13..18 => &["axis"],
            _ => &["axis", "num_outputs"],
        };
        let attrs = Attrs::new(spec, "Split", allowed)?;
        let axis = attrs.int_or("axis", 0)?;
        if spec.outputs == 0 {
            return Err(KernelError::Shape(
                "Split: at least one output is required".into(),
            ));
        }
        let sizes = if spec.opset < 13 {
            Sizes::Attribute(attrs.ints("split")?)
        } else if let Some(n) = attrs.int("num_outputs")? {
            if n < 1 || n as usize != spec.outputs {
                return Err(attrs.error(
                    "num_outputs",
                    format!("{n} does not match the node's {} outputs", spec.outputs),
                ));
            }
            if spec.inputs > 1 {
                return Err(attrs.error("num_outputs", "given together with the split input"));
            }
            Sizes::NumOutputs(n as usize)
        } else {
            Sizes::Input
        };
        Ok(Self {
            axis,
            outputs: spec.outputs,
            sizes,
        })
    }

    fn sizes(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        dim: usize,
    ) -> Result<Vec<usize>, KernelError> {
        let n = self.outputs;
        let explicit = match &self.sizes {
            Sizes::Attribute(s) => {
                // Split-1 could also take the sizes as a second input.
                match (s, optional(inputs, 1)) {
                    (Some(s), _) => Some(s.clone()),
                    (None, Some(info)) => Some(constant_ints("Split", info, 1)?),
                    (None, None) => None,
                }
            }
            Sizes::Input => match optional(inputs, 1) {
                Some(info) => Some(constant_ints("Split", info, 1)?),
                None => None,
            },
            Sizes::NumOutputs(k) => {
                let chunk = dim.div_ceil(*k);
                return Ok((0..*k)
                    .map(|i| chunk.min(dim.saturating_sub(i.saturating_mul(chunk))))
                    .collect());
            }
        };
        match explicit {
            Some(s) => {
                if s.len() != n {
                    return Err(KernelError::Shape(format!(
                        "Split: {} split sizes for {n} outputs",
                        s.len()
                    )));
                }
                let sum = s
                    .iter()
                    .try_fold(0i64, |acc, &v| acc.checked_add(v))
                    .ok_or_else(|| overflow("Split", format!("the sum of sizes {s:?}")))?;
                if s.iter().any(|&v| v < 0) || usize::try_from(sum) != Ok(dim) {
                    return Err(KernelError::Shape(format!(
                        "Split: sizes {s:?} do not add up to the axis size {dim}"
                    )));
                }
                Ok(s.iter().map(|&v| v as usize).collect())
            }
            None => {
                if !dim.is_multiple_of(n) {
                    return Err(KernelError::Shape(format!(
                        "Split: axis size {dim} is not divisible into {n} equal parts"
                    )));
                }
                Ok(vec![dim / n; n])
            }
        }
    }
}

fn split<T: Elem>(
    axis: usize,
    x: &Tensor,
    outputs: &mut [Tensor],
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let shape = x.shape();
    let src = typed::<T>("Split", x)?;
    if src.is_empty() {
        // Nothing to copy (the other dims of an empty input may be huge).
        return Ok(());
    }
    let bad = |detail: String| KernelError::Invalid {
        op: "Split",
        detail,
    };
    let outer = numel(&shape[..axis]);
    let inner = numel(&shape[axis + 1..]);
    let row = numel(&[shape[axis], inner]);
    let mut total = 0;
    for (k, t) in outputs.iter().enumerate() {
        let s = t.shape();
        let ok = s.len() == shape.len()
            && s.iter()
                .zip(shape)
                .enumerate()
                .all(|(d, (a, b))| d == axis || a == b);
        if !ok {
            return Err(bad(format!(
                "output {k} shape {s:?} does not fit input {shape:?}"
            )));
        }
        total += s[axis];
    }
    if total != shape[axis] {
        return Err(bad(format!(
            "output sizes do not add up to the input's axis {axis}"
        )));
    }
    let mut at = 0;
    for t in outputs.iter_mut() {
        let n = t.shape()[axis] * inner;
        let dst = typed_mut::<T>("Split", t)?;
        if n > 0 {
            let dst = dst
                .get_mut(..outer * n)
                .ok_or_else(|| bad(format!("an output holds fewer than {outer} x {n} elements")))?;
            let par = for_len(par, dst.len());
            let chunk = rows_chunk(par, outer, n);
            for_each_chunk_mut(par, dst, chunk, &|offset, rows: &mut [T]| {
                for (i, part) in rows.chunks_exact_mut(n).enumerate() {
                    let o = offset / n + i;
                    part.copy_from_slice(&src[o * row + at..o * row + at + n]);
                }
            });
        }
        at += n;
    }
    Ok(())
}

impl Operator for Split {
    fn name(&self) -> &'static str {
        "Split"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Split", inputs, 1, 2)?;
        let x = required("Split", inputs, 0)?;
        if matches!(x.dtype, ElementType::I4 | ElementType::U4) {
            return Err(KernelError::UnsupportedType {
                op: "Split",
                dtype: x.dtype,
            });
        }
        if x.shape.is_empty() {
            return Err(KernelError::Shape(
                "Split: input must have rank >= 1".into(),
            ));
        }
        let axis = normalize_axis("Split", "axis", self.axis, x.shape.len())?;
        let sizes = self.sizes(inputs, x.shape[axis])?;
        Ok(sizes
            .into_iter()
            .map(|s| {
                let mut shape = x.shape.to_vec();
                shape[axis] = s;
                OutputInfo {
                    dtype: x.dtype,
                    shape,
                }
            })
            .collect())
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Split", inputs, 0)?;
        if x.shape().is_empty() {
            return Err(KernelError::Invalid {
                op: "Split",
                detail: "input must have rank >= 1".into(),
            });
        }
        let axis = normalize_axis("Split", "axis", self.axis, x.shape().len())?;
        dispatch_any!(x.dtype(), T => split::<T>(axis, x, outputs, par),
            else Err(KernelError::UnsupportedType { op: "Split", dtype: x.dtype() }))
    }
}
