//! Multidirectional (NumPy) broadcasting: the output shape (cold path) and a
//! collapsed iteration plan whose inner loop is one of three contiguous
//! slice kernels (hot path).

use super::common::MAX_RANK;
use crate::par::{PARALLEL_MIN_ELEMENTS, for_each_part_mut, rows_chunk};
use crate::vector::{self, Width};
use crate::{KernelError, ParallelFor, for_each_chunk_mut};

/// The broadcast shape of `a` and `b`, or a `Shape` error naming `op`.
pub(crate) fn broadcast_shape(
    op: &str,
    a: &[usize],
    b: &[usize],
) -> Result<Vec<usize>, KernelError> {
    let rank = a.len().max(b.len());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = dim_from_right(a, rank, i);
        let db = dim_from_right(b, rank, i);
        out.push(broadcast_dim(da, db).ok_or_else(|| {
            KernelError::Shape(format!(
                "{op}: shapes {a:?} and {b:?} cannot be broadcast together"
            ))
        })?);
    }
    Ok(out)
}

/// Whether `small` is unidirectionally broadcastable to `big` (its dims,
/// right-aligned, equal `big`'s or are 1).
pub(crate) fn unidirectional(small: &[usize], big: &[usize]) -> bool {
    small.len() <= big.len()
        && small
            .iter()
            .rev()
            .zip(big.iter().rev())
            .all(|(&s, &b)| s == b || s == 1)
}

#[inline]
fn dim_from_right(shape: &[usize], rank: usize, i: usize) -> usize {
    let pad = rank - shape.len();
    if i < pad { 1 } else { shape[i - pad] }
}

#[inline]
fn broadcast_dim(a: usize, b: usize) -> Option<usize> {
    if a == b || b == 1 {
        Some(a)
    } else if a == 1 {
        Some(b)
    } else {
        None
    }
}

/// How to walk two broadcast operands and their output: dimensions of size 1
/// are dropped and neighbours with the same broadcast pattern are merged, so
/// `[1,T,512] + [512]` becomes `[T, 512]` with `b` repeated (stride 0 on the
/// outer dimension) and same-shape operands become one contiguous run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    rank: usize,
    dims: [usize; MAX_RANK],
    a_strides: [usize; MAX_RANK],
    b_strides: [usize; MAX_RANK],
    a_len: usize,
    b_len: usize,
    out_len: usize,
}

impl Plan {
    /// The plan for `a` op `b` (no allocation). Errors when the shapes do not
    /// broadcast or the collapsed rank exceeds [`MAX_RANK`].
    pub(crate) fn new(op: &str, a: &[usize], b: &[usize]) -> Result<Self, KernelError> {
        let rank = a.len().max(b.len());
        let mut dims = [0usize; MAX_RANK];
        let mut a_bc = [false; MAX_RANK];
        let mut b_bc = [false; MAX_RANK];
        let mut n = 0usize;
        let mut out_len = 1usize;
        let mut a_len = 1usize;
        let mut b_len = 1usize;
        for i in 0..rank {
            let da = dim_from_right(a, rank, i);
            let db = dim_from_right(b, rank, i);
            let d = broadcast_dim(da, db).ok_or_else(|| {
                KernelError::Shape(format!(
                    "{op}: shapes {a:?} and {b:?} cannot be broadcast together"
                ))
            })?;
            let overflow = || {
                super::common::overflow("broadcast", format!("{op}: broadcasting {a:?} with {b:?}"))
            };
            out_len = out_len.checked_mul(d).ok_or_else(overflow)?;
            a_len = a_len.checked_mul(da).ok_or_else(overflow)?;
            b_len = b_len.checked_mul(db).ok_or_else(overflow)?;
            if d == 1 {
                continue;
            }
            let (ab, bb) = (da != d, db != d);
            if n > 0 && a_bc[n - 1] == ab && b_bc[n - 1] == bb {
                dims[n - 1] *= d;
            } else {
                if n == MAX_RANK {
                    return Err(KernelError::Shape(format!(
                        "{op}: broadcasting {a:?} with {b:?} needs more than {MAX_RANK} strided dimensions"
                    )));
                }
                dims[n] = d;
                a_bc[n] = ab;
                b_bc[n] = bb;
                n += 1;
            }
        }
        let mut a_strides = [0usize; MAX_RANK];
        let mut b_strides = [0usize; MAX_RANK];
        let (mut sa, mut sb) = (1usize, 1usize);
        for d in (0..n).rev() {
            if !a_bc[d] {
                a_strides[d] = sa;
                sa *= dims[d];
            }
            if !b_bc[d] {
                b_strides[d] = sb;
                sb *= dims[d];
            }
        }
        Ok(Self {
            rank: n,
            dims,
            a_strides,
            b_strides,
            a_len,
            b_len,
            out_len,
        })
    }

