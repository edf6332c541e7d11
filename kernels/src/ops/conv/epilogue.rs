//! What a convolution does to its outputs as they leave the product (hot
//! path): the per-channel scale and shift (bias, a folded
//! BatchNormalization), a residual addend and an activation, in one pass
//! over a tile that is still in cache.

/// The activation a fused convolution applies last.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ConvActivation {
    /// None.
    #[default]
    Identity,
    /// `max(x, 0)`.
    Relu,
    /// `x` when `x >= 0`, else `alpha * x`.
    LeakyRelu {
        /// Slope below zero.
        alpha: f32,
    },
    /// `min(max(x, min), max)`.
    Clip {
        /// Lower bound.
        min: f32,
        /// Upper bound (wins over `min`).
        max: f32,
    },
    /// `clamp(alpha * x + beta, 0, 1)`.
    HardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
    /// `x * clamp(x / 6 + 1/2, 0, 1)`.
    HardSwish,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x * clamp(alpha * x + beta, 0, 1)` (HardSigmoid, then Mul by `x`).
    MulHardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
    /// `x / (1 + e^-x)` (Sigmoid, then Mul by `x`: SiLU).
    Silu,
}

impl ConvActivation {
    /// A short name for plan dumps.
    pub fn name(self) -> &'static str {
        match self {
            Self::Identity => "",
            Self::Relu => "Relu",
            Self::LeakyRelu { .. } => "LeakyRelu",
            Self::Clip { .. } => "Clip",
            Self::HardSigmoid { .. } => "HardSigmoid",
            Self::HardSwish => "HardSwish",
            Self::Sigmoid => "Sigmoid",
            Self::MulHardSigmoid { .. } => "HardSigmoid*Mul",
            Self::Silu => "Sigmoid*Mul",
        }
    }
}

/// What follows a convolution inside one fused operator. The fused
/// operator's inputs are Conv's `X, W, B` (`B` possibly omitted), then
/// BatchNormalization's `scale, B, mean, var` when `batch_norm` is set,
/// then the residual addend when `residual` is set.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ConvFusion {
    /// The epsilon of a BatchNormalization (inference form) applied to the
    /// convolution's output.
    pub batch_norm: Option<f32>,
    /// An `Add` of a tensor of the output's shape, after the
    /// normalization and before the activation.
    pub residual: bool,
    /// The activation applied last.
    pub activation: ConvActivation,
}

impl ConvFusion {
    /// Whether anything follows the convolution.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Inputs of the fused operator.
    pub(crate) fn inputs(&self) -> usize {
        3 + if self.batch_norm.is_some() { 4 } else { 0 } + usize::from(self.residual)
    }

    /// Position of the residual addend.
    pub(crate) fn residual_input(&self) -> Option<usize> {
        self.residual.then(|| self.inputs() - 1)
    }
}

/// The logistic function in f32, vectorizable.
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + crate::ops::basic::real::exp_f32(-x))
}

/// `y = f(y * mul + add (+ r))` over one run of outputs.
#[inline(always)]
fn finish_with<F: Fn(f32) -> f32>(f: F, y: &mut [f32], mul: f32, add: f32, r: Option<&[f32]>) {
    match r {
        Some(r) => {
            for (o, &v) in y.iter_mut().zip(r) {
                *o = f(*o * mul + add + v);
            }
        }
        None => {
            for o in y.iter_mut() {
                *o = f(*o * mul + add);
            }
        }
    }
}

/// Finishes one run of outputs of one channel: `y = act(y * mul + add +
/// r)`. Inline it into a [`crate::vector::run`] closure to get the CPU's
/// vector width.
#[inline(always)]
pub(crate) fn finish(act: ConvActivation, y: &mut [f32], mul: f32, add: f32, r: Option<&[f32]>) {
    match act {
        ConvActivation::Identity => finish_with(|v| v, y, mul, add, r),
        ConvActivation::Relu => finish_with(|v| v.max(0.0), y, mul, add, r),
        ConvActivation::LeakyRelu { alpha } => {
            finish_with(|v| if v < 0.0 { alpha * v } else { v }, y, mul, add, r)
        }
        ConvActivation::Clip { min, max } => finish_with(|v| v.max(min).min(max), y, mul, add, r),
        ConvActivation::HardSigmoid { alpha, beta } => {
            finish_with(|v| (alpha * v + beta).clamp(0.0, 1.0), y, mul, add, r)
        }
        ConvActivation::HardSwish => finish_with(
            |v| v * (v * (1.0 / 6.0) + 0.5).clamp(0.0, 1.0),
            y,
            mul,
            add,
            r,
        ),
        ConvActivation::Sigmoid => finish_with(sigmoid, y, mul, add, r),
        ConvActivation::MulHardSigmoid { alpha, beta } => {
            finish_with(|v| v * (alpha * v + beta).clamp(0.0, 1.0), y, mul, add, r)
        }
        ConvActivation::Silu => finish_with(|v| v * sigmoid(v), y, mul, add, r),
    }
}
