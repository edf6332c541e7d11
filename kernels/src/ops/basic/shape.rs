//! Operators that only change the shape: Reshape, Squeeze, Unsqueeze and
//! Identity (cold path inference from constant shape operands; `execute` is
//! one copy, since the interface gives each output its own buffer).

use super::common::{
    Attrs, check_inputs, checked_count, constant_ints, copy_data, input, normalize_axis, optional,
    output, required,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

fn data_input<'b>(
    op: &'static str,
    inputs: &[Option<InputInfo<'b>>],
) -> Result<InputInfo<'b>, KernelError> {
    let x = required(op, inputs, 0)?;
    if matches!(x.dtype, ElementType::I4 | ElementType::U4) {
        return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
    }
    Ok(x)
}

fn copy_through(
    op: &'static str,
    inputs: &[Option<&Tensor>],
    outputs: &mut [Tensor],
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let x = input(op, inputs, 0)?;
    let y = output(op, outputs, 0)?;
    copy_data(op, x, y, par)
}

/// Reshape.
#[derive(Debug)]
pub(crate) struct Reshape {
    /// Opset < 5: the `shape` attribute.
    shape_attr: Option<Vec<i64>>,
    allowzero: bool,
}

impl Reshape {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = match spec.opset {
            ..5 => &["shape", "consumed_inputs"],
            5..14 => &[],
            _ => &["allowzero"],
        };
        let attrs = Attrs::new(spec, "Reshape", allowed)?;
        let shape_attr = if spec.opset < 5 {
            Some(
                attrs
                    .ints("shape")?
                    .ok_or_else(|| attrs.error("shape", "is required before opset 5"))?,
            )
        } else {
            None
        };
        let allowzero = match attrs.int_or("allowzero", 0)? {
            0 => false,
            1 => true,
            v => return Err(attrs.error("allowzero", format!("{v} is not 0 or 1"))),
        };
        Ok(Self {
            shape_attr,
            allowzero,
        })
    }
}

/// The output shape of Reshape (ONNX rules: 0 copies the input dimension
/// unless `allowzero`, one -1 is inferred).
pub(crate) fn reshape_shape(
    input: &[usize],
    target: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, KernelError> {
    let err =
        |d: String| KernelError::Shape(format!("Reshape: {d} (input {input:?}, shape {target:?})"));
    let total = checked_count("Reshape", input)?;
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &v) in target.iter().enumerate() {
        match v {
            -1 => {
                if infer_at.replace(i).is_some() {
                    return Err(err("more than one -1".into()));
                }
                out.push(1);
            }
            0 if !allowzero => {
                let d = *input
                    .get(i)
                    .ok_or_else(|| err(format!("0 at position {i} has no input dimension")))?;
                out.push(d);
            }
            v if v >= 0 => out.push(v as usize),
            v => return Err(err(format!("invalid dimension {v}"))),
        }
    }
    if allowzero && infer_at.is_some() && target.contains(&0) {
        return Err(err("allowzero=1 forbids 0 together with -1".into()));
    }
    let known = checked_count("Reshape", &out)?;
    match infer_at {
        Some(i) => {
            if known == 0 || total % known != 0 {
                return Err(err("cannot infer the -1 dimension".into()));
            }
            out[i] = total / known;
        }
        None if known != total => {
            return Err(err(format!("{total} elements cannot take shape {out:?}")));
        }
        None => {}
    }
    Ok(out)
}

impl Operator for Reshape {
    fn name(&self) -> &'static str {
        "Reshape"
    }

    fn passes_elements_through(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let (x, target) = match &self.shape_attr {
            Some(s) => {
                let inputs = check_inputs("Reshape", inputs, 1, 1)?;
                (data_input("Reshape", inputs)?, s.clone())
            }
            None => {
                let inputs = check_inputs("Reshape", inputs, 2, 2)?;
                let shape = required("Reshape", inputs, 1)?;
                if shape.dtype != ElementType::I64 {
                    return Err(KernelError::UnsupportedType {
                        op: "Reshape",
                        dtype: shape.dtype,
                    });
                }
                (
                    data_input("Reshape", inputs)?,
                    constant_ints("Reshape", shape, 1)?,
                )
            }
        };
        let shape = reshape_shape(x.shape, &target, self.allowzero)?;
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
        copy_through("Reshape", inputs, outputs, par)
    }
}

/// Squeeze or Unsqueeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AxesKind {
    Squeeze,
    Unsqueeze,
}

