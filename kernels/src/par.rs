//! `ParallelFor`: how kernels split work across the caller's threads (hot
//! path). Kernels never create threads; the runtime passes an executor.

/// Runs independent tasks, possibly in parallel.
///
/// # Safety
///
/// Kernels build disjoint `&mut` slices of one output from a raw pointer,
/// one per task index (see [`for_each_chunk_mut`]), so an implementation
/// that called an index twice, concurrently, or out of range would let safe
/// kernel code race on memory. An implementation must guarantee, for every
/// call of [`run`](ParallelFor::run):
///
/// * `task(i)` is called **exactly once** for every `i` in `0..tasks`, and
///   never with an index outside that range;
/// * every call of `task` has **returned** before `run` returns (no call
///   starts or is still running afterwards), and `run` does not return by
///   unwinding while a call may still be running on another thread.
///
/// Hence implementing the trait requires `unsafe impl`; no safe code can
/// supply an executor that breaks the kernels' disjoint writes:
///
/// ```compile_fail,E0200
/// use onnx_prepared_kernels::ParallelFor;
///
/// struct Twice;
///
/// impl ParallelFor for Twice {
///     fn threads(&self) -> usize {
///         2
///     }
///
///     fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
///         (0..tasks).chain(0..tasks).for_each(task); // index called twice
///     }
/// }
/// ```
pub unsafe trait ParallelFor: Sync {
    /// Threads that may run tasks at once (1 = sequential).
    fn threads(&self) -> usize;

    /// Calls `task(i)` for every `i` in `0..tasks` and returns when all have
    /// finished. Tasks may run in any order and on any participating thread,
    /// including the caller's.
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync));
}

/// Runs every task on the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sequential;

// SAFETY: `(0..tasks).for_each(task)` calls each index in range exactly once,
// on the calling thread, and returns after the last call.
unsafe impl ParallelFor for Sequential {
    fn threads(&self) -> usize {
        1
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).for_each(task);
    }
}

/// Splits `0..len` into about `parts` contiguous chunks whose boundaries are
/// multiples of `align` (except the end); returns the `index`th chunk.
pub fn chunk(len: usize, parts: usize, align: usize, index: usize) -> std::ops::Range<usize> {
    let align = align.max(1);
    let units = len.div_ceil(align);
    let parts = parts.clamp(1, units.max(1));
    let per = units.div_ceil(parts);
    let start = (index * per * align).min(len);
    let end = ((index + 1) * per * align).min(len);
    start..end
}

#[cfg(test)]
mod tests {
    use super::chunk;

    #[test]
    fn chunks_cover_the_range_once() {
        for len in [0, 1, 7, 64, 100, 1000] {
            for parts in 1..5 {
                for align in [1, 8, 16] {
                    let mut covered = 0;
                    for i in 0..parts {
                        let r = chunk(len, parts, align, i);
                        assert_eq!(r.start, covered.min(len), "{len} {parts} {align} {i}");
                        covered = r.end.max(covered);
                    }
                    assert_eq!(covered, len);
                }
            }
        }
    }
}

/// Element count below which elementwise kernels stay on the calling
/// thread: a parallel region costs a few microseconds of hand-off.
pub const PARALLEL_MIN_ELEMENTS: usize = 32 * 1024;

/// `par` for an output of `len` elements, or the calling thread alone when
/// it is below [`PARALLEL_MIN_ELEMENTS`] (too small to share).
pub(crate) fn for_len(par: &dyn ParallelFor, len: usize) -> &dyn ParallelFor {
    if len < PARALLEL_MIN_ELEMENTS {
        &Sequential
    } else {
        par
    }
}

/// A raw pointer to the caller's output, shared by tasks writing disjoint ranges.
struct SharedOut<T>(*mut T);

impl<T> SharedOut<T> {
    fn ptr(&self) -> *mut T {
        self.0
    }
}

// SAFETY: used only inside `for_each_chunk_mut` and `for_each_part_mut`, whose tasks each build a
// slice over a range no other task touches, while the caller's `&mut [T]`
// stays borrowed for the whole `par.run` call; `T: Send` makes handing those
// elements to another thread sound.
unsafe impl<T: Send> Sync for SharedOut<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for SharedOut<T> {}

