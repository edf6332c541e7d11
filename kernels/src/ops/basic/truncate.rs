//! Float-to-integer conversion as ONNX Runtime's x86-64 build performs it
//! (Cast to an integer type, integer Pow): C++ `static_cast`, which compiles
//! to the truncating `cvtt*2si` instructions. A value whose truncation does
//! not fit the instruction's 32- or 64-bit result, and NaN, give the
//! "integer indefinite" (the type's minimum); 8- and 16-bit targets keep the
//! low bits of the 32-bit conversion, unsigned targets the bits of the
//! signed one (`-1.0` to `u8` is 255, `300.0` to `i8` is 44).
//!
//! Rust's `as` saturates instead (NaN to 0, `300.0` to `i8` 127), so every
//! float-to-integer conversion that must agree with ONNX Runtime goes
//! through [`FromFloat`].

/// `2^31` and `2^63`, the thresholds of the unsigned conversions.
const TWO_31: f64 = 2_147_483_648.0;
const TWO_63: f64 = 9_223_372_036_854_775_808.0;

/// `cvttsd2si` with a 32-bit result: `x` truncated toward zero, or
/// `i32::MIN` when that is out of range or `x` is NaN.
#[inline(always)]
pub(crate) fn cvtt_i32(x: f64) -> i32 {
    // Truncation fits exactly when -2^31 - 1 < x < 2^31 (false for NaN).
    if x > -TWO_31 - 1.0 && x < TWO_31 {
        x as i32
    } else {
        i32::MIN
    }
}

/// `cvttsd2si` with a 64-bit result: `x` truncated toward zero, or
/// `i64::MIN` when that is out of range or `x` is NaN.
#[inline(always)]
pub(crate) fn cvtt_i64(x: f64) -> i64 {
    // No double lies strictly between -2^63 - 1 and -2^63.
    if (-TWO_63..TWO_63).contains(&x) {
        x as i64
    } else {
        i64::MIN
    }
}

/// The conversion of the unsigned 32-bit target in ONNX Runtime's scalar
/// loops (and the remainder of its vector loop, see [`FromFloat`]): the
/// 64-bit conversion's low half, so NaN and `-inf` give 0.
#[inline(always)]
pub(crate) fn u32_scalar(x: f64) -> u32 {
    cvtt_i64(x) as u32
}

/// An integer type converted from a float as ONNX Runtime's vectorized
/// loops convert it.
pub(crate) trait FromFloat {
    /// `x` converted (never panics; see the module documentation).
    fn from_float(x: f64) -> Self;
}

macro_rules! from_low_bits_of_i32 {
    ($($t:ty),*) => {
        $(
            impl FromFloat for $t {
                #[inline(always)]
                fn from_float(x: f64) -> Self {
                    cvtt_i32(x) as $t
                }
            }
        )*
    };
}

from_low_bits_of_i32!(i8, i16, i32, u8, u16);

impl FromFloat for i64 {
    #[inline(always)]
    fn from_float(x: f64) -> Self {
        cvtt_i64(x)
    }
}

impl FromFloat for u32 {
    /// The vector form: values from `2^31` up convert after subtracting
    /// `2^31` (the top bit restored), the rest as `i32`; NaN and `-inf`
    /// give `2^31`, `+inf` gives 0.
    #[inline(always)]
    fn from_float(x: f64) -> Self {
        if x >= TWO_31 {
            (cvtt_i32(x - TWO_31) as u32) ^ 0x8000_0000
        } else {
            cvtt_i32(x) as u32
        }
    }
}

impl FromFloat for u64 {
    /// Values from `2^63` up convert after subtracting `2^63` (the top bit
    /// restored), the rest as `i64`; NaN and `-inf` give `2^63`, `+inf` 0.
    #[inline(always)]
    fn from_float(x: f64) -> Self {
        if x >= TWO_63 {
            (cvtt_i64(x - TWO_63) as u64) ^ (1 << 63)
        } else {
            cvtt_i64(x) as u64
        }
    }
}
