//! ScatterND and ScatterElements: the output is a copy of `data` with the
//! `updates` written (or combined by `reduction`: add, mul, max, min) at the
//! positions `indices` address, applied in index order. Negative indices
//! count from the end; out-of-range ones are errors.

use super::common::{Num, check_index_type, check_storable, strides, wrap_index};
use super::gather::{elements_axis, for_each_element};
use crate::ops::basic::common::{
    Attrs, Elem, Ints, check_inputs, check_len, check_rank, input, numel, output, required, typed,
    typed_mut,
};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
};

/// How an update combines with the current value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Reduction {
    fn parse(attrs: &Attrs<'_>, opset: i64) -> Result<Self, KernelError> {
        let Some(s) = attrs.string("reduction")? else {
            return Ok(Self::None);
        };
        let r = match s.as_str() {
            "none" => Self::None,
            "add" => Self::Add,
            "mul" => Self::Mul,
            "max" if opset >= 18 => Self::Max,
            "min" if opset >= 18 => Self::Min,
            _ => {
                let allowed = if opset >= 18 {
                    "none, add, mul, max, min"
                } else {
                    "none, add, mul (max and min from opset 18)"
                };
                return Err(attrs.error(
                    "reduction",
                    format!("`{s}` is not supported at opset {opset} (allowed: {allowed})"),
                ));
            }
        };
        Ok(r)
    }

    fn func<T: Num>(self) -> fn(T, T) -> T {
        match self {
            Self::None => |_, u| u,
            Self::Add => T::add,
            Self::Mul => T::mul,
            Self::Max => T::max,
            Self::Min => T::min,
        }
    }
}

/// Runs `$body` with `$T` and `$f: fn(T, T) -> T` for the reduction: any
/// type without one, numeric types with one.
macro_rules! with_reduction {
    ($op:expr, $red:expr, $dtype:expr, $T:ident, $f:ident => $body:expr) => {{
        let dtype = $dtype;
        let err = KernelError::UnsupportedType { op: $op, dtype };
        if $red == Reduction::None {
            dispatch_any!(dtype, $T => {
                let $f: fn($T, $T) -> $T = |_, u| u;
                $body
            }, else Err(err))
        } else {
            dispatch_num!(dtype, $T => {
                let $f: fn($T, $T) -> $T = $red.func::<$T>();
                $body
            }, else Err(err))
        }
    }};
}

fn check_updates(
    op: &'static str,
    data: InputInfo<'_>,
    updates: InputInfo<'_>,
) -> Result<(), KernelError> {
    check_storable(op, data.dtype)?;
    if updates.dtype != data.dtype {
        return Err(KernelError::Shape(format!(
            "{op}: updates are {} but data is {}",
            updates.dtype, data.dtype
        )));
    }
    Ok(())
}

/// ScatterND.
#[derive(Debug)]
pub(crate) struct ScatterNd {
    reduction: Reduction,
}

impl ScatterNd {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = if spec.opset >= 16 {
            &["reduction"]
        } else {
            &[]
        };
        let attrs = Attrs::new(spec, "ScatterND", allowed)?;
        Ok(Self {
            reduction: Reduction::parse(&attrs, spec.opset)?,
        })
    }
}

fn scatter_nd_shapes(
    data: &[usize],
    indices: &[usize],
    updates: &[usize],
) -> Result<(), KernelError> {
    let err = |d: &str| {
        KernelError::Shape(format!(
            "ScatterND: {d} (data {data:?}, indices {indices:?}, updates {updates:?})"
        ))
    };
    let (r, q) = (data.len(), indices.len());
    if r == 0 || q == 0 {
        return Err(err("data and indices must have rank >= 1"));
    }
    check_rank("ScatterND", r)?;
    let k = indices[q - 1];
    if k < 1 || k > r {
        return Err(err("the last indices dimension must be in 1..=rank(data)"));
    }
    let mut want = indices[..q - 1].to_vec();
    want.extend_from_slice(&data[k..]);
    if updates != want.as_slice() {
        return Err(err("updates must have shape indices[:-1] + data[k:]"));
    }
    Ok(())
}