impl AxesKind {
    fn name(self) -> &'static str {
        match self {
            Self::Squeeze => "Squeeze",
            Self::Unsqueeze => "Unsqueeze",
        }
    }
}

/// Squeeze or Unsqueeze: axes from the attribute (opset < 13) or a
/// constant input (opset 13+).
#[derive(Debug)]
pub(crate) struct Axes {
    kind: AxesKind,
    /// `Some` before opset 13 (`Some(None)`: attribute absent).
    attr: Option<Option<Vec<i64>>>,
}

impl Axes {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: AxesKind) -> Result<Self, KernelError> {
        let op = kind.name();
        let allowed: &[&'static str] = if spec.opset < 13 { &["axes"] } else { &[] };
        let attrs = Attrs::new(spec, op, allowed)?;
        let attr = if spec.opset < 13 {
            let axes = attrs.ints("axes")?;
            if kind == AxesKind::Unsqueeze && axes.is_none() {
                return Err(attrs.error("axes", "is required"));
            }
            Some(axes)
        } else {
            None
        };
        Ok(Self { kind, attr })
    }

    fn out_shape(&self, shape: &[usize], axes: Option<&[i64]>) -> Result<Vec<usize>, KernelError> {
        let op = self.kind.name();
        match self.kind {
            AxesKind::Squeeze => {
                // No axes, or an empty list: every size-1 dimension goes.
                let Some(axes) = axes.filter(|a| !a.is_empty()) else {
                    return Ok(shape.iter().copied().filter(|&d| d != 1).collect());
                };
                let mut drop = vec![false; shape.len()];
                for &a in axes {
                    let a = normalize_axis(op, "axis", a, shape.len())?;
                    if drop[a] {
                        return Err(KernelError::Shape(format!("{op}: axis {a} is repeated")));
                    }
                    if shape[a] != 1 {
                        return Err(KernelError::Shape(format!(
                            "{op}: axis {a} of shape {shape:?} is not 1"
                        )));
                    }
                    drop[a] = true;
                }
                Ok(shape
                    .iter()
                    .zip(&drop)
                    .filter(|(_, d)| !**d)
                    .map(|(&s, _)| s)
                    .collect())
            }
            AxesKind::Unsqueeze => {
                let axes =
                    axes.ok_or_else(|| KernelError::Shape(format!("{op}: axes are required")))?;
                let rank = shape.len() + axes.len();
                let mut add = vec![false; rank];
                for &a in axes {
                    let a = normalize_axis(op, "axis", a, rank)?;
                    if add[a] {
                        return Err(KernelError::Shape(format!("{op}: axis {a} is repeated")));
                    }
                    add[a] = true;
                }
                let mut dims = shape.iter();
                Ok(add
                    .iter()
                    .map(|&n| {
                        if n {
                            1
                        } else {
                            dims.next().copied().unwrap_or(1)
                        }
                    })
                    .collect())
            }
        }
    }
}

impl Operator for Axes {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn passes_elements_through(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.kind.name();
        let (x, axes) = match &self.attr {
            Some(a) => {
                let inputs = check_inputs(op, inputs, 1, 1)?;
                (data_input(op, inputs)?, a.clone())
            }
            None => {
                let min = if self.kind == AxesKind::Unsqueeze {
                    2
                } else {
                    1
                };
                let inputs = check_inputs(op, inputs, min, 2)?;
                let axes = match optional(inputs, 1) {
                    Some(info) => {
                        if info.dtype != ElementType::I64 {
                            return Err(KernelError::UnsupportedType {
                                op,
                                dtype: info.dtype,
                            });
                        }
                        Some(constant_ints(op, info, 1)?)
                    }
                    None if self.kind == AxesKind::Unsqueeze => {
                        return Err(KernelError::Shape(format!(
                            "{op}: input 1 (axes) is required"
                        )));
                    }
                    None => None,
                };
                (data_input(op, inputs)?, axes)
            }
        };
        let shape = self.out_shape(x.shape, axes.as_deref())?;
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
        copy_through(self.kind.name(), inputs, outputs, par)
    }
}

/// Identity.
#[derive(Debug)]
pub(crate) struct Identity;

impl Identity {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        Attrs::new(spec, "Identity", &[])?;
        Ok(Self)
    }
}

impl Operator for Identity {
    fn name(&self) -> &'static str {
        "Identity"
    }

    fn passes_elements_through(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Identity", inputs, 1, 1)?;
        let x = data_input("Identity", inputs)?;
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
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        copy_through("Identity", inputs, outputs, par)
    }
}
