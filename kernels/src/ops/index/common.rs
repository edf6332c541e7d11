//! Shared pieces of the shape and indexing operators: index wrapping,
//! row-major strides, the numeric trait of the reducing kernels and a
//! collapsed strided walk over K broadcast operands (hot path, no
//! allocation).

use half::{bf16, f16};

use crate::ops::basic::common::{Elem, MAX_RANK};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::{ElementType, KernelError, ParallelFor, for_each_chunk_mut};

/// Wraps `index` (negative counts from the end) into `0..dim`, or an
/// `Invalid` error naming `op` and `what`.
#[inline]
pub(crate) fn wrap_index(
    op: &'static str,
    what: &str,
    index: i64,
    dim: usize,
) -> Result<usize, KernelError> {
    let d = dim as i64;
    let i = if index < 0 { index + d } else { index };
    if i < 0 || i >= d {
        return Err(KernelError::Invalid {
            op,
            detail: format!("{what} {index} is out of range for a dimension of size {dim}"),
        });
    }
    Ok(i as usize)
}

/// Row-major strides of `shape` (rank checked by the caller).
#[inline]
pub(crate) fn strides(shape: &[usize]) -> [usize; MAX_RANK] {
    let mut s = [0usize; MAX_RANK];
    let mut acc = 1usize;
    for d in (0..shape.len()).rev() {
        s[d] = acc;
        acc = acc.saturating_mul(shape[d]);
    }
    s
}

/// Whether `dtype` has a compute representation (not a storage-only 4-bit type).
pub(crate) fn check_storable(op: &'static str, dtype: ElementType) -> Result<(), KernelError> {
    if matches!(dtype, ElementType::I4 | ElementType::U4) {
        return Err(KernelError::UnsupportedType { op, dtype });
    }
    Ok(())
}

/// Whether `dtype` is an index type (i32 or i64).
pub(crate) fn check_index_type(op: &'static str, dtype: ElementType) -> Result<(), KernelError> {
    if !matches!(dtype, ElementType::I32 | ElementType::I64) {
        return Err(KernelError::UnsupportedType { op, dtype });
    }
    Ok(())
}

/// Runs `f(first_row, rows)` over the rows (of `inner` elements) of `out`,
/// in parallel when the output is large.
pub(crate) fn by_rows<T: Send>(
    par: &dyn ParallelFor,
    out: &mut [T],
    inner: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    if out.is_empty() || inner == 0 {
        return;
    }
    let rows = out.len() / inner;
    if out.len() < PARALLEL_MIN_ELEMENTS || par.threads() <= 1 || rows < 2 {
        f(0, out);
        return;
    }
    let chunk = rows_chunk(par, rows, inner);
    for_each_chunk_mut(par, out, chunk, &|offset, rows| f(offset / inner, rows));
}

/// Conversion from f64 (attribute values), saturating for integers, `!= 0`
/// for bool.
pub(crate) trait FromF64: Elem {
    /// The value as this type.
    fn from_f64(v: f64) -> Self;
}

macro_rules! impl_from_f64 {
    ($($t:ty => $e:expr;)*) => {$(
        impl FromF64 for $t {
            #[inline]
            fn from_f64(v: f64) -> Self {
                #[allow(clippy::redundant_closure_call)]
                { $e(v) }
            }
        }
    )*};
}

impl_from_f64! {
    f32 => |v: f64| v as f32;
    f64 => |v: f64| v;
    f16 => f16::from_f64;
    bf16 => bf16::from_f64;
    i8 => |v: f64| v as i8;
    i16 => |v: f64| v as i16;
    i32 => |v: f64| v as i32;
    i64 => |v: f64| v as i64;
    u8 => |v: f64| v as u8;
    u16 => |v: f64| v as u16;
    u32 => |v: f64| v as u32;
    u64 => |v: f64| v as u64;
    bool => |v: f64| v != 0.0;
}

/// Arithmetic for the reducing kernels (CumSum, Scatter reductions):
/// integers wrap, floats follow IEEE (f16 and bf16 through f32).
pub(crate) trait Num: Elem + PartialOrd {
    /// 0.
    const ZERO: Self;
    /// `a + b`.
    fn add(a: Self, b: Self) -> Self;
    /// `a * b`.
    fn mul(a: Self, b: Self) -> Self;
    /// The larger (NaN propagates for floats).
    fn max(a: Self, b: Self) -> Self;
    /// The smaller (NaN propagates for floats).
    fn min(a: Self, b: Self) -> Self;
}

macro_rules! impl_num_int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0;
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
        }
    )*};
}

