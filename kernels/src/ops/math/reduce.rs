//! ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
//! ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare.
//!
//! Axes come from the `axes` attribute (ReduceSum before opset 13, the
//! others before 18) or from a constant second input (after), with
//! `keepdims` and `noop_with_empty_axes`. The sum-based reductions map each
//! element first (`|x|`, `x²`, `e^(x - max)`) and finish each output
//! (`√`, `ln`); an empty reduced set gives the identity finished (0, or
//! `-inf` for the logarithms). ReduceLogSumExp is two passes: the maximum,
//! then the sum of shifted exponentials (no overflow for large inputs). The input shape is collapsed into
//! alternating groups of reduced and kept dimensions (size-1 dimensions
//! dropped); one pass over the input in memory order then combines each
//! innermost run into the output: a reduced innermost run is folded with
//! eight independent lanes (vectorizable), a kept innermost run is combined
//! elementwise into its output row. Large reductions split over the
//! outermost kept group (independent outputs), or over output columns when
//! the leading axes are reduced.

use super::num::Num;
use crate::ops::basic::common::{
    Attrs, Elem, Ints, MAX_RANK, check_inputs, check_len, constant_ints, input, optional, output,
    overflow, required, typed, typed_mut,
};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Which reduction a [`Reduce`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

impl ReduceKind {
    fn name(self) -> &'static str {
        match self {
            Self::Sum => "ReduceSum",
            Self::Mean => "ReduceMean",
            Self::Max => "ReduceMax",
            Self::Min => "ReduceMin",
            Self::Prod => "ReduceProd",
            Self::L1 => "ReduceL1",
            Self::L2 => "ReduceL2",
            Self::LogSum => "ReduceLogSum",
            Self::LogSumExp => "ReduceLogSumExp",
            Self::SumSquare => "ReduceSumSquare",
        }
    }

    /// The first opset that takes `axes` as an input.
    fn axes_input_opset(self) -> i64 {
        if self == Self::Sum { 13 } else { 18 }
    }
}

/// A reducible element type: the [`Num`] types and bool (Max/Min only).
pub(crate) trait Reducible: Elem {
    /// The identity of the reduction.
    fn identity(kind: ReduceKind) -> Self;
    /// Combines two partial results.
    fn combine(kind: ReduceKind, a: Self, b: Self) -> Self;
    /// An element as the sum-based reductions add it (`|x|`, `x²`).
    fn prep(kind: ReduceKind, v: Self) -> Self;
    /// An output from its sum (`√`, `ln`, the mean).
    fn post(kind: ReduceKind, v: Self, n: usize) -> Self;
    /// `e^(self - shift)`, where `shift` is a finite maximum (else 0).
    fn exp_shifted(self, shift: Self) -> Self;
    /// `ln(self) + shift`, with `shift` as in [`Reducible::exp_shifted`].
    fn ln_shifted(self, shift: Self) -> Self;
}

/// `shift` when finite, else 0 (an all `-inf` or empty set).
#[inline(always)]
fn finite_or_zero(shift: f64) -> f64 {
    if shift.is_finite() { shift } else { 0.0 }
}

impl<T: Num> Reducible for T {
    #[inline(always)]
    fn identity(kind: ReduceKind) -> Self {
        match kind {
            ReduceKind::Prod => T::ONE,
            ReduceKind::Max => T::LOWEST,
            ReduceKind::Min => T::HIGHEST,
            _ => T::ZERO,
        }
    }
    #[inline(always)]
    fn combine(kind: ReduceKind, a: Self, b: Self) -> Self {
        match kind {
            ReduceKind::Prod => a.mul(b),
            ReduceKind::Max => a.max_nan(b),
            ReduceKind::Min => a.min_nan(b),
            _ => a.add(b),
        }
    }
    #[inline(always)]
    fn prep(kind: ReduceKind, v: Self) -> Self {
        match kind {
            ReduceKind::L1 => v.abs(),
            ReduceKind::L2 | ReduceKind::SumSquare => v.mul(v),
            _ => v,
        }
    }
    #[inline(always)]
    fn post(kind: ReduceKind, v: Self, n: usize) -> Self {
        match kind {
            ReduceKind::Mean => v.div_count(n),
            ReduceKind::L2 => T::from_f64(v.to_f64().sqrt()),
            ReduceKind::LogSum => T::from_f64(v.to_f64().ln()),
            _ => v,
        }
    }
    #[inline(always)]
    fn exp_shifted(self, shift: Self) -> Self {
        T::from_f64((self.to_f64() - finite_or_zero(shift.to_f64())).exp())
    }
    #[inline(always)]
    fn ln_shifted(self, shift: Self) -> Self {
        T::from_f64(self.to_f64().ln() + finite_or_zero(shift.to_f64()))
    }
}

