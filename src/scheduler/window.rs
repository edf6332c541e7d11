//! `LookAhead`: the window that releases a submission's gated tasks (the
//! session tasks on an inference path) as the invocation advances (cold
//! path: touched once per gated task and once per step).
//!
//! Each gated task carries a *distance*: the step of the inference path
//! that first needs its output ([`TaskGraph::with_distances`]). A task is
//! released (posted to its ready queue) only while
//! `distance ≤ frontier + window` and the bytes of released, unfinished
//! gated tasks stay within `max_bytes_in_flight` (a task that alone exceeds
//! it is released only when nothing else is in flight). Protocol "window":
//! 1. Post-ready of a gated task goes through `offer`: released at once if
//!    it fits, else kept in the held list.
//! 2. `advance(step)` moves the frontier forward (never back) and releases
//!    what now fits; so does every finish of a released task (its bytes
//!    leave the in-flight count).
//! 3. `stalled()` (the invocation waited for an object that was not ready:
//!    I/O is the bottleneck) doubles the window, up to `max_distance`.
//! 4. Before each release decision, if the watched residency domain is at
//!    or above `shrink_at_percent` of its limit, the window halves (at
//!    least 1): speculative work must not fill the memory the running
//!    inference needs.
//! 5. Promotion bypasses the window (the promoted entry is pushed
//!    directly; the held entry becomes a duplicate the claim drops).
//!
//! [`TaskGraph::with_distances`]: super::TaskGraph::with_distances

use crate::arena::{Domain, MemoryBudget, UNLIMITED};
use crate::scheduler::TaskId;
use crate::sync::{AtomicU32, AtomicUsize, Lock, Ordering};

/// Not released yet.
const IDLE: u32 = 0;
/// Released; its bytes are in flight.
const RELEASED: u32 = 1;
/// Reached its terminal state (possibly without a release: promoted).
const FINISHED: u32 = 2;

/// What [`LookAhead::offer`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Offer {
    /// Post it now.
    Released,
    /// Kept in the held list.
    Held,
    /// Already finished (a promoted entry ran it): drop it.
    Finished,
}

/// Settings of a submission's look-ahead window.
#[derive(Debug, Clone)]
pub struct LookAheadOptions {
    /// Window at start, in steps beyond the frontier.
    pub initial_distance: u32,
    /// Largest window `stalled` may grow it to.
    pub max_distance: u32,
    /// Most estimated bytes of released, unfinished gated tasks.
    pub max_bytes_in_flight: usize,
    /// Residency watched for shrinking: (budget, domain). Sessions do not
    /// set it yet (a residency limit is kept by the evictor instead).
    pub residency: Option<(MemoryBudget, Domain)>,
    /// Shrink when the watched domain's live bytes reach this percent of
    /// its limit.
    pub shrink_at_percent: usize,
}

impl Default for LookAheadOptions {
    fn default() -> Self {
        Self {
            initial_distance: 2,
            max_distance: 64,
            max_bytes_in_flight: UNLIMITED,
            residency: None,
            shrink_at_percent: 80,
        }
    }
}

/// The window's live state (one per submission that asked for one).
#[derive(Debug)]
pub(super) struct LookAhead {
    options: LookAheadOptions,
    frontier: AtomicU32,
    distance: AtomicU32,
    in_flight: AtomicUsize,
    /// Per task: [`IDLE`], [`RELEASED`] (its bytes are in flight) or
    /// [`FINISHED`].
    states: Box<[AtomicU32]>,
    held: Lock<Vec<TaskId>>,
}

impl LookAhead {
    pub(super) fn new(options: LookAheadOptions, tasks: usize) -> Self {
        let distance = options
            .initial_distance
            .clamp(1, options.max_distance.max(1));
        Self {
            frontier: AtomicU32::new(0),
            distance: AtomicU32::new(distance),
            in_flight: AtomicUsize::new(0),
            states: (0..tasks).map(|_| AtomicU32::new(IDLE)).collect(),
            held: Lock::new(Vec::new()),
            options,
        }
    }

