//! CenterCropPad (opset 18): each selected axis is cropped or zero-padded
//! to the constant `shape` about its centre. Hot path: per output row, one
//! copy of the kept interior and zero fill around it.

use crate::ops::basic::common::{
    Attrs, Elem, MAX_RANK, check_inputs, check_rank, constant_ints, input, normalize_axis, output,
    required, typed, typed_mut,
};
use crate::ops::index::common::{by_rows, check_index_type, check_storable, strides};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
};

/// CenterCropPad.
#[derive(Debug)]
pub(crate) struct CenterCropPad {
    axes: Option<Vec<i64>>,
}

impl CenterCropPad {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "CenterCropPad", &["axes"])?;
        Ok(Self {
            axes: attrs.ints("axes")?,
        })
    }

    /// The output shape for input dims `x` and the `shape` values.
    fn out_shape(&self, x: &[usize], shape: &[i64]) -> Result<Vec<usize>, KernelError> {
        let op = "CenterCropPad";
        let rank = x.len();
        check_rank(op, rank)?;
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a
                .iter()
                .map(|&a| normalize_axis(op, "axis", a, rank))
                .collect::<Result<_, _>>()?,
            None => (0..rank).collect(),
        };
        if shape.len() != axes.len() {
            return Err(KernelError::Shape(format!(
                "{op}: shape has {} values for {} axes of input {x:?}",
                shape.len(),
                axes.len()
            )));
        }
        let mut out = x.to_vec();
        let mut seen = [false; MAX_RANK];
        for (&a, &s) in axes.iter().zip(shape) {
            if std::mem::replace(&mut seen[a], true) {
                return Err(KernelError::Shape(format!("{op}: axis {a} is repeated")));
            }
            out[a] = usize::try_from(s).map_err(|_| {
                KernelError::Shape(format!("{op}: shape value {s} for axis {a} is negative"))
            })?;
        }
        crate::ops::basic::common::checked_count(op, &out)?;
        Ok(out)
    }
}

/// Input index of output index `o` on an axis of input size `dim` and
/// output size `out`, or `None` inside the padding.
#[inline]
fn source(o: usize, dim: usize, out: usize) -> Option<usize> {
    if out <= dim {
        Some(o + (dim - out) / 2)
    } else {
        o.checked_sub((out - dim) / 2).filter(|&i| i < dim)
    }
}

/// The crop/pad copy of `x` (shape `xs`) into `y` (shape `ys`).
fn crop_pad<T: Elem + Default>(
    x: &[T],
    xs: &[usize],
    y: &mut [T],
    ys: &[usize],
    par: &dyn ParallelFor,
) {
    let rank = xs.len();
    if rank == 0 {
        y.copy_from_slice(x);
        return;
    }
    let st = strides(xs);
    let last = rank - 1;
    let (dim, out) = (xs[last], ys[last]);
    // The kept span of the last axis: output `lo..lo + n` from input `from`.
    let (lo, from, n) = if out <= dim {
        (0, (dim - out) / 2, out)
    } else {
        ((out - dim) / 2, 0, dim)
    };
    by_rows(par, y, out, &|first, rows| {
        for (r, row) in rows.chunks_exact_mut(out).enumerate() {
            let mut rest = first + r;
            let mut base = Some(0usize);
            for d in (0..last).rev() {
                let o = rest % ys[d];
                rest /= ys[d];
                base = base.and_then(|b| source(o, xs[d], ys[d]).map(|i| b + i * st[d]));
            }
            match base {
                None => row.fill(T::default()),
                Some(b) => {
                    row[..lo].fill(T::default());
                    row[lo..lo + n].copy_from_slice(&x[b + from..b + from + n]);
                    row[lo + n..].fill(T::default());
                }
            }
        }
    });
}

impl Operator for CenterCropPad {
    fn name(&self) -> &'static str {
        "CenterCropPad"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = "CenterCropPad";
        let inputs = check_inputs(op, inputs, 2, 2)?;
        let x = required(op, inputs, 0)?;
        check_storable(op, x.dtype)?;
        let s = required(op, inputs, 1)?;
        check_index_type(op, s.dtype)?;
        let shape = constant_ints(op, s, 1)?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: self.out_shape(x.shape, &shape)?,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = "CenterCropPad";
        let x = input(op, inputs, 0)?;
        let s = input(op, inputs, 1)?;
        let shape = s.to_i64_vec().ok_or(KernelError::UnsupportedType {
            op,
            dtype: s.dtype(),
        })?;
        let want = self.out_shape(x.shape(), &shape)?;
        let y = output(op, outputs, 0)?;
        if y.shape() != want.as_slice() {
            return Err(KernelError::Invalid {
                op,
                detail: format!("output shape {:?} where {want:?} was computed", y.shape()),
            });
        }
        dispatch_any!(x.dtype(), T => {
            crop_pad::<T>(typed::<T>(op, x)?, x.shape(), typed_mut::<T>(op, y)?, &want, par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}
