//! Shared pieces of the image operators: the arithmetic of interpolating
//! kernels (hot path: each element type loads into an accumulator type and
//! stores back, rounding and saturating integers), and reading float
//! operands (scales, roi, theta) at resolution (cold path).

pub(crate) use crate::ops::basic::real::{Real, Widen};
use crate::{DataRef, ElementType, KernelError, Tensor};

macro_rules! impl_sample_int {
    ($($t:ty => $acc:ty),*) => {$(
        impl Widen for $t {
            type Acc = $acc;
            #[inline(always)]
            fn load(self) -> $acc {
                self as $acc
            }
            #[inline(always)]
            fn store(v: $acc) -> Self {
                // `as` saturates (NaN to 0) after rounding half to even.
                v.round_ties_even() as $t
            }
        }
    )*};
}

impl_sample_int!(
    i8 => f32, u8 => f32, i16 => f32, u16 => f32,
    i32 => f64, u32 => f64, i64 => f64, u64 => f64
);

/// Whether interpolating kernels handle `dtype` (every numeric type).
pub(crate) fn interpolable(dtype: ElementType) -> bool {
    use ElementType as E;
    matches!(
        dtype,
        E::F32
            | E::F64
            | E::F16
            | E::BF16
            | E::I8
            | E::U8
            | E::I16
            | E::U16
            | E::I32
            | E::U32
            | E::I64
            | E::U64
    )
}

/// The elements of a float tensor (f32, f64, f16 or bf16) as f64, for
/// operands read once (scales, roi).
pub(crate) fn float_values(
    op: &'static str,
    what: &str,
    t: &Tensor,
) -> Result<Vec<f64>, KernelError> {
    Ok(match t.data() {
        DataRef::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        DataRef::F64(v) => v.to_vec(),
        DataRef::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        DataRef::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
        _ => {
            return Err(KernelError::Invalid {
                op,
                detail: format!("{what} must be a float tensor, got {}", t.dtype()),
            });
        }
    })
}

/// A 1-D (or scalar) operand's rank check.
pub(crate) fn check_1d(op: &'static str, what: &str, shape: &[usize]) -> Result<(), KernelError> {
    if shape.len() > 1 {
        return Err(KernelError::Shape(format!(
            "{op}: {what} must be a 1-D tensor, got shape {shape:?}"
        )));
    }
    Ok(())
}
