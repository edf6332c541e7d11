//! TopK and OneHot: selection and encoding operators of detection and
//! classification heads whose output shapes follow from constant operands
//! (`K`, `depth`). Hot path: TopK selects per row with a partial sort into a
//! per-task index buffer (ties toward the lower index) and splits rows
//! across threads; OneHot fills whole `[depth, inner]` blocks.

use crate::ops::basic::common::{
    Attrs, Elem, check_inputs, check_len, constant_ints, input, normalize_axis, numel, output,
    required, typed, typed_mut,
};
use crate::ops::normalize::common::flag;
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::{
    DataRef, ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight,
    ParallelFor, Tensor, for_each_chunk_mut,
};

/// Whether `dtype` is a numeric type with a compute representation (not
/// bool, not the storage-only 4-bit types).
fn is_number(dtype: ElementType) -> bool {
    !matches!(dtype, ElementType::Bool | ElementType::I4 | ElementType::U4)
}

/// Where TopK's `k` comes from.
#[derive(Debug, Clone, Copy)]
enum KFrom {
    /// The `k` attribute (opset 1).
    Attribute(i64),
    /// Input 1 (opset 10+), a constant one-element int64 tensor.
    Input,
}

/// TopK.
#[derive(Debug)]
pub(crate) struct TopK {
    k: KFrom,
    axis: i64,
    largest: bool,
}

impl TopK {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let op = "TopK";
        let allowed: &[&'static str] = match spec.opset {
            ..10 => &["axis", "k"],
            10 => &["axis"],
            _ => &["axis", "largest", "sorted"],
        };
        let attrs = Attrs::new(spec, op, allowed)?;
        let k = if spec.opset < 10 {
            match attrs.int("k")? {
                Some(k) => KFrom::Attribute(k),
                None => return Err(attrs.error("k", "is required before opset 10")),
            }
        } else {
            KFrom::Input
        };
        let largest = flag(&attrs, "largest", true)?;
        // `sorted = 0` leaves the order unspecified: sorted output is one.
        flag(&attrs, "sorted", true)?;
        if spec.outputs != 2 {
            return Err(KernelError::Shape(format!(
                "{op}: {} outputs requested where TopK has 2 (Values, Indices)",
                spec.outputs
            )));
        }
        Ok(Self {
            k,
            axis: attrs.int_or("axis", -1)?,
            largest,
        })
    }

    /// `(outer, n, inner)` around the axis and `k`, checked.
    fn layout(&self, shape: &[usize], k: i64) -> Result<[usize; 4], KernelError> {
        if shape.is_empty() {
            return Err(KernelError::Shape("TopK: X must have rank >= 1".into()));
        }
        let axis = normalize_axis("TopK", "axis", self.axis, shape.len())?;
        let n = shape[axis];
        let k = usize::try_from(k).ok().filter(|&k| k <= n).ok_or_else(|| {
            KernelError::Shape(format!(
                "TopK: k = {k} must be in [0, {n}] (the size of axis {axis} of X {shape:?})"
            ))
        })?;
        Ok([numel(&shape[..axis]), n, numel(&shape[axis + 1..]), k])
    }

    /// `k` from the attribute or a constant input 1.
    fn k_value(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<i64, KernelError> {
        match self.k {
            KFrom::Attribute(k) => Ok(k),
            KFrom::Input => {
                let info = required("TopK", inputs, 1)?;
                k_of(constant_ints("TopK", info, 1)?)
            }
        }
    }
}

/// The single value of a K operand.
fn k_of(v: Vec<i64>) -> Result<i64, KernelError> {
    match v[..] {
        [k] => Ok(k),
        _ => Err(KernelError::Shape(format!(
            "TopK: K must hold exactly one value, got {v:?}"
        ))),
    }
}

