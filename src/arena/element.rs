//! `Element`: the plain element types arenas hand out as zeroed slices
//! (hot path: the execution arena's allocations are generic over it).

use std::fmt;

use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
}

/// A plain-old-data element type whose all-zero value is `ZERO`: the types
/// [`super::ExecutionArena`] and [`super::IoArena`] hand out slices of.
/// Sealed: implemented for the integer and float types the runtime computes
/// with.
pub trait Element: Copy + Send + Sync + fmt::Debug + 'static + sealed::Sealed {
    /// The value new slices are filled with.
    const ZERO: Self;
}

macro_rules! element {
    ($($ty:ty = $zero:expr),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const ZERO: Self = $zero;
        }
    )*};
}

element!(
    u8 = 0,
    i8 = 0,
    u16 = 0,
    i16 = 0,
    u32 = 0,
    i32 = 0,
    u64 = 0,
    i64 = 0,
    f32 = 0.0,
    f64 = 0.0,
    f16 = f16::ZERO,
    bf16 = bf16::ZERO,
);