impl_num_int!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! impl_num_float {
    ($($t:ty: $zero:expr, $to:expr, $from:expr;)*) => {$(
        impl Num for $t {
            const ZERO: Self = $zero;
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self {
                #[allow(clippy::redundant_closure_call)]
                { $from($to(a) + $to(b)) }
            }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self {
                #[allow(clippy::redundant_closure_call)]
                { $from($to(a) * $to(b)) }
            }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() { if a.is_nan() { a } else { b } }
                else if b > a { b } else { a }
            }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self {
                if a.is_nan() || b.is_nan() { if a.is_nan() { a } else { b } }
                else if b < a { b } else { a }
            }
        }
    )*};
}

impl_num_float! {
    f32: 0.0, |v: f32| v, |v: f32| v;
    f64: 0.0, |v: f64| v, |v: f64| v;
    f16: f16::ZERO, |v: f16| v.to_f32(), f16::from_f32;
    bf16: bf16::ZERO, |v: bf16| v.to_f32(), bf16::from_f32;
}

/// A walk over an output shape and K operands that broadcast to it (each
/// operand dimension equals the output's or is 1): size-1 dimensions are
/// dropped and neighbours that stay contiguous in every operand merged, so
/// the walk visits rows of the last collapsed dimension with per-operand
/// base offsets and inner strides (0 or contiguous).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Walk<const K: usize> {
    rank: usize,
    dims: [usize; MAX_RANK],
    strides: [[usize; MAX_RANK]; K],
}

impl<const K: usize> Walk<K> {
    /// The walk of `out` over `operands` (right-aligned). Errors when an
    /// operand does not broadcast or the collapsed rank exceeds MAX_RANK.
    pub(crate) fn new(
        op: &'static str,
        out: &[usize],
        operands: [&[usize]; K],
    ) -> Result<Self, KernelError> {
        let rank = out.len();
        let mut dims = [1usize; MAX_RANK];
        let mut st = [[0usize; MAX_RANK]; K];
        let mut acc = [1usize; K];
        let mut n = 0usize;
        // Walk from the innermost dimension outwards, building reversed.
        for i in (0..rank).rev() {
            let d = out[i];
            let mut s = [0usize; K];
            for (k, shape) in operands.iter().enumerate() {
                let pad = rank.checked_sub(shape.len()).ok_or_else(|| {
                    KernelError::Shape(format!(
                        "{op}: operand shape {shape:?} has a higher rank than {out:?}"
                    ))
                })?;
                let od = if i < pad { 1 } else { shape[i - pad] };
                if od == d {
                    s[k] = acc[k];
                    acc[k] = acc[k].saturating_mul(od);
                } else if od == 1 {
                    s[k] = 0;
                } else {
                    return Err(KernelError::Shape(format!(
                        "{op}: shape {shape:?} does not broadcast to {out:?}"
                    )));
                }
            }
            if d == 1 {
                continue;
            }
            // Merge into the previously kept (inner) dimension when every
            // operand stays contiguous across both.
            if n > 0 && (0..K).all(|k| s[k] == st[k][n - 1].saturating_mul(dims[n - 1])) {
                dims[n - 1] *= d;
                continue;
            }
            if n == MAX_RANK {
                return Err(KernelError::Shape(format!(
                    "{op}: shape {out:?} needs more than {MAX_RANK} strided dimensions"
                )));
            }
            dims[n] = d;
            for k in 0..K {
                st[k][n] = s[k];
            }
            n += 1;
        }
        // Reverse into outer-to-inner order; a scalar walk has one row of 1.
        if n == 0 {
            dims[0] = 1;
            n = 1;
        }
        dims[..n].reverse();
        for s in st.iter_mut() {
            s[..n].reverse();
        }
        Ok(Self {
            rank: n,
            dims,
            strides: st,
        })
    }

    /// Elements of a row (the last collapsed dimension).
    #[inline]
    pub(crate) fn inner(&self) -> usize {
        self.dims[self.rank - 1]
    }

    /// Operand `k`'s stride along a row (0 when broadcast).
    #[inline]
    pub(crate) fn inner_stride(&self, k: usize) -> usize {
        self.strides[k][self.rank - 1]
    }

    /// Calls `f(row, offsets)` for `count` rows from `first`, with each
    /// operand's offset of the row's first element.
    #[inline]
    pub(crate) fn rows(&self, first: usize, count: usize, mut f: impl FnMut(usize, [usize; K])) {
        let last = self.rank - 1;
        let mut idx = [0usize; MAX_RANK];
        let mut off = [0usize; K];
        let mut rest = first;
        for d in (0..last).rev() {
            idx[d] = rest % self.dims[d];
            rest /= self.dims[d];
            for (o, s) in off.iter_mut().zip(&self.strides) {
                *o += idx[d] * s[d];
            }
        }
        for r in 0..count {
            f(first + r, off);
            let mut d = last;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                for (o, s) in off.iter_mut().zip(&self.strides) {
                    *o += s[d];
                }
                if idx[d] < self.dims[d] {
                    break;
                }
                for (o, s) in off.iter_mut().zip(&self.strides) {
                    *o -= s[d] * self.dims[d];
                }
                idx[d] = 0;
            }
        }
    }
}