impl Reducible for bool {
    #[inline(always)]
    fn identity(kind: ReduceKind) -> Self {
        matches!(kind, ReduceKind::Min | ReduceKind::Prod)
    }
    #[inline(always)]
    fn combine(kind: ReduceKind, a: Self, b: Self) -> Self {
        match kind {
            ReduceKind::Min | ReduceKind::Prod => a & b,
            _ => a | b,
        }
    }
    #[inline(always)]
    fn prep(_kind: ReduceKind, v: Self) -> Self {
        v
    }
    #[inline(always)]
    fn post(_kind: ReduceKind, v: Self, _n: usize) -> Self {
        v
    }
    #[inline(always)]
    fn exp_shifted(self, _shift: Self) -> Self {
        self
    }
    #[inline(always)]
    fn ln_shifted(self, _shift: Self) -> Self {
        self
    }
}

/// Where the axes come from.
#[derive(Debug, Clone)]
enum AxesFrom {
    /// The attribute (absent: every axis).
    Attribute(Option<Vec<i64>>),
    /// Input 1 (absent or empty: every axis, or none with
    /// `noop_with_empty_axes`).
    Input,
}

/// One reduction operator.
#[derive(Debug)]
pub(crate) struct Reduce {
    kind: ReduceKind,
    axes: AxesFrom,
    keepdims: bool,
    noop_with_empty_axes: bool,
}

impl Reduce {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: ReduceKind) -> Result<Self, KernelError> {
        let op = kind.name();
        let from_input = spec.opset >= kind.axes_input_opset();
        let allowed: &[&'static str] = if from_input {
            &["keepdims", "noop_with_empty_axes"]
        } else {
            &["axes", "keepdims"]
        };
        let attrs = Attrs::new(spec, op, allowed)?;
        let flag = |name: &'static str, default: i64| -> Result<bool, KernelError> {
            match attrs.int_or(name, default)? {
                0 => Ok(false),
                1 => Ok(true),
                v => Err(attrs.error(name, format!("must be 0 or 1, got {v}"))),
            }
        };
        let keepdims = flag("keepdims", 1)?;
        let noop_with_empty_axes = flag("noop_with_empty_axes", 0)?;
        let axes = if from_input {
            AxesFrom::Input
        } else {
            AxesFrom::Attribute(attrs.ints("axes")?)
        };
        Ok(Self {
            kind,
            axes,
            keepdims,
            noop_with_empty_axes,
        })
    }

    fn supports(&self, dtype: ElementType) -> bool {
        use ElementType as E;
        match self.kind {
            ReduceKind::Max | ReduceKind::Min => super::num::is_num(dtype) || dtype == E::Bool,
            ReduceKind::LogSumExp => matches!(dtype, E::F32 | E::F64),
            _ => matches!(dtype, E::F32 | E::F64 | E::I32 | E::I64 | E::U32 | E::U64),
        }
    }
}

/// Which axes are reduced: none (`noop_with_empty_axes` with no axes), all,
/// or a list (validated against the rank: in range, no repeats).
#[derive(Debug, Clone, Copy)]
enum Axes<'a> {
    None,
    All,
    List(Ints<'a>),
}

