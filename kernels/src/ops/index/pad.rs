//! Pad: modes constant, reflect, edge and wrap (wrap from opset 19).
//! Opsets 2-10 take `pads`/`value` attributes; 11+ take `pads` and
//! `constant_value` as inputs, 18+ the optional `axes` input. Negative pads
//! crop first; the modes then pad the cropped extent. Hot path: per output
//! row of the last axis, the interior is one copy and the borders are
//! mapped element by element.

use super::common::{FromF64, by_rows, check_storable, strides};
use crate::ops::basic::common::{
    Attrs, Elem, Ints, MAX_RANK, check_inputs, check_rank, checked_count, input, normalize_axis,
    optional, output, product, required, typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// Pad.
#[derive(Debug)]
pub(crate) struct Pad {
    mode: Mode,
    /// Opsets 2-10: the `pads` and `value` attributes.
    legacy: Option<(Vec<i64>, f32)>,
    /// Opset 18+: the `axes` input is accepted.
    axes_input: bool,
}

impl Pad {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = if spec.opset >= 11 {
            &["mode"]
        } else {
            &["mode", "pads", "value"]
        };
        let attrs = Attrs::new(spec, "Pad", allowed)?;
        let mode = match attrs.string("mode")?.as_deref() {
            None | Some("constant") => Mode::Constant,
            Some("reflect") => Mode::Reflect,
            Some("edge") => Mode::Edge,
            Some("wrap") if spec.opset >= 19 => Mode::Wrap,
            Some(m) => {
                return Err(attrs.error(
                    "mode",
                    format!(
                        "`{m}` is not supported at opset {} (constant, reflect, edge; wrap from 19)",
                        spec.opset
                    ),
                ));
            }
        };
        let legacy = if spec.opset < 11 {
            let pads = attrs
                .ints("pads")?
                .ok_or_else(|| attrs.error("pads", "is required before opset 11"))?;
            Some((pads, attrs.float("value")?.unwrap_or(0.0)))
        } else {
            None
        };
        Ok(Self {
            mode,
            legacy,
            axes_input: spec.opset >= 18,
        })
    }

    /// Per-axis begin and end pads for a data rank, from the pads (and
    /// axes) values.
    fn pads(
        &self,
        rank: usize,
        pads: Ints<'_>,
        axes: Option<Ints<'_>>,
    ) -> Result<([i64; MAX_RANK], [i64; MAX_RANK]), KernelError> {
        check_rank("Pad", rank)?;
        let mut begin = [0i64; MAX_RANK];
        let mut end = [0i64; MAX_RANK];
        let n = axes.map_or(rank, |a| a.len());
        if pads.len() != 2 * n {
            return Err(KernelError::Shape(format!(
                "Pad: {} pads for {n} axes (2 per axis expected)",
                pads.len()
            )));
        }
        let mut seen = [false; MAX_RANK];
        for j in 0..n {
            let axis = match axes {
                Some(a) => normalize_axis("Pad", "axis", a.get(j), rank)?,
                None => j,
            };
            if std::mem::replace(&mut seen[axis], true) {
                return Err(KernelError::Shape(format!("Pad: axis {axis} is repeated")));
            }
            begin[axis] = pads.get(j);
            end[axis] = pads.get(n + j);
        }
        Ok((begin, end))
    }
}

/// What one output coordinate reads on one axis.
#[derive(Debug, Clone, Copy)]
struct AxisMap {
    /// Effective begin pad (>= 0).
    begin: i64,
    /// First input coordinate kept (after a crop).
    lo: i64,
    /// Input extent kept.
    len: i64,
}

impl AxisMap {
    fn new(dim: usize, begin: i64, end: i64) -> Self {
        // Saturating: pads come from the model and may be extreme.
        let lo = begin.saturating_neg().max(0);
        let hi = (dim as i64).saturating_sub(end.saturating_neg().max(0));
        Self {
            begin: begin.max(0),
            lo,
            len: hi.saturating_sub(lo).max(0),
        }
    }