/// Whether `a` ranks before `b` (values compared, NaN above every number;
/// ties to the lower index).
#[inline(always)]
fn before<T: PartialOrd>(largest: bool, (ia, a): (usize, T), (ib, b): (usize, T)) -> bool {
    use std::cmp::Ordering::*;
    let ord = match a.partial_cmp(&b) {
        Some(o) => o,
        // NaN: equal to NaN, above numbers.
        None => match (a.partial_cmp(&a).is_none(), b.partial_cmp(&b).is_none()) {
            (true, true) => Equal,
            (true, false) => Greater,
            _ => Less,
        },
    };
    match (ord, largest) {
        (Greater, true) | (Less, false) => true,
        (Equal, _) => ia < ib,
        _ => false,
    }
}

/// Writes the indices (along the axis) of the top `k` of every row.
fn top_indices<T: Elem + PartialOrd>(
    x: &[T],
    idx: &mut [i64],
    [_, n, inner, k]: [usize; 4],
    largest: bool,
    par: &dyn ParallelFor,
) {
    let block = k * inner;
    if block == 0 {
        return;
    }
    let chunk = if x.len() < PARALLEL_MIN_ELEMENTS {
        idx.len()
    } else {
        rows_chunk(par, idx.len() / block, block)
    };
    for_each_chunk_mut(par, idx, chunk, &|offset, part: &mut [i64]| {
        // One buffer per task, reused for every row.
        let mut order: Vec<usize> = Vec::with_capacity(n);
        for (b, ob) in part.chunks_exact_mut(block).enumerate() {
            let xb = &x[(offset / block + b) * n * inner..][..n * inner];
            for j in 0..inner {
                let at = |i: usize| (i, xb[i * inner + j]);
                let cmp = |&a: &usize, &b: &usize| {
                    if before(largest, at(a), at(b)) {
                        std::cmp::Ordering::Less
                    } else if before(largest, at(b), at(a)) {
                        std::cmp::Ordering::Greater
                    } else {
                        std::cmp::Ordering::Equal
                    }
                };
                order.clear();
                order.extend(0..n);
                if k < n {
                    order.select_nth_unstable_by(k - 1, cmp);
                }
                order[..k].sort_unstable_by(cmp);
                for (r, &i) in order[..k].iter().enumerate() {
                    ob[r * inner + j] = i as i64;
                }
            }
        }
    });
}

/// Values from the chosen indices.
fn gather_values<T: Elem>(x: &[T], idx: &[i64], vals: &mut [T], [_, n, inner, k]: [usize; 4]) {
    let block = k * inner;
    if block == 0 {
        return;
    }
    for (b, (vb, ib)) in vals
        .chunks_exact_mut(block)
        .zip(idx.chunks_exact(block))
        .enumerate()
    {
        let xb = &x[b * n * inner..];
        for (p, (v, &i)) in vb.iter_mut().zip(ib).enumerate() {
            *v = xb[i as usize * inner + p % inner];
        }
    }
}

