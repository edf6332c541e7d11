//! ArgMax and ArgMin (`axis`, `keepdims`, `select_last_index`; i64 output).
//! NaN counts as the extreme value (the first NaN wins, or the last with
//! `select_last_index`), as in NumPy.

use super::num::{Num, is_num};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_len, checked_count, input, normalize_axis, output, required, typed,
    typed_mut,
};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// ArgMax or ArgMin.
#[derive(Debug)]
pub(crate) struct ArgExtremum {
    max: bool,
    axis: i64,
    keepdims: bool,
    last: bool,
}

impl ArgExtremum {
    pub(crate) fn new(spec: &NodeSpec<'_>, max: bool) -> Result<Self, KernelError> {
        let op = if max { "ArgMax" } else { "ArgMin" };
        let allowed: &[&'static str] = if spec.opset >= 12 {
            &["axis", "keepdims", "select_last_index"]
        } else {
            &["axis", "keepdims"]
        };
        let attrs = Attrs::new(spec, op, allowed)?;
        let flag = |name: &'static str, default: i64| -> Result<bool, KernelError> {
            match attrs.int_or(name, default)? {
                0 => Ok(false),
                1 => Ok(true),
                v => Err(attrs.error(name, format!("must be 0 or 1, got {v}"))),
            }
        };
        Ok(Self {
            max,
            axis: attrs.int_or("axis", 0)?,
            keepdims: flag("keepdims", 1)?,
            last: flag("select_last_index", 0)?,
        })
    }

    fn op(&self) -> &'static str {
        if self.max { "ArgMax" } else { "ArgMin" }
    }

    /// `[outer, n, inner]` around the axis.
    fn split(&self, shape: &[usize]) -> Result<(usize, usize, usize), KernelError> {
        let axis = normalize_axis(self.op(), "axis", self.axis, shape.len())?;
        let outer = checked_count(self.op(), &shape[..axis])?;
        let inner = checked_count(self.op(), &shape[axis + 1..])?;
        Ok((outer, shape[axis], inner))
    }
}

/// Whether `v` replaces the current extreme `best`.
#[inline(always)]
fn better<T: Num>(max: bool, last: bool, v: T, best: T) -> bool {
    if best.is_nan() {
        last && v.is_nan()
    } else if v.is_nan() {
        true
    } else {
        match (max, last) {
            (true, false) => v > best,
            (true, true) => v >= best,
            (false, false) => v < best,
            (false, true) => v <= best,
        }
    }
}

/// Fills `out` (whole `inner`-long rows for consecutive outer indices
/// starting at `first`) with the extreme indices.
#[inline(always)]
fn arg_rows<T: Num>(
    max: bool,
    last: bool,
    x: &[T],
    (n, inner): (usize, usize),
    first: usize,
    out: &mut [i64],
) {
    let block = n * inner;
    for (b, o) in out.chunks_exact_mut(inner).enumerate() {
        let base = (first + b) * block;
        if inner == 1 {
            let row = &x[base..base + n];
            let mut best = 0usize;
            for (i, &v) in row.iter().enumerate().skip(1) {
                if better(max, last, v, row[best]) {
                    best = i;
                }
            }
            o[0] = best as i64;
        } else {
            o.fill(0);
            for r in 1..n {
                let row = &x[base + r * inner..base + (r + 1) * inner];
                for (c, (slot, &v)) in o.iter_mut().zip(row).enumerate() {
                    let cur = x[base + *slot as usize * inner + c];
                    if better(max, last, v, cur) {
                        *slot = r as i64;
                    }
                }
            }
        }
    }
}

fn arg_typed<T: Num>(
    this: &ArgExtremum,
    x: &Tensor,
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let op = this.op();
    let (outer, n, inner) = this.split(x.shape())?;
    let (x, y) = (typed::<T>(op, x)?, typed_mut::<i64>(op, out)?);
    check_len(op, "output", y.len(), outer * inner)?;
    if y.is_empty() {
        return Ok(());
    }
    let (max, last) = (this.max, this.last);
    let chunk = if x.len() < PARALLEL_MIN_ELEMENTS || par.threads() <= 1 {
        y.len()
    } else {
        rows_chunk(par, outer, inner)
    };
    for_each_chunk_mut(par, y, chunk, &|offset, rows| {
        arg_rows(max, last, x, (n, inner), offset / inner, rows);
    });
    Ok(())
}

impl Operator for ArgExtremum {
    fn name(&self) -> &'static str {
        self.op()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.op();
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        if !is_num(x.dtype) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        let axis = normalize_axis(op, "axis", self.axis, x.shape.len())?;
        if x.shape[axis] == 0 {
            return Err(KernelError::Shape(format!(
                "{op}: axis {axis} of shape {:?} is empty: no index to return",
                x.shape
            )));
        }
        let mut shape = x.shape.to_vec();
        if self.keepdims {
            shape[axis] = 1;
        } else {
            shape.remove(axis);
        }
        Ok(vec![OutputInfo {
            dtype: ElementType::I64,
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
        let op = self.op();
        let x = input(op, inputs, 0)?;
        let (_, n, _) = self.split(x.shape())?;
        if n == 0 {
            return Err(KernelError::Invalid {
                op,
                detail: "the reduced axis is empty".into(),
            });
        }
        let out = output(op, outputs, 0)?;
        dispatch_num!(x.dtype(), T => arg_typed::<T>(self, x, out, par),
            else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}
