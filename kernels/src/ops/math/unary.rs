//! Unary math: Abs, Exp, Log, Cos, Sin, Tanh, Erf, Gelu, Relu, Floor, Ceil,
//! Round, Sign (hot path: one typed map per call, f32 through the
//! vectorizable functions of `fast`; f16/bf16 computed in f32).

use half::{bf16, f16};

use super::fast::{erf_f32, erf_f64, gelu_f32, gelu_f64, gelu_tanh_f32, gelu_tanh_f64, tanh_f32};
use super::num::{Num, is_float, is_num, map, map_wide};
use crate::ops::basic::common::{Attrs, check_inputs, input, output, required};
use crate::ops::basic::real::exp_f32;
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Which function a [`MathUnary`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MathKind {
    Abs,
    Exp,
    Log,
    Cos,
    Sin,
    Tanh,
    Erf,
    /// Gelu; `tanh` selects the tanh approximation.
    Gelu {
        tanh: bool,
    },
    Relu,
    Floor,
    Ceil,
    Round,
    Sign,
}

impl MathKind {
    fn name(self) -> &'static str {
        match self {
            Self::Abs => "Abs",
            Self::Exp => "Exp",
            Self::Log => "Log",
            Self::Cos => "Cos",
            Self::Sin => "Sin",
            Self::Tanh => "Tanh",
            Self::Erf => "Erf",
            Self::Gelu { .. } => "Gelu",
            Self::Relu => "Relu",
            Self::Floor => "Floor",
            Self::Ceil => "Ceil",
            Self::Round => "Round",
            Self::Sign => "Sign",
        }
    }

    /// Whether the function is defined for integer types too.
    fn takes_integers(self) -> bool {
        matches!(self, Self::Abs | Self::Relu | Self::Sign)
    }
}

/// One unary math operator.
#[derive(Debug)]
pub(crate) struct MathUnary {
    kind: MathKind,
}

impl MathUnary {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: MathKind) -> Result<Self, KernelError> {
        let op = kind.name();
        if let MathKind::Gelu { .. } = kind {
            let attrs = Attrs::new(spec, op, &["approximate"])?;
            let tanh = match attrs.string("approximate")?.as_deref() {
                None | Some("none") => false,
                Some("tanh") => true,
                Some(v) => {
                    return Err(attrs.error(
                        "approximate",
                        format!("must be \"none\" or \"tanh\", got {v:?}"),
                    ));
                }
            };
            return Ok(Self {
                kind: MathKind::Gelu { tanh },
            });
        }
        // `consumed_inputs` (opset < 6) was an in-place hint without meaning
        // for the result.
        let allowed: &[&'static str] = if spec.opset < 6 {
            &["consumed_inputs"]
        } else {
            &[]
        };
        Attrs::new(spec, op, allowed)?;
        Ok(Self { kind })
    }
}

/// The f32 function of `kind`.
#[inline(always)]
fn f32_fn(kind: MathKind) -> fn(f32) -> f32 {
    match kind {
        MathKind::Abs => f32::abs,
        MathKind::Exp => exp_f32,
        MathKind::Log => f32::ln,
        MathKind::Cos => f32::cos,
        MathKind::Sin => f32::sin,
        MathKind::Tanh => tanh_f32,
        MathKind::Erf => erf_f32,
        MathKind::Gelu { tanh: false } => gelu_f32,
        MathKind::Gelu { tanh: true } => gelu_tanh_f32,
        MathKind::Relu => |v| if v < 0.0 { 0.0 } else { v },
        MathKind::Floor => f32::floor,
        MathKind::Ceil => f32::ceil,
        MathKind::Round => f32::round_ties_even,
        MathKind::Sign => Num::sign,
    }
}

/// The f64 function of `kind`.
fn f64_fn(kind: MathKind) -> fn(f64) -> f64 {
    match kind {
        MathKind::Abs => f64::abs,
        MathKind::Exp => f64::exp,
        MathKind::Log => f64::ln,
        MathKind::Cos => f64::cos,
        MathKind::Sin => f64::sin,
        MathKind::Tanh => f64::tanh,
        MathKind::Erf => erf_f64,
        MathKind::Gelu { tanh: false } => gelu_f64,
        MathKind::Gelu { tanh: true } => gelu_tanh_f64,
        MathKind::Relu => |v| if v < 0.0 { 0.0 } else { v },
        MathKind::Floor => f64::floor,
        MathKind::Ceil => f64::ceil,
        MathKind::Round => f64::round_ties_even,
        MathKind::Sign => Num::sign,
    }
}

/// The f32 kernel, monomorphized per function so each loop inlines (and
/// vectorizes) its body.
fn unary_f32(
    kind: MathKind,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let op = kind.name();
    // Each function inlined into a loop compiled for the widest vectors.
    macro_rules! go {
        ($f:expr) => {
            map_wide::<f32, f32>(
                op,
                x,
                y,
                par,
                #[inline(always)]
                |v: f32| $f(v),
            )
        };
    }
    match kind {
        MathKind::Abs => go!(f32::abs),
        MathKind::Exp => go!(exp_f32),
        MathKind::Log => go!(f32::ln),
        MathKind::Cos => go!(f32::cos),
        MathKind::Sin => go!(f32::sin),
        MathKind::Tanh => go!(tanh_f32),
        MathKind::Erf => go!(erf_f32),
        MathKind::Gelu { tanh: false } => go!(gelu_f32),
        MathKind::Gelu { tanh: true } => go!(gelu_tanh_f32),
        MathKind::Relu => go!(|v: f32| if v < 0.0 { 0.0 } else { v }),
        MathKind::Floor => go!(f32::floor),
        MathKind::Ceil => go!(f32::ceil),
        MathKind::Round => go!(f32::round_ties_even),
        MathKind::Sign => go!(Num::sign),
    }
}

/// Abs, Relu or Sign on an integer type.
fn unary_int<T: Num>(
    kind: MathKind,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let op = kind.name();
    match kind {
        MathKind::Abs => map::<T, T>(op, x, y, par, Num::abs),
        MathKind::Sign => map::<T, T>(op, x, y, par, Num::sign),
        MathKind::Relu => map::<T, T>(op, x, y, par, |v| if v < T::ZERO { T::ZERO } else { v }),
        _ => Err(KernelError::UnsupportedType {
            op,
            dtype: T::DTYPE,
        }),
    }
}

impl Operator for MathUnary {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        let ok = if self.kind.takes_integers() {
            is_num(x.dtype)
        } else {
            is_float(x.dtype)
        };
        if !ok {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
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
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        use ElementType as E;
        let op = self.name();
        let x = input(op, inputs, 0)?;
        let y = output(op, outputs, 0)?;
        let kind = self.kind;
        match x.dtype() {
            E::F32 => unary_f32(kind, x, y, par),
            E::F64 => map::<f64, f64>(op, x, y, par, f64_fn(kind)),
            E::F16 => {
                let f = f32_fn(kind);
                map::<f16, f16>(op, x, y, par, |v| f16::from_f32(f(v.to_f32())))
            }
            E::BF16 => {
                let f = f32_fn(kind);
                map::<bf16, bf16>(op, x, y, par, |v| bf16::from_f32(f(v.to_f32())))
            }
            dtype if kind.takes_integers() => {
                dispatch_num!(dtype, T => unary_int::<T>(kind, x, y, par),
                    else Err(KernelError::UnsupportedType { op, dtype }))
            }
            dtype => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}
