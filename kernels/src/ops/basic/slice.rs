//! Slice (hot path: copies contiguous runs; untouched trailing axes are
//! merged into the run). Opset 10+ reads starts/ends/axes/steps from
//! constant inputs; opsets 1-9 from attributes (no steps).

use super::common::{
    Attrs, Elem, Ints, MAX_RANK, check_inputs, check_len, check_rank, input, numel, optional,
    output, required, typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Where the slice parameters come from.
#[derive(Debug)]
enum Params {
    /// Opset 1-9 attributes.
    Attributes {
        starts: Vec<i64>,
        ends: Vec<i64>,
        axes: Option<Vec<i64>>,
    },
    /// Opset 10+ inputs 1-4.
    Inputs,
}

/// Slice.
#[derive(Debug)]
pub(crate) struct Slice {
    params: Params,
}

impl Slice {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        if spec.opset >= 10 {
            Attrs::new(spec, "Slice", &[])?;
            return Ok(Self {
                params: Params::Inputs,
            });
        }
        let attrs = Attrs::new(spec, "Slice", &["starts", "ends", "axes"])?;
        let starts = attrs
            .ints("starts")?
            .ok_or_else(|| attrs.error("starts", "is required"))?;
        let ends = attrs
            .ints("ends")?
            .ok_or_else(|| attrs.error("ends", "is required"))?;
        let axes = attrs.ints("axes")?;
        Ok(Self {
            params: Params::Attributes { starts, ends, axes },
        })
    }
}

/// Per input axis: first index, step and number of elements taken.
#[derive(Debug, Clone, Copy)]
struct Plan {
    start: [usize; MAX_RANK],
    step: [isize; MAX_RANK],
    count: [usize; MAX_RANK],
}

fn shape_err(detail: String) -> KernelError {
    KernelError::Shape(format!("Slice: {detail}"))
}

fn plan(
    shape: &[usize],
    starts: Ints<'_>,
    ends: Ints<'_>,
    axes: Option<Ints<'_>>,
    steps: Option<Ints<'_>>,
) -> Result<Plan, KernelError> {
    let r = shape.len();
    check_rank("Slice", r)?;
    let mut p = Plan {
        start: [0; MAX_RANK],
        step: [1; MAX_RANK],
        count: [0; MAX_RANK],
    };
    p.count[..r].copy_from_slice(shape);
    let n = starts.len();
    if ends.len() != n {
        return Err(shape_err(format!("{n} starts but {} ends", ends.len())));
    }
    if let Some(a) = axes
        && a.len() != n
    {
        return Err(shape_err(format!("{n} starts but {} axes", a.len())));
    }
    if let Some(s) = steps
        && s.len() != n
    {
        return Err(shape_err(format!("{n} starts but {} steps", s.len())));
    }
    let mut seen = [false; MAX_RANK];
    for i in 0..n {
        let axis = axes.map_or(i as i64, |a| a.get(i));
        let ri = r as i64;
        if axis < -ri || axis >= ri {
            return Err(shape_err(format!(
                "axis {axis} is out of range for rank {r}"
            )));
        }
        let axis = if axis < 0 { axis + ri } else { axis } as usize;
        if seen[axis] {
            return Err(shape_err(format!("axis {axis} is repeated")));
        }
        seen[axis] = true;
        let step = steps.map_or(1, |s| s.get(i));
        if step == 0 {
            return Err(shape_err("steps must not be 0".into()));
        }
        let d = shape[axis] as i128;
        let (mut s, mut e, st) = (starts.get(i) as i128, ends.get(i) as i128, step as i128);
        if s < 0 {
            s += d;
        }
        if e < 0 {
            e += d;
        }
        let count = if st > 0 {
            s = s.clamp(0, d);
            e = e.clamp(0, d);
            if e > s { (e - s - 1) / st + 1 } else { 0 }
        } else if d == 0 {
            s = 0;
            0
        } else {
            s = s.clamp(0, d - 1);
            e = e.clamp(-1, d - 1);
            if s > e { (s - e - 1) / (-st) + 1 } else { 0 }
        };
        p.start[axis] = s as usize;
        p.count[axis] = count as usize;
        // A step only matters when more than one element is taken, and then
        // its magnitude is below the dimension.
        p.step[axis] = if count > 1 { st as isize } else { 1 };
        if count == 0 {
            p.start[axis] = 0;
        }
    }
    Ok(p)
}

fn ints(t: Option<&Tensor>) -> Result<Option<Ints<'_>>, KernelError> {
    t.map(|t| Ints::of("Slice", t)).transpose()
}

