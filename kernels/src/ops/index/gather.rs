//! GatherND (slices addressed by index tuples, with batch dimensions) and
//! GatherElements (one element per index along an axis). Indices are i64 or
//! i32, negative ones count from the end, out-of-range ones are errors.

use super::common::{check_index_type, check_storable, strides, wrap_index};
use crate::ops::basic::common::{
    Attrs, Elem, Ints, MAX_RANK, check_inputs, check_len, check_rank, checked_count, input,
    normalize_axis, numel, output, required, typed, typed_mut,
};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
};

/// GatherND.
#[derive(Debug)]
pub(crate) struct GatherNd {
    batch_dims: usize,
}

impl GatherNd {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = if spec.opset >= 12 {
            &["batch_dims"]
        } else {
            &[]
        };
        let attrs = Attrs::new(spec, "GatherND", allowed)?;
        let b = attrs.int_or("batch_dims", 0)?;
        let batch_dims = usize::try_from(b)
            .map_err(|_| attrs.error("batch_dims", format!("{b} is negative")))?;
        Ok(Self { batch_dims })
    }

    /// Checks the shapes; returns the output shape.
    fn shape(&self, data: &[usize], indices: &[usize]) -> Result<Vec<usize>, KernelError> {
        let (r, q, b) = (data.len(), indices.len(), self.batch_dims);
        let err = |d: String| {
            KernelError::Shape(format!(
                "GatherND: {d} (data {data:?}, indices {indices:?}, batch_dims {b})"
            ))
        };
        if r == 0 || q == 0 {
            return Err(err("data and indices must have rank >= 1".into()));
        }
        check_rank("GatherND", r)?;
        if b >= r.min(q) {
            return Err(err("batch_dims must be less than both ranks".into()));
        }
        if data[..b] != indices[..b] {
            return Err(err("the batch dimensions differ".into()));
        }
        let k = indices[q - 1];
        if k < 1 || k > r - b {
            return Err(err(format!(
                "the last indices dimension {k} must be in 1..={}",
                r - b
            )));
        }
        let mut out = indices[..q - 1].to_vec();
        out.extend_from_slice(&data[b + k..]);
        checked_count("GatherND", &out)?;
        Ok(out)
    }
}

fn gather_nd<T: Elem>(
    b: usize,
    data: &Tensor,
    indices: Ints<'_>,
    index_shape: &[usize],
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let ds = data.shape();
    let q = index_shape.len();
    let k = index_shape[q - 1];
    let st = strides(ds);
    let batches = numel(&ds[..b]);
    let batch_len = numel(&ds[b..]);
    let tuples = numel(&index_shape[b..q - 1]);
    let slice = numel(&ds[b + k..]);
    let src = typed::<T>("GatherND", data)?;
    let dst = typed_mut::<T>("GatherND", out)?;
    check_len(
        "GatherND",
        "output",
        dst.len(),
        numel(&[batches, tuples, slice]),
    )?;
    check_len(
        "GatherND",
        "indices",
        indices.len(),
        numel(&[batches, tuples, k]),
    )?;
    for t in 0..numel(&[batches, tuples]) {
        let mut off = (t / tuples.max(1)) * batch_len;
        for j in 0..k {
            let i = wrap_index("GatherND", "index", indices.get(t * k + j), ds[b + j])?;
            off += i * st[b + j];
        }
        if slice > 0 {
            dst[t * slice..(t + 1) * slice].copy_from_slice(&src[off..off + slice]);
        }
    }
    Ok(())
}

