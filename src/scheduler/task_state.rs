//! `TaskState`: one packed atomic word per task (hot path: touched once per
//! finishing dependency and once per claim).
//!
//! Layout of the `u32` word:
//!
//! | bits  | field                          |
//! |-------|--------------------------------|
//! | 0–27  | remaining dependency count     |
//! | 28    | `PROMOTED`: post it critical   |
//! | 29    | `CLAIMED`: a worker owns the run (running or finished) |
//! | 30    | unused                         |
//! | 31    | `CANCELLED`: must never start  |
//!
//! Every transition is one read-modify-write returning a `#[must_use]`
//! outcome; the word is decoded only through [`TaskSnapshot`].
//!
//! Ordering: `dependency_done` is an `AcqRel` RMW, so the decrements form a
//! release sequence on the word; the claimer's `Acquire` CAS therefore
//! synchronizes with every finished dependency, and whatever those
//! dependencies wrote is visible to the task's run. `dependency_done_claiming`
//! is one `AcqRel` CAS that both takes the count to zero and claims: the
//! last finisher then runs the task itself (the worker's continuation) with
//! no queue round trip. Whether a task finished is recorded by the pool's
//! outcome column, not here. `promote` is an RMW too,
//! so it does not break that release sequence; and because the mark lives in
//! the same word as the count, a promoter and the last finishing dependency
//! are ordered by the word's modification order (protocol "promote").

use crate::sync::{AtomicU32, Ordering};

const COUNT_BITS: u32 = 28;
const COUNT_MASK: u32 = (1 << COUNT_BITS) - 1;
const PROMOTED: u32 = 1 << 28;
const CLAIMED: u32 = 1 << 29;
const CANCELLED: u32 = 1 << 31;

const _: () = assert!(COUNT_MASK & (PROMOTED | CLAIMED | CANCELLED) == 0);
const _: () = assert!(PROMOTED.trailing_zeros() == COUNT_BITS);
const _: () = assert!(PROMOTED < CLAIMED && CLAIMED < CANCELLED);
const _: () = assert!(crate::limits::MAX_SCHEDULER_TASKS as u64 <= COUNT_MASK as u64 + 1);

/// Most dependencies one task may have.
pub const MAX_DEPENDENCIES: u32 = COUNT_MASK;

/// A decoded copy of a task's state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskSnapshot(u32);

impl TaskSnapshot {
    /// Dependencies that have not finished yet.
    pub fn remaining(self) -> u32 {
        self.0 & COUNT_MASK
    }

    /// Whether a worker claimed the task (it is running or finished).
    pub fn is_claimed(self) -> bool {
        self.0 & CLAIMED != 0
    }

    /// Whether the task was cancelled.
    pub fn is_cancelled(self) -> bool {
        self.0 & CANCELLED != 0
    }

    /// Whether the task was promoted: it is posted at critical priority.
    pub fn is_promoted(self) -> bool {
        self.0 & PROMOTED != 0
    }
}

/// Outcome of [`TaskState::dependency_done`].
#[must_use = "a `Fired` task must be enqueued by the caller"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DependencyDone {
    /// This call took the count to zero: the caller must enqueue the task.
    Fired,
    /// Other dependencies remain.
    Pending,
}

/// Outcome of [`TaskState::dependency_done_claiming`].
#[must_use = "a `Fired` task must be enqueued, a `FiredClaimed` one run, by the caller"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireClaim {
    /// This call took the count to zero and claimed the task: the caller
    /// owns its run (as after [`TaskClaim::Claimed`]).
    FiredClaimed,
    /// This call took the count to zero of a cancelled task: enqueue it as
    /// after [`DependencyDone::Fired`] (its claim drops it).
    Fired,
    /// Other dependencies remain.
    Pending,
}

/// Outcome of [`TaskState::try_claim`].
#[must_use = "only a `Claimed` caller may run the task"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskClaim {
    /// The caller owns the run.
    Claimed,
    /// Someone else claimed it (a duplicate queue entry): drop the entry.
    AlreadyClaimed,
    /// The task was cancelled before anyone claimed it: never run it.
    Cancelled,
    /// Dependencies remain (an entry pushed ahead of readiness): drop it;
    /// the last dependency enqueues the task again.
    NotReady,
}

