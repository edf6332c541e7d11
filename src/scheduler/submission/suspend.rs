//! Protocol "suspend" ([`super::TaskContext::suspend`], [`ResumeHandle`]):
//! a task waits for an event without holding a worker. One word per task
//! (the constants below) decides between the run returning, a resume and
//! a cancel:
//! 1. The run calls `suspend`: its word `IDLE → SUSPENDING` (SeqCst) and
//!    it gets a [`ResumeHandle`] (which resumes when dropped).
//! 2. The run returned `Ok`: its worker CASes `SUSPENDING → SUSPENDED`. The
//!    task stays claimed, its dependents are not fired and no worker holds
//!    it (an owner gives up ownership, own step 4). A failed CAS means it
//!    was resumed meanwhile (step 3): the word goes back to `IDLE` and the
//!    task runs again at once (its worker pushes it as a claimed critical
//!    entry; an owner runs it again in place).
//! 3. `resume`: `SUSPENDED → IDLE`, then the task is pushed as a claimed
//!    entry at critical priority on its lane (sleep/wake step 2);
//!    `SUSPENDING → RESUMED_EARLY` leaves the rerun to step 2. A dead or
//!    already resumed task is left alone.
//! 4. A run that suspended but returned `Err` is never resumed: `DEAD`,
//!    then the failure protocol as for any failed run.
//! 5. Cancel: the sweep (cancel step 2), finding a task claimed, buries it
//!    if suspended (`SUSPENDED → DEAD`); a worker whose step-2 CAS came
//!    after the sweep sees `cancel_requested` (both sides SeqCst) and tries
//!    the same CAS. Its one winner records the task cancelled; a later
//!    resume finds it dead.

use std::sync::Arc;

use crate::scheduler::{Priority, TaskId};
use crate::sync::Ordering;

use super::{CLAIMED_ENTRY, SubmissionInner, suspend};

/// Not suspended (or resumed and queued).
pub(super) const IDLE: u32 = 0;
/// Its run called `suspend` and has not returned yet.
pub(super) const SUSPENDING: u32 = 1;
/// Its run returned suspended; waits for `resume`.
pub(super) const SUSPENDED: u32 = 2;
/// Resumed before its run returned: the worker runs it again.
pub(super) const RESUMED_EARLY: u32 = 3;
/// Never resumed again: the run failed or the submission was cancelled.
pub(super) const DEAD: u32 = 4;

/// What the worker does after a run that suspended.
pub(super) enum AfterSuspend {
    /// Parked until resumed.
    Suspended,
    /// Resumed meanwhile: run it again now.
    RunAgain,
    /// Cancelled while suspending: record it cancelled.
    Cancelled,
    /// It failed: finish it as usual.
    Finished,
}

impl SubmissionInner {
    /// Suspend steps 2 and 5: after a run that called
    /// [`TaskContext::suspend`] returned.
    ///
    /// [`TaskContext::suspend`]: super::TaskContext::suspend
    pub(super) fn settle_suspension(&self, task: TaskId, ok: bool) -> AfterSuspend {
        let word = &self.suspension[task.0 as usize];
        if !ok {
            // A failed run is never resumed.
            word.store(suspend::DEAD, Ordering::SeqCst);
            return AfterSuspend::Finished;
        }
        match word.compare_exchange(
            suspend::SUSPENDING,
            suspend::SUSPENDED,
            Ordering::SeqCst,
            Ordering::SeqCst,
        ) {
            Ok(_) => {
                // Step 5: a cancel that scanned before our CAS missed us.
                if self.cancel_requested.load(Ordering::SeqCst) && self.bury(task.0 as usize) {
                    return AfterSuspend::Cancelled;
                }
                AfterSuspend::Suspended
            }
            Err(_) => {
                // Resumed while still running (step 3): run again.
                word.store(suspend::IDLE, Ordering::SeqCst);
                AfterSuspend::RunAgain
            }
        }
    }

    /// Suspend step 5: a suspended task `i` never runs again; `true` for the
    /// one caller that made it so (it records the task cancelled).
    pub(super) fn bury(&self, i: usize) -> bool {
        self.suspension[i]
            .compare_exchange(
                suspend::SUSPENDED,
                suspend::DEAD,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
    }

    /// Suspend step 3: resumes a suspended `task` (or marks it to run again
    /// once its run returns).
    pub(super) fn resume(&self, task: TaskId) {
        let word = &self.suspension[task.0 as usize];
        let mut state = word.load(Ordering::SeqCst);
        loop {
            let next = match state {
                suspend::SUSPENDING => suspend::RESUMED_EARLY,
                suspend::SUSPENDED => suspend::IDLE,
                _ => return, // Dead (failed or cancelled) or already resumed.
            };
            match word.compare_exchange(state, next, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) if next == suspend::IDLE => {
                    if let Some(lanes) = self.lanes.upgrade() {
                        self.push(&lanes, TaskId(task.0 | CLAIMED_ENTRY), Priority::Critical);
                    }
                    return;
                }
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
    }
}

/// Resumes a suspended task (protocol "suspend"). Owns what the resumed
/// run needs (`Send`, `'static`), so it can be handed to any event source.
/// Dropping it resumes too: a suspended task is never forgotten.
#[derive(Debug)]
pub struct ResumeHandle {
    pub(super) submission: Arc<SubmissionInner>,
    pub(super) task: TaskId,
}

impl ResumeHandle {
    /// Suspend step 3: queues the task again (critical), or — if its run has
    /// not returned yet — makes the worker run it again when it does.
    pub fn resume(self) {
        drop(self);
    }

    /// The suspended task.
    pub fn task(&self) -> TaskId {
        self.task
    }
}

impl Drop for ResumeHandle {
    fn drop(&mut self) {
        self.submission.resume(self.task);
    }
}
