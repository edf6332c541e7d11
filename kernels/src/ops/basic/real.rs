//! `Real`: the float compute types (f32, f64) shared by the elementwise,
//! softmax and normalization kernels (hot path).

use std::ops::{Add, Div, Mul, Neg, Sub};

use super::common::Elem;

/// f32 or f64 arithmetic.
pub(crate) trait Real:
    Elem
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Negative infinity.
    const NEG_INFINITY: Self;
    /// `e^self`.
    fn exp(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Whether the value is NaN.
    fn is_nan(self) -> bool;
    /// The larger of two values (NaN-ignoring like `f32::max`).
    fn max(self, other: Self) -> Self;
    /// From an f32 (attributes).
    fn from_f32(v: f32) -> Self;
    /// From a count.
    fn from_usize(v: usize) -> Self;
    /// To f32 (statistics outputs).
    fn to_f32(self) -> f32;
    /// From an f64 (weights computed once per execute).
    fn from_f64(v: f64) -> Self;
    /// To f64.
    fn to_f64(self) -> f64;
}

/// An element type computed in a [`Real`] accumulator: loaded into it and
/// stored back (f16 and bf16 in f32; the image family adds the integer
/// types, rounded half to even and saturated on the way back).
pub(crate) trait Widen: Elem {
    /// The accumulator type.
    type Acc: Real;
    /// The value as an accumulator.
    fn load(self) -> Self::Acc;
    /// An accumulator stored as this type.
    fn store(v: Self::Acc) -> Self;
}

/// Implements [`Widen`] for float types.
macro_rules! impl_widen {
    ($($t:ty => $acc:ty, $load:expr, $store:expr);*) => {$(
        impl Widen for $t {
            type Acc = $acc;
            #[inline(always)]
            fn load(self) -> $acc {
                $load(self)
            }
            #[inline(always)]
            fn store(v: $acc) -> Self {
                $store(v)
            }
        }
    )*};
}

impl_widen!(
    f32 => f32, |v| v, |v| v;
    f64 => f64, |v| v, |v| v;
    half::f16 => f32, half::f16::to_f32, half::f16::from_f32;
    half::bf16 => f32, half::bf16::to_f32, half::bf16::from_f32
);

/// Sum of `f(v)` over `x` with eight independent accumulators, so the loop
/// vectorizes (a single running float sum cannot be reordered) and loses
/// less precision than one running sum.
#[inline(always)]
pub(crate) fn sum_by<T: Real>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::ZERO; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = *a + f(v);
        }
    }
    let mut s = T::ZERO;
    for &v in rest {
        s = s + f(v);
    }
    let pairs = [
        acc[0] + acc[4],
        acc[1] + acc[5],
        acc[2] + acc[6],
        acc[3] + acc[7],
    ];
    s + ((pairs[0] + pairs[2]) + (pairs[1] + pairs[3]))
}

/// The maximum of `x` (NaN-ignoring; negative infinity when empty), eight
/// lanes at a time.
#[inline(always)]
pub(crate) fn max_of<T: Real>(x: &[T]) -> T {
    let mut acc = [T::NEG_INFINITY; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = a.max(v);
        }
    }
    let mut m = T::NEG_INFINITY;
    for &v in rest {
        m = m.max(v);
    }
    acc.iter().fold(m, |m, &v| m.max(v))
}

/// `e^x` for f32 without a libm call, so loops over it vectorize: Cephes'
/// `expf` range reduction and polynomial (about 1 ulp on the normal range),
/// with 0 below the underflow bound, infinity above the overflow bound and
/// NaN propagated.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const HI: f32 = 88.722_83;
    const LO: f32 = -87.336_55;
    // 1.5 * 2^23: adding and subtracting it rounds to the nearest integer
    // without `round` (which is a libm call before SSE4.1).
    const MAGIC: f32 = 12_582_912.0;
    let xc = x.clamp(LO, HI);
    let t = xc * std::f32::consts::LOG2_E + MAGIC;
    let k = t - MAGIC;
    let r = xc - k * 0.693_359_4 - k * -2.121_944_4e-4;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    // 2^k in two halves so k = 128 (x near HI) does not overflow the
    // exponent field. `t`'s low mantissa bits hold k (`as i32` on a float
    // would not vectorize).
    let k = t.to_bits() as i32 - MAGIC.to_bits() as i32;
    let k1 = k >> 1;
    let s1 = f32::from_bits(((k1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((k - k1 + 127) as u32) << 23);
    let v = y * s1 * s2;
    if x > HI {
        f32::INFINITY
    } else if x < LO {
        0.0
    } else if x.is_nan() {
        x
    } else {
        v
    }
}

/// Implements `Real` for a float type, with its `exp`.
macro_rules! impl_real {
    ($($t:ident => $exp:expr),*) => {
        $(
            impl Real for $t {
                const ZERO: Self = 0.0;
                const ONE: Self = 1.0;
                const NEG_INFINITY: Self = $t::NEG_INFINITY;
                #[inline(always)]
                fn exp(self) -> Self {
                    $exp(self)
                }
                #[inline(always)]
                fn sqrt(self) -> Self {
                    $t::sqrt(self)
                }
                #[inline(always)]
                fn ln(self) -> Self {
                    $t::ln(self)
                }
                #[inline(always)]
                fn is_nan(self) -> bool {
                    $t::is_nan(self)
                }
                #[inline(always)]
                fn max(self, other: Self) -> Self {
                    $t::max(self, other)
                }
                #[inline(always)]
                fn from_f32(v: f32) -> Self {
                    v as $t
                }
                #[inline(always)]
                fn from_usize(v: usize) -> Self {
                    v as $t
                }
                #[inline(always)]
                fn to_f32(self) -> f32 {
                    self as f32
                }
                #[inline(always)]
                fn from_f64(v: f64) -> Self {
                    v as $t
                }
                #[inline(always)]
                fn to_f64(self) -> f64 {
                    self as f64
                }
            }
        )*
    };
}

impl_real!(f32 => exp_f32, f64 => f64::exp);

#[cfg(test)]
mod tests {
    use super::exp_f32;

    #[test]
    fn exp_f32_matches_std_within_two_ulp() {
        let mut x = -90.0f32;
        while x < 90.0 {
            let (got, want) = (exp_f32(x), x.exp());
            if want.is_infinite() {
                assert_eq!(got, want, "{x}");
            } else if want < f32::MIN_POSITIVE {
                assert!(
                    (got - want).abs() <= f32::MIN_POSITIVE,
                    "{x}: {got} vs {want}"
                );
            } else {
                let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(ulps <= 2, "{x}: {got} vs {want} ({ulps} ulp)");
            }
            x += 0.001_37;
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(89.0), f32::INFINITY);
    }
}