impl Operator for GatherNd {
    fn name(&self) -> &'static str {
        "GatherND"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("GatherND", inputs, 2, 2)?;
        let data = required("GatherND", inputs, 0)?;
        let indices = required("GatherND", inputs, 1)?;
        check_storable("GatherND", data.dtype)?;
        check_index_type("GatherND", indices.dtype)?;
        Ok(vec![OutputInfo {
            dtype: data.dtype,
            shape: self.shape(data.shape, indices.shape)?,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let data = input("GatherND", inputs, 0)?;
        let it = input("GatherND", inputs, 1)?;
        self.shape(data.shape(), it.shape())?;
        let indices = Ints::of("GatherND", it)?;
        let out = output("GatherND", outputs, 0)?;
        let b = self.batch_dims;
        dispatch_any!(data.dtype(), T => gather_nd::<T>(b, data, indices, it.shape(), out),
            else Err(KernelError::UnsupportedType { op: "GatherND", dtype: data.dtype() }))
    }
}

/// GatherElements.
#[derive(Debug)]
pub(crate) struct GatherElements {
    axis: i64,
}

impl GatherElements {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "GatherElements", &["axis"])?;
        Ok(Self {
            axis: attrs.int_or("axis", 0)?,
        })
    }
}

/// Checks data and index shapes of GatherElements / ScatterElements;
/// returns the normalized axis.
pub(crate) fn elements_axis(
    op: &'static str,
    axis: i64,
    data: &[usize],
    indices: &[usize],
) -> Result<usize, KernelError> {
    if data.is_empty() {
        return Err(KernelError::Shape(format!(
            "{op}: data must have rank >= 1"
        )));
    }
    check_rank(op, data.len())?;
    if indices.len() != data.len() {
        return Err(KernelError::Shape(format!(
            "{op}: indices {indices:?} must have the rank of data {data:?}"
        )));
    }
    let axis = normalize_axis(op, "axis", axis, data.len())?;
    for d in 0..data.len() {
        if d != axis && indices[d] > data[d] {
            return Err(KernelError::Shape(format!(
                "{op}: indices {indices:?} exceed data {data:?} on axis {d}"
            )));
        }
    }
    Ok(axis)
}

/// Calls `f(index_position, data_offset)` for every element of the indices
/// tensor, with the data offset of its position (the axis coordinate replaced
/// by the wrapped index value).
#[inline]
pub(crate) fn for_each_element(
    op: &'static str,
    data: &[usize],
    index_shape: &[usize],
    indices: Ints<'_>,
    axis: usize,
    mut f: impl FnMut(usize, usize),
) -> Result<(), KernelError> {
    let rank = data.len();
    let n = indices.len();
    if n == 0 {
        return Ok(());
    }
    let st = strides(data);
    let dim = data[axis];
    let mut idx = [0usize; MAX_RANK];
    let mut base = 0usize; // data offset of idx without the axis coordinate
    for p in 0..n {
        let i = wrap_index(op, "index", indices.get(p), dim)?;
        f(p, base + i * st[axis]);
        let mut d = rank;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            if d != axis {
                base += st[d];
            }
            if idx[d] < index_shape[d] {
                break;
            }
            if d != axis {
                base -= st[d] * index_shape[d];
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

fn gather_elements<T: Elem>(
    data: &Tensor,
    it: &Tensor,
    axis: usize,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let indices = Ints::of("GatherElements", it)?;
    let src = typed::<T>("GatherElements", data)?;
    let dst = typed_mut::<T>("GatherElements", out)?;
    check_len("GatherElements", "output", dst.len(), indices.len())?;
    for_each_element(
        "GatherElements",
        data.shape(),
        it.shape(),
        indices,
        axis,
        |p, off| dst[p] = src[off],
    )
}

impl Operator for GatherElements {
    fn name(&self) -> &'static str {
        "GatherElements"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("GatherElements", inputs, 2, 2)?;
        let data = required("GatherElements", inputs, 0)?;
        let indices = required("GatherElements", inputs, 1)?;
        check_storable("GatherElements", data.dtype)?;
        check_index_type("GatherElements", indices.dtype)?;
        elements_axis("GatherElements", self.axis, data.shape, indices.shape)?;
        Ok(vec![OutputInfo {
            dtype: data.dtype,
            shape: indices.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let data = input("GatherElements", inputs, 0)?;
        let it = input("GatherElements", inputs, 1)?;
        let axis = elements_axis("GatherElements", self.axis, data.shape(), it.shape())?;
        let out = output("GatherElements", outputs, 0)?;
        dispatch_any!(data.dtype(), T => gather_elements::<T>(data, it, axis, out),
            else Err(KernelError::UnsupportedType { op: "GatherElements", dtype: data.dtype() }))
    }
}
