//! Shared pieces of the quantization operators: float outputs computed in
//! f32 (hot path), quantized element access (hot path) and element-type
//! names for attribute checks (cold path).

use half::{bf16, f16};

use crate::ops::basic::common::{Elem, normalize_axis, numel};
use crate::par::{for_each_chunk_mut, rows_chunk};
use crate::{ElementType, KernelError, ParallelFor};

/// Elements per task of a per-tensor (de)quantization.
const FLAT_CHUNK: usize = 16 * 1024;

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

/// How scales map onto `x`, seen as `[outer, dim, inner]` around the axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One scale.
    Tensor,
    /// One scale per index of the axis.
    Axis,
    /// Scales `[outer, blocks, inner]`: index `j` of the axis uses block
    /// `j / block_size`.
    Blocked { block_size: usize, blocks: usize },
}

/// The scale layout of a QuantizeLinear or DequantizeLinear (per tensor,
/// per axis or blocked) over `x`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    outer: usize,
    dim: usize,
    inner: usize,
    mode: Mode,
}

/// Where the scales (and zero points) of one row of `x` are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ScaleAt {
    /// One scale for the row, at this index.
    One(usize),
    /// A row of scales (one per element), starting at this index.
    Row(usize),
}

impl Geometry {
    /// The layout of scales of shape `scale` (and zero points of shape
    /// `zp`, which must equal it) over `x`, for attributes `axis` and
    /// `block_size` (0: not blocked).
    pub(crate) fn of(
        op: &'static str,
        axis: i64,
        block_size: usize,
        x: &[usize],
        scale: &[usize],
        zp: Option<&[usize]>,
    ) -> Result<Self, KernelError> {
        if let Some(z) = zp {
            let scalars = numel(z) == 1 && numel(scale) == 1 && z.len() <= 1 && scale.len() <= 1;
            if z != scale && !scalars {
                return Err(KernelError::Shape(format!(
                    "{op}: zero point shape {z:?} differs from scale shape {scale:?}"
                )));
            }
        }
        let n = numel(x);
        if block_size == 0 {
            if scale.len() <= 1 && numel(scale) == 1 {
                return Ok(Self {
                    outer: 1,
                    dim: 1,
                    inner: n,
                    mode: Mode::Tensor,
                });
            }
            if scale.len() != 1 {
                return Err(KernelError::Shape(format!(
                    "{op}: scale {scale:?} must be a scalar or 1-D without block_size"
                )));
            }
            let a = normalize_axis(op, "axis", axis, x.len())?;
            if scale[0] != x[a] {
                return Err(KernelError::Shape(format!(
                    "{op}: per-axis scale has {} values, axis {a} of x {x:?} has {}",
                    scale[0], x[a]
                )));
            }
            return Ok(Self {
                outer: numel(&x[..a]),
                dim: x[a],
                inner: numel(&x[a + 1..]),
                mode: Mode::Axis,
            });
        }
        if scale.len() != x.len() || x.is_empty() {
            return Err(KernelError::Shape(format!(
                "{op}: blocked scale {scale:?} must have the rank of x {x:?}"
            )));
        }
        let a = normalize_axis(op, "axis", axis, x.len())?;
        let bs = block_size;
        let blocks = x[a].div_ceil(bs);
        let ok = x
            .iter()
            .zip(scale)
            .enumerate()
            .all(|(i, (&d, &s))| if i == a { s == blocks } else { s == d });
        if !ok {
            return Err(KernelError::Shape(format!(
                "{op}: blocked scale {scale:?} does not fit x {x:?} with axis {a} and block_size {bs} (axis {a} needs {blocks} blocks)"
            )));
        }
        Ok(Self {
            outer: numel(&x[..a]),
            dim: x[a],
            inner: numel(&x[a + 1..]),
            mode: Mode::Blocked {
                block_size: bs,
                blocks,
            },
        })
    }

