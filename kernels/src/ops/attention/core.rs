//! The fused attention core shared by ONNX `Attention` and com.microsoft
//! `GroupQueryAttention` (hot path).
//!
//! Each output row (one batch, query head and query position) is computed in
//! one pass over its allowed key range, in blocks of [`KEY_BLOCK`] keys:
//! scores (scaled dot products, optionally soft-capped, plus the mask's
//! bias), an online, numerically stable softmax (running maximum and sum,
//! rescaling the accumulator when the maximum grows) and the weighted sum of
//! V. No score matrix is materialized; the only scratch is one block of
//! scores and the f32 query row and accumulator (on the stack for head sizes
//! up to [`STACK_SCRATCH`] floats together), plus, where many rows share
//! each key, the keys transposed into panels (`panels`). Rows are split
//! across the caller's threads in contiguous runs of equal work (a causal
//! row's cost grows with its position).
//!
//! When the caller asks for the QK matrix itself (ONNX `qk_matmul_output`),
//! rows are computed by [`attend_with_scores`] instead, which writes each
//! full score row into that output and runs on the calling thread.

use std::ops::Range;

use crate::ops::basic::real::exp_f32;
use crate::par::{PARALLEL_MIN_ELEMENTS, for_each_part_mut, rows_chunk};
use crate::vector::{self, Width, madd};
use crate::{ParallelFor, Sequential, for_each_chunk_mut};

use super::Float;
use super::panels::KeyPanels;
use super::problem::{KEY_BLOCK, Problem, QkMode, Rows};

/// Query row plus accumulator floats kept on the stack.
const STACK_SCRATCH: usize = 1024;

impl<T: Float> Problem<'_, T> {
    /// Asks for the first [`PREFETCH_KEYS`] key rows of output row
    /// `(b, h, i)` (the ones its scoring reads before its own prefetches
    /// arrive).
    #[inline(always)]
    fn prefetch_first_keys(&self, (b, h, i): (usize, usize, usize)) {
        let g = h / (self.q_heads / self.kv_heads);
        let keys = (self.keys)(b, i);
        for j in keys.start..keys.end.min(keys.start + PREFETCH_KEYS) {
            prefetch_lines(self.k.row(b, g, j));
        }
    }

    /// One output row by the online softmax; `acc` receives the result.
    /// Scores come from `panels` when given, else key by key.
    /// `FMA`: multiply-adds are fused (see [`Width::fma`]).
    #[inline(always)]
    fn row<const FMA: bool>(
        &self,
        (b, h, i): (usize, usize, usize),
        panels: Option<&KeyPanels>,
        q: &mut [f32],
        acc: &mut [f32],
    ) {
        self.load_q(b, h, i, q);
        let g = h / (self.q_heads / self.kv_heads);
        let keys = (self.keys)(b, i);
        let mask_base = self.mask.as_ref().map(|m| m.base(b, h, i));
        acc.fill(0.0);
        let mut m = f32::NEG_INFINITY;
        let mut l = 0.0f32;
        let mut s = [0.0f32; KEY_BLOCK];
        let mut j0 = keys.start;
        while j0 < keys.end {
            let n = KEY_BLOCK.min(keys.end - j0);
            match panels {
                Some(panels) => panels.scores::<FMA>(b, g, q, j0, &mut s),
                None => {
                    for (t, v) in s[..n].iter_mut().enumerate() {
                        let j = j0 + t;
                        if j + PREFETCH_KEYS < keys.end {
                            prefetch_lines(self.k.row(b, g, j + PREFETCH_KEYS));
                        }
                        // Read once the block's scores are known.
                        prefetch_lines(self.v.row(b, g, j));
                        *v = dot::<T, FMA>(q, self.k.row(b, g, j));
                    }
                }
            }
            let s = &mut s[..n];
            self.cap(s);
            if let (Some(mask), Some(base)) = (&self.mask, mask_base) {
                mask.add(base, j0, s);
            }
            let bm = block_max(s);
            if bm > m {
                let f = if m == f32::NEG_INFINITY {
                    0.0
                } else {
                    exp_f32(m - bm)
                };
                for a in acc.iter_mut() {
                    *a *= f;
                }
                l *= f;
                m = bm;
            }
            if m != f32::NEG_INFINITY {
                for v in s.iter_mut() {
                    *v = exp_f32(*v - m);
                }
                if s.iter().fold(false, |z, &p| z | (p == 0.0)) {
                    // Keys of weight 0 are skipped (their values may be
                    // infinite or NaN where a mask hides them).
                    for (t, &p) in s.iter().enumerate() {
                        if p != 0.0 || p.is_nan() {
                            l += p;
                            axpy::<T, FMA>(p, self.v.row(b, g, j0 + t), acc);
                        }
                    }
                } else {
                    l += block_sum(s);
                    axpy_block::<T, FMA>(s, &self.v, (b, g, j0), acc);
                }
            }
            j0 += n;
        }
        if m == f32::NEG_INFINITY || l == 0.0 {
            // Every key masked: the row is zero.
            acc.fill(0.0);
        } else {
            let inv = 1.0 / l;
            for a in acc.iter_mut() {
                *a *= inv;
            }
        }
    }
}

