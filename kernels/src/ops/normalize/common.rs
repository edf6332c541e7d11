//! Shared pieces of the normalizations: the float element trait (f32, f64,
//! f16, bf16) with f64 statistics and a fused scale-and-shift in the
//! element's compute type (hot path), read-only float views of parameter
//! tensors, and the `[N, C, spatial...]` checks (cold path).

use half::{bf16, f16};

use crate::ops::basic::common::Elem;
use crate::{DataRef, ElementType, KernelError, Tensor};

/// A float element type: statistics accumulate in f64; the per-element
/// scale-and-shift runs in f32 (f32, f16, bf16) or f64.
pub(crate) trait Float: Elem + PartialOrd {
    /// The value as f64.
    fn to_f64(self) -> f64;
    /// The nearest value of this type.
    fn from_f64(v: f64) -> Self;
    /// `self * a + c` in the compute type (f32, or f64 for f64).
    fn affine(self, a: f64, c: f64) -> Self;
}

impl Float for f32 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn affine(self, a: f64, c: f64) -> Self {
        self * a as f32 + c as f32
    }
}

impl Float for f64 {
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn affine(self, a: f64, c: f64) -> Self {
        self * a + c
    }
}

macro_rules! impl_float_half {
    ($($t:ident),*) => {
        $(
            impl Float for $t {
                #[inline(always)]
                fn to_f64(self) -> f64 {
                    $t::to_f64(self)
                }
                #[inline(always)]
                fn from_f64(v: f64) -> Self {
                    $t::from_f64(v)
                }
                #[inline(always)]
                fn affine(self, a: f64, c: f64) -> Self {
                    $t::from_f32(self.to_f32() * a as f32 + c as f32)
                }
            }
        )*
    };
}

impl_float_half!(f16, bf16);

/// Whether `dtype` is one of the [`Float`] types.
pub(crate) fn is_float(dtype: ElementType) -> bool {
    matches!(
        dtype,
        ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16
    )
}

/// Runs `$body` with `$T` the [`Float`] type of `$dtype`, else `$err`.
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, else $err:expr) => {
        dispatch_types!($dtype, [
            F32 => f32, F64 => f64, F16 => ::half::f16, BF16 => ::half::bf16,
        ], $T => $body, else $err)
    };
}
pub(crate) use dispatch_float;

/// Sum of `f(v)` over `x` in f64 with four independent accumulators (so the
/// loop vectorizes).
#[inline(always)]
pub(crate) fn sum_f64<T: Float>(x: &[T], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0.0f64; 4];
    let chunks = x.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v.to_f64());
        }
    }
    let tail: f64 = rest.iter().map(|&v| f(v.to_f64())).sum();
    (acc[0] + acc[2]) + (acc[1] + acc[3]) + tail
}

/// Mean and biased variance of `x` in two f64 passes (NaN for an empty
/// slice).
#[inline(always)]
pub(crate) fn mean_var<T: Float>(x: &[T]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = sum_f64(x, |v| v) / n;
    let var = sum_f64(x, |v| (v - mean) * (v - mean)) / n;
    (mean, var)
}

/// `y = x * a + c` elementwise (the fused scale-and-shift pass).
#[inline(always)]
pub(crate) fn affine<T: Float>(x: &[T], y: &mut [T], a: f64, c: f64) {
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v.affine(a, c);
    }
}

/// A float tensor's elements read as f64 one at a time (per channel, never
/// per element of the data).
#[derive(Debug, Clone, Copy)]
pub(crate) enum FloatView<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl<'a> FloatView<'a> {
    /// A view of `t`, whose type must be a float type.
    pub(crate) fn of(op: &'static str, t: &'a Tensor) -> Result<Self, KernelError> {
        Ok(match t.data() {
            DataRef::F32(v) => Self::F32(v),
            DataRef::F64(v) => Self::F64(v),
            DataRef::F16(v) => Self::F16(v),
            DataRef::BF16(v) => Self::BF16(v),
            _ => {
                return Err(KernelError::UnsupportedType {
                    op,
                    dtype: t.dtype(),
                });
            }
        })
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F64(v) => v.len(),
            Self::F16(v) => v.len(),
            Self::BF16(v) => v.len(),
        }
    }

    /// Value `i` as f64 (caller checks `i < len`).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> f64 {
        match self {
            Self::F32(v) => f64::from(v[i]),
            Self::F64(v) => v[i],
            Self::F16(v) => v[i].to_f64(),
            Self::BF16(v) => v[i].to_f64(),
        }
    }
}

/// Checks `X` is `[N, C, spatial...]` (rank >= `min_rank`) of a float type
/// and returns `(N, C, spatial element count)`.
pub(crate) fn nc_layout(
    op: &'static str,
    dtype: ElementType,
    shape: &[usize],
    min_rank: usize,
) -> Result<(usize, usize, usize), KernelError> {
    if !is_float(dtype) {
        return Err(KernelError::UnsupportedType { op, dtype });
    }
    if shape.len() < min_rank {
        return Err(KernelError::Shape(format!(
            "{op}: X {shape:?} must have rank >= {min_rank} ([N, C, spatial...])"
        )));
    }
    let plane = crate::ops::basic::common::numel(&shape[2.min(shape.len())..]);
    Ok((shape[0], shape.get(1).copied().unwrap_or(1), plane))
}

/// Checks a per-channel parameter input: a float type and `want` elements
/// in a 1-D shape.
pub(crate) fn check_param(
    op: &'static str,
    what: &str,
    dtype: ElementType,
    shape: &[usize],
    want: usize,
) -> Result<(), KernelError> {
    if !is_float(dtype) {
        return Err(KernelError::UnsupportedType { op, dtype });
    }
    if shape != [want] {
        return Err(KernelError::Shape(format!(
            "{op}: {what} has shape {shape:?} where [{want}] (one value per channel) is required"
        )));
    }
    Ok(())
}

/// Reads a 0/1 flag attribute.
pub(crate) fn flag(
    attrs: &crate::ops::basic::common::Attrs<'_>,
    name: &'static str,
    default: bool,
) -> Result<bool, KernelError> {
    match attrs.int_or(name, i64::from(default))? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(attrs.error(name, format!("must be 0 or 1, got {v}"))),
    }
}

/// Reads `epsilon`: a finite value >= 0.
pub(crate) fn epsilon(
    attrs: &crate::ops::basic::common::Attrs<'_>,
    default: f32,
) -> Result<f64, KernelError> {
    let eps = attrs.float("epsilon")?.unwrap_or(default);
    if !eps.is_finite() || eps < 0.0 {
        return Err(attrs.error("epsilon", format!("{eps} is not a finite value >= 0")));
    }
    Ok(f64::from(eps))
}
