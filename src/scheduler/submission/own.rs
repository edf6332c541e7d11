//! Protocol "own" (steps 1–4, numbered in the module docs of
//! [`crate::scheduler`]): the exclusive CPU worker runs a sequential
//! submission in id order, without dependency counting.

use std::sync::Arc;

use crate::scheduler::TaskId;
use crate::sync::Ordering;

use super::SubmissionInner;
use super::suspend::AfterSuspend;
use crate::scheduler::outcome::code;
use crate::scheduler::lanes::Lanes;
use crate::scheduler::local::LocalWork;
use crate::scheduler::queue::Lane;
use crate::scheduler::task_state::{TaskClaim, DependencyDone};

/// Who runs a submission's tasks (protocol "own").
pub(super) mod mode {
    /// No task claimed yet: the exclusive CPU worker may still own it.
    pub const NORMAL: u32 = 0;
    /// One worker runs every task in id order, counting nothing.
    pub const OWNED: u32 = 1;
    /// Dependency counting: any participant claims ready tasks.
    pub const SHARED: u32 = 2;
}

impl SubmissionInner {
    /// Own step 1 for every participant but the owner: before its first
    /// claim of a task of this submission, it makes the submission shared
    /// (`false`: it is owned, leave its tasks to the owner).
    pub(super) fn share(&self) -> bool {
        match self.mode.load(Ordering::Acquire) {
            mode::SHARED => true,
            mode::OWNED => false,
            _ => match self.mode.compare_exchange(
                mode::NORMAL,
                mode::SHARED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => true,
                Err(now) => now == mode::SHARED,
            },
        }
    }

    /// Whether a worker owns the submission now (own step 1).
    pub(in crate::scheduler) fn is_owned(&self) -> bool {
        self.mode.load(Ordering::Acquire) == mode::OWNED
    }

    /// Own step 1 for the exclusive CPU worker: takes the whole submission
    /// when nothing of it was claimed yet and its graph runs in id order
    /// without admission or window.
    pub(in crate::scheduler) fn try_own(&self) -> bool {
        self.graph.is_sequential()
            && self.admission.is_none()
            && self.window.is_none()
            && self.mode.load(Ordering::Relaxed) == mode::NORMAL
            && self
                .mode
                .compare_exchange(
                    mode::NORMAL,
                    mode::OWNED,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Own steps 2–3: the owner runs every task in id order — claim (one
    /// CAS, whatever the stale dependency count says), check the cancel
    /// flag, run, terminal accounting — firing nothing. A failure
    /// suppresses its dependents (on this thread, before the next claim);
    /// a cancel sets its flag before it cancels any task, so a task
    /// claimed after one of its dependencies was cancelled sees the flag
    /// and is recorded cancelled. A run that suspends ends ownership
    /// (step 4).
    /// `entry`: the task whose queue entry the owner consumed to take the
    /// submission (step 4 restores it if the task is still to run).
    // Inlined into the worker loop (another module, maybe another codegen
    // unit), as the per-task loop of a lone CPU worker.
    #[inline]
    pub(in crate::scheduler) fn run_owned(
        self: &Arc<Self>,
        lanes: &Lanes,
        entry: TaskId,
        local: &mut LocalWork,
    ) {
        let n = self.graph.len();
        let mut t = 0;
        while t < n {
            let task = TaskId(t as u32);
            t += 1;
            if self.states[task.0 as usize].try_claim_in_order() != TaskClaim::Claimed {
                continue;
            }
            if self.cancel_requested.load(Ordering::Acquire) {
                // Claimed ahead of a cancel's sweep (which may have taken
                // its dependencies already): its claimer records it
                // cancelled, as for a continuation (claim step 1).
                self.cancelled_claim(task, local);
                continue;
            }
            loop {
                let (result, suspended) = self.run_claimed(lanes, Lane::Cpu, task, true);
                if suspended {
                    match self.settle_suspension(task, result.is_ok()) {
                        AfterSuspend::Suspended => {
                            self.abandon_ownership(lanes, task, entry);
                            return;
                        }
                        AfterSuspend::RunAgain if self.cancel_requested.load(Ordering::Acquire) => {
                            // Resumed, but cancelled meanwhile: as a
                            // resumed entry would be (claim step 1).
                            self.cancelled_claim(task, local);
                            break;
                        }
                        AfterSuspend::RunAgain => continue,
                        AfterSuspend::Cancelled => {
                            self.cancelled_claim(task, local);
                            break;
                        }
                        AfterSuspend::Finished => {}
                    }
                }
                local.finished += 1;
                if let Err(failure) = result {
                    self.record_failure(task, failure);
                    self.suppress_dependents(task);
                    self.outcomes[task.0 as usize].store(code::FAILED, Ordering::Relaxed);
                }
                local.terminal += 1;
                break;
            }
        }
    }

    /// Own step 4: `suspended` (claimed in order) waits for its resume, so
    /// the rest of the graph goes back to dependency counting: the
    /// submission becomes shared, the queue entry the owner consumed is
    /// restored if its task comes later, then every later task's count
    /// drops by
    /// the dependencies the owner completed (those before `suspended` it
    /// claimed whose outcome is still unrecorded) — the subtraction that
    /// reaches zero posts the task. Decrements commute, so a resumed task
    /// that completes and fires meanwhile counts right.
    pub(super) fn abandon_ownership(&self, lanes: &Lanes, suspended: TaskId, entry: TaskId) {
        self.mode.store(mode::SHARED, Ordering::SeqCst);
        if entry.0 > suspended.0 {
            // The entry the owner consumed to take the submission belongs
            // to a task it never reached: put it back (helpers put back
            // theirs, step 1).
            self.post(lanes, entry);
        }
        let completed = |d: TaskId| {
            d.0 < suspended.0
                && self.states[d.0 as usize].snapshot().is_claimed()
                && self.outcomes[d.0 as usize].load(Ordering::Relaxed) == code::PENDING
        };
        for u in suspended.0 as usize + 1..self.graph.len() {
            let task = TaskId(u as u32);
            let done = self
                .graph
                .dependencies(task)
                .iter()
                .filter(|&&d| completed(d))
                .count() as u32;
            if done > 0 && self.states[u].dependencies_done(done) == DependencyDone::Fired {
                self.post(lanes, task);
            }
        }
    }
}
