//! Trilu (keep the upper or lower triangle of the last two axes, shifted by
//! the optional `k` input) and CumSum (running sums along the axis input,
//! `exclusive` and `reverse`). Hot path: row slices, no allocation.

use super::common::{Num, check_storable};
use crate::ops::basic::common::{
    Attrs, Elem, Ints, check_inputs, check_len, input, normalize_axis, numel, optional, output,
    required, typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// A scalar integer operand (0-D or one element), i64 or i32.
fn scalar_int(op: &'static str, what: &str, t: &Tensor) -> Result<i64, KernelError> {
    let v = Ints::of(op, t)?;
    if v.len() != 1 || t.shape().len() > 1 {
        return Err(KernelError::Shape(format!(
            "{op}: {what} must be a scalar, got shape {:?}",
            t.shape()
        )));
    }
    Ok(v.get(0))
}

fn bool_attr(attrs: &Attrs<'_>, name: &'static str, default: bool) -> Result<bool, KernelError> {
    match attrs.int(name)? {
        None => Ok(default),
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        Some(v) => Err(attrs.error(name, format!("{v} is not 0 or 1"))),
    }
}

/// Trilu.
#[derive(Debug)]
pub(crate) struct Trilu {
    upper: bool,
}

impl Trilu {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "Trilu", &["upper"])?;
        Ok(Self {
            upper: bool_attr(&attrs, "upper", true)?,
        })
    }
}

fn trilu<T: Elem + Default>(
    upper: bool,
    k: i64,
    x: &Tensor,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let s = x.shape();
    let r = s.len();
    let (n, m) = (s[r - 2], s[r - 1]);
    let src = typed::<T>("Trilu", x)?;
    let dst = typed_mut::<T>("Trilu", out)?;
    check_len("Trilu", "output", dst.len(), src.len())?;
    dst.copy_from_slice(src);
    if m == 0 {
        return Ok(());
    }
    let mi = m as i64;
    for (row_index, row) in dst.chunks_exact_mut(m).enumerate() {
        let i = (row_index % n.max(1)) as i64;
        // Column i + k is the diagonal; saturate so huge k cannot overflow.
        let diag = i.saturating_add(k);
        if upper {
            let end = diag.clamp(0, mi) as usize;
            row[..end].fill(T::default());
        } else {
            let start = diag.saturating_add(1).clamp(0, mi) as usize;
            row[start..].fill(T::default());
        }
    }
    Ok(())
}

impl Operator for Trilu {
    fn name(&self) -> &'static str {
        "Trilu"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Trilu", inputs, 1, 2)?;
        let x = required("Trilu", inputs, 0)?;
        check_storable("Trilu", x.dtype)?;
        if x.shape.len() < 2 {
            return Err(KernelError::Shape(format!(
                "Trilu: input must have rank >= 2, got {:?}",
                x.shape
            )));
        }
        if let Some(k) = optional(inputs, 1) {
            if k.dtype != ElementType::I64 {
                return Err(KernelError::UnsupportedType {
                    op: "Trilu",
                    dtype: k.dtype,
                });
            }
            if numel(k.shape) != 1 || k.shape.len() > 1 {
                return Err(KernelError::Shape(format!(
                    "Trilu: k must be a scalar, got shape {:?}",
                    k.shape
                )));
            }
        }
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Trilu", inputs, 0)?;
        if x.shape().len() < 2 {
            return Err(KernelError::Invalid {
                op: "Trilu",
                detail: format!("input must have rank >= 2, got {:?}", x.shape()),
            });
        }
        let k = match inputs.get(1).copied().flatten() {
            Some(t) => scalar_int("Trilu", "k", t)?,
            None => 0,
        };
        let out = output("Trilu", outputs, 0)?;
        let upper = self.upper;
        dispatch_any!(x.dtype(), T => trilu::<T>(upper, k, x, out),
            else Err(KernelError::UnsupportedType { op: "Trilu", dtype: x.dtype() }))
    }
}

/// CumSum.
#[derive(Debug)]
pub(crate) struct CumSum {
    exclusive: bool,
    reverse: bool,
}

impl CumSum {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "CumSum", &["exclusive", "reverse"])?;
        Ok(Self {
            exclusive: bool_attr(&attrs, "exclusive", false)?,
            reverse: bool_attr(&attrs, "reverse", false)?,
        })
    }
}

fn cumsum<T: Num>(
    exclusive: bool,
    reverse: bool,
    axis: usize,
    x: &Tensor,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let s = x.shape();
    let dim = s[axis];
    let inner = numel(&s[axis + 1..]);
    let block = numel(&[dim, inner]);
    let src = typed::<T>("CumSum", x)?;
    let dst = typed_mut::<T>("CumSum", out)?;
    check_len("CumSum", "output", dst.len(), src.len())?;
    if block == 0 {
        return Ok(());
    }
    for (sb, db) in src.chunks_exact(block).zip(dst.chunks_exact_mut(block)) {
        // Position t of the scan order is axis index `at(t)`.
        let at = |t: usize| if reverse { dim - 1 - t } else { t };
        for t in 0..dim {
            let cur = at(t) * inner;
            if t == 0 {
                let row = &mut db[cur..cur + inner];
                if exclusive {
                    row.fill(T::ZERO);
                } else {
                    row.copy_from_slice(&sb[cur..cur + inner]);
                }
                continue;
            }
            let prev = at(t - 1) * inner;
            // The value added at step t: x[t] (inclusive) or x[t - 1].
            let add = if exclusive { prev } else { cur };
            for j in 0..inner {
                db[cur + j] = T::add(db[prev + j], sb[add + j]);
            }
        }
    }
    Ok(())
}

impl Operator for CumSum {
    fn name(&self) -> &'static str {
        "CumSum"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("CumSum", inputs, 2, 2)?;
        let x = required("CumSum", inputs, 0)?;
        let axis = required("CumSum", inputs, 1)?;
        if matches!(
            x.dtype,
            ElementType::Bool | ElementType::I4 | ElementType::U4
        ) {
            return Err(KernelError::UnsupportedType {
                op: "CumSum",
                dtype: x.dtype,
            });
        }
        if !matches!(axis.dtype, ElementType::I32 | ElementType::I64) {
            return Err(KernelError::UnsupportedType {
                op: "CumSum",
                dtype: axis.dtype,
            });
        }
        if x.shape.is_empty() {
            return Err(KernelError::Shape(
                "CumSum: input must have rank >= 1".into(),
            ));
        }
        if let Some(v) = axis.value {
            let a = scalar_int("CumSum", "axis", v)?;
            normalize_axis("CumSum", "axis", a, x.shape.len())?;
        } else if numel(axis.shape) != 1 || axis.shape.len() > 1 {
            return Err(KernelError::Shape(format!(
                "CumSum: axis must be a scalar, got shape {:?}",
                axis.shape
            )));
        }
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("CumSum", inputs, 0)?;
        let a = scalar_int("CumSum", "axis", input("CumSum", inputs, 1)?)?;
        let axis = normalize_axis("CumSum", "axis", a, x.shape().len())?;
        let out = output("CumSum", outputs, 0)?;
        let (e, r) = (self.exclusive, self.reverse);
        dispatch_num!(x.dtype(), T => cumsum::<T>(e, r, axis, x, out),
            else Err(KernelError::UnsupportedType { op: "CumSum", dtype: x.dtype() }))
    }
}
