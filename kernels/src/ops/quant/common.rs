//! Shared pieces of the quantization operators: float outputs computed in
//! f32 (hot path), quantized element access (hot path) and element-type
//! names for attribute checks (cold path).

use half::{bf16, f16};

use crate::ops::basic::common::Elem;
use crate::{ElementType, ParallelFor};

/// A float output type: values are computed in f32 and rounded once.
pub(crate) trait OutFloat: Elem {
    /// Rounds an f32 result to this type.
    fn from_f32(v: f32) -> Self;
    /// Widens to f32 (scales are read through this).
    fn to_f32(self) -> f32;
}

impl OutFloat for f32 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}

impl OutFloat for f16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}

impl OutFloat for bf16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

/// An integer quantized element: `(x - zero_point)` exactly, as f32.
pub(crate) trait QElem: Elem {
    /// The zero point when none is given.
    const ZERO: Self;
    /// `x - zp` computed without overflow, rounded once to f32.
    fn diff(self, zp: Self) -> f32;
}

macro_rules! small_qelem {
    ($($t:ty),*) => {$(
        impl QElem for $t {
            const ZERO: Self = 0;
            #[inline(always)]
            fn diff(self, zp: Self) -> f32 {
                (self as i32 - zp as i32) as f32
            }
        }
    )*};
}

small_qelem!(i8, u8, i16, u16);

impl QElem for i32 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn diff(self, zp: Self) -> f32 {
        (self as i64 - zp as i64) as f32
    }
}

/// The ONNX `TensorProto.DataType` code of a float element type (for the
/// `output_dtype` attribute).
pub(crate) fn onnx_float_code(t: ElementType) -> Option<i64> {
    match t {
        ElementType::F32 => Some(1),
        ElementType::F16 => Some(10),
        ElementType::BF16 => Some(16),
        ElementType::F64 => Some(11),
        _ => None,
    }
}

/// Whether a loop over `elements` outputs is worth splitting on `par`.
#[inline]
pub(crate) fn worth_parallel(par: &dyn ParallelFor, elements: usize) -> bool {
    par.threads() > 1 && elements >= crate::par::PARALLEL_MIN_ELEMENTS
}