fn slice<T: Elem>(p: &Plan, x: &Tensor, y: &mut Tensor) -> Result<(), KernelError> {
    let shape = x.shape();
    let r = shape.len();
    let src = typed::<T>("Slice", x)?;
    let dst = typed_mut::<T>("Slice", y)?;
    check_len("Slice", "output", dst.len(), numel(&p.count[..r]))?;
    if dst.is_empty() {
        return Ok(());
    }
    if r == 0 {
        dst.copy_from_slice(src);
        return Ok(());
    }
    let mut strides = [0usize; MAX_RANK];
    let mut s = 1;
    for d in (0..r).rev() {
        strides[d] = s;
        s *= shape[d];
    }
    let full = |d: usize| p.start[d] == 0 && p.step[d] == 1 && p.count[d] == shape[d];
    let mut j = r - 1;
    while j > 0 && full(j) {
        j -= 1;
    }
    let block = strides[j];
    let (count_j, step_j) = (p.count[j], p.step[j]);
    let mut off: isize = (0..j).map(|d| (p.start[d] * strides[d]) as isize).sum();
    let first = (p.start[j] * strides[j]) as isize;
    let jump = step_j * block as isize;
    let mut idx = [0usize; MAX_RANK];
    for chunk in dst.chunks_exact_mut(count_j * block) {
        let base = off + first;
        if step_j == 1 {
            let b = base as usize;
            chunk.copy_from_slice(&src[b..b + count_j * block]);
        } else if block == 1 {
            for (k, o) in chunk.iter_mut().enumerate() {
                *o = src[(base + k as isize * jump) as usize];
            }
        } else {
            for (k, run) in chunk.chunks_exact_mut(block).enumerate() {
                let b = (base + k as isize * jump) as usize;
                run.copy_from_slice(&src[b..b + block]);
            }
        }
        let mut d = j;
        while d > 0 {
            d -= 1;
            let delta = p.step[d] * strides[d] as isize;
            idx[d] += 1;
            off += delta;
            if idx[d] < p.count[d] {
                break;
            }
            off -= delta * p.count[d] as isize;
            idx[d] = 0;
        }
    }
    Ok(())
}

impl Operator for Slice {
    fn name(&self) -> &'static str {
        "Slice"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let p = match &self.params {
            Params::Attributes { starts, ends, axes } => {
                let inputs = check_inputs("Slice", inputs, 1, 1)?;
                let x = required("Slice", inputs, 0)?;
                (
                    x,
                    plan(
                        x.shape,
                        Ints::I64(starts),
                        Ints::I64(ends),
                        axes.as_deref().map(Ints::I64),
                        None,
                    )?,
                )
            }
            Params::Inputs => {
                let inputs = check_inputs("Slice", inputs, 3, 5)?;
                let x = required("Slice", inputs, 0)?;
                let mut tensors: [Option<&Tensor>; 4] = [None; 4];
                for (i, t) in tensors.iter_mut().enumerate() {
                    let Some(info) = optional(inputs, i + 1) else {
                        if i < 2 {
                            return Err(KernelError::Shape(format!(
                                "Slice: input {} is required",
                                i + 1
                            )));
                        }
                        continue;
                    };
                    let v = info.value.ok_or_else(|| KernelError::NeedsConstant {
                        op: "Slice",
                        input: i + 1,
                    })?;
                    if v.shape().len() != 1 {
                        return Err(shape_err(format!(
                            "input {} must be 1-D, got {:?}",
                            i + 1,
                            v.shape()
                        )));
                    }
                    *t = Some(v);
                }
                let (Some(starts), Some(ends)) = (ints(tensors[0])?, ints(tensors[1])?) else {
                    return Err(shape_err("starts and ends are required".into()));
                };
                (
                    x,
                    plan(x.shape, starts, ends, ints(tensors[2])?, ints(tensors[3])?)?,
                )
            }
        };
        let (x, p) = p;
        if matches!(x.dtype, ElementType::I4 | ElementType::U4) {
            return Err(KernelError::UnsupportedType {
                op: "Slice",
                dtype: x.dtype,
            });
        }
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: p.count[..x.shape.len()].to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Slice", inputs, 0)?;
        let p = match &self.params {
            Params::Attributes { starts, ends, axes } => plan(
                x.shape(),
                Ints::I64(starts),
                Ints::I64(ends),
                axes.as_deref().map(Ints::I64),
                None,
            )?,
            Params::Inputs => {
                let at = |i: usize| inputs.get(i).copied().flatten();
                let starts = Ints::of("Slice", input("Slice", inputs, 1)?)?;
                let ends = Ints::of("Slice", input("Slice", inputs, 2)?)?;
                plan(x.shape(), starts, ends, ints(at(3))?, ints(at(4))?)?
            }
        };
        let y = output("Slice", outputs, 0)?;
        dispatch_any!(x.dtype(), T => slice::<T>(&p, x, y),
            else Err(KernelError::UnsupportedType { op: "Slice", dtype: x.dtype() }))
    }
}
