//! `Num`: the numeric element types (every integer width, f16, bf16, f32,
//! f64) with the ONNX semantics the math operators need (hot path), the
//! type-dispatch macros, and the elementwise map helper.

use half::{bf16, f16};

use crate::ops::basic::common::{Elem, check_len, typed, typed_mut};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::vector::{self, Width};
use crate::{ElementType, KernelError, ParallelFor, Tensor, for_each_chunk_mut};

/// A numeric element type: comparisons follow IEEE for floats, integer
/// arithmetic wraps.
pub(crate) trait Num: Elem + PartialOrd {
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// The lowest value (negative infinity for floats).
    const LOWEST: Self;
    /// The highest value (infinity for floats).
    const HIGHEST: Self;
    /// Whether the value is NaN (always false for integers).
    fn is_nan(self) -> bool;
    /// Sum (wrapping for integers).
    fn add(self, o: Self) -> Self;
    /// Product (wrapping for integers).
    fn mul(self, o: Self) -> Self;
    /// The value divided by a count (truncating for integers; a count of
    /// 0 gives NaN for floats, 0 for integers).
    fn div_count(self, n: usize) -> Self;
    /// Absolute value (wrapping: `|MIN| = MIN`).
    fn abs(self) -> Self;
    /// -1, 0 or 1 (NaN stays NaN).
    fn sign(self) -> Self;
    /// Value from an f64 (Clip attributes): saturating for integers.
    fn from_f64(v: f64) -> Self;
    /// The value as f64 (rounded for 64-bit integers beyond 2^53).
    fn to_f64(self) -> f64;

    /// The larger value, NaN if either is NaN.
    #[inline(always)]
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || self >= o { self } else { o }
    }

    /// The smaller value, NaN if either is NaN.
    #[inline(always)]
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || self <= o { self } else { o }
    }
}

macro_rules! impl_num_int {
    ($($t:ty: $abs:expr, $sign:expr;)*) => {
        $(
            impl Num for $t {
                const ZERO: Self = 0;
                const ONE: Self = 1;
                const LOWEST: Self = <$t>::MIN;
                const HIGHEST: Self = <$t>::MAX;
                #[inline(always)]
                fn is_nan(self) -> bool { false }
                #[inline(always)]
                fn add(self, o: Self) -> Self { self.wrapping_add(o) }
                #[inline(always)]
                fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
                #[inline(always)]
                fn div_count(self, n: usize) -> Self {
                    match <$t>::try_from(n) {
                        Ok(0) => 0,
                        Ok(d) => self.wrapping_div(d),
                        // More elements than the type holds: only a
                        // wrapped sum could be this large.
                        Err(_) => 0,
                    }
                }
                #[inline(always)]
                fn abs(self) -> Self { $abs(self) }
                #[inline(always)]
                fn sign(self) -> Self { $sign(self) }
                #[inline(always)]
                fn from_f64(v: f64) -> Self { v as $t }
                #[inline(always)]
                fn to_f64(self) -> f64 { self as f64 }
            }
        )*
    };
}

impl_num_int! {
    i8: i8::wrapping_abs, i8::signum;
    i16: i16::wrapping_abs, i16::signum;
    i32: i32::wrapping_abs, i32::signum;
    i64: i64::wrapping_abs, i64::signum;
    u8: |v| v, |v: u8| v.min(1);
    u16: |v| v, |v: u16| v.min(1);
    u32: |v| v, |v: u32| v.min(1);
    u64: |v| v, |v: u64| v.min(1);
}

macro_rules! impl_num_float {
    ($($t:ident),*) => {
        $(
            impl Num for $t {
                const ZERO: Self = 0.0;
                const ONE: Self = 1.0;
                const LOWEST: Self = $t::NEG_INFINITY;
                const HIGHEST: Self = $t::INFINITY;
                #[inline(always)]
                fn is_nan(self) -> bool { self != self }
                #[inline(always)]
                fn add(self, o: Self) -> Self { self + o }
                #[inline(always)]
                fn mul(self, o: Self) -> Self { self * o }
                #[inline(always)]
                fn div_count(self, n: usize) -> Self { self / n as $t }
                #[inline(always)]
                fn abs(self) -> Self { $t::abs(self) }
                #[inline(always)]
                fn sign(self) -> Self {
                    if self > 0.0 { 1.0 } else if self < 0.0 { -1.0 } else { self * 0.0 }
                }
                #[inline(always)]
                fn from_f64(v: f64) -> Self { v as $t }
                #[inline(always)]
                fn to_f64(self) -> f64 { self as f64 }
            }
        )*
    };
}