impl Operator for TopK {
    fn name(&self) -> &'static str {
        "TopK"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let max = if matches!(self.k, KFrom::Input) { 2 } else { 1 };
        let inputs = check_inputs("TopK", inputs, max, max)?;
        let x = required("TopK", inputs, 0)?;
        if !is_number(x.dtype) {
            return Err(KernelError::UnsupportedType {
                op: "TopK",
                dtype: x.dtype,
            });
        }
        let k = self.k_value(inputs)?;
        let [_, _, _, k] = self.layout(x.shape, k)?;
        let axis = normalize_axis("TopK", "axis", self.axis, x.shape.len())?;
        let mut shape = x.shape.to_vec();
        shape[axis] = k;
        Ok(vec![
            OutputInfo {
                dtype: x.dtype,
                shape: shape.clone(),
            },
            OutputInfo {
                dtype: ElementType::I64,
                shape,
            },
        ])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = "TopK";
        let x = input(op, inputs, 0)?;
        let k = match self.k {
            KFrom::Attribute(k) => k,
            KFrom::Input => {
                let t = input(op, inputs, 1)?;
                k_of(t.to_i64_vec().ok_or(KernelError::UnsupportedType {
                    op,
                    dtype: t.dtype(),
                })?)?
            }
        };
        let l = self.layout(x.shape(), k)?;
        let [vals, idx] = outputs else {
            return Err(KernelError::Invalid {
                op,
                detail: format!("{} outputs given where TopK has 2", outputs.len()),
            });
        };
        let idx = typed_mut::<i64>(op, idx)?;
        check_len(op, "Indices", idx.len(), l[0] * l[2] * l[3])?;
        let largest = self.largest;
        dispatch_num!(x.dtype(), T => {
            let xs = typed::<T>(op, x)?;
            let vs = typed_mut::<T>(op, vals)?;
            check_len(op, "Values", vs.len(), idx.len())?;
            top_indices(xs, idx, l, largest, par);
            gather_values(xs, idx, vs, l);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}

/// OneHot: `values[1]` where the index (negative ones counted from
/// `depth`) equals the position along the new `axis`, `values[0]`
/// elsewhere (also for indices out of range).
#[derive(Debug)]
pub(crate) struct OneHot {
    axis: i64,
}

impl OneHot {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "OneHot", &["axis"])?;
        Ok(Self {
            axis: attrs.int_or("axis", -1)?,
        })
    }

    /// The new axis's position in the output.
    fn out_axis(&self, rank: usize) -> Result<usize, KernelError> {
        normalize_axis("OneHot", "axis", self.axis, rank + 1)
    }
}

/// The single numeric value of a `depth` tensor, truncated to an integer.
fn depth_of(t: &Tensor) -> Result<usize, KernelError> {
    let bad = |what: String| KernelError::Shape(format!("OneHot: depth {what}"));
    if t.len() != 1 || t.shape().len() > 1 {
        return Err(bad(format!(
            "must be a scalar or one-element tensor, got shape {:?}",
            t.shape()
        )));
    }
    let v = scalar_f64(t).ok_or(KernelError::UnsupportedType {
        op: "OneHot",
        dtype: t.dtype(),
    })?;
    if !(v >= 1.0 && v < 2f64.powi(53)) {
        return Err(bad(format!("{v} must be a whole number of classes >= 1")));
    }
    Ok(v as usize)
}

/// Element 0 of a numeric tensor as f64.
fn scalar_f64(t: &Tensor) -> Option<f64> {
    Some(match t.data() {
        DataRef::F32(v) => f64::from(*v.first()?),
        DataRef::F64(v) => *v.first()?,
        DataRef::F16(v) => v.first()?.to_f64(),
        DataRef::BF16(v) => v.first()?.to_f64(),
        DataRef::I8(v) => f64::from(*v.first()?),
        DataRef::I16(v) => f64::from(*v.first()?),
        DataRef::I32(v) => f64::from(*v.first()?),
        DataRef::I64(v) => *v.first()? as f64,
        DataRef::U8(v) => f64::from(*v.first()?),
        DataRef::U16(v) => f64::from(*v.first()?),
        DataRef::U32(v) => f64::from(*v.first()?),
        DataRef::U64(v) => *v.first()? as f64,
        _ => return None,
    })
}

/// Indices as i64 (floats truncated toward zero), one pass per type.
fn indices_i64(t: &Tensor, out: &mut Vec<i64>) -> Result<(), KernelError> {
    macro_rules! widen {
        ($v:expr) => {
            out.extend($v.iter().map(|&x| x as i64))
        };
    }
    match t.data() {
        DataRef::F32(v) => widen!(v),
        DataRef::F64(v) => widen!(v),
        DataRef::F16(v) => out.extend(v.iter().map(|x| x.to_f32() as i64)),
        DataRef::BF16(v) => out.extend(v.iter().map(|x| x.to_f32() as i64)),
        DataRef::I8(v) => widen!(v),
        DataRef::I16(v) => widen!(v),
        DataRef::I32(v) => widen!(v),
        DataRef::I64(v) => out.extend_from_slice(v),
        DataRef::U8(v) => widen!(v),
        DataRef::U16(v) => widen!(v),
        DataRef::U32(v) => widen!(v),
        DataRef::U64(v) => out.extend(v.iter().map(|&x| i64::try_from(x).unwrap_or(i64::MAX))),
        _ => {
            return Err(KernelError::UnsupportedType {
                op: "OneHot",
                dtype: t.dtype(),
            });
        }
    }
    Ok(())
}