/// Outcome of [`TaskState::cancel`].
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// This call set the cancel bit: no run will start, and the caller owns
    /// the task's terminal accounting.
    Cancelled,
    /// An earlier call cancelled it (that caller owns the accounting).
    AlreadyCancelled,
    /// Already claimed (running or done); the run is not interrupted.
    TooLate,
}

/// A task's packed state word.
#[derive(Debug)]
pub struct TaskState(AtomicU32);

impl TaskState {
    /// A task waiting for `dependencies` dependencies.
    ///
    /// # Panics
    /// If `dependencies > MAX_DEPENDENCIES`.
    pub fn new(dependencies: u32) -> Self {
        assert!(dependencies <= MAX_DEPENDENCIES, "too many dependencies");
        Self(AtomicU32::new(dependencies))
    }

    /// Back to "waiting for `dependencies`", for a submission that is run
    /// again (only after every task of its previous round was terminal).
    pub(super) fn reset(&self, dependencies: u32) {
        self.0.store(dependencies, Ordering::Release);
    }

    /// The current state.
    pub fn snapshot(&self) -> TaskSnapshot {
        TaskSnapshot(self.0.load(Ordering::Acquire))
    }

    /// Records that one dependency finished; `Fired` for exactly the call
    /// that takes the count to zero.
    pub fn dependency_done(&self) -> DependencyDone {
        let before = TaskSnapshot(self.0.fetch_sub(1, Ordering::AcqRel));
        debug_assert!(before.remaining() > 0, "dependency count underflow");
        if before.remaining() == 1 {
            DependencyDone::Fired
        } else {
            DependencyDone::Pending
        }
    }

    /// Records that `k` dependencies finished at once; `Fired` for exactly
    /// the call that takes the count to zero (protocol "own", step 4).
    pub fn dependencies_done(&self, k: u32) -> DependencyDone {
        let before = TaskSnapshot(self.0.fetch_sub(k, Ordering::AcqRel));
        debug_assert!(before.remaining() >= k, "dependency count underflow");
        if before.remaining() == k {
            DependencyDone::Fired
        } else {
            DependencyDone::Pending
        }
    }

    /// Claims the run with a CAS whatever its dependency count says (the
    /// owner of a sequential run ran every dependency itself, protocol
    /// "own", step 2): exactly one caller ever gets `Claimed`, never for a
    /// cancelled task.
    pub fn try_claim_in_order(&self) -> TaskClaim {
        // The Acquire load of `set_unless`: a cancelled word seen here makes
        // the canceller's flag (set before its sweep) visible to the
        // owner's next check.
        self.claim_if(|_| true)
    }

    /// Claims unless cancelled, claimed, or `ready` says no.
    fn claim_if(&self, ready: impl Fn(TaskSnapshot) -> bool) -> TaskClaim {
        match self.set_unless(CLAIMED, |s| {
            if s.is_cancelled() {
                Some(TaskClaim::Cancelled)
            } else if s.is_claimed() {
                Some(TaskClaim::AlreadyClaimed)
            } else if !ready(s) {
                Some(TaskClaim::NotReady)
            } else {
                None
            }
        }) {
            Ok(()) => TaskClaim::Claimed,
            Err(refused) => refused,
        }
    }

    /// CASes `bit` into the word (`AcqRel`; every load `Acquire`) unless
    /// `refuse` gives a reason first, re-checked after every lost race.
    fn set_unless<R>(&self, bit: u32, refuse: impl Fn(TaskSnapshot) -> Option<R>) -> Result<(), R> {
        let mut word = self.0.load(Ordering::Acquire);
        loop {
            if let Some(reason) = refuse(TaskSnapshot(word)) {
                return Err(reason);
            }
            match self.0.compare_exchange_weak(
                word,
                word | bit,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => word = actual,
            }
        }
    }

