//! Failure and cancellation types of a run: [`TaskFailure`] (why one task
//! failed), [`SubmissionOutcome`] (the summary [`super::Submission::wait`] returns)
//! and the per-task terminal codes the pool records (cold path: touched once
//! per task).

use std::any::Any;
use std::fmt;

use crate::scheduler::TaskId;

/// Why a task failed: returned by [`super::TaskRunner::run`], made from a
/// caught panic, or from an admission that can never succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFailure {
    message: String,
}

impl TaskFailure {
    /// A failure described by `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The description.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The failure of a run that panicked with `payload`.
    pub(super) fn from_panic(payload: &(dyn Any + Send)) -> Self {
        let text = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("non-string panic payload");
        Self::new(format!("panicked: {text}"))
    }
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TaskFailure {}

/// How every task of a submission ended; returned by [`super::Submission::wait`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SubmissionOutcome {
    /// Tasks whose run returned `Ok`.
    pub completed: usize,
    /// The first task that failed (by the order failures were recorded) and
    /// why; `None` if none failed.
    pub failed: Option<(TaskId, TaskFailure)>,
    /// Every task that failed, in id order (the first one included).
    pub failed_tasks: Vec<TaskId>,
    /// Tasks that never ran because a (transitive) dependency failed, in id
    /// order.
    pub suppressed: Vec<TaskId>,
    /// Tasks that never ran because the run was cancelled.
    pub cancelled: usize,
}

impl SubmissionOutcome {
    /// Whether every task completed.
    pub fn is_success(&self) -> bool {
        self.failed_tasks.is_empty() && self.suppressed.is_empty() && self.cancelled == 0
    }
}

/// A task's terminal state as recorded in the pool's outcome column; set
/// once, by the owner of the task's terminal accounting (the claimer, or the
/// caller whose `cancel` set the bit).
pub(super) mod code {
    /// Nothing recorded: not terminal yet, or — once the submission is over
    /// — completed (the hot path records nothing for a completed task).
    pub const PENDING: u32 = 0;
    /// Ran and failed (error or panic), or could never be admitted.
    pub const FAILED: u32 = 2;
    /// Never ran: a dependency failed or was suppressed.
    pub const SUPPRESSED: u32 = 3;
    /// Never ran: the run was cancelled.
    pub const CANCELLED: u32 = 4;
}