    /// Elements of the output.
    pub(crate) fn out_len(&self) -> usize {
        self.out_len
    }

    /// Whether each operand holds one value along the innermost collapsed
    /// dimension (stride 0 there), as ONNX Runtime's broadcaster sees a
    /// "scalar" operand per inner run; both when every dimension is 1.
    pub(crate) fn inner_repeats(&self) -> (bool, bool) {
        match self.rank.checked_sub(1) {
            None => (true, true),
            Some(d) => (self.a_strides[d] == 0, self.b_strides[d] == 0),
        }
    }

    /// Whether operand `a` is never repeated (it has the output's layout).
    pub(crate) fn a_is_full(&self) -> bool {
        self.a_len == self.out_len
    }

    fn check(&self, op: &'static str, a: usize, b: usize, out: usize) -> Result<(), KernelError> {
        if a != self.a_len || b != self.b_len || out != self.out_len {
            return Err(KernelError::Invalid {
                op,
                detail: format!(
                    "operand lengths {a}, {b} -> {out} do not match the shapes ({}, {} -> {})",
                    self.a_len, self.b_len, self.out_len
                ),
            });
        }
        Ok(())
    }

    /// `out[i] = f(a[ia], b[ib])` over the broadcast index space.
    #[inline]
    pub(crate) fn run<A: Copy, B: Copy, O, F: Fn(A, B) -> O>(
        &self,
        op: &'static str,
        a: &[A],
        b: &[B],
        out: &mut [O],
        f: F,
    ) -> Result<(), KernelError> {
        self.check(op, a.len(), b.len(), out.len())?;
        if self.out_len == 0 {
            return Ok(());
        }
        if self.rank == 0 {
            out[0] = f(a[0], b[0]);
            return Ok(());
        }
        let width = Width::detect();
        vector::run(
            width,
            #[inline(always)]
            || self.run_rows(a, b, out, 0, &f),
        );
        Ok(())
    }

    /// [`Plan::run`], splitting the output across `par`'s threads when it
    /// is large: whole rows of the last axis, or pieces of rows when there
    /// are fewer rows than tasks (same-shape operands collapse to one row).
    pub(crate) fn run_par<A, B, O, F>(
        &self,
        op: &'static str,
        a: &[A],
        b: &[B],
        out: &mut [O],
        par: &dyn ParallelFor,
        f: F,
    ) -> Result<(), KernelError>
    where
        A: Copy + Sync,
        B: Copy + Sync,
        O: Send,
        F: Fn(A, B) -> O + Sync,
    {
        if self.rank == 0 || self.out_len < PARALLEL_MIN_ELEMENTS || par.threads() <= 1 {
            return self.run(op, a, b, out, f);
        }
        self.check(op, a.len(), b.len(), out.len())?;
        let last = self.rank - 1;
        let inner = self.dims[last];
        let rows = self.out_len / inner;
        let tasks = par.threads() * 4;
        let width = Width::detect();
        if rows < tasks {
            // Pieces of at least 16 elements, none crossing a row.
            let piece = inner.div_ceil(tasks.div_ceil(rows)).next_multiple_of(16);
            let bounds: Vec<usize> = (0..rows)
                .flat_map(|r| (0..inner.div_ceil(piece)).map(move |p| r * inner + p * piece))
                .chain([self.out_len])
                .collect();
            let (sa, sb) = (self.a_strides[last], self.b_strides[last]);
            for_each_part_mut(par, out, &bounds, &|offset, part| {
                let (row, start) = (offset / inner, offset % inner);
                let (oa, ob) = self.row_offsets(row);
                vector::run(
                    width,
                    #[inline(always)]
                    || span((sa, sb), a, oa + start * sa, b, ob + start * sb, part, &f),
                )
            });
            return Ok(());
        }
        let chunk = rows_chunk(par, rows, inner);
        for_each_chunk_mut(par, out, chunk, &|offset, rows| {
            vector::run(
                width,
                #[inline(always)]
                || self.run_rows(a, b, rows, offset / inner, &f),
            )
        });
        Ok(())
    }

