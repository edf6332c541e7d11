//! NonZero and Compress: output lengths count the nonzero elements of `X`
//! or the true entries of `condition`, so shape inference needs those
//! values ([`KernelError::ValueDependent`] without them). Each operator has
//! one walk over the values that decides its positions: `infer` counts what
//! it visits, `execute` writes it (hot path: a single pass over the input).

use super::{check_outputs, counted};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_len, input, normalize_axis, numel, output, required, typed,
    typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const NONZERO: &str = "NonZero";
const COMPRESS: &str = "Compress";

/// Whether `dtype` has a compute representation (not the storage-only
/// four-bit types).
fn has_elements(dtype: ElementType) -> bool {
    !matches!(dtype, ElementType::I4 | ElementType::U4)
}

/// NonZero (opsets 9 and 13): the coordinates of the nonzero elements,
/// `[rank, count]` int64 in storage order (a scalar reads as one element:
/// `[1, count]`).
#[derive(Debug)]
pub(crate) struct NonZero;

impl NonZero {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        Attrs::new(spec, NONZERO, &[])?;
        check_outputs(NONZERO, spec, 1, 1)?;
        Ok(Self)
    }
}

/// Calls `visit` with the flat position of every nonzero element of `x` in
/// storage order (NaN is nonzero, -0.0 is zero): the one walk `infer`
/// counts and `execute` writes.
fn nonzero_walk(
    x: &Tensor,
    mut visit: impl FnMut(usize) -> Result<(), KernelError>,
) -> Result<(), KernelError> {
    dispatch_any!(x.dtype(), T => {
        let zero = T::default();
        for (i, v) in typed::<T>(NONZERO, x)?.iter().enumerate() {
            if *v != zero {
                visit(i)?;
            }
        }
        Ok(())
    }, else Err(KernelError::UnsupportedType { op: NONZERO, dtype: x.dtype() }))
}

impl Operator for NonZero {
    fn name(&self) -> &'static str {
        NONZERO
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(NONZERO, inputs, 1, 1)?;
        let x = required(NONZERO, inputs, 0)?;
        if !has_elements(x.dtype) {
            return Err(KernelError::UnsupportedType {
                op: NONZERO,
                dtype: x.dtype,
            });
        }
        let mut count = 0usize;
        nonzero_walk(counted(NONZERO, x)?, |_| {
            count += 1;
            Ok(())
        })?;
        Ok(vec![OutputInfo {
            dtype: ElementType::I64,
            shape: vec![x.shape.len().max(1), count],
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = NONZERO;
        let x = input(op, inputs, 0)?;
        let dims = x.shape();
        let out = output(op, outputs, 0)?;
        let n = match *out.shape() {
            [r, n] if r == dims.len().max(1) => n,
            _ => {
                return Err(KernelError::Invalid {
                    op,
                    detail: format!(
                        "output of shape {:?} for X of rank {}",
                        out.shape(),
                        dims.len()
                    ),
                });
            }
        };
        let ys = typed_mut::<i64>(op, out)?;
        check_len(op, "output", ys.len(), numel(&[dims.len().max(1), n]))?;
        let mut j = 0usize;
        nonzero_walk(x, |i| {
            if j == n {
                return Err(KernelError::Invalid {
                    op,
                    detail: format!("X has more than the {n} nonzero elements inferred"),
                });
            }
            // Coordinates from the last axis back (a scalar's is 0).
            let mut rem = i;
            ys[j] = 0;
            for (d, &len) in dims.iter().enumerate().rev() {
                ys[d * n + j] = (rem % len) as i64;
                rem /= len;
            }
            j += 1;
            Ok(())
        })?;
        if j != n {
            return Err(KernelError::Invalid {
                op,
                detail: format!("X has {j} nonzero elements where {n} were inferred"),
            });
        }
        Ok(())
    }
}

/// Compress (opsets 9 and 11): the slices along `axis` (or the elements of
/// the flattened input when `axis` is absent) whose `condition` entry is
/// true. As in ONNX Runtime, entries of `condition` past the length of the
/// axis are ignored.
#[derive(Debug)]
pub(crate) struct Compress {
    axis: Option<i64>,
}

impl Compress {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, COMPRESS, &["axis"])?;
        check_outputs(COMPRESS, spec, 1, 1)?;
        Ok(Self {
            axis: attrs.int("axis")?,
        })
    }

    /// `[outer, n, inner]` around the axis (`[1, elements, 1]` without
    /// one) and the axis.
    fn layout(&self, shape: &[usize]) -> Result<([usize; 3], Option<usize>), KernelError> {
        Ok(match self.axis {
            None => ([1, numel(shape), 1], None),
            Some(a) => {
                let a = normalize_axis(COMPRESS, "axis", a, shape.len())?;
                (
                    [numel(&shape[..a]), shape[a], numel(&shape[a + 1..])],
                    Some(a),
                )
            }
        })
    }
}

/// The positions below `n` whose condition is true, in order: the one walk
/// `infer` counts and `execute` copies.
fn kept(condition: &[bool], n: usize) -> impl Iterator<Item = usize> + '_ {
    condition
        .iter()
        .take(n)
        .enumerate()
        .filter_map(|(i, &c)| c.then_some(i))
}

/// Checks `condition` is a 1-D bool tensor.
fn check_condition(dtype: ElementType, shape: &[usize]) -> Result<(), KernelError> {
    if dtype != ElementType::Bool {
        return Err(KernelError::UnsupportedType {
            op: COMPRESS,
            dtype,
        });
    }
    if shape.len() != 1 {
        return Err(KernelError::Shape(format!(
            "{COMPRESS}: condition must be 1-D, got shape {shape:?}"
        )));
    }
    Ok(())
}

impl Operator for Compress {
    fn name(&self) -> &'static str {
        COMPRESS
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = COMPRESS;
        let inputs = check_inputs(op, inputs, 2, 2)?;
        let (x, cond) = (required(op, inputs, 0)?, required(op, inputs, 1)?);
        if !has_elements(x.dtype) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        check_condition(cond.dtype, cond.shape)?;
        let ([_, n, _], axis) = self.layout(x.shape)?;
        let count = kept(typed::<bool>(op, counted(op, cond)?)?, n).count();
        let shape = match axis {
            None => vec![count],
            Some(a) => {
                let mut s = x.shape.to_vec();
                s[a] = count;
                s
            }
        };
        Ok(vec![OutputInfo {
            dtype: x.dtype,
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
        let op = COMPRESS;
        let (x, cond) = (input(op, inputs, 0)?, input(op, inputs, 1)?);
        check_condition(cond.dtype(), cond.shape())?;
        let c = typed::<bool>(op, cond)?;
        let ([outer, n, inner], _) = self.layout(x.shape())?;
        let count = kept(c, n).count();
        let out = output(op, outputs, 0)?;
        check_len(op, "output", out.len(), numel(&[outer, count, inner]))?;
        if out.is_empty() {
            return Ok(());
        }
        dispatch_any!(x.dtype(), T => {
            let (xs, ys) = (typed::<T>(op, x)?, typed_mut::<T>(op, out)?);
            let mut blocks = ys.chunks_exact_mut(inner);
            for xb in xs.chunks_exact(n * inner) {
                for j in kept(c, n) {
                    if let Some(yb) = blocks.next() {
                        yb.copy_from_slice(&xb[j * inner..][..inner]);
                    }
                }
            }
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}