/// Keys ahead of the one being scored whose key rows are asked for early;
/// the same number of the next row's first keys are asked for before that
/// row starts.
///
/// A decode step's keys and values come from memory (the weights streamed
/// since the previous step evicted them) a head at a time: a few kilobytes
/// per head, too short a stream for the hardware prefetchers to ramp up on.
/// 8 layers of 16 heads, 64 wide, evicted before each pass: 48 keys 28.8 ->
/// 14-16 us a layer, 150 keys 69 -> 37-42 us (1 thread, Zen 5). Rows
/// already in the cache pay for the hints: 48 keys 7.7-8.2 -> 9.3-9.9 us.
const PREFETCH_KEYS: usize = 16;

/// Asks the caches for the lines of `row` (a hint: nothing is read, and
/// nothing happens off x86-64).
#[inline(always)]
fn prefetch_lines<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = row.as_ptr().cast::<i8>();
        for at in (0..std::mem::size_of_val(row)).step_by(64) {
            // SAFETY: a prefetch never faults; the address lies inside `row`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(at)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// `sum(a[i] * b[i])` with sixteen accumulators, one vector of them.
///
/// The lanes are summed in order at the end. A halving tree
/// (`acc[k] += acc[k + w]`) reads as faster but is not: the compiler then
/// packs the whole function, the multiply-adds too, into 2-lane vectors (a
/// decode step's attention ran 8 two-float multiply-adds per 16 floats).
#[inline(always)]
fn dot<T: Float, const FMA: bool>(a: &[f32], b: &[T]) -> f32 {
    let mut acc = [0.0f32; 16];
    let ca = a.chunks_exact(16);
    let cb = b.chunks_exact(16);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((acc, &x), &y) in acc.iter_mut().zip(x).zip(y) {
            *acc = madd::<FMA>(x, y.to_f32(), *acc);
        }
    }
    let mut s = 0.0;
    for (&x, &y) in ra.iter().zip(rb) {
        s = madd::<FMA>(x, y.to_f32(), s);
    }
    s + acc.iter().sum::<f32>()
}

/// `acc += p * v`.
#[inline(always)]
fn axpy<T: Float, const FMA: bool>(p: f32, v: &[T], acc: &mut [f32]) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a = madd::<FMA>(p, x.to_f32(), *a);
    }
}

/// Floats of the accumulator kept in registers by [`axpy_block`].
const ACC_SLICE: usize = 64;