    /// The input coordinate of output coordinate `o`, or `None` for the
    /// constant value.
    #[inline]
    fn map(&self, mode: Mode, o: i64) -> Option<usize> {
        let i = o - self.begin;
        let n = self.len;
        let i = if (0..n).contains(&i) {
            i
        } else {
            match mode {
                Mode::Constant => return None,
                _ if n == 0 => return None,
                Mode::Edge => i.clamp(0, n - 1),
                Mode::Wrap => i.rem_euclid(n),
                Mode::Reflect if n == 1 => 0,
                Mode::Reflect => {
                    let period = 2 * (n - 1);
                    let m = i.rem_euclid(period);
                    if m >= n { period - m } else { m }
                }
            }
        };
        Some((self.lo + i) as usize)
    }
}

fn pad<T: Elem>(
    mode: Mode,
    begin: &[i64; MAX_RANK],
    x: &Tensor,
    out: &mut Tensor,
    value: T,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let xs = x.shape();
    let rank = xs.len();
    check_rank("Pad", rank)?;
    if out.shape().len() != rank {
        return Err(KernelError::Invalid {
            op: "Pad",
            detail: format!("output rank {} for input rank {rank}", out.shape().len()),
        });
    }
    let mut os = [0usize; MAX_RANK];
    os[..rank].copy_from_slice(out.shape());
    let mut maps = [AxisMap {
        begin: 0,
        lo: 0,
        len: 0,
    }; MAX_RANK];
    for d in 0..rank {
        let end = (os[d] as i64)
            .saturating_sub(xs[d] as i64)
            .saturating_sub(begin[d]);
        maps[d] = AxisMap::new(xs[d], begin[d], end);
    }
    let src = typed::<T>("Pad", x)?;
    let dst = typed_mut::<T>("Pad", out)?;
    if rank == 0 {
        dst.copy_from_slice(src);
        return Ok(());
    }
    if mode != Mode::Constant && src.is_empty() && !dst.is_empty() {
        return Err(KernelError::Invalid {
            op: "Pad",
            detail: format!("cannot pad an empty input {xs:?} in a non-constant mode"),
        });
    }
    let st = strides(xs);
    let last = rank - 1;
    let inner = os[last];
    let lm = maps[last];
    by_rows(par, dst, inner, &|first, rows| {
        let mut idx = [0usize; MAX_RANK];
        let mut rest = first;
        for d in (0..last).rev() {
            idx[d] = rest % os[d];
            rest /= os[d];
        }
        for row in rows.chunks_exact_mut(inner) {
            let mut base = Some(0usize);
            for d in 0..last {
                base = match (base, maps[d].map(mode, idx[d] as i64)) {
                    (Some(b), Some(i)) => Some(b + i * st[d]),
                    _ => None,
                };
            }
            match base {
                None => row.fill(value),
                Some(b) => {
                    let (start, n) = (lm.begin as usize, lm.len as usize);
                    let interior = start.min(inner)..(start + n).min(inner);
                    let from = b + lm.lo as usize;
                    let taken = interior.len();
                    row[interior.clone()].copy_from_slice(&src[from..from + taken]);
                    for o in (0..interior.start).chain(interior.end..inner) {
                        row[o] = match lm.map(mode, o as i64) {
                            Some(i) => src[b + i],
                            None => value,
                        };
                    }
                }
            }
            let mut d = last;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                if idx[d] < os[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    });
    Ok(())
}

impl Operator for Pad {
    fn name(&self) -> &'static str {
        "Pad"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let max = match (&self.legacy, self.axes_input) {
            (Some(_), _) => 1,
            (None, false) => 3,
            (None, true) => 4,
        };
        let inputs = check_inputs("Pad", inputs, 1, max)?;
        let x = required("Pad", inputs, 0)?;
        check_storable("Pad", x.dtype)?;
        let (begin, end) = match &self.legacy {
            Some((pads, _)) => {
                let t = Tensor::from_i64(vec![pads.len()], pads.clone())?;
                self.pads(x.shape.len(), Ints::of("Pad", &t)?, None)?
            }
            None => {
                let p = required("Pad", inputs, 1)?;
                if p.dtype != ElementType::I64 {
                    return Err(KernelError::UnsupportedType {
                        op: "Pad",
                        dtype: p.dtype,
                    });
                }
                let pv = p.value.ok_or(KernelError::NeedsConstant {
                    op: "Pad",
                    input: 1,
                })?;
                if let Some(c) = optional(inputs, 2) {
                    if c.dtype != x.dtype {
                        return Err(KernelError::Shape(format!(
                            "Pad: constant_value is {} but data is {}",
                            c.dtype, x.dtype
                        )));
                    }
                    if product(c.shape).unwrap_or(2) > 1 {
                        return Err(KernelError::Shape(format!(
                            "Pad: constant_value must be a scalar, got shape {:?}",
                            c.shape
                        )));
                    }
                }
                let axes = match optional(inputs, 3) {
                    Some(a) => {
                        let av = a.value.ok_or(KernelError::NeedsConstant {
                            op: "Pad",
                            input: 3,
                        })?;
                        Some(Ints::of("Pad", av)?)
                    }
                    None => None,
                };
                self.pads(x.shape.len(), Ints::of("Pad", pv)?, axes)?
            }
        };
        let mut shape = Vec::with_capacity(x.shape.len());
        for (d, &dim) in x.shape.iter().enumerate() {
            let o = (dim as i64)
                .checked_add(begin[d])
                .and_then(|v| v.checked_add(end[d]))
                .filter(|&v| v >= 0)
                .ok_or_else(|| {
                    KernelError::Shape(format!(
                        "Pad: pads {} and {} on axis {d} of {:?} leave a negative size",
                        begin[d], end[d], x.shape
                    ))
                })?;
            shape.push(o as usize);
        }
        checked_count("Pad", &shape)?;
        if self.mode != Mode::Constant && product(x.shape) == Some(0) && product(&shape) != Some(0)
        {
            return Err(KernelError::Shape(format!(
                "Pad: cannot pad an empty input {:?} in a non-constant mode",
                x.shape
            )));
        }
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
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Pad", inputs, 0)?;
        let rank = x.shape().len();
        let (begin, _) = match &self.legacy {
            Some((pads, _)) => {
                // Legacy pads have one value per axis and side.
                if pads.len() != 2 * rank {
                    return Err(KernelError::Invalid {
                        op: "Pad",
                        detail: format!("{} pads for rank {rank}", pads.len()),
                    });
                }
                check_rank("Pad", rank)?;
                let mut b = [0i64; MAX_RANK];
                b[..rank].copy_from_slice(&pads[..rank]);
                (b, b)
            }
            None => {
                let pads = Ints::of("Pad", input("Pad", inputs, 1)?)?;
                let axes = match inputs.get(3).copied().flatten() {
                    Some(a) => Some(Ints::of("Pad", a)?),
                    None => None,
                };
                self.pads(rank, pads, axes)?
            }
        };
        let constant = inputs
            .get(2)
            .copied()
            .flatten()
            .filter(|_| self.legacy.is_none());
        let legacy_value = self.legacy.as_ref().map_or(0.0, |l| l.1 as f64);
        let out = output("Pad", outputs, 0)?;
        let mode = self.mode;
        dispatch_any!(x.dtype(), T => {
            let value = match constant {
                Some(c) => match typed::<T>("Pad", c)? {
                    [] => T::from_f64(0.0),
                    [v] => *v,
                    _ => return Err(KernelError::Invalid {
                        op: "Pad",
                        detail: format!("constant_value must be a scalar, got shape {:?}", c.shape()),
                    }),
                },
                None => T::from_f64(legacy_value),
            };
            pad::<T>(mode, &begin, x, out, value, par)
        }, else Err(KernelError::UnsupportedType { op: "Pad", dtype: x.dtype() }))
    }
}