/// Calls `f(offset, chunk)` for consecutive disjoint chunks of `out`, each
/// `chunk_len` elements (the last may be shorter), possibly in parallel on
/// `par`. `offset` is the chunk's start index in `out`.
pub fn for_each_chunk_mut<T: Send>(
    par: &dyn ParallelFor,
    out: &mut [T],
    chunk_len: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let chunk_len = chunk_len.max(1);
    let len = out.len();
    if par.threads() <= 1 || len <= chunk_len {
        for (i, chunk) in out.chunks_mut(chunk_len).enumerate() {
            f(i * chunk_len, chunk);
        }
        return;
    }
    let base = SharedOut(out.as_mut_ptr());
    par.run(len.div_ceil(chunk_len), &|i| {
        let start = i * chunk_len;
        let end = (start + chunk_len).min(len);
        // SAFETY: `ParallelFor`'s contract (an unsafe trait) calls each `i`
        // in `0..ceil(len / chunk_len)` exactly once and finishes every call
        // before `run` returns; so `start..end` lies inside `out`
        // (`start < len`), no two live slices overlap, and `out` stays
        // mutably borrowed by this function for as long as any slice lives.
        let chunk = unsafe { std::slice::from_raw_parts_mut(base.ptr().add(start), end - start) };
        f(start, chunk);
    });
}

/// Calls `f(offset, part)` for the parts of `out` between consecutive
/// `bounds` (offsets increasing from 0 to `out.len()`), possibly in
/// parallel on `par`: chunks of unequal length for work of unequal cost.
///
/// # Panics
/// When `bounds` does not run from 0 to `out.len()` without decreasing.
pub(crate) fn for_each_part_mut<T: Send>(
    par: &dyn ParallelFor,
    out: &mut [T],
    bounds: &[usize],
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let len = out.len();
    assert!(
        bounds.first() == Some(&0)
            && bounds.last() == Some(&len)
            && bounds.windows(2).all(|w| w[0] <= w[1]),
        "part bounds must run from 0 to the output's length"
    );
    let parts = bounds.len() - 1;
    if par.threads() <= 1 || parts <= 1 {
        let mut rest = out;
        for w in bounds.windows(2) {
            let (part, tail) = rest.split_at_mut(w[1] - w[0]);
            f(w[0], part);
            rest = tail;
        }
        return;
    }
    let base = SharedOut(out.as_mut_ptr());
    par.run(parts, &|i| {
        let (start, end) = (bounds[i], bounds[i + 1]);
        // SAFETY: `ParallelFor`'s contract calls each `i` in `0..parts`
        // exactly once and finishes every call before `run` returns; the
        // bounds were checked to increase from 0 to `len`, so `start..end`
        // lies inside `out` and no two parts overlap, and `out` stays
        // mutably borrowed by this function while any part lives.
        let part = unsafe { std::slice::from_raw_parts_mut(base.ptr().add(start), end - start) };
        f(start, part);
    });
}

/// A chunk length that gives each of `par`'s threads about four chunks of
/// whole rows of `row_len` elements.
pub fn rows_chunk(par: &dyn ParallelFor, rows: usize, row_len: usize) -> usize {
    let tasks = (par.threads() * 4).max(1);
    rows.div_ceil(tasks).max(1) * row_len.max(1)
}

#[cfg(test)]
mod chunk_tests {
    use super::*;

    /// Runs tasks in reverse order on the calling thread, as a second
    /// participant would interleave them.
    struct Reversed;

    // SAFETY: every index of `0..tasks` exactly once, on the calling thread,
    // all before `run` returns.
    unsafe impl ParallelFor for Reversed {
        fn threads(&self) -> usize {
            3
        }

        fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
            (0..tasks).rev().for_each(task);
        }
    }

    #[test]
    fn every_element_is_written_once_with_its_offset() {
        for len in [0, 1, 7, 100, 1000] {
            for chunk in [1, 3, 64, 5000] {
                let mut out = vec![usize::MAX; len];
                for_each_chunk_mut(&Reversed, &mut out, chunk, &|offset, c| {
                    for (i, v) in c.iter_mut().enumerate() {
                        assert_eq!(*v, usize::MAX, "written twice");
                        *v = offset + i;
                    }
                });
                assert!(
                    out.iter().enumerate().all(|(i, &v)| v == i),
                    "{len} {chunk}"
                );
            }
        }
    }
}