    pub(super) fn frontier(&self) -> u32 {
        self.frontier.load(Ordering::Acquire)
    }

    pub(super) fn distance(&self) -> u32 {
        self.distance.load(Ordering::Acquire)
    }

    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Window step 4.
    fn shrink_if_resident_near_limit(&self) {
        let Some((budget, domain)) = &self.options.residency else {
            return;
        };
        let limit = budget.limit(*domain);
        if limit == UNLIMITED {
            return;
        }
        let live = budget.live(*domain) as u128;
        if live * 100 >= limit as u128 * self.options.shrink_at_percent as u128 {
            let _ = self
                .distance
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                    (d > 1).then_some(d / 2)
                });
        }
    }

    /// Whether a task at `distance` needing `bytes` may be released now;
    /// if so its bytes are counted in flight.
    fn try_release(&self, task: TaskId, distance: u32, bytes: usize) -> Offer {
        let limit = self.frontier().saturating_add(self.distance());
        if distance > limit {
            return Offer::Held;
        }
        let max = self.options.max_bytes_in_flight;
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                let sum = f.saturating_add(bytes);
                (sum <= max || f == 0).then_some(sum)
            })
            .is_ok();
        if !taken {
            return Offer::Held;
        }
        match self.states[task.0 as usize].compare_exchange(
            IDLE,
            RELEASED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Offer::Released,
            Err(_) => {
                // Finished through a promoted entry meanwhile.
                self.in_flight.fetch_sub(bytes, Ordering::AcqRel);
                Offer::Finished
            }
        }
    }

    /// Window step 1: whether `task` is released (the caller posts it),
    /// held, or already finished.
    pub(super) fn offer(&self, task: TaskId, distance: u32, bytes: usize) -> Offer {
        self.shrink_if_resident_near_limit();
        // Under the lock, so a concurrent `release_held` either sees the
        // task in the list or its own releases ran before our decision.
        self.held.with(|held| {
            let offer = self.try_release(task, distance, bytes);
            if offer == Offer::Held {
                held.push(task);
            }
            offer
        })
    }

    /// Window step 2: the tasks of the held list that fit now, in distance
    /// order; the caller posts them.
    pub(super) fn release_held(
        &self,
        distance_of: impl Fn(TaskId) -> u32,
        bytes_of: impl Fn(TaskId) -> usize,
    ) -> Vec<TaskId> {
        self.shrink_if_resident_near_limit();
        self.held.with(|held| {
            // Nearest first, and by task id within a distance (plan
            // order: a step's reads before its prepacks).
            held.sort_by_key(|&t| std::cmp::Reverse((distance_of(t), t.0)));
            let mut out = Vec::new();
            while let Some(&t) = held.last() {
                match self.try_release(t, distance_of(t), bytes_of(t)) {
                    Offer::Held => break,
                    Offer::Released => out.push(t),
                    Offer::Finished => {}
                }
                held.pop();
            }
            out
        })
    }

    /// Window step 2: moves the frontier to `step` (never back).
    pub(super) fn advance(&self, step: u32) {
        self.frontier.fetch_max(step, Ordering::AcqRel);
    }

    /// Window step 3.
    pub(super) fn stalled(&self) {
        let max = self.options.max_distance.max(1);
        let _ = self
            .distance
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| {
                (d < max).then(|| d.saturating_mul(2).min(max))
            });
    }

    /// A gated task reached its terminal state: if it had been released
    /// its bytes leave the in-flight count (returns `true`: the caller
    /// releases what now fits).
    pub(super) fn finished(&self, task: TaskId, bytes: usize) -> bool {
        if self.states[task.0 as usize].swap(FINISHED, Ordering::AcqRel) == RELEASED {
            self.in_flight.fetch_sub(bytes, Ordering::AcqRel);
            true
        } else {
            false
        }
    }
}