impl Axes<'_> {
    /// Whether dimension `d` of a rank-`rank` input is reduced.
    #[inline]
    fn reduces(&self, d: usize, rank: usize) -> bool {
        match self {
            Self::None => false,
            Self::All => true,
            Self::List(axes) => (0..axes.len()).any(|i| {
                let a = axes.get(i);
                let a = if a < 0 { a + rank as i64 } else { a };
                a == d as i64
            }),
        }
    }

    fn check(&self, op: &'static str, rank: usize) -> Result<(), KernelError> {
        if let Self::List(axes) = self {
            let r = rank as i64;
            for i in 0..axes.len() {
                let a = axes.get(i);
                if a < -r || a >= r {
                    return Err(KernelError::Shape(format!(
                        "{op}: axis {a} is out of range for rank {rank}"
                    )));
                }
                let n = if a < 0 { a + r } else { a };
                if (0..i).any(|j| {
                    let b = axes.get(j);
                    (if b < 0 { b + r } else { b }) == n
                }) {
                    return Err(KernelError::Shape(format!(
                        "{op}: axis {a} is given more than once"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Dimensions collapsed into alternating reduced/kept groups.
#[derive(Debug, Clone, Copy)]
struct Groups {
    n: usize,
    dims: [usize; MAX_RANK],
    reduced: [bool; MAX_RANK],
    in_len: usize,
    out_len: usize,
    /// Input elements per output element.
    count: usize,
}

impl Groups {
    fn new(op: &'static str, shape: &[usize], axes: &Axes<'_>) -> Result<Self, KernelError> {
        let mut g = Self {
            n: 0,
            dims: [0; MAX_RANK],
            reduced: [false; MAX_RANK],
            in_len: 1,
            out_len: 1,
            count: 1,
        };
        let too_big = || overflow(op, format!("the element count of {shape:?}"));
        for (d, &dim) in shape.iter().enumerate() {
            let red = axes.reduces(d, shape.len());
            g.in_len = g.in_len.checked_mul(dim).ok_or_else(too_big)?;
            if red {
                g.count = g.count.checked_mul(dim).ok_or_else(too_big)?;
            } else {
                g.out_len = g.out_len.checked_mul(dim).ok_or_else(too_big)?;
            }
            if dim == 1 {
                continue;
            }
            if g.n > 0 && g.reduced[g.n - 1] == red {
                g.dims[g.n - 1] *= dim;
            } else {
                if g.n == MAX_RANK {
                    return Err(KernelError::Shape(format!(
                        "{op}: {shape:?} alternates reduced and kept axes more than {MAX_RANK} times"
                    )));
                }
                g.dims[g.n] = dim;
                g.reduced[g.n] = red;
                g.n += 1;
            }
        }
        Ok(g)
    }
}

/// Folds `m(x)` with eight independent lanes (so float sums vectorize).
#[inline(always)]
fn fold8<T: Copy>(x: &[T], init: T, m: impl Fn(T) -> T, f: impl Fn(T, T) -> T) -> T {
    let mut acc = [init; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = f(*a, m(v));
        }
    }
    let mut r = init;
    for &v in rest {
        r = f(r, m(v));
    }
    let pairs = [
        f(acc[0], acc[4]),
        f(acc[1], acc[5]),
        f(acc[2], acc[6]),
        f(acc[3], acc[7]),
    ];
    f(r, f(f(pairs[0], pairs[2]), f(pairs[1], pairs[3])))
}

/// Reduces `x` (the input block of `g`) into `out` (its output block) with
/// `f` from `init`, each element mapped by `m(element, output index)`
/// first.
#[inline(always)]
fn reduce_block<T: Copy>(
    g: &Groups,
    x: &[T],
    out: &mut [T],
    init: T,
    m: impl Fn(T, usize) -> T + Copy,
    f: impl Fn(T, T) -> T + Copy,
) {
    out.fill(init);
    if x.is_empty() || out.is_empty() {
        return;
    }
    if g.n == 0 {
        out[0] = f(init, m(x[0], 0));
        return;
    }
    let last = g.n - 1;
    let inner = g.dims[last];
    // Output strides over the groups (0 on reduced ones).
    let mut ostride = [0usize; MAX_RANK];
    let mut s = 1usize;
    for d in (0..g.n).rev() {
        if !g.reduced[d] {
            ostride[d] = s;
            s *= g.dims[d];
        }
    }
    let mut idx = [0usize; MAX_RANK];
    let mut o = 0usize;
    for row in x.chunks_exact(inner) {
        if g.reduced[last] {
            out[o] = f(out[o], fold8(row, init, |v| m(v, o), f));
        } else {
            for (j, (y, &v)) in out[o..o + inner].iter_mut().zip(row).enumerate() {
                *y = f(*y, m(v, o + j));
            }
        }
        let mut d = last;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            o += ostride[d];
            if idx[d] < g.dims[d] {
                break;
            }
            o -= ostride[d] * g.dims[d];
            idx[d] = 0;
        }
    }
}

fn reduce_typed<T: Reducible>(
    kind: ReduceKind,
    g: &Groups,
    x: &Tensor,
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let op = kind.name();
    let (x, y) = (typed::<T>(op, x)?, typed_mut::<T>(op, out)?);
    check_len(op, "input", x.len(), g.in_len)?;
    check_len(op, "output", y.len(), g.out_len)?;
    // One monomorphized loop per reduction (the kind is constant in each
    // closure).
    let add = |a, b| T::combine(ReduceKind::Sum, a, b);
    match kind {
        ReduceKind::Sum | ReduceKind::Mean | ReduceKind::LogSum => {
            reduce_with(kind, g, x, y, par, |v, _| v, add)
        }
        ReduceKind::L1 => reduce_with(kind, g, x, y, par, |v, _| T::prep(ReduceKind::L1, v), add),
        ReduceKind::L2 | ReduceKind::SumSquare => reduce_with(
            kind,
            g,
            x,
            y,
            par,
            |v, _| T::prep(ReduceKind::SumSquare, v),
            add,
        ),
        ReduceKind::LogSumExp => log_sum_exp(g, x, y, par)?,
        ReduceKind::Prod => reduce_with(
            kind,
            g,
            x,
            y,
            par,
            |v, _| v,
            |a, b| T::combine(ReduceKind::Prod, a, b),
        ),
        ReduceKind::Max => reduce_with(
            kind,
            g,
            x,
            y,
            par,
            |v, _| v,
            |a, b| T::combine(ReduceKind::Max, a, b),
        ),
        ReduceKind::Min => reduce_with(
            kind,
            g,
            x,
            y,
            par,
            |v, _| v,
            |a, b| T::combine(ReduceKind::Min, a, b),
        ),
    }
    Ok(())
}

/// ReduceLogSumExp in two passes: the maximum of each output's set (kept
/// aside), then `ln(sum e^(x - max)) + max`.
fn log_sum_exp<T: Reducible>(
    g: &Groups,
    x: &[T],
    y: &mut [T],
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let max = |a, b| T::combine(ReduceKind::Max, a, b);
    reduce_with(ReduceKind::Max, g, x, y, par, |v, _| v, max);
    let mut shift = Vec::new();
    shift
        .try_reserve_exact(y.len())
        .map_err(|_| KernelError::Allocation {
            op: "ReduceLogSumExp",
            bytes: std::mem::size_of_val(y),
        })?;
    shift.extend_from_slice(y);
    let add = |a, b| T::combine(ReduceKind::Sum, a, b);
    let m = |v: T, o: usize| v.exp_shifted(shift[o]);
    reduce_with(ReduceKind::LogSumExp, g, x, y, par, m, add);
    for (v, &s) in y.iter_mut().zip(&shift) {
        *v = v.ln_shifted(s);
    }
    Ok(())
}

fn reduce_with<T: Reducible>(
    kind: ReduceKind,
    g: &Groups,
    x: &[T],
    y: &mut [T],
    par: &dyn ParallelFor,
    m: impl Fn(T, usize) -> T + Copy + Sync,
    f: impl Fn(T, T) -> T + Copy + Sync,
) {
    let init = T::identity(kind);
    let parallel = g.in_len >= PARALLEL_MIN_ELEMENTS && par.threads() > 1 && g.n >= 2;
    if parallel && !g.reduced[0] {
        // Independent blocks of the outermost kept group.
        let rows = g.dims[0];
        let (out_inner, in_inner) = (g.out_len / rows, g.in_len / rows);
        let chunk = rows_chunk(par, rows, out_inner);
        for_each_chunk_mut(par, y, chunk, &|offset, block| {
            let (r0, nr) = (offset / out_inner, block.len() / out_inner);
            let mut sub = *g;
            sub.dims[0] = nr;
            let xb = &x[r0 * in_inner..(r0 + nr) * in_inner];
            reduce_block(&sub, xb, block, init, |v, o| m(v, o + offset), f);
            finish(kind, g.count, block);
        });
    } else if parallel && g.n == 2 {
        // [reduced R, kept K]: split the K output columns.
        let (r, k) = (g.dims[0], g.dims[1]);
        let chunk = k.div_ceil(par.threads() * 4).next_multiple_of(64).max(256);
        for_each_chunk_mut(par, y, chunk, &|c0, cols| {
            cols.fill(init);
            for i in 0..r {
                let row = &x[i * k + c0..i * k + c0 + cols.len()];
                for (j, (y, &v)) in cols.iter_mut().zip(row).enumerate() {
                    *y = f(*y, m(v, c0 + j));
                }
            }
            finish(kind, g.count, cols);
        });
    } else {
        reduce_block(g, x, y, init, m, f);
        finish(kind, g.count, y);
    }
}

/// Turns sums into means, square roots or logarithms.
#[inline]
fn finish<T: Reducible>(kind: ReduceKind, count: usize, out: &mut [T]) {
    if matches!(kind, ReduceKind::Mean | ReduceKind::L2 | ReduceKind::LogSum) {
        for v in out {
            *v = T::post(kind, *v, count);
        }
    }
}

impl Reduce {
    /// The axes for an input of rank `rank`, from the attribute or from
    /// input 1 (`axes_input`).
    fn resolve<'a>(&'a self, axes_input: Option<Ints<'a>>) -> Axes<'a> {
        let list = match (&self.axes, axes_input) {
            (AxesFrom::Attribute(None), _) | (AxesFrom::Input, None) => None,
            (AxesFrom::Attribute(Some(v)), _) => Some(Ints::I64(v)),
            (AxesFrom::Input, Some(ints)) => Some(ints),
        };
        match list {
            Some(l) if l.len() > 0 => Axes::List(l),
            _ if self.noop_with_empty_axes => Axes::None,
            _ => Axes::All,
        }
    }
}

impl Operator for Reduce {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let max = if matches!(self.axes, AxesFrom::Input) {
            2
        } else {
            1
        };
        let inputs = check_inputs(op, inputs, 1, max)?;
        let x = required(op, inputs, 0)?;
        if !self.supports(x.dtype) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        let values = match optional(inputs, 1) {
            Some(info) => Some(constant_ints(op, info, 1)?),
            None => None,
        };
        let axes = self.resolve(values.as_deref().map(Ints::I64));
        axes.check(op, x.shape.len())?;
        let rank = x.shape.len();
        let mut shape = Vec::with_capacity(rank);
        for (d, &dim) in x.shape.iter().enumerate() {
            if !axes.reduces(d, rank) {
                shape.push(dim);
            } else if self.keepdims {
                shape.push(1);
            }
        }
        Groups::new(op, x.shape, &axes)?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        use ElementType as E;
        let op = self.name();
        let x = input(op, inputs, 0)?;
        let axes_input = match inputs.get(1).copied().flatten() {
            Some(t) if matches!(self.axes, AxesFrom::Input) => Some(Ints::of(op, t)?),
            _ => None,
        };
        let axes = self.resolve(axes_input);
        axes.check(op, x.shape().len())?;
        let g = Groups::new(op, x.shape(), &axes)?;
        let out = output(op, outputs, 0)?;
        let k = self.kind;
        match (k, x.dtype()) {
            (ReduceKind::Max | ReduceKind::Min, E::Bool) => {
                reduce_typed::<bool>(k, &g, x, out, par)
            }
            (ReduceKind::Max | ReduceKind::Min, dtype) => {
                dispatch_num!(dtype, T => reduce_typed::<T>(k, &g, x, out, par),
                    else Err(KernelError::UnsupportedType { op, dtype }))
            }
            (_, E::F32) => reduce_typed::<f32>(k, &g, x, out, par),
            (_, E::F64) => reduce_typed::<f64>(k, &g, x, out, par),
            (_, E::I32) => reduce_typed::<i32>(k, &g, x, out, par),
            (_, E::I64) => reduce_typed::<i64>(k, &g, x, out, par),
            (_, E::U32) => reduce_typed::<u32>(k, &g, x, out, par),
            (_, E::U64) => reduce_typed::<u64>(k, &g, x, out, par),
            (_, dtype) => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}
