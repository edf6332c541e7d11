//! `ReadyQueues`: one bounded lock-free FIFO of ready [`TaskId`]s per
//! (lane × priority) — hot path: every task is pushed and popped once.
//!
//! Each queue is a [`BoundedQueue`] (an `ArrayQueue`, with a loom-visible
//! stand-in under `cfg(loom)`); the models check *our* protocols around the
//! queue (post-ready, claim, sleep/wake).

use crate::plan::{Priority, ResourceClass, TaskId};
use crate::sync::BoundedQueue;

/// Which workers serve a queue: the scheduler's view of a
/// [`ResourceClass`]. Accelerators are not scheduled yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Blocking reads and writes, served by I/O workers only.
    Io,
    /// Computation, served by CPU workers only.
    Cpu,
    /// Cheap tasks, served by any worker (after its own lane).
    Inline,
}

impl Lane {
    /// Every lane, in queue-index order.
    pub const ALL: [Lane; 3] = [Lane::Io, Lane::Cpu, Lane::Inline];

    /// The lane of `resource`; `None` for [`ResourceClass::Device`], which
    /// the scheduler does not serve yet.
    pub fn of(resource: ResourceClass) -> Option<Lane> {
        match resource {
            ResourceClass::Io => Some(Lane::Io),
            ResourceClass::Cpu => Some(Lane::Cpu),
            ResourceClass::Inline => Some(Lane::Inline),
            ResourceClass::Device(_) => None,
        }
    }

    fn index(self) -> usize {
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

fn priority_index(priority: Priority) -> usize {
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

#[derive(Debug)]
pub struct ReadyQueues {
    /// Indexed by `lane.index() * 3 + priority_index(priority)`.
    queues: [Queue; 9],
}

impl ReadyQueues {
    /// Queues of [`crate::limits::SCHEDULER_QUEUE_CAPACITY`] entries each.
    pub fn new() -> Self {
        Self::with_capacity(crate::limits::SCHEDULER_QUEUE_CAPACITY)
    }

    /// Queues of `capacity` entries each (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            queues: std::array::from_fn(|_| Queue::new(capacity)),
        }
    }

    fn queue(&self, lane: Lane, priority: Priority) -> &Queue {
        &self.queues[lane.index() * 3 + priority_index(priority)]
    }

    /// Enqueues `task` at `priority` on `lane`'s queue.
    pub fn push(&self, lane: Lane, priority: Priority, task: TaskId) -> Result<(), Full> {
        self.queue(lane, priority).push(task).map_err(Full)
    }

    /// Dequeues the oldest task of the highest non-empty priority of `lane`.
    pub fn pop(&self, lane: Lane) -> Option<(Priority, TaskId)> {
        PRIORITIES
            .iter()
            .find_map(|&p| self.queue(lane, p).pop().map(|t| (p, t)))
    }

    /// Whether every priority of `lane` looked empty (a racy hint).
    pub fn is_empty(&self, lane: Lane) -> bool {
        PRIORITIES.iter().all(|&p| self.queue(lane, p).is_empty())
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