    /// Writes `out` (whole rows of the last axis, starting at row
    /// `first_row` of the output) with `f` over the broadcast operands.
    #[inline(always)]
    fn run_rows<A: Copy, B: Copy, O, F: Fn(A, B) -> O>(
        &self,
        a: &[A],
        b: &[B],
        out: &mut [O],
        first_row: usize,
        f: &F,
    ) {
        let last = self.rank - 1;
        let inner = self.dims[last];
        let (sa, sb) = (self.a_strides[last], self.b_strides[last]);
        let mut idx = self.row_index(first_row);
        let (mut oa, mut ob) = self.row_offsets(first_row);
        for chunk in out.chunks_exact_mut(inner) {
            span((sa, sb), a, oa, b, ob, chunk, f);
            // Advance the odometer over the outer dimensions.
            let mut d = last;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                oa += self.a_strides[d];
                ob += self.b_strides[d];
                if idx[d] < self.dims[d] {
                    break;
                }
                oa -= self.a_strides[d] * self.dims[d];
                ob -= self.b_strides[d] * self.dims[d];
                idx[d] = 0;
            }
        }
    }

    /// The odometer over the outer dimensions at output row `row`.
    #[inline(always)]
    fn row_index(&self, row: usize) -> [usize; MAX_RANK] {
        let mut idx = [0usize; MAX_RANK];
        let mut rest = row;
        for d in (0..self.rank - 1).rev() {
            idx[d] = rest % self.dims[d];
            rest /= self.dims[d];
        }
        idx
    }

    /// Offsets in `a` and `b` of output row `row`'s first element.
    #[inline(always)]
    fn row_offsets(&self, row: usize) -> (usize, usize) {
        let idx = self.row_index(row);
        (0..self.rank - 1).fold((0, 0), |(oa, ob), d| {
            (
                oa + idx[d] * self.a_strides[d],
                ob + idx[d] * self.b_strides[d],
            )
        })
    }

    /// `out[i] = f(out[i], b[ib])` where `out` has `a`'s layout (the plan's
    /// `a` must not be repeated: [`Plan::a_is_full`]).
    #[inline]
    pub(crate) fn run_in_place<T: Copy, B: Copy, F: Fn(T, B) -> T>(
        &self,
        op: &'static str,
        out: &mut [T],
        b: &[B],
        f: F,
    ) -> Result<(), KernelError> {
        if !self.a_is_full() {
            return Err(KernelError::Invalid {
                op,
                detail: "in-place broadcast needs an unbroadcast destination".into(),
            });
        }
        self.check(op, out.len(), b.len(), out.len())?;
        if self.out_len == 0 {
            return Ok(());
        }
        if self.rank == 0 {
            out[0] = f(out[0], b[0]);
            return Ok(());
        }
        let last = self.rank - 1;
        let inner = self.dims[last];
        let sb = self.b_strides[last];
        let mut idx = [0usize; MAX_RANK];
        let mut ob = 0usize;
        for chunk in out.chunks_exact_mut(inner) {
            if sb == 1 {
                for (o, &y) in chunk.iter_mut().zip(&b[ob..ob + inner]) {
                    *o = f(*o, y);
                }
            } else {
                let y = b[ob];
                for o in chunk.iter_mut() {
                    *o = f(*o, y);
                }
            }
            let mut d = last;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                ob += self.b_strides[d];
                if idx[d] < self.dims[d] {
                    break;
                }
                ob -= self.b_strides[d] * self.dims[d];
                idx[d] = 0;
            }
        }
        Ok(())
    }
}

/// `out[i] = f(a[oa + i * sa], b[ob + i * sb])` along one row of the last
/// axis, whose strides `(sa, sb)` are 1 or 0 (not both 0).
#[inline(always)]
fn span<A: Copy, B: Copy, O, F: Fn(A, B) -> O>(
    (sa, sb): (usize, usize),
    a: &[A],
    oa: usize,
    b: &[B],
    ob: usize,
    out: &mut [O],
    f: &F,
) {
    let n = out.len();
    match (sa, sb) {
        (1, 1) => {
            let (a, b) = (&a[oa..oa + n], &b[ob..ob + n]);
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        }
        (0, _) => {
            let x = a[oa];
            for (o, &y) in out.iter_mut().zip(&b[ob..ob + n]) {
                *o = f(x, y);
            }
        }
        _ => {
            let y = b[ob];
            for (o, &x) in out.iter_mut().zip(&a[oa..oa + n]) {
                *o = f(x, y);
            }
        }
    }
}
