//! Comparison and logic: Equal, Less, LessOrEqual, Greater, GreaterOrEqual,
//! And, Or, Xor (NumPy broadcasting, bool output), Not, IsNaN, IsInf.

use super::num::{Num, is_float, is_num, map};
use crate::ops::basic::broadcast::{Plan, broadcast_shape};
use crate::ops::basic::common::{Attrs, check_inputs, input, output, required, typed, typed_mut};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Which relation a [`Compare`] tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompareKind {
    Equal,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl CompareKind {
    fn name(self) -> &'static str {
        match self {
            Self::Equal => "Equal",
            Self::Less => "Less",
            Self::LessOrEqual => "LessOrEqual",
            Self::Greater => "Greater",
            Self::GreaterOrEqual => "GreaterOrEqual",
        }
    }
}

/// Checks the legacy (opset < 7) broadcasting attributes: only the default
/// "no broadcast" form is accepted.
pub(crate) fn legacy_broadcast(spec: &NodeSpec<'_>, op: &'static str) -> Result<(), KernelError> {
    let allowed: &[&'static str] = if spec.opset < 7 {
        &["broadcast", "axis"]
    } else {
        &[]
    };
    let attrs = Attrs::new(spec, op, allowed)?;
    // `axis` only places a broadcast operand, refused below; its declared
    // type is still checked.
    attrs.int("axis")?;
    match attrs.int("broadcast")? {
        None | Some(0) => Ok(()),
        Some(v) => Err(attrs.error(
            "broadcast",
            format!("legacy (opset < 7) broadcasting with broadcast={v} is not supported"),
        )),
    }
}

/// Infers a two-operand bool-output operator whose operands share a type
/// accepted by `ok`.
fn infer_bool_binary(
    op: &'static str,
    inputs: &[Option<InputInfo<'_>>],
    ok: impl Fn(ElementType) -> bool,
) -> Result<Vec<OutputInfo>, KernelError> {
    let inputs = check_inputs(op, inputs, 2, 2)?;
    let (a, b) = (required(op, inputs, 0)?, required(op, inputs, 1)?);
    if a.dtype != b.dtype {
        return Err(KernelError::Shape(format!(
            "{op}: operand types differ ({} and {})",
            a.dtype, b.dtype
        )));
    }
    if !ok(a.dtype) {
        return Err(KernelError::UnsupportedType { op, dtype: a.dtype });
    }
    let shape = broadcast_shape(op, a.shape, b.shape)?;
    Plan::new(op, a.shape, b.shape)?;
    Ok(vec![OutputInfo {
        dtype: ElementType::Bool,
        shape,
    }])
}

/// Equal, Less, LessOrEqual, Greater or GreaterOrEqual.
#[derive(Debug)]
pub(crate) struct Compare {
    kind: CompareKind,
}

impl Compare {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: CompareKind) -> Result<Self, KernelError> {
        legacy_broadcast(spec, kind.name())?;
        Ok(Self { kind })
    }
}

fn compare_typed<T: Num>(
    kind: CompareKind,
    plan: &Plan,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let op = kind.name();
    let (a, b, out) = (
        typed::<T>(op, a)?,
        typed::<T>(op, b)?,
        typed_mut::<bool>(op, out)?,
    );
    match kind {
        CompareKind::Equal => plan.run_par(op, a, b, out, par, |x, y| x == y),
        CompareKind::Less => plan.run_par(op, a, b, out, par, |x, y| x < y),
        CompareKind::LessOrEqual => plan.run_par(op, a, b, out, par, |x, y| x <= y),
        CompareKind::Greater => plan.run_par(op, a, b, out, par, |x, y| x > y),
        CompareKind::GreaterOrEqual => plan.run_par(op, a, b, out, par, |x, y| x >= y),
    }
}

impl Operator for Compare {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let equal = self.kind == CompareKind::Equal;
        infer_bool_binary(self.name(), inputs, |t| {
            is_num(t) || (equal && t == ElementType::Bool)
        })
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.name();
        let (a, b) = (input(op, inputs, 0)?, input(op, inputs, 1)?);
        let out = output(op, outputs, 0)?;
        let plan = Plan::new(op, a.shape(), b.shape())?;
        if a.dtype() == ElementType::Bool && self.kind == CompareKind::Equal {
            let (a, b, out) = (
                typed::<bool>(op, a)?,
                typed::<bool>(op, b)?,
                typed_mut::<bool>(op, out)?,
            );
            return plan.run_par(op, a, b, out, par, |x, y| x == y);
        }
        dispatch_num!(a.dtype(), T => compare_typed::<T>(self.kind, &plan, a, b, out, par),
            else Err(KernelError::UnsupportedType { op, dtype: a.dtype() }))
    }
}