impl_num_float!(f32, f64);

macro_rules! impl_num_half {
    ($($t:ident),*) => {
        $(
            impl Num for $t {
                const ZERO: Self = $t::ZERO;
                const ONE: Self = $t::ONE;
                const LOWEST: Self = $t::NEG_INFINITY;
                const HIGHEST: Self = $t::INFINITY;
                #[inline(always)]
                fn is_nan(self) -> bool { $t::is_nan(self) }
                #[inline(always)]
                fn add(self, o: Self) -> Self { $t::from_f32(self.to_f32() + o.to_f32()) }
                #[inline(always)]
                fn mul(self, o: Self) -> Self { $t::from_f32(self.to_f32() * o.to_f32()) }
                #[inline(always)]
                fn div_count(self, n: usize) -> Self { $t::from_f32(self.to_f32() / n as f32) }
                #[inline(always)]
                fn abs(self) -> Self { $t::from_bits(self.to_bits() & 0x7fff) }
                #[inline(always)]
                fn sign(self) -> Self { $t::from_f32(self.to_f32().sign()) }
                #[inline(always)]
                fn from_f64(v: f64) -> Self { $t::from_f64(v) }
                #[inline(always)]
                fn to_f64(self) -> f64 { $t::to_f64(self) }
            }
        )*
    };
}

impl_num_half!(f16, bf16);

/// Whether `dtype` is one of the [`Num`] types.
pub(crate) fn is_num(dtype: ElementType) -> bool {
    use ElementType as E;
    matches!(
        dtype,
        E::F32
            | E::F64
            | E::F16
            | E::BF16
            | E::I8
            | E::I16
            | E::I32
            | E::I64
            | E::U8
            | E::U16
            | E::U32
            | E::U64
    )
}

/// Whether `dtype` is a float type.
pub(crate) fn is_float(dtype: ElementType) -> bool {
    use ElementType as E;
    matches!(dtype, E::F32 | E::F64 | E::F16 | E::BF16)
}

/// `y[i] = f(x[i])` over same-length tensors, in parallel chunks when
/// large.
#[inline]
pub(crate) fn map<A: Elem + Sync, B: Elem + Send>(
    op: &'static str,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
    f: impl Fn(A) -> B + Sync,
) -> Result<(), KernelError> {
    map_at(op, x, y, par, None, f)
}

/// [`map`] with the loop compiled for the CPU's widest vectors: `f`, an
/// `#[inline(always)]` closure, is inlined there, so that a polynomial
/// such as `erf_f32` runs 16 lanes wide on AVX-512 instead of 4 on the
/// baseline target.
#[inline]
pub(crate) fn map_wide<A: Elem + Sync, B: Elem + Send>(
    op: &'static str,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
    f: impl Fn(A) -> B + Sync,
) -> Result<(), KernelError> {
    map_at(op, x, y, par, Some(Width::detect()), f)
}

/// [`map`] at `width` (the baseline target when `None`).
#[inline(always)]
fn map_at<A: Elem + Sync, B: Elem + Send>(
    op: &'static str,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
    width: Option<Width>,
    f: impl Fn(A) -> B + Sync,
) -> Result<(), KernelError> {
    let (x, y) = (typed::<A>(op, x)?, typed_mut::<B>(op, y)?);
    check_len(op, "output", y.len(), x.len())?;
    let chunk = if y.len() < PARALLEL_MIN_ELEMENTS || par.threads() <= 1 {
        y.len()
    } else {
        rows_chunk(par, y.len(), 1).max(4096)
    };
    for_each_chunk_mut(par, y, chunk, &|offset, out| match width {
        Some(w) => vector::run(
            w,
            #[inline(always)]
            || fill(out, &x[offset..], &f),
        ),
        None => fill(out, &x[offset..], &f),
    });
    Ok(())
}

/// `out[i] = f(x[i])`.
#[inline(always)]
fn fill<A: Copy, B>(out: &mut [B], x: &[A], f: &impl Fn(A) -> B) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}