fn scatter_nd<T: Elem>(
    data: &Tensor,
    it: &Tensor,
    updates: &Tensor,
    out: &mut Tensor,
    f: fn(T, T) -> T,
) -> Result<(), KernelError> {
    let ds = data.shape();
    let q = it.shape().len();
    let k = it.shape()[q - 1];
    let indices = Ints::of("ScatterND", it)?;
    let st = strides(ds);
    let tuples = numel(&it.shape()[..q - 1]);
    let slice = numel(&ds[k..]);
    let upd = typed::<T>("ScatterND", updates)?;
    let dst = typed_mut::<T>("ScatterND", out)?;
    dst.copy_from_slice(typed::<T>("ScatterND", data)?);
    check_len("ScatterND", "updates", upd.len(), numel(&[tuples, slice]))?;
    for t in 0..tuples {
        let mut off = 0usize;
        for j in 0..k {
            off += wrap_index("ScatterND", "index", indices.get(t * k + j), ds[j])? * st[j];
        }
        let src = &upd[t * slice..(t + 1) * slice];
        for (o, &u) in dst[off..off + slice].iter_mut().zip(src) {
            *o = f(*o, u);
        }
    }
    Ok(())
}

impl Operator for ScatterNd {
    fn name(&self) -> &'static str {
        "ScatterND"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("ScatterND", inputs, 3, 3)?;
        let data = required("ScatterND", inputs, 0)?;
        let indices = required("ScatterND", inputs, 1)?;
        let updates = required("ScatterND", inputs, 2)?;
        check_updates("ScatterND", data, updates)?;
        check_index_type("ScatterND", indices.dtype)?;
        scatter_nd_shapes(data.shape, indices.shape, updates.shape)?;
        Ok(vec![OutputInfo {
            dtype: data.dtype,
            shape: data.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let data = input("ScatterND", inputs, 0)?;
        let it = input("ScatterND", inputs, 1)?;
        let updates = input("ScatterND", inputs, 2)?;
        scatter_nd_shapes(data.shape(), it.shape(), updates.shape())?;
        let out = output("ScatterND", outputs, 0)?;
        check_len("ScatterND", "output", out.len(), data.len())?;
        with_reduction!("ScatterND", self.reduction, data.dtype(), T, f =>
            scatter_nd::<T>(data, it, updates, out, f))
    }
}

/// ScatterElements.
#[derive(Debug)]
pub(crate) struct ScatterElements {
    axis: i64,
    reduction: Reduction,
}

impl ScatterElements {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = if spec.opset >= 16 {
            &["axis", "reduction"]
        } else {
            &["axis"]
        };
        let attrs = Attrs::new(spec, "ScatterElements", allowed)?;
        Ok(Self {
            axis: attrs.int_or("axis", 0)?,
            reduction: Reduction::parse(&attrs, spec.opset)?,
        })
    }

    fn axis(
        &self,
        data: &[usize],
        indices: &[usize],
        updates: &[usize],
    ) -> Result<usize, KernelError> {
        if indices != updates {
            return Err(KernelError::Shape(format!(
                "ScatterElements: updates {updates:?} must have the shape of indices {indices:?}"
            )));
        }
        elements_axis("ScatterElements", self.axis, data, indices)
    }
}

fn scatter_elements<T: Elem>(
    data: &Tensor,
    it: &Tensor,
    updates: &Tensor,
    axis: usize,
    out: &mut Tensor,
    f: fn(T, T) -> T,
) -> Result<(), KernelError> {
    let indices = Ints::of("ScatterElements", it)?;
    let upd = typed::<T>("ScatterElements", updates)?;
    let dst = typed_mut::<T>("ScatterElements", out)?;
    dst.copy_from_slice(typed::<T>("ScatterElements", data)?);
    check_len("ScatterElements", "updates", upd.len(), indices.len())?;
    for_each_element(
        "ScatterElements",
        data.shape(),
        it.shape(),
        indices,
        axis,
        |p, off| dst[off] = f(dst[off], upd[p]),
    )
}

impl Operator for ScatterElements {
    fn name(&self) -> &'static str {
        "ScatterElements"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("ScatterElements", inputs, 3, 3)?;
        let data = required("ScatterElements", inputs, 0)?;
        let indices = required("ScatterElements", inputs, 1)?;
        let updates = required("ScatterElements", inputs, 2)?;
        check_updates("ScatterElements", data, updates)?;
        check_index_type("ScatterElements", indices.dtype)?;
        self.axis(data.shape, indices.shape, updates.shape)?;
        Ok(vec![OutputInfo {
            dtype: data.dtype,
            shape: data.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let data = input("ScatterElements", inputs, 0)?;
        let it = input("ScatterElements", inputs, 1)?;
        let updates = input("ScatterElements", inputs, 2)?;
        let axis = self.axis(data.shape(), it.shape(), updates.shape())?;
        let out = output("ScatterElements", outputs, 0)?;
        check_len("ScatterElements", "output", out.len(), data.len())?;
        with_reduction!("ScatterElements", self.reduction, data.dtype(), T, f =>
            scatter_elements::<T>(data, it, updates, axis, out, f))
    }
}
