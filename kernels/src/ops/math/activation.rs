//! Parameterized activations of CNNs and vision models: LeakyRelu, Elu,
//! Selu, Celu, HardSigmoid, HardSwish, Softplus, Softsign, Mish,
//! ThresholdedRelu, Shrink and Swish (`x·σ(alpha·x)`, whose `alpha` of
//! opset 24 is read at any opset) (hot path: one typed map per call; each
//! formula evaluated in f64 and rounded once to the tensor's float type).

use half::{bf16, f16};

use super::num::{is_float, map};
use crate::ops::basic::common::{Attrs, check_inputs, input, output, required};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Which activation, with its attributes (ONNX defaults applied).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Activation {
    LeakyRelu { alpha: f64 },
    Elu { alpha: f64 },
    Selu { alpha: f64, gamma: f64 },
    Celu { alpha: f64 },
    HardSigmoid { alpha: f64, beta: f64 },
    HardSwish,
    Softplus,
    Softsign,
    Mish,
    ThresholdedRelu { alpha: f64 },
    Shrink { bias: f64, lambd: f64 },
    Swish { alpha: f64 },
}

impl Activation {
    /// The operator `op` of `spec`, its attributes read and checked; `None`
    /// when `op` is not an activation of this file.
    pub(crate) fn parse(spec: &NodeSpec<'_>, op: &str) -> Option<Result<Self, KernelError>> {
        let (name, names): (&'static str, &[&'static str]) = match op {
            "LeakyRelu" => ("LeakyRelu", &["alpha"]),
            "Elu" => ("Elu", &["alpha"]),
            "Selu" => ("Selu", &["alpha", "gamma"]),
            "Celu" => ("Celu", &["alpha"]),
            "HardSigmoid" => ("HardSigmoid", &["alpha", "beta"]),
            "HardSwish" => ("HardSwish", &[]),
            "Softplus" => ("Softplus", &[]),
            "Softsign" => ("Softsign", &[]),
            "Mish" => ("Mish", &[]),
            "ThresholdedRelu" => ("ThresholdedRelu", &["alpha"]),
            "Shrink" => ("Shrink", &["bias", "lambd"]),
            "Swish" => ("Swish", &["alpha"]),
            _ => return None,
        };
        Some(Self::read(spec, name, names))
    }

    fn read(
        spec: &NodeSpec<'_>,
        name: &'static str,
        names: &[&'static str],
    ) -> Result<Self, KernelError> {
        // `consumed_inputs` (opset < 6) was an in-place hint without
        // meaning for the result.
        let mut allowed = names.to_vec();
        if spec.opset < 6 {
            allowed.push("consumed_inputs");
        }
        let attrs = Attrs::new(spec, name, &allowed)?;
        let f = |n: &'static str, default: f64| -> Result<f64, KernelError> {
            Ok(attrs.float(n)?.map_or(default, f64::from))
        };
        Ok(match name {
            "LeakyRelu" => Self::LeakyRelu {
                alpha: f("alpha", 0.01)?,
            },
            "Elu" => Self::Elu {
                alpha: f("alpha", 1.0)?,
            },
            "Selu" => Self::Selu {
                alpha: f("alpha", f64::from(1.673_263_2_f32))?,
                gamma: f("gamma", f64::from(1.050_701_f32))?,
            },
            "Celu" => {
                let alpha = f("alpha", 1.0)?;
                if alpha == 0.0 {
                    return Err(attrs.error("alpha", "must not be 0"));
                }
                Self::Celu { alpha }
            }
            "HardSigmoid" => Self::HardSigmoid {
                alpha: f("alpha", f64::from(0.2_f32))?,
                beta: f("beta", 0.5)?,
            },
            "HardSwish" => Self::HardSwish,
            "Softplus" => Self::Softplus,
            "Softsign" => Self::Softsign,
            "Mish" => Self::Mish,
            "ThresholdedRelu" => Self::ThresholdedRelu {
                alpha: f("alpha", 1.0)?,
            },
            "Swish" => Self::Swish {
                alpha: f("alpha", 1.0)?,
            },
            _ => Self::Shrink {
                bias: f("bias", 0.0)?,
                lambd: f("lambd", 0.5)?,
            },
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::LeakyRelu { .. } => "LeakyRelu",
            Self::Elu { .. } => "Elu",
            Self::Selu { .. } => "Selu",
            Self::Celu { .. } => "Celu",
            Self::HardSigmoid { .. } => "HardSigmoid",
            Self::HardSwish => "HardSwish",
            Self::Softplus => "Softplus",
            Self::Softsign => "Softsign",
            Self::Mish => "Mish",
            Self::ThresholdedRelu { .. } => "ThresholdedRelu",
            Self::Shrink { .. } => "Shrink",
            Self::Swish { .. } => "Swish",
        }
    }

    /// The activation of `x`.
    #[inline(always)]
    fn eval(self, x: f64) -> f64 {
        let softplus = |x: f64| {
            // ln(1 + e^x) without overflow for large x.
            if x > 30.0 { x } else { x.exp().ln_1p() }
        };
        match self {
            Self::LeakyRelu { alpha } => {
                if x < 0.0 {
                    alpha * x
                } else {
                    x
                }
            }
            Self::Elu { alpha } => {
                if x < 0.0 {
                    alpha * x.exp_m1()
                } else {
                    x
                }
            }
            Self::Selu { alpha, gamma } => {
                if x <= 0.0 {
                    gamma * (alpha * x.exp() - alpha)
                } else {
                    gamma * x
                }
            }
            Self::Celu { alpha } => x.max(0.0) + (alpha * (x / alpha).exp_m1()).min(0.0),
            Self::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
            Self::HardSwish => x * (x / 6.0 + 0.5).clamp(0.0, 1.0),
            Self::Softplus => softplus(x),
            Self::Softsign => x / (1.0 + x.abs()),
            Self::Mish => x * softplus(x).tanh(),
            Self::ThresholdedRelu { alpha } => {
                if x > alpha {
                    x
                } else {
                    0.0
                }
            }
            Self::Shrink { bias, lambd } => {
                if x < -lambd {
                    x + bias
                } else if x > lambd {
                    x - bias
                } else {
                    0.0
                }
            }
            Self::Swish { alpha } => x / (1.0 + (-alpha * x).exp()),
        }
    }
}

/// One activation operator.
#[derive(Debug)]
pub(crate) struct ActivationOp(pub(crate) Activation);

impl Operator for ActivationOp {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        if !is_float(x.dtype) {
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
        let (x, y) = (input(op, inputs, 0)?, output(op, outputs, 0)?);
        let a = self.0;
        match x.dtype() {
            E::F32 => map::<f32, f32>(op, x, y, par, |v| a.eval(f64::from(v)) as f32),
            E::F64 => map::<f64, f64>(op, x, y, par, |v| a.eval(v)),
            E::F16 => map::<f16, f16>(op, x, y, par, |v| f16::from_f64(a.eval(v.to_f64()))),
            E::BF16 => map::<bf16, bf16>(op, x, y, par, |v| bf16::from_f64(a.eval(v.to_f64()))),
            dtype => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}