    /// Calls `f(offset, scales, row)` for runs of `y` (of `x`'s elements)
    /// that share one scale or one row of scales, possibly in parallel.
    pub(crate) fn for_each_row<O: Send>(
        self,
        y: &mut [O],
        par: &dyn ParallelFor,
        f: &(dyn Fn(usize, ScaleAt, &mut [O]) + Sync),
    ) {
        if y.is_empty() {
            return;
        }
        let parallel = worth_parallel(par, y.len());
        if self.mode == Mode::Tensor {
            let chunk = if parallel { FLAT_CHUNK } else { y.len() };
            for_each_chunk_mut(par, y, chunk, &|off, out| f(off, ScaleAt::One(0), out));
            return;
        }
        let rows = self.outer * self.dim;
        let inner = self.inner;
        let chunk = if parallel {
            rows_chunk(par, rows, inner)
        } else {
            y.len()
        };
        for_each_chunk_mut(par, y, chunk, &|off, out| {
            for (i, yr) in out.chunks_exact_mut(inner).enumerate() {
                let r = off / inner + i;
                let (o, j) = (r / self.dim, r % self.dim);
                let at = match self.mode {
                    Mode::Axis => ScaleAt::One(j),
                    Mode::Blocked { block_size, blocks } => {
                        ScaleAt::Row((o * blocks + j / block_size) * inner)
                    }
                    Mode::Tensor => ScaleAt::One(0),
                };
                f(r * inner, at, yr);
            }
        });
    }
}

/// An integer quantized type: its range and conversions.
pub(crate) trait QInt: Elem {
    /// Smallest value.
    const MIN: i32;
    /// Largest value.
    const MAX: i32;
    /// `v`, which is in range.
    fn from_i32(v: i32) -> Self;
    /// The value.
    fn to_i32(self) -> i32;
}

macro_rules! qint {
    ($($t:ty),*) => {$(
        impl QInt for $t {
            const MIN: i32 = <$t>::MIN as i32;
            const MAX: i32 = <$t>::MAX as i32;
            #[inline(always)]
            fn from_i32(v: i32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_i32(self) -> i32 {
                self as i32
            }
        }
    )*};
}

qint!(u8, i8, u16, i16);

/// ONNX Runtime's quantization of one value: `v` (already divided by the
/// scale, or multiplied by a requantization multiplier) clamped to `T`'s
/// range less the zero point, rounded half to even, plus the zero point
/// (NaN gives `T`'s minimum). `zero` is a value of `T`.
#[inline(always)]
pub(crate) fn quantize_value<T: QInt>(v: f32, zero: i32) -> T {
    // Adding and subtracting 1.5 * 2^23 rounds half to even any |x| below
    // 2^22 (every clamped value here), without a call to `rint`.
    const MAGIC: f32 = 12_582_912.0;
    let lo = (T::MIN - zero) as f32;
    let hi = (T::MAX - zero) as f32;
    // `max` and `min` written as comparisons (NaN fails `v > lo`, so it
    // gives `lo`): one `maxps` and one `minps` each when vectorized, where
    // `f32::max` adds a NaN fix-up.
    let c = if v > lo { v } else { lo };
    let c = if c < hi { c } else { hi };
    // SAFETY: NaN gives `lo` (above), so `c` is finite and inside
    // `[lo, hi]`, a range of `T` less a value of `T`: its rounding fits
    // i32 (no saturating conversion needed, which keeps the loop vector).
    let r: i32 = unsafe { ((c + MAGIC) - MAGIC).to_int_unchecked() };
    T::from_i32(r + zero)
}

#[cfg(test)]
mod tests {
    use super::quantize_value;

    #[test]
    fn quantize_value_saturates_rounds_half_to_even_and_maps_nan_to_the_minimum() {
        // uint8, zero point 10: the range less the zero point is [-10, 245].
        let q = |v: f32| quantize_value::<u8>(v, 10);
        assert_eq!(q(f32::NAN), 0);
        assert_eq!(q(-f32::NAN), 0);
        assert_eq!(q(f32::INFINITY), 255);
        assert_eq!(q(f32::NEG_INFINITY), 0);
        assert_eq!(q(1e30), 255);
        assert_eq!(q(-11.0), 0);
        assert_eq!(q(2.5), 12);
        assert_eq!(q(3.5), 14);
        assert_eq!(q(-0.5), 10);
        assert_eq!(q(-1.5), 8);
        assert_eq!(q(244.6), 255);
        // int8, zero point -3: NaN is the type's minimum.
        let s = |v: f32| quantize_value::<i8>(v, -3);
        assert_eq!(s(f32::NAN), -128);
        assert_eq!(s(130.0), 127);
        assert_eq!(s(-200.0), -128);
        assert_eq!(s(0.5), -3);
        assert_eq!(s(1.5), -1);
    }
}