/// Which function a [`Logic`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogicKind {
    And,
    Or,
    Xor,
}

impl LogicKind {
    fn name(self) -> &'static str {
        match self {
            Self::And => "And",
            Self::Or => "Or",
            Self::Xor => "Xor",
        }
    }
}

/// And, Or or Xor of two bool tensors.
#[derive(Debug)]
pub(crate) struct Logic {
    kind: LogicKind,
}

impl Logic {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: LogicKind) -> Result<Self, KernelError> {
        legacy_broadcast(spec, kind.name())?;
        Ok(Self { kind })
    }
}

impl Operator for Logic {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        infer_bool_binary(self.name(), inputs, |t| t == ElementType::Bool)
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.name();
        let (a, b) = (input(op, inputs, 0)?, input(op, inputs, 1)?);
        let out = output(op, outputs, 0)?;
        let plan = Plan::new(op, a.shape(), b.shape())?;
        let (a, b, out) = (
            typed::<bool>(op, a)?,
            typed::<bool>(op, b)?,
            typed_mut::<bool>(op, out)?,
        );
        match self.kind {
            LogicKind::And => plan.run_par(op, a, b, out, par, |x, y| x & y),
            LogicKind::Or => plan.run_par(op, a, b, out, par, |x, y| x | y),
            LogicKind::Xor => plan.run_par(op, a, b, out, par, |x, y| x ^ y),
        }
    }
}

/// Which test a [`Predicate`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PredicateKind {
    /// Logical negation of a bool tensor.
    Not,
    /// NaN test of a float tensor.
    IsNaN,
    /// Infinity test of a float tensor (which signs count).
    IsInf { positive: bool, negative: bool },
}

/// Not, IsNaN or IsInf: one input, bool output of the same shape.
#[derive(Debug)]
pub(crate) struct Predicate {
    kind: PredicateKind,
}

impl Predicate {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: PredicateKind) -> Result<Self, KernelError> {
        let kind = match kind {
            PredicateKind::IsInf { .. } => {
                let attrs = Attrs::new(spec, "IsInf", &["detect_positive", "detect_negative"])?;
                let flag = |name: &'static str| -> Result<bool, KernelError> {
                    match attrs.int_or(name, 1)? {
                        0 => Ok(false),
                        1 => Ok(true),
                        v => Err(attrs.error(name, format!("must be 0 or 1, got {v}"))),
                    }
                };
                PredicateKind::IsInf {
                    positive: flag("detect_positive")?,
                    negative: flag("detect_negative")?,
                }
            }
            PredicateKind::Not => {
                Attrs::new(spec, "Not", &[])?;
                kind
            }
            PredicateKind::IsNaN => {
                Attrs::new(spec, "IsNaN", &[])?;
                kind
            }
        };
        Ok(Self { kind })
    }
}

fn predicate_float<T: Num + Sync>(
    kind: PredicateKind,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    match kind {
        PredicateKind::IsNaN => map::<T, bool>("IsNaN", x, y, par, |v| v.is_nan()),
        PredicateKind::IsInf { positive, negative } => {
            map::<T, bool>("IsInf", x, y, par, move |v| {
                (positive && v == T::HIGHEST) || (negative && v == T::LOWEST)
            })
        }
        PredicateKind::Not => Err(KernelError::UnsupportedType {
            op: "Not",
            dtype: T::DTYPE,
        }),
    }
}

impl Operator for Predicate {
    fn name(&self) -> &'static str {
        match self.kind {
            PredicateKind::Not => "Not",
            PredicateKind::IsNaN => "IsNaN",
            PredicateKind::IsInf { .. } => "IsInf",
        }
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        let ok = match self.kind {
            PredicateKind::Not => x.dtype == ElementType::Bool,
            _ => is_float(x.dtype),
        };
        if !ok {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        Ok(vec![OutputInfo {
            dtype: ElementType::Bool,
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
        use ElementType as E;
        let op = self.name();
        let x = input(op, inputs, 0)?;
        let y = output(op, outputs, 0)?;
        let kind = self.kind;
        match (kind, x.dtype()) {
            (PredicateKind::Not, E::Bool) => map::<bool, bool>(op, x, y, par, |v| !v),
            (PredicateKind::Not, dtype) => Err(KernelError::UnsupportedType { op, dtype }),
            (_, E::F32) => predicate_float::<f32>(kind, x, y, par),
            (_, E::F64) => predicate_float::<f64>(kind, x, y, par),
            (_, E::F16) => predicate_float::<half::f16>(kind, x, y, par),
            (_, E::BF16) => predicate_float::<half::bf16>(kind, x, y, par),
            (_, dtype) => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}
