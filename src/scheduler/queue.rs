//! `ReadyQueues`: one bounded lock-free FIFO of ready [`TaskId`]s per
//! (lane × priority) — hot path: every task is pushed and popped once.
//!
//! Each queue is a [`BoundedQueue`] (an `ArrayQueue`, with a loom-visible
//! stand-in under `cfg(loom)`); the models check *our* protocols around the
//! queue (post-ready, claim, sleep/wake).

use super::task::{Priority, ResourceClass, TaskId};
use crate::sync::BoundedQueue;

/// Which workers serve a queue: the scheduler's view of a
/// [`ResourceClass`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Blocking reads and writes, served by I/O workers only.
    Io,
    /// Computation, served by CPU workers only.
    Cpu,
    /// Cheap tasks, served by CPU and I/O workers (after their own lane).
    Inline,
}

impl Lane {
    /// Every lane, in queue-index order.
    pub const ALL: [Lane; 3] = [Lane::Io, Lane::Cpu, Lane::Inline];

    /// The lane of `resource`.
    pub fn of(resource: ResourceClass) -> Lane {
        match resource {
            ResourceClass::Io => Lane::Io,
            ResourceClass::Cpu => Lane::Cpu,
            ResourceClass::Inline => Lane::Inline,
        }
    }

    /// Dense index: io 0, cpu 1, inline 2.
    pub fn index(self) -> usize {
        match self {
            Lane::Io => 0,
            Lane::Cpu => 1,
            Lane::Inline => 2,
        }
    }
}

/// Priorities in service order: critical before prefetch before background.
pub const PRIORITIES: [Priority; 3] =
    [Priority::Critical, Priority::Prefetch, Priority::Background];

/// Dense index of `priority` (service order).
pub(super) fn priority_index(priority: Priority) -> usize {
    match priority {
        Priority::Critical => 0,
        Priority::Prefetch => 1,
        Priority::Background => 2,
    }
}

/// A push found its queue full; the task was not enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full(pub TaskId);

type Queue = BoundedQueue<TaskId>;

/// One bounded FIFO per lane × priority.
#[derive(Debug)]
pub struct ReadyQueues {
    /// Indexed by `lane.index() * 3 + priority_index(priority)`.
    queues: Box<[Queue]>,
}

impl ReadyQueues {
    /// Host-lane queues of [`crate::limits::SCHEDULER_QUEUE_CAPACITY`]
    /// entries each.
    pub fn new() -> Self {
        Self::with_capacity(crate::limits::SCHEDULER_QUEUE_CAPACITY)
    }

    /// Host-lane queues of `capacity` entries each (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        Self::with_lane_capacities(&[capacity; 3])
    }

    /// Queues for lanes `0..capacities.len()` (dense [`Lane::index`]); every
    /// priority of lane `i` holds `capacities[i]` entries (at least one).
    pub fn with_lane_capacities(capacities: &[usize]) -> Self {
        Self {
            queues: capacities
                .iter()
                .flat_map(|&c| (0..3).map(move |_| Queue::new(c.max(1))))
                .collect(),
        }
    }

    /// Lanes these queues cover.
    pub fn lanes(&self) -> usize {
        self.queues.len() / 3
    }

    fn queue(&self, lane: Lane, priority: Priority) -> Option<&Queue> {
        self.queues.get(lane.index() * 3 + priority_index(priority))
    }

    /// Enqueues `task` at `priority` on `lane`'s queue; a lane these queues
    /// do not cover counts as full.
    pub fn push(&self, lane: Lane, priority: Priority, task: TaskId) -> Result<(), Full> {
        match self.queue(lane, priority) {
            Some(q) => q.push(task).map_err(Full),
            None => Err(Full(task)),
        }
    }

    /// Dequeues the oldest task of the highest non-empty priority of `lane`.
    pub fn pop(&self, lane: Lane) -> Option<(Priority, TaskId)> {
        PRIORITIES
            .iter()
            .find_map(|&p| self.queue(lane, p)?.pop().map(|t| (p, t)))
    }

    /// Dequeues the oldest task of `lane` at exactly `priority`. An empty
    /// queue is recognized by two plain loads first (an empty `pop` costs a
    /// full fence), which is what an idle worker's polling mostly sees.
    pub fn pop_at(&self, lane: Lane, priority: Priority) -> Option<TaskId> {
        let q = self.queue(lane, priority)?;
        // (Under loom the stand-in is a locked deque: no fence to save.)
        #[cfg(not(loom))]
        if q.is_empty() {
            return None;
        }
        q.pop()
    }

    /// Whether the queue of `lane` at `priority` looked empty (a racy hint).
    pub fn is_empty_at(&self, lane: Lane, priority: Priority) -> bool {
        self.queue(lane, priority).is_none_or(Queue::is_empty)
    }

    /// Whether every priority of `lane` looked empty (a racy hint).
    pub fn is_empty(&self, lane: Lane) -> bool {
        PRIORITIES
            .iter()
            .all(|&p| self.queue(lane, p).is_none_or(Queue::is_empty))
    }
}

impl Default for ReadyQueues {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn serves_critical_before_prefetch_before_background() {
        let q = ReadyQueues::with_capacity(4);
        q.push(Lane::Cpu, Priority::Background, TaskId(1)).unwrap();
        q.push(Lane::Cpu, Priority::Prefetch, TaskId(2)).unwrap();
        q.push(Lane::Cpu, Priority::Critical, TaskId(3)).unwrap();
        q.push(Lane::Io, Priority::Critical, TaskId(4)).unwrap();
        assert_eq!(q.pop(Lane::Cpu), Some((Priority::Critical, TaskId(3))));
        assert_eq!(q.pop(Lane::Cpu), Some((Priority::Prefetch, TaskId(2))));
        assert_eq!(q.pop(Lane::Cpu), Some((Priority::Background, TaskId(1))));
        assert_eq!(q.pop(Lane::Cpu), None);
        assert!(q.is_empty(Lane::Cpu));
        assert_eq!(q.pop(Lane::Io), Some((Priority::Critical, TaskId(4))));
    }

    #[test]
    fn push_reports_full() {
        let q = ReadyQueues::with_capacity(1);
        q.push(Lane::Inline, Priority::Critical, TaskId(0)).unwrap();
        assert_eq!(
            q.push(Lane::Inline, Priority::Critical, TaskId(1)),
            Err(Full(TaskId(1)))
        );
        // Another priority is another queue.
        q.push(Lane::Inline, Priority::Background, TaskId(2))
            .unwrap();
    }
}
