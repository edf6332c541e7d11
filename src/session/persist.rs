//! `BackgroundWriter`: the session's [`PersistSink`] — each prepared-cache
//! write runs as a one-task submission on the pool's I/O lane at
//! background priority, after the object it writes was published, so
//! cache writes never delay a run. [`BackgroundWriter::flush`] waits for
//! every write submitted so far.
//!
//! The writer holds its pool weakly: the pool keeps the runners of what it
//! ran (the session's state among them), and the state holds the writer,
//! so a strong reference would keep the session's pool, state, plan and
//! prepared cache alive after the session is dropped.

use std::sync::{Arc, Weak};

use crate::cache::{PersistJob, PersistSink};
use crate::plan::{Csr, Priority, ResourceClass, TaskId};
use crate::scheduler::{Submission, TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool};
use crate::sync::Lock;

/// Runs persist jobs as background I/O tasks on a pool.
#[derive(Debug)]
pub(super) struct BackgroundWriter {
    pool: Weak<WorkerPool>,
    graph: Arc<TaskGraph>,
    pending: Lock<Vec<Submission>>,
}

impl BackgroundWriter {
    /// A writer submitting to `pool`.
    pub(super) fn new(pool: &Arc<WorkerPool>) -> Result<Self, crate::scheduler::GraphError> {
        let graph = TaskGraph::new(
            &[ResourceClass::Io],
            &[Priority::Background],
            &Csr::from_rows(&[Vec::<TaskId>::new()]),
        )?;
        Ok(Self {
            pool: Arc::downgrade(pool),
            graph: Arc::new(graph),
            pending: Lock::new(Vec::new()),
        })
    }

    /// Waits for every write submitted so far.
    pub(super) fn flush(&self) {
        let pending = self.pending.with(std::mem::take);
        for s in pending {
            s.wait();
        }
    }
}

impl PersistSink for BackgroundWriter {
    fn submit(&self, job: PersistJob) {
        let runner = Arc::new(Persist(Lock::new(Some(job))));
        let submitted = match self.pool.upgrade() {
            Some(pool) => pool.submit(self.graph.clone(), runner.clone()).ok(),
            None => None,
        };
        match submitted.ok_or(()) {
            Ok(s) => self.pending.with(|p| {
                p.retain(|s| !s.is_done());
                p.push(s);
            }),
            // No I/O worker (or the pool is gone): write here (failures
            // are in the diagnostics).
            Err(_) => {
                if let Some(job) = runner.0.with(Option::take) {
                    drop(job.run());
                }
            }
        }
    }
}

/// One persist job as a task.
struct Persist(Lock<Option<PersistJob>>);

impl TaskRunner for Persist {
    fn run(&self, _: TaskId, _: &TaskContext<'_>) -> Result<(), TaskFailure> {
        match self.0.with(Option::take) {
            Some(job) => job.run().map_err(|e| TaskFailure::new(e.to_string())),
            None => Ok(()),
        }
    }
}