/// `acc += sum_t p[t] * v.row(b, g, j0 + t)`, slice by slice of the
/// accumulator, each slice held in registers (two sets, even and odd keys)
/// across the block instead of stored and reloaded after every key.
#[inline(always)]
fn axpy_block<T: Float, const FMA: bool>(
    p: &[f32],
    v: &Rows<'_, T>,
    (b, g, j0): (usize, usize, usize),
    acc: &mut [f32],
) {
    let dv = acc.len();
    let Some((data, first, stride)) = v.run(b, g, j0, p.len()).filter(|_| dv >= ACC_SLICE) else {
        for (t, &pt) in p.iter().enumerate() {
            axpy::<T, FMA>(pt, v.row(b, g, j0 + t), acc);
        }
        return;
    };
    let mut c0 = 0;
    while c0 + ACC_SLICE <= dv {
        let mut even = [0.0f32; ACC_SLICE];
        let mut odd = [0.0f32; ACC_SLICE];
        let mut pairs = p.chunks_exact(2);
        let mut at = first + c0;
        for pair in pairs.by_ref() {
            let r0 = &data[at..at + ACC_SLICE];
            let r1 = &data[at + stride..at + stride + ACC_SLICE];
            for l in 0..ACC_SLICE {
                even[l] = madd::<FMA>(pair[0], r0[l].to_f32(), even[l]);
                odd[l] = madd::<FMA>(pair[1], r1[l].to_f32(), odd[l]);
            }
            at += 2 * stride;
        }
        if let [last] = pairs.remainder() {
            let r = &data[at..at + ACC_SLICE];
            for l in 0..ACC_SLICE {
                even[l] = madd::<FMA>(*last, r[l].to_f32(), even[l]);
            }
        }
        let out = &mut acc[c0..c0 + ACC_SLICE];
        for l in 0..ACC_SLICE {
            out[l] += even[l] + odd[l];
        }
        c0 += ACC_SLICE;
    }
    if c0 < dv {
        for (t, &pt) in p.iter().enumerate() {
            axpy::<T, FMA>(pt, &v.row(b, g, j0 + t)[c0..], &mut acc[c0..]);
        }
    }
}

/// The sum of `s`, sixteen lanes at a time.
#[inline(always)]
fn block_sum(s: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let chunks = s.chunks_exact(16);
    let rest = chunks.remainder().iter();
    for c in chunks {
        for k in 0..16 {
            lanes[k] += c[k];
        }
    }
    rest.chain(&lanes).sum()
}

/// The largest of `s` (NaNs ignored, as by `f32::max`), sixteen lanes at a
/// time.
#[inline(always)]
fn block_max(s: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = s.chunks_exact(16);
    let rest = chunks.remainder().iter();
    for c in chunks {
        for k in 0..16 {
            lanes[k] = lanes[k].max(c[k]);
        }
    }
    rest.chain(&lanes).fold(f32::NEG_INFINITY, |a, &v| a.max(v))
}

/// Runs `f(q, acc)` with f32 scratch of `d` and `dv` floats (stack when small).
#[inline(always)]
fn with_scratch(d: usize, dv: usize, f: impl FnOnce(&mut [f32], &mut [f32])) {
    let mut stack = [0.0f32; STACK_SCRATCH];
    let mut heap;
    let buf: &mut [f32] = if d + dv <= STACK_SCRATCH {
        &mut stack[..d + dv]
    } else {
        heap = vec![0.0f32; d + dv];
        &mut heap
    };
    let (q, acc) = buf.split_at_mut(d);
    f(q, acc)
}

/// Multiply-adds (or copied elements) below which attention and its cache
/// copies stay on the calling thread: a parallel region costs a few
/// microseconds of hand-off. A decode step's attention over a hundred keys
/// of eight 64-wide heads (about 2^17) reads its KV rows for tens of
/// microseconds, and two threads read them sooner (tiny-llm's int8 decode
/// on 2 threads: +6–9 % tokens/s, medians of 20–30 alternated runs).
const PARALLEL_MIN_WORK: usize = 1 << 16;

/// Computes every output row of `p` into `out` (`[B, Sq, H, dv]` or
/// `[B, H, Sq, dv]` per `p.out_bsnh`; the caller checked its length), split
/// across `par`.
pub(crate) fn attend<T: Float>(p: &Problem<'_, T>, out: &mut [T], par: &dyn ParallelFor) {
    let rows = p.batch * p.q_heads * p.q_len;
    if rows == 0 || p.dv == 0 {
        return;
    }
    // A decode step's few rows stay on the calling thread: splitting them
    // costs more hand-off than the work it shares.
    let keys = (p.keys)(0, p.q_len - 1).len().max(1);
    let work = rows.saturating_mul(keys).saturating_mul(p.d + p.dv);
    let par: &dyn ParallelFor = if work < PARALLEL_MIN_WORK {
        &Sequential
    } else {
        par
    };
    let panels = KeyPanels::build(p, par);
    let parts = if par.threads() > 1 {
        par.threads() * 4
    } else {
        1
    };
    let bounds = balanced_bounds(p, rows, parts);
    let width = Width::detect();
    for_each_part_mut(par, out, &bounds, &|offset, part: &mut [T]| {
        vector::run(
            width,
            #[inline(always)]
            || {
                if width.fma() {
                    rows_at::<T, true>(p, panels.as_ref(), offset / p.dv, part)
                } else {
                    rows_at::<T, false>(p, panels.as_ref(), offset / p.dv, part)
                }
            },
        )
    });
}

