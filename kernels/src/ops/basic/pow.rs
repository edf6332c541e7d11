//! Pow with NumPy broadcasting (hot path kernel, cold path construction and
//! inference), computed as ONNX Runtime's CPU kernel computes it:
//!
//! * each element is C++ `std::pow` in double precision (in `float` for an
//!   f32 base with an f32 exponent), converted back to the base type with
//!   `static_cast`: for an integer base that is [`FromFloat`] (a result
//!   that is not an integer truncates toward zero, so `2^-1` is 0; an
//!   infinite, NaN or out-of-range result, such as `0^-1` or `3^40` in
//!   int32, is the type's minimum);
//! * except where the exponent is one value along the innermost broadcast
//!   run and the base is not (ONNX Runtime's "input 1 scalar" loop): there
//!   an exponent equal to 2 or 3 multiplies in the base type, `x * x` or
//!   `x * x * x`, wrapping for integers (65536^2 in int32 is 0).

use super::broadcast::{Plan, broadcast_shape};
use super::common::{Elem, check_inputs, input, output, required, typed, typed_mut};
use super::elementwise::legacy_broadcast;
use super::truncate::FromFloat;
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// An exponent element type of Pow.
trait PowExp: Elem {
    /// The value as f64 (exact for every value that is 2 or 3).
    fn as_f64(self) -> f64;
}

macro_rules! impl_pow_exp {
    ($($t:ty),*) => {
        $(
            impl PowExp for $t {
                #[inline(always)]
                fn as_f64(self) -> f64 { self as f64 }
            }
        )*
    };
}

impl_pow_exp!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64);

/// A base element type of Pow.
trait PowBase: Elem {
    /// `std::pow(self, e)` converted back to `Self`.
    fn pow<E: PowExp>(self, e: E) -> Self;
    /// `self * self` in `Self` (wrapping for integers).
    fn square(self) -> Self;
    /// `self * self * self` in `Self` (wrapping for integers).
    fn cube(self) -> Self;
}

impl PowBase for f32 {
    #[inline(always)]
    fn pow<E: PowExp>(self, e: E) -> Self {
        // `std::pow(float, float)` is `powf`; any other exponent type
        // promotes both operands to double.
        if E::DTYPE == ElementType::F32 {
            self.powf(e.as_f64() as f32)
        } else {
            (self as f64).powf(e.as_f64()) as f32
        }
    }
    #[inline(always)]
    fn square(self) -> Self {
        self * self
    }
    #[inline(always)]
    fn cube(self) -> Self {
        self * self * self
    }
}

impl PowBase for f64 {
    #[inline(always)]
    fn pow<E: PowExp>(self, e: E) -> Self {
        self.powf(e.as_f64())
    }
    #[inline(always)]
    fn square(self) -> Self {
        self * self
    }
    #[inline(always)]
    fn cube(self) -> Self {
        self * self * self
    }
}

macro_rules! impl_pow_base_int {
    ($($t:ty),*) => {
        $(
            impl PowBase for $t {
                #[inline(always)]
                fn pow<E: PowExp>(self, e: E) -> Self {
                    <$t>::from_float((self as f64).powf(e.as_f64()))
                }
                #[inline(always)]
                fn square(self) -> Self {
                    self.wrapping_mul(self)
                }
                #[inline(always)]
                fn cube(self) -> Self {
                    self.wrapping_mul(self).wrapping_mul(self)
                }
            }
        )*
    };
}

impl_pow_base_int!(i32, i64);

/// Pow (base types f32, f64, i32, i64; exponent any integer or f32/f64).
#[derive(Debug)]
pub(crate) struct Pow;

impl Pow {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        legacy_broadcast(spec, "Pow")?;
        Ok(Self)
    }
}

/// `x^y` where the exponent may take the multiplying shortcut (see the
/// module documentation).
#[inline(always)]
fn pow_or_product<B: PowBase, E: PowExp>(x: B, y: E) -> B {
    let e = y.as_f64();
    if e == 2.0 {
        x.square()
    } else if e == 3.0 {
        x.cube()
    } else {
        x.pow(y)
    }
}

fn pow_typed<B: PowBase, E: PowExp>(
    plan: &Plan,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    let (a, b, out) = (
        typed::<B>("Pow", a)?,
        typed::<E>("Pow", b)?,
        typed_mut::<B>("Pow", out)?,
    );
    match plan.inner_repeats() {
        // The base repeats along the inner run, or neither operand does.
        (true, _) | (false, false) => plan.run("Pow", a, b, out, |x, y| x.pow(y)),
        // One exponent for everything (x^2 in decomposed RMS/LayerNorm).
        (false, true) => match b {
            [y] if y.as_f64() == 2.0 => plan.run("Pow", a, b, out, |x, _| x.square()),
            [y] if y.as_f64() == 3.0 => plan.run("Pow", a, b, out, |x, _| x.cube()),
            _ => plan.run("Pow", a, b, out, pow_or_product),
        },
    }
}

fn pow_exp<B: PowBase>(
    plan: &Plan,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
) -> Result<(), KernelError> {
    use ElementType as E;
    match b.dtype() {
        E::F32 => pow_typed::<B, f32>(plan, a, b, out),
        E::F64 => pow_typed::<B, f64>(plan, a, b, out),
        E::I8 => pow_typed::<B, i8>(plan, a, b, out),
        E::I16 => pow_typed::<B, i16>(plan, a, b, out),
        E::I32 => pow_typed::<B, i32>(plan, a, b, out),
        E::I64 => pow_typed::<B, i64>(plan, a, b, out),
        E::U8 => pow_typed::<B, u8>(plan, a, b, out),
        E::U16 => pow_typed::<B, u16>(plan, a, b, out),
        E::U32 => pow_typed::<B, u32>(plan, a, b, out),
        E::U64 => pow_typed::<B, u64>(plan, a, b, out),
        dtype => Err(KernelError::UnsupportedType { op: "Pow", dtype }),
    }
}

impl Operator for Pow {
    fn name(&self) -> &'static str {
        "Pow"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        use ElementType as E;
        let inputs = check_inputs("Pow", inputs, 2, 2)?;
        let (a, b) = (required("Pow", inputs, 0)?, required("Pow", inputs, 1)?);
        if !matches!(a.dtype, E::F32 | E::F64 | E::I32 | E::I64) {
            return Err(KernelError::UnsupportedType {
                op: "Pow",
                dtype: a.dtype,
            });
        }
        if !matches!(
            b.dtype,
            E::F32 | E::F64 | E::I8 | E::I16 | E::I32 | E::I64 | E::U8 | E::U16 | E::U32 | E::U64
        ) {
            return Err(KernelError::UnsupportedType {
                op: "Pow",
                dtype: b.dtype,
            });
        }
        let shape = broadcast_shape("Pow", a.shape, b.shape)?;
        Plan::new("Pow", a.shape, b.shape)?;
        Ok(vec![OutputInfo {
            dtype: a.dtype,
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
        use ElementType as E;
        let (a, b) = (input("Pow", inputs, 0)?, input("Pow", inputs, 1)?);
        let out = output("Pow", outputs, 0)?;
        let plan = Plan::new("Pow", a.shape(), b.shape())?;
        match a.dtype() {
            E::F32 => pow_exp::<f32>(&plan, a, b, out),
            E::F64 => pow_exp::<f64>(&plan, a, b, out),
            E::I32 => pow_exp::<i32>(&plan, a, b, out),
            E::I64 => pow_exp::<i64>(&plan, a, b, out),
            dtype => Err(KernelError::UnsupportedType { op: "Pow", dtype }),
        }
    }
}
