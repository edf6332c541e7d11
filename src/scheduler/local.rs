//! A worker's private state ([`LocalWork`]): its lane, the fired tasks it
//! keeps for itself (claim-on-fire continuation) and the counts it has not
//! published yet. Hot path: written by every task a worker runs.

use crate::limits::SCHEDULER_LOCAL_CAPACITY;

use super::queue::Lane;

/// A worker's private state: its lane, fired tasks it keeps for itself
/// (claim-on-fire continuation first) and counts not yet published.
#[derive(Debug)]
pub(super) struct LocalWork {
    lane: Lane,
    /// This worker is the only one of its lane: nobody could take a shared
    /// entry of it, so every task it keeps is claimed when it fires.
    pub(super) exclusive: bool,
    /// Task ids of the current submission;
    /// [`CLAIMED_ENTRY`](super::submission::CLAIMED_ENTRY) marks a task this
    /// worker claimed when it fired. Never grows past its capacity.
    pub(super) tasks: Vec<u32>,
    pub(super) terminal: usize,
    pub(super) finished: usize,
    /// A waiting caller helping its own submission, not a pool worker (it
    /// keeps no local work and leases every CPU worker for kernels).
    pub(super) waiter: bool,
}

impl LocalWork {
    pub(super) fn new(lane: Lane, exclusive: bool) -> Self {
        Self {
            lane,
            exclusive,
            tasks: Vec::with_capacity(SCHEDULER_LOCAL_CAPACITY),
            terminal: 0,
            finished: 0,
            waiter: false,
        }
    }

    /// The state of a caller helping its own submission while it waits:
    /// no buffer (nothing allocated), so every fired task is posted.
    pub(super) fn waiter() -> Self {
        Self {
            lane: Lane::Cpu,
            exclusive: false,
            tasks: Vec::new(),
            terminal: 0,
            finished: 0,
            waiter: true,
        }
    }

    /// Whether this worker may run a task of `lane`.
    pub(super) fn accepts(&self, lane: Lane) -> bool {
        lane == self.lane || (lane == Lane::Inline && matches!(self.lane, Lane::Cpu | Lane::Io))
    }

    /// Whether one more task fits without growing the buffer.
    pub(super) fn has_room(&self) -> bool {
        !self.waiter && self.tasks.len() < SCHEDULER_LOCAL_CAPACITY - 1
    }
}
