//! The caller's handle to one submitted graph ([`Submission`]): wait,
//! help (protocol "help"), promote, the window and counters.

use std::sync::Arc;

use crate::scheduler::{Priority, TaskId};
use crate::sync::Ordering;

use super::{CLAIMED_ENTRY, CancelToken, PoolHost, SubmissionInner, WindowState, suspend};
use crate::scheduler::admission::Admission;
use crate::scheduler::graph::TaskGraph;
use crate::scheduler::outcome::SubmissionOutcome;
use crate::scheduler::lanes::Lanes;
use crate::scheduler::local::LocalWork;
use crate::scheduler::queue::{Lane, PRIORITIES};

/// The caller's handle to one submitted graph. Dropping it neither cancels
/// nor waits: the pool keeps the submission's state alive until every task
/// is terminal (and the pool's shutdown cancels what never started).
#[derive(Debug)]
pub struct Submission {
    pub(in crate::scheduler) inner: Arc<SubmissionInner>,
    /// Keeps the pool (its registry) alive while the handle is.
    pub(in crate::scheduler) pool: Arc<dyn PoolHost>,
    /// The pool's lanes: what posting and helping need of it.
    pub(in crate::scheduler) lanes: Arc<Lanes>,
}

impl Submission {
    /// Blocks until every task reached a terminal state (completed, failed,
    /// suppressed or cancelled; running tasks are always joined) and returns
    /// the summary.
    pub fn wait(&self) -> SubmissionOutcome {
        if self.inner.take_pending_roots() {
            for task in self.inner.graph.roots() {
                self.inner.post(&self.lanes, task);
            }
        }
        self.inner.all_done.wait();
        self.inner.outcome()
    }

    /// [`Submission::wait`], running ready CPU and inline tasks of this
    /// submission on the calling thread meanwhile (protocol "help"): for a
    /// caller that would otherwise only block, e.g. a synchronous inference.
    pub fn wait_helping(&self) -> SubmissionOutcome {
        self.help();
        self.inner.all_done.wait();
        self.inner.outcome()
    }

    /// Protocol "help": while its submission has ready CPU or inline tasks,
    /// the waiting caller claims and runs them itself (the claim makes it
    /// one more participant, never a second runner of a task); it blocks
    /// only when nothing is left for it. A run whose only task is ready
    /// therefore runs on the caller's thread with no handoff, its kernels'
    /// parallel regions helped by the pool's CPU workers.
    fn help(&self) {
        let inner = &self.inner;
        let mut local = LocalWork::waiter();
        if inner.take_pending_roots() {
            for task in inner.graph.roots() {
                inner.execute(&self.lanes, Lane::Cpu, task, false, &mut local);
                inner.flush(&mut local);
            }
        }
        while !inner.is_done() {
            let next = PRIORITIES.iter().find_map(|&p| {
                inner
                    .may_start(Lane::Cpu, p)
                    .then(|| inner.queues.pop_at(Lane::Cpu, p))
                    .flatten()
                    .or_else(|| inner.queues.pop_at(Lane::Inline, p))
            });
            let Some(task) = next else { break };
            let claimed = task.0 & CLAIMED_ENTRY != 0;
            let task = TaskId(task.0 & !CLAIMED_ENTRY);
            inner.execute(&self.lanes, Lane::Cpu, task, claimed, &mut local);
            inner.flush(&mut local);
            if inner.is_owned() {
                break; // Its owner runs the rest (own step 1).
            }
        }
    }

    /// Protocol "help" for a thread that waits for something this
    /// submission produces (a run blocked on an object in its caller's
    /// thread): runs one ready critical CPU task — a producer chain a run
    /// promoted — on the calling thread. `false` when there was none.
    pub fn help_critical(&self) -> bool {
        let inner = &self.inner;
        let Some(entry) = inner.queues.pop_at(Lane::Cpu, Priority::Critical) else {
            return false;
        };
        let mut local = LocalWork::waiter();
        let claimed = entry.0 & CLAIMED_ENTRY != 0;
        let task = TaskId(entry.0 & !CLAIMED_ENTRY);
        inner.execute(&self.lanes, Lane::Cpu, task, claimed, &mut local);
        inner.flush(&mut local);
        true
    }