    /// Records that one dependency finished and, if this call takes the
    /// count to zero of a task nobody cancelled, claims it in the same CAS.
    pub fn dependency_done_claiming(&self) -> FireClaim {
        let mut word = self.0.load(Ordering::Relaxed);
        loop {
            let s = TaskSnapshot(word);
            debug_assert!(s.remaining() > 0, "dependency count underflow");
            let last = s.remaining() == 1;
            let claim = last && !s.is_cancelled() && !s.is_claimed();
            let next = (word - 1) | if claim { CLAIMED } else { 0 };
            match self
                .0
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if claim => return FireClaim::FiredClaimed,
                Ok(_) if last => return FireClaim::Fired,
                Ok(_) => return FireClaim::Pending,
                Err(actual) => word = actual,
            }
        }
    }

    /// Claims the run with a CAS: exactly one caller ever gets `Claimed`.
    pub fn try_claim(&self) -> TaskClaim {
        self.claim_if(|s| s.remaining() == 0)
    }

    /// Sets the promoted mark and returns the word as it was before: the
    /// caller that sees it unset owns the promotion of this task (promote
    /// steps 2–3). Any state accepts the mark; it changes only the priority
    /// the task is posted at.
    pub fn promote(&self) -> TaskSnapshot {
        TaskSnapshot(self.0.fetch_or(PROMOTED, Ordering::AcqRel))
    }

    /// Cancels the task unless it was already claimed; exactly one call gets
    /// [`Cancel::Cancelled`].
    pub fn cancel(&self) -> Cancel {
        match self.set_unless(CANCELLED, |s| {
            if s.is_claimed() {
                Some(Cancel::TooLate)
            } else if s.is_cancelled() {
                Some(Cancel::AlreadyCancelled)
            } else {
                None
            }
        }) {
            Ok(()) => Cancel::Cancelled,
            Err(refused) => refused,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fires_once_then_claims_once() {
        let s = TaskState::new(2);
        assert_eq!(s.try_claim(), TaskClaim::NotReady);
        assert_eq!(s.dependency_done(), DependencyDone::Pending);
        assert_eq!(s.dependency_done(), DependencyDone::Fired);
        assert_eq!(s.try_claim(), TaskClaim::Claimed);
        assert_eq!(s.try_claim(), TaskClaim::AlreadyClaimed);
        assert_eq!(s.cancel(), Cancel::TooLate);
        let snap = s.snapshot();
        assert!(snap.is_claimed() && !snap.is_cancelled());
        assert_eq!(snap.remaining(), 0);
    }

    #[test]
    fn cancelled_task_is_never_claimed() {
        let s = TaskState::new(0);
        assert_eq!(s.cancel(), Cancel::Cancelled);
        assert_eq!(s.cancel(), Cancel::AlreadyCancelled);
        assert_eq!(s.try_claim(), TaskClaim::Cancelled);
        assert!(s.snapshot().is_cancelled());
    }

    #[test]
    fn promoted_mark_keeps_count_and_claim() {
        let s = TaskState::new(1);
        assert!(!s.promote().is_promoted());
        let again = s.promote();
        assert!(again.is_promoted() && again.remaining() == 1);
        assert_eq!(s.try_claim(), TaskClaim::NotReady);
        assert_eq!(s.dependency_done(), DependencyDone::Fired);
        assert_eq!(s.try_claim(), TaskClaim::Claimed);
        let snap = s.snapshot();
        assert!(snap.is_promoted() && snap.is_claimed() && snap.remaining() == 0);
    }

    #[test]
    fn last_finisher_claims_in_the_same_step() {
        let s = TaskState::new(2);
        assert_eq!(s.dependency_done_claiming(), FireClaim::Pending);
        assert_eq!(s.dependency_done_claiming(), FireClaim::FiredClaimed);
        assert_eq!(s.try_claim(), TaskClaim::AlreadyClaimed);
        assert_eq!(s.cancel(), Cancel::TooLate);

        let c = TaskState::new(1);
        assert_eq!(c.cancel(), Cancel::Cancelled);
        assert_eq!(c.dependency_done_claiming(), FireClaim::Fired);
        assert_eq!(c.try_claim(), TaskClaim::Cancelled);
    }
}
