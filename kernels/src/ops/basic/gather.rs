//! Gather along one axis (hot path: one contiguous copy per index; indices
//! are checked while copying, negative ones count from the end).

use super::common::{
    Attrs, Elem, Ints, check_inputs, check_len, input, normalize_axis, numel, output, required,
    typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Gather.
#[derive(Debug)]
pub(crate) struct Gather {
    axis: i64,
}

impl Gather {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "Gather", &["axis"])?;
        Ok(Self {
            axis: attrs.int_or("axis", 0)?,
        })
    }
}

#[inline]
fn resolve(index: i64, dim: usize) -> Result<usize, KernelError> {
    let d = dim as i64;
    let i = if index < 0 { index + d } else { index };
    if i < 0 || i >= d {
        return Err(KernelError::Invalid {
            op: "Gather",
            detail: format!("index {index} is out of range for axis of size {dim}"),
        });
    }
    Ok(i as usize)
}

fn gather<T: Elem>(
    data: &Tensor,
    indices: Ints<'_>,
    axis: usize,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let shape = data.shape();
    let outer = numel(&shape[..axis]);
    let dim = shape[axis];
    let inner = numel(&shape[axis + 1..]);
    let src = typed::<T>("Gather", data)?;
    let dst = typed_mut::<T>("Gather", out)?;
    let count = indices.len();
    check_len("Gather", "output", dst.len(), numel(&[outer, count, inner]))?;
    if dst.is_empty() {
        // Still reject bad indices when nothing is copied.
        for k in 0..count {
            resolve(indices.get(k), dim)?;
        }
        return Ok(());
    }
    if inner == 1 {
        for (o, dst) in dst.chunks_exact_mut(count).enumerate() {
            let base = &src[o * dim..(o + 1) * dim];
            for (k, d) in dst.iter_mut().enumerate() {
                *d = base[resolve(indices.get(k), dim)?];
            }
        }
        return Ok(());
    }
    let mut chunks = dst.chunks_exact_mut(inner);
    for o in 0..outer {
        let base = o * dim * inner;
        for k in 0..count {
            let i = resolve(indices.get(k), dim)?;
            let start = base + i * inner;
            if let Some(chunk) = chunks.next() {
                chunk.copy_from_slice(&src[start..start + inner]);
            }
        }
    }
    Ok(())
}

impl Operator for Gather {
    fn name(&self) -> &'static str {
        "Gather"
    }

    fn gathers_rows(&self) -> bool {
        self.axis == 0
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Gather", inputs, 2, 2)?;
        let data = required("Gather", inputs, 0)?;
        let indices = required("Gather", inputs, 1)?;
        if data.dtype == ElementType::I4 || data.dtype == ElementType::U4 {
            return Err(KernelError::UnsupportedType {
                op: "Gather",
                dtype: data.dtype,
            });
        }
        if !matches!(indices.dtype, ElementType::I32 | ElementType::I64) {
            return Err(KernelError::UnsupportedType {
                op: "Gather",
                dtype: indices.dtype,
            });
        }
        if data.shape.is_empty() {
            return Err(KernelError::Shape(
                "Gather: data must have rank >= 1".into(),
            ));
        }
        let axis = normalize_axis("Gather", "axis", self.axis, data.shape.len())?;
        if let Some(v) = indices.value {
            let view = Ints::of("Gather", v)?;
            for k in 0..view.len() {
                resolve(view.get(k), data.shape[axis])?;
            }
        }
        let mut shape = data.shape[..axis].to_vec();
        shape.extend_from_slice(indices.shape);
        shape.extend_from_slice(&data.shape[axis + 1..]);
        Ok(vec![OutputInfo {
            dtype: data.dtype,
            shape,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let data = input("Gather", inputs, 0)?;
        let indices = Ints::of("Gather", input("Gather", inputs, 1)?)?;
        let out = output("Gather", outputs, 0)?;
        if data.shape().is_empty() {
            return Err(KernelError::Invalid {
                op: "Gather",
                detail: "data must have rank >= 1".into(),
            });
        }
        let axis = normalize_axis("Gather", "axis", self.axis, data.shape().len())?;
        dispatch_any!(data.dtype(), T => gather::<T>(data, indices, axis, out),
            else Err(KernelError::UnsupportedType { op: "Gather", dtype: data.dtype() }))
    }
}