    /// Whether every task reached a terminal state.
    pub fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    /// Runs `hook` exactly once when every task reached a terminal state:
    /// on the thread whose terminal accounting completes the submission (a
    /// worker, a helping waiter, a canceller), right after the waiters were
    /// woken, or at once on the calling thread when it is complete already
    /// (`Latch::on_open`). Cold path: one allocation, and the completion
    /// takes the latch's lock only when a hook or a sleeper is registered.
    pub fn on_done(&self, hook: Box<dyn FnOnce() + Send>) {
        self.inner.all_done.on_open(hook);
    }

    /// A token that cancels this submission (protocol "cancel"). It does not
    /// keep the submission alive, so a runner may own one of its own.
    pub fn cancel_token(&self) -> CancelToken {
        CancelToken {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Promote protocol: raises `task` and the producer chain it still waits
    /// for to critical priority. Every unfinished transitive dependency (and
    /// `task`) is marked promoted; each one that is ready but not yet claimed
    /// is pushed again into its lane's critical queue (its earlier entry is
    /// dropped by the claim), and each one not yet fired is posted at critical
    /// priority when it fires. Returns how many tasks this call pushed.
    /// Promoting a task twice, or a finished one, does nothing; a second
    /// promoter racing the first may return while the first is still
    /// walking (each task's promotion is completed by whoever set its mark).
    /// Cold path: allocates a walk stack.
    ///
    /// # Panics
    /// If `task` is not a task of the submitted graph.
    pub fn promote(&self, task: TaskId) -> usize {
        assert!((task.0 as usize) < self.inner.graph.len(), "no such task");
        self.inner.promote(&self.lanes, task)
    }

    /// The admission controller, if the submission has one.
    pub fn admission(&self) -> Option<&Admission> {
        self.inner.admission.as_deref()
    }

    /// Tasks that reached a terminal state so far (workers publish their
    /// counts in batches, at the latest when they run out of local work).
    pub fn terminal(&self) -> usize {
        self.inner.terminal()
    }

    /// Tasks whose run finished (completed or failed) so far, published in
    /// batches like [`Submission::terminal`].
    pub fn finished(&self) -> usize {
        (self.inner.counts.load(Ordering::Acquire) >> 32) as usize
    }

    /// Runs that panicked so far.
    pub fn panicked(&self) -> usize {
        self.inner.panicked.load(Ordering::Acquire)
    }

    /// Whether `task` was claimed: it is running, suspended or finished.
    ///
    /// # Panics
    /// If `task` is not a task of the submitted graph.
    pub fn is_claimed(&self, task: TaskId) -> bool {
        self.inner.states[task.0 as usize].snapshot().is_claimed()
    }

    /// Whether `task` is suspended: its run called
    /// [`TaskContext::suspend`] and it was not resumed yet.
    ///
    /// # Panics
    /// If `task` is not a task of the submitted graph.
    ///
    /// [`TaskContext::suspend`]: super::TaskContext::suspend
    pub fn is_suspended(&self, task: TaskId) -> bool {
        matches!(
            self.inner.suspension[task.0 as usize].load(Ordering::Acquire),
            suspend::SUSPENDING | suspend::SUSPENDED
        )
    }

    /// The submitted graph.
    pub fn graph(&self) -> &TaskGraph {
        &self.inner.graph
    }

    /// Window step 2: the invocation reached inference step `step`; gated
    /// tasks within the window are released. No-op without a window.
    pub fn advance(&self, step: u32) {
        self.inner.advance(&self.lanes, step);
    }

    /// Window step 3: the invocation had to wait for an object (I/O is the
    /// bottleneck); the window doubles up to its maximum.
    pub fn stalled(&self) {
        self.inner.stalled(&self.lanes);
    }

    /// The look-ahead window's state, if the submission has one.
    pub fn window(&self) -> Option<WindowState> {
        self.inner.window_state()
    }
}
