//! `ParallelFor`: how kernels split work across the caller's threads (hot
//! path). Kernels never create threads; the runtime passes an executor.

/// Runs independent tasks, possibly in parallel.
pub trait ParallelFor: Sync {
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

impl ParallelFor for Sequential {
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
