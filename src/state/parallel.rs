//! `ThreadPool`: the kernels' `ParallelFor` over the caller's thread plus
//! persistent helpers (hot path).

use onnx_prepared_kernels::ParallelFor;

use crate::sync::ForkJoinPool;

/// Runs kernel parallel regions on the calling thread and `helpers` threads.
#[derive(Debug)]
pub struct ThreadPool {
    pool: ForkJoinPool,
}

impl ThreadPool {
    /// A pool of `helpers` threads besides the caller.
    pub fn new(helpers: usize) -> Self {
        Self {
            pool: ForkJoinPool::new(helpers),
        }
    }
}

impl ParallelFor for ThreadPool {
    fn threads(&self) -> usize {
        self.pool.threads()
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.pool.run(tasks, task);
    }
}
