//! `ThreadPool`: the kernels' `ParallelFor` over the caller's thread plus
//! the CPU workers of a [`WorkerPool`] (hot path), leased the same way a
//! task running on those workers leases them: one persistent pool under
//! everything.

use onnx_prepared_kernels::ParallelFor;

use crate::scheduler::{PoolConfig, SpawnError, WorkerPool};

/// Runs kernel parallel regions on the calling thread and `helpers` CPU
/// workers of a pool of its own (no I/O workers).
#[derive(Debug)]
pub struct ThreadPool {
    pool: WorkerPool,
}

impl ThreadPool {
    /// A pool of `helpers` CPU workers besides the caller (not pinned: the
    /// caller's thread is not either).
    ///
    /// # Panics
    ///
    /// When [`ThreadPool::try_new`] fails.
    pub fn new(helpers: usize) -> Self {
        Self::try_new(helpers).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`ThreadPool::new`], or why the workers could not be started.
    pub fn try_new(helpers: usize) -> Result<Self, SpawnError> {
        Ok(Self {
            pool: WorkerPool::try_new(PoolConfig {
                cpu_workers: helpers,
                io_workers: 0,
                devices: 0,
                pin_cpu_workers: false,
            })?,
        })
    }

    /// The pool whose CPU workers help.
    pub fn workers(&self) -> &WorkerPool {
        &self.pool
    }
}

// SAFETY: delegates to the pool's `Lease`, which upholds the contract.
unsafe impl ParallelFor for ThreadPool {
    fn threads(&self) -> usize {
        self.pool.lease().threads()
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.pool.lease().run(tasks, task);
    }
}