/// Element offsets of `out` splitting its `rows` into about `parts` runs
/// of equal work: a row costs its key count (a causal prefill's last rows
/// attend to every key, its first to one) plus a fixed share.
fn balanced_bounds<T: Float>(p: &Problem<'_, T>, rows: usize, parts: usize) -> Vec<usize> {
    let cost = |r: usize| {
        let (b, _, i) = p.decode(r);
        (p.keys)(b, i).len() + 16
    };
    let parts = parts.clamp(1, rows);
    if parts == 1 {
        return vec![0, rows * p.dv];
    }
    let total: usize = (0..rows).map(cost).sum();
    let mut bounds = Vec::with_capacity(parts + 1);
    bounds.push(0);
    let mut done = 0usize;
    for r in 0..rows {
        done += cost(r);
        // Cut after row r once the parts so far hold their share.
        if done * parts >= total * bounds.len() && bounds.len() < parts {
            bounds.push((r + 1) * p.dv);
        }
    }
    if *bounds.last().expect("starts at 0") != rows * p.dv {
        bounds.push(rows * p.dv);
    }
    bounds
}

/// Output rows `first..` of `p` into `out` (whole rows of `dv`), scored from
/// `panels` when given.
#[inline(always)]
fn rows_at<T: Float, const FMA: bool>(
    p: &Problem<'_, T>,
    panels: Option<&KeyPanels>,
    first: usize,
    out: &mut [T],
) {
    with_scratch(
        p.d,
        p.dv,
        #[inline(always)]
        |q, acc| {
            let rows = out.len() / p.dv;
            for (n, o) in out.chunks_exact_mut(p.dv).enumerate() {
                let at = p.decode(first + n);
                if panels.is_none() && n + 1 < rows {
                    p.prefetch_first_keys(p.decode(first + n + 1));
                }
                match T::as_f32_mut(o) {
                    Some(o) => p.row::<FMA>(at, panels, q, o),
                    None => {
                        p.row::<FMA>(at, panels, q, acc);
                        for (d, &a) in o.iter_mut().zip(acc.iter()) {
                            *d = T::from_f32(a);
                        }
                    }
                }
            }
        },
    );
}

/// Like [`attend`], also writing each row's scores (`[B, H, Sq, total]`,
/// `total` = keys per batch) in `mode`; on the calling thread.
pub(crate) fn attend_with_scores<T: Float>(
    p: &Problem<'_, T>,
    out: &mut [T],
    scores: &mut [T],
    total: usize,
    mode: QkMode,
) {
    let rows = p.batch * p.q_heads * p.q_len;
    let group = p.q_heads / p.kv_heads;
    with_scratch(
        p.d,
        p.dv,
        #[inline(always)]
        |q, acc| {
            for r in 0..rows {
                let (b, h, i) = p.decode(r);
                p.load_q(b, h, i, q);
                let g = h / group;
                let keys = (p.keys)(b, i);
                let sr = ((b * p.q_heads + h) * p.q_len + i) * total;
                let srow = &mut scores[sr..sr + total];
                let base = p.mask.as_ref().map(|m| m.base(b, h, i));
                let bias = |j: usize| -> f32 {
                    if !keys.contains(&j) {
                        return f32::NEG_INFINITY;
                    }
                    match (&p.mask, base) {
                        (Some(m), Some(base)) => m.bias(base, j, m.strides[3]),
                        _ => 0.0,
                    }
                };
                for (j, o) in srow.iter_mut().enumerate() {
                    let mut s = [dot::<T, false>(q, p.k.row(b, g, j))];
                    p.cap(&mut s);
                    let v = if mode == QkMode::Biased {
                        s[0] + bias(j)
                    } else {
                        s[0]
                    };
                    *o = T::from_f32(v);
                }
                let z = |j: usize, v: T| -> f32 {
                    if mode == QkMode::Biased {
                        v.to_f32()
                    } else {
                        v.to_f32() + bias(j)
                    }
                };
                let m = srow
                    .iter()
                    .enumerate()
                    .fold(f32::NEG_INFINITY, |a, (j, &v)| a.max(z(j, v)));
                acc.fill(0.0);
                let mut l = 0.0f32;
                if m != f32::NEG_INFINITY {
                    for (j, o) in srow.iter_mut().enumerate() {
                        let e = (z(j, *o) - m).exp();
                        if e != 0.0 || e.is_nan() {
                            l += e;
                            axpy::<T, false>(e, p.v.row(b, g, j), acc);
                        }
                        if mode == QkMode::Softmax {
                            *o = T::from_f32(e);
                        }
                    }
                }
                let inv = if m == f32::NEG_INFINITY || l == 0.0 {
                    0.0
                } else {
                    1.0 / l
                };
                if mode == QkMode::Softmax {
                    for o in srow.iter_mut() {
                        *o = if inv == 0.0 {
                            T::default()
                        } else {
                            T::from_f32(o.to_f32() * inv)
                        };
                    }
                }
                let orow = if p.out_bsnh {
                    ((b * p.q_len + i) * p.q_heads + h) * p.dv
                } else {
                    ((b * p.q_heads + h) * p.q_len + i) * p.dv
                };
                for (d, &a) in out[orow..orow + p.dv].iter_mut().zip(acc.iter()) {
                    *d = T::from_f32(a * inv);
                }
            }
        },
    );
}

