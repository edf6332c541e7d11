//! What the scheduler knows of a task's work: the [`TaskRunner`] that runs
//! it, and the [`TaskContext`] a running task sees of its submission and
//! pool.

use std::sync::Arc;

use crate::scheduler::{Priority, TaskId};
use crate::sync::{AtomicBool, Ordering};

use super::{CancelToken, ResumeHandle, SubmissionInner, suspend};
use crate::scheduler::outcome::TaskFailure;
use crate::scheduler::lanes::{Lanes, Lease};
use crate::scheduler::queue::Lane;

/// Runs a task by id; the scheduler never knows what a task does.
pub trait TaskRunner: Send + Sync {
    /// Runs `task`. Called at most once per task, on a worker of the task's
    /// lane, after every dependency's `run` returned `Ok` (and with its
    /// effects visible). An `Err` or a panic (caught) fails the task: its
    /// transitive dependents are suppressed and never run. `ctx` reaches
    /// the submission (promotion, cancellation) and the pool's CPU workers
    /// (kernel parallelism).
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure>;
}

/// A runner of a renumbered graph: graph task `i` runs as `ids[i]` of the
/// inner runner (e.g. the session tasks of a plan, [`PreparedExecutionPlan::session_graph`]).
///
/// [`PreparedExecutionPlan::session_graph`]: crate::plan::PreparedExecutionPlan::session_graph
#[derive(Debug)]
pub struct Remapped<R> {
    /// The runner of the original ids.
    pub runner: R,
    /// Original id of each graph task.
    pub ids: Box<[TaskId]>,
}

impl<R: TaskRunner> TaskRunner for Remapped<R> {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.runner.run(self.ids[task.0 as usize], ctx)
    }
}

/// What a running task sees of its submission and pool.
#[derive(Debug)]
pub struct TaskContext<'a> {
    pub(super) lanes: &'a Lanes,
    pub(super) submission: &'a Arc<SubmissionInner>,
    pub(super) task: TaskId,
    pub(super) worker_lane: Lane,
    /// Runs on a pool worker (not on a caller helping in `wait`).
    pub(super) on_worker: bool,
    /// Set by [`TaskContext::suspend`].
    pub(super) suspended: AtomicBool,
}

impl TaskContext<'_> {
    /// Suspend step 1: when this run returns `Ok`, the task is not finished
    /// but parked (still claimed, its dependents not fired, no worker held);
    /// it runs again — with the same task id, on a worker of its lane, at
    /// critical priority — after the returned handle's
    /// [`ResumeHandle::resume`] (or drop). This is how a task waits for an
    /// event without blocking a worker. A run that returns `Err` is never
    /// resumed. Call at most once per run.
    pub fn suspend(&self) -> ResumeHandle {
        let word = &self.submission.suspension[self.task.0 as usize];
        let before = word.swap(suspend::SUSPENDING, Ordering::SeqCst);
        debug_assert_eq!(before, suspend::IDLE, "suspend called twice in one run");
        self.suspended.store(true, Ordering::Relaxed);
        ResumeHandle {
            submission: self.submission.clone(),
            task: self.task,
        }
    }

    /// Whether this run called [`TaskContext::suspend`]: the task is not
    /// finished when it returns.
    pub fn is_suspending(&self) -> bool {
        self.suspended.load(Ordering::Relaxed)
    }

    /// The running task.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The priority the running task was admitted at: critical once
    /// promoted (a run waits for it), else its graph priority.
    pub fn priority(&self) -> Priority {
        let t = self.task.0 as usize;
        self.submission
            .priority(self.task, self.submission.states[t].snapshot())
    }

    /// Whether it runs on a pool worker; `false` on a caller helping in
    /// `wait` (a thread that would otherwise only block).
    pub fn on_worker(&self) -> bool {
        self.on_worker
    }

    /// The lane of the worker running it (an inline task runs on a CPU or
    /// an I/O worker).
    pub fn worker_lane(&self) -> Lane {
        self.worker_lane
    }

    /// Promote protocol from inside a task (see [`Submission::promote`]):
    /// e.g. an invocation that found a requirement not resident raises its
    /// producer chain. Returns how many tasks this call pushed.
    ///
    /// # Panics
    /// If `task` is not a task of this submission's graph.
    ///
    /// [`Submission::promote`]: super::Submission::promote
    pub fn promote(&self, task: TaskId) -> usize {
        assert!(
            (task.0 as usize) < self.submission.graph.len(),
            "no such task"
        );
        self.submission.promote(self.lanes, task)
    }

    /// Window step 2 from inside a task (see [`Submission::advance`]).
    ///
    /// [`Submission::advance`]: super::Submission::advance
    pub fn advance(&self, step: u32) {
        self.submission.advance(self.lanes, step);
    }

    /// Window step 3 from inside a task (see [`Submission::stalled`]).
    ///
    /// [`Submission::stalled`]: super::Submission::stalled
    pub fn stalled(&self) {
        self.submission.stalled(self.lanes);
    }

    /// Whether the submission was cancelled (a long task may stop early and
    /// return an error).
    pub fn is_cancelled(&self) -> bool {
        self.submission.cancel_requested.load(Ordering::Acquire)
    }

    /// A token cancelling this submission.
    pub fn cancel_token(&self) -> CancelToken {
        CancelToken {
            inner: Arc::downgrade(self.submission),
        }
    }

    /// Kernel parallelism on the pool's CPU workers (protocol "lease"):
    /// `parallel_for` regions started from this task run on this thread
    /// and whichever CPU workers are idle, never on a second pool.
    pub fn parallel(&self) -> Lease<'_> {
        self.lanes
            .lease(self.on_worker && self.worker_lane == Lane::Cpu)
    }
}