fn one_hot<T: Elem>(
    idx: &[i64],
    values: &[T],
    out: &mut [T],
    (depth, inner): (usize, usize),
    par: &dyn ParallelFor,
) {
    let block = depth * inner;
    if block == 0 || out.is_empty() {
        return;
    }
    let (off, on) = (values[0], values[1]);
    let chunk = if out.len() < PARALLEL_MIN_ELEMENTS {
        out.len()
    } else {
        rows_chunk(par, out.len() / block, block)
    };
    let d = depth as i64;
    for_each_chunk_mut(par, out, chunk, &|offset, part: &mut [T]| {
        part.fill(off);
        for (b, ob) in part.chunks_exact_mut(block).enumerate() {
            let first = (offset / block + b) * inner;
            for (j, &i) in idx[first..first + inner].iter().enumerate() {
                let i = if i < 0 { i + d } else { i };
                if (0..d).contains(&i) {
                    ob[i as usize * inner + j] = on;
                }
            }
        }
    });
}

impl Operator for OneHot {
    fn name(&self) -> &'static str {
        "OneHot"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = "OneHot";
        let inputs = check_inputs(op, inputs, 3, 3)?;
        let (idx, depth, values) = (
            required(op, inputs, 0)?,
            required(op, inputs, 1)?,
            required(op, inputs, 2)?,
        );
        if !is_number(idx.dtype) {
            return Err(KernelError::UnsupportedType {
                op,
                dtype: idx.dtype,
            });
        }
        if matches!(values.dtype, ElementType::I4 | ElementType::U4) {
            return Err(KernelError::UnsupportedType {
                op,
                dtype: values.dtype,
            });
        }
        if numel(values.shape) != 2 || values.shape.len() != 1 {
            return Err(KernelError::Shape(format!(
                "OneHot: values must be [off_value, on_value] (shape [2]), got {:?}",
                values.shape
            )));
        }
        let depth = depth_of(
            depth
                .value
                .ok_or(KernelError::NeedsConstant { op, input: 1 })?,
        )?;
        let axis = self.out_axis(idx.shape.len())?;
        let mut shape = idx.shape.to_vec();
        shape.insert(axis, depth);
        Ok(vec![OutputInfo {
            dtype: values.dtype,
            shape,
        }])
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        inputs
            .first()
            .copied()
            .flatten()
            .map_or(0, |i| numel(i.shape).saturating_mul(8))
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = "OneHot";
        let (idx_t, values) = (input(op, inputs, 0)?, input(op, inputs, 2)?);
        let depth = depth_of(input(op, inputs, 1)?)?;
        let axis = self.out_axis(idx_t.shape().len())?;
        let inner = numel(&idx_t.shape()[axis..]);
        let mut idx = Vec::new();
        idx.try_reserve_exact(idx_t.len())
            .map_err(|_| KernelError::Allocation {
                op,
                bytes: idx_t.len().saturating_mul(8),
            })?;
        indices_i64(idx_t, &mut idx)?;
        let out = output(op, outputs, 0)?;
        check_len(op, "values", values.len(), 2)?;
        dispatch_any!(values.dtype(), T => {
            let (vs, os) = (typed::<T>(op, values)?, typed_mut::<T>(op, out)?);
            check_len(op, "output", os.len(), idx.len().saturating_mul(depth))?;
            one_hot(&idx, vs, os, (depth, inner), par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: values.dtype() }))
    }
}
