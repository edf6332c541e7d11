//! Protocols "failure" (steps 2–3) and "cancel" (steps 1–2, with
//! [`CancelToken`]), numbered in the module docs of [`crate::scheduler`],
//! and the summary of a finished run. Cold path.

use std::sync::Weak;

use crate::scheduler::TaskId;
use crate::sync::Ordering;

use super::SubmissionInner;
use crate::scheduler::outcome::{SubmissionOutcome, TaskFailure, code};
use crate::scheduler::task_state::Cancel;

impl SubmissionInner {
    /// Failure step 2: the first failure is kept for the outcome.
    pub(super) fn record_failure(&self, task: TaskId, failure: TaskFailure) {
        if self
            .first_failed
            .compare_exchange(
                usize::MAX,
                task.0 as usize,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            let _ = self.first_failure.put((task, failure));
        }
    }

    /// Failure step 3: cancels every transitive dependent of the failed
    /// `task`; each one this call cancels is recorded suppressed.
    pub(super) fn suppress_dependents(&self, task: TaskId) {
        let mut stack: Vec<TaskId> = self.graph.dependents(task).to_vec();
        while let Some(d) = stack.pop() {
            match self.states[d.0 as usize].cancel() {
                Cancel::Cancelled => {
                    stack.extend_from_slice(self.graph.dependents(d));
                    self.terminate(d, code::SUPPRESSED);
                }
                // Its canceller covers its dependents (cancel step 2 or
                // another suppression).
                Cancel::AlreadyCancelled => {}
                // A dependent of a failed task never reaches zero
                // dependencies, so it is never claimed.
                Cancel::TooLate => debug_assert!(false, "dependent of a failed task ran"),
            }
        }
    }

    /// Cancel step 2: cancels every unclaimed task; each one this call
    /// cancels is recorded cancelled.
    pub(in crate::scheduler) fn cancel_all(&self) {
        self.cancel_requested.store(true, Ordering::SeqCst);
        for (i, state) in self.states.iter().enumerate() {
            match state.cancel() {
                Cancel::Cancelled => self.terminate(TaskId(i as u32), code::CANCELLED),
                Cancel::AlreadyCancelled => {}
                // Suspend step 5: a suspended task never runs again.
                Cancel::TooLate => {
                    if self.bury(i) {
                        self.terminate(TaskId(i as u32), code::CANCELLED);
                    }
                }
            }
        }
    }

    /// The summary of a finished run (after `all_done` opened).
    pub(super) fn outcome(&self) -> SubmissionOutcome {
        let mut outcome = SubmissionOutcome::default();
        for (i, o) in self.outcomes.iter().enumerate() {
            let task = TaskId(i as u32);
            match o.load(Ordering::Relaxed) {
                code::PENDING => {
                    debug_assert!(self.states[i].snapshot().is_claimed());
                    outcome.completed += 1;
                }
                code::FAILED => outcome.failed_tasks.push(task),
                code::SUPPRESSED => outcome.suppressed.push(task),
                code::CANCELLED => outcome.cancelled += 1,
                _ => unreachable!("unknown outcome code"),
            }
        }
        if self.first_failed.load(Ordering::Acquire) != usize::MAX
            && let Some(first) = self.first_failure.take_first(|_| true)
        {
            outcome.failed = Some(first.clone());
            let _ = self.first_failure.put(first);
        }
        outcome
    }
}

/// Cancels one submission: a cheap handle (clone it freely) that does not
/// keep the submission alive. Tasks not claimed when [`CancelToken::cancel`]
/// returns never run; running tasks finish and are joined by
/// [`Submission::wait`].
///
/// [`Submission::wait`]: super::Submission::wait
#[derive(Debug, Clone)]
pub struct CancelToken {
    pub(super) inner: Weak<SubmissionInner>,
}

impl CancelToken {
    /// Cancel steps 1–2: marks the submission cancelled and cancels every
    /// task not yet claimed. Idempotent; several callers may race. Does
    /// nothing once the submission is gone.
    pub fn cancel(&self) {
        if let Some(inner) = self.inner.upgrade() {
            inner.cancel_all();
        }
    }

    /// Whether `cancel` was called (false once the submission is gone).
    pub fn is_cancelled(&self) -> bool {
        self.inner
            .upgrade()
            .is_some_and(|i| i.cancel_requested.load(Ordering::Acquire))
    }
}