/// Writes row `(batch, head, position)` into the slice it is given.
pub(crate) type RowFill<'f, T> = dyn Fn(usize, usize, usize, &mut [T]) + Sync + 'f;

/// Fills `dst` (`[batch, heads, len, width]`) row by row with `f(b, g, j,
/// row)`, split across `par` by (batch, head). `fresh` rows per head come
/// from new inputs (rotated or converted), the others are plain copies of a
/// past cache.
pub(crate) fn fill_rows<T: Float>(
    dst: &mut [T],
    heads: usize,
    (len, fresh): (usize, usize),
    width: usize,
    par: &dyn ParallelFor,
    f: &RowFill<'_, T>,
) {
    fill_row_ranges(dst, heads, (len, fresh), width, &|_| 0..len, par, f);
}

/// [`fill_rows`] over rows `rows(b)` of each head of batch `b` only; the
/// other rows keep their contents (a cache updated in place, where only
/// the new rows are written).
pub(crate) fn fill_row_ranges<T: Float>(
    dst: &mut [T],
    heads: usize,
    (len, fresh): (usize, usize),
    width: usize,
    rows: &(dyn Fn(usize) -> Range<usize> + Sync),
    par: &dyn ParallelFor,
    f: &RowFill<'_, T>,
) {
    if dst.is_empty() || heads == 0 {
        return;
    }
    // Bounded by `dst`'s length, which holds at least one head.
    let per_head = len.saturating_mul(width);
    if per_head == 0 {
        return;
    }
    // A decode step's cache is mostly copied past rows: split only when
    // the copy is large (the hand-off costs more than a small copy) or the
    // new rows are many (a prompt's keys, each rotated).
    let fresh_elements = (dst.len() / per_head)
        .saturating_mul(fresh.min(len))
        .saturating_mul(width);
    let written = (0..dst.len() / per_head / heads)
        .map(|b| rows(b).len().min(len))
        .fold(0usize, usize::saturating_add)
        .saturating_mul(heads * width);
    let par: &dyn ParallelFor =
        if written < PARALLEL_MIN_WORK && fresh_elements < PARALLEL_MIN_ELEMENTS {
            &Sequential
        } else {
            par
        };
    let chunk = rows_chunk(par, dst.len() / per_head, per_head);
    for_each_chunk_mut(par, dst, chunk, &|offset, c: &mut [T]| {
        for (n, head) in c.chunks_exact_mut(per_head).enumerate() {
            let bg = offset / per_head + n;
            let b = bg / heads;
            let range = rows(b);
            let range = range.start.min(len)..range.end.min(len);
            for j in range {
                f(b, bg % heads, j, &mut head[j * width..(j + 1) * width]);
            }
        }
    });
}
