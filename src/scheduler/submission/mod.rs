//! One run of a [`TaskGraph`] on a [`super::WorkerPool`]: its task words,
//! ready queues and terminal accounting ([`SubmissionInner`]), the caller's
//! handle ([`Submission`]), the cancel token and the context a running task
//! sees ([`TaskContext`]). Hot path: `execute`, once per task.
//!
//! The protocols are numbered in the module docs of [`crate::scheduler`]
//! (protocol "suspend" in `suspend.rs`); each function names the steps it
//! implements. This file holds the shared state, terminal accounting and
//! the claim protocol (`execute`, with admission); a submission reaches its
//! pool through the pool's [`Lanes`] (posting, waking, leasing) and, once
//! per registration and retirement, through [`PoolHost`] (the registry),
//! so nothing here names the pool itself. The rest, by protocol:
//! * `post.rs`: post-ready, the window, the roots of a submission, promote;
//! * `own.rs`: own;
//! * `suspend.rs`: suspend ([`ResumeHandle`]);
//! * `failure.rs`: failure, cancel ([`CancelToken`]) and the outcome;
//! * `context.rs`: [`TaskRunner`], [`Remapped`] and [`TaskContext`];
//! * `handle.rs`: the caller's [`Submission`] (help).

use crossbeam_utils::CachePadded;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};

use crate::scheduler::{Priority, TaskId};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Latch, Ordering, FreeList, fence};

use super::admission::{Admission, AdmissionPermit, Refusal, Requeue};
use super::graph::TaskGraph;
use super::outcome::{TaskFailure, code};
use super::lanes::Lanes;
use super::local::LocalWork;
use super::queue::{Lane, PRIORITIES, ReadyQueues};
use super::task_state::{TaskClaim, TaskState};
use super::window::{LookAhead, LookAheadOptions};

mod context;
mod failure;
mod handle;
mod own;
mod post;
mod suspend;

pub use context::{Remapped, TaskContext, TaskRunner};
pub use failure::CancelToken;
pub use handle::Submission;
pub use suspend::ResumeHandle;

use own::mode;
use suspend::AfterSuspend;

/// Options of one [`super::WorkerPool::submit_with`].
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// Admit every task through this controller before it runs (protocol
    /// "admit"). Several submissions may share one controller (one budget).
    pub admission: Option<Arc<Admission>>,
    /// Hold the graph's gated tasks (those with a distance,
    /// [`TaskGraph::with_distances`]) behind a look-ahead window (protocol
    /// "window"); without one, distances are ignored.
    pub look_ahead: Option<LookAheadOptions>,
}

/// A snapshot of a submission's look-ahead window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    /// The furthest step the invocation reported.
    pub frontier: u32,
    /// The window, in steps beyond the frontier.
    pub distance: u32,
    /// Estimated bytes of released, unfinished gated tasks.
    pub bytes_in_flight: usize,
}

/// Why a graph could not be submitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// A task runs on a lane the pool has no worker for.
    #[error("task {task:?} runs on lane {lane:?}, which this pool has no worker for")]
    NoWorkers {
        /// The first such task.
        task: TaskId,
        /// Its lane.
        lane: Lane,
    },
}

/// A queue entry's mark: the task is already claimed (claimed when it
/// fired, or a resumed suspension); the popper runs it without a claim.
pub(super) const CLAIMED_ENTRY: u32 = 1 << 31;

/// The registry side of a submission's pool (implemented by the pool):
/// called once when a submission is registered (at submit, or lazily at a
/// quiet resubmit's first push) and once when it retires, never per task;
/// the hot path reaches the pool through its [`Lanes`] only.
pub(super) trait PoolHost: Send + Sync + std::fmt::Debug {
    /// Submit step 3: `submission` joins the registry; with `wake`, parked
    /// workers of the lanes that got tasks are woken.
    fn register(&self, submission: &Arc<SubmissionInner>, wake: bool);
    /// Retire step: finished submissions leave the registry.
    fn retire(&self);
}

/// The shared state of one submission.
pub(super) struct SubmissionInner {
    /// The pool's registry side (register, retire).
    pub(super) pool: Weak<dyn PoolHost>,
    /// The pool's lanes, for posts without a caller (requeue, resume).
    lanes: Weak<Lanes>,
    /// Itself, for registering lazily from `push`.
    this: Weak<SubmissionInner>,
    /// In the pool's registry (workers look at its queues).
    registered: AtomicBool,
    pub(super) graph: Arc<TaskGraph>,
    states: Box<[TaskState]>,
    /// Per task, its [`suspend`] state.
    suspension: Box<[AtomicU32]>,
    pub(super) queues: ReadyQueues,
    /// Tasks that reached a terminal state (low 32 bits; the last one
    /// opens `all_done`) and runs that finished, completed or failed (high
    /// 32 bits): one word, so a worker's flush is one RMW, on lines of its
    /// own, so the read-mostly fields the hot path loads (runner, graph,
    /// states) do not bounce between cores with it.
    counts: CachePadded<AtomicU64>,
    panicked: AtomicUsize,
    /// Per task, its [`code`]: written once by the owner of its accounting.
    outcomes: Box<[AtomicU32]>,
    /// Id of the first failed task, `usize::MAX` while none failed.
    first_failed: AtomicUsize,
    /// The first failure (capacity 1, only `first_failed`'s winner puts).
    first_failure: FreeList<(TaskId, TaskFailure)>,
    cancel_requested: AtomicBool,
    /// Protocol "own": a [`mode`].
    mode: AtomicU32,
    /// Set by a quiet resubmit: the roots were not posted; the waiter runs
    /// them (protocol "help"), or posts them if it waits without helping.
    roots_pending: AtomicBool,
    admission: Option<Arc<Admission>>,
    window: Option<LookAhead>,
    all_done: Latch,
    runner: Arc<dyn TaskRunner>,
}

impl std::fmt::Debug for SubmissionInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submission")
            .field("tasks", &self.graph.len())
            .field("terminal", &self.terminal())
            .finish_non_exhaustive()
    }
}

/// Admit step 4: a deferred task goes back to its own pool's queues.
impl Requeue for SubmissionInner {
    fn requeue(&self, task: TaskId) {
        if let Some(lanes) = self.lanes.upgrade() {
            self.post(&lanes, task);
        }
    }
}

impl SubmissionInner {
    pub(super) fn new(
        pool: Weak<dyn PoolHost>,
        lanes: Weak<Lanes>,
        this: Weak<SubmissionInner>,
        graph: Arc<TaskGraph>,
        runner: Arc<dyn TaskRunner>,
        options: SubmitOptions,
    ) -> Self {
        let mut capacities = [0usize; Lane::ALL.len()];
        for (i, &n) in graph.lane_tasks().iter().enumerate() {
            // Promote step 4: at most two entries per task circulate.
            capacities[i] = n.saturating_mul(2);
        }
        Self {
            pool,
            lanes,
            this,
            registered: AtomicBool::new(false),
            states: (0..graph.len())
                .map(|i| TaskState::new(graph.dependency_count(TaskId(i as u32))))
                .collect(),
            suspension: (0..graph.len())
                .map(|_| AtomicU32::new(suspend::IDLE))
                .collect(),
            queues: ReadyQueues::with_lane_capacities(&capacities),
            counts: CachePadded::new(AtomicU64::new(0)),
            panicked: AtomicUsize::new(0),
            outcomes: (0..graph.len())
                .map(|_| AtomicU32::new(code::PENDING))
                .collect(),
            first_failed: AtomicUsize::new(usize::MAX),
            first_failure: FreeList::new(1),
            cancel_requested: AtomicBool::new(false),
            mode: AtomicU32::new(mode::NORMAL),
            roots_pending: AtomicBool::new(false),
            admission: options.admission,
            window: options.look_ahead.map(|o| LookAhead::new(o, graph.len())),
            all_done: Latch::new(),
            runner,
            graph,
        }
    }

    /// Records whether the submission is in the registry (under its lock).
    pub(super) fn set_registered(&self, registered: bool) {
        self.registered.store(registered, Ordering::Release);
    }

    /// Opens the completion latch of a submission without tasks.
    pub(super) fn finish_empty(&self) {
        debug_assert!(self.graph.is_empty());
        self.all_done.open();
    }

    /// Rearms a finished submission for another round of the same graph
    /// (protocol "resubmit"): every word back to its initial value, stale
    /// queue entries dropped. The caller saw the latch open, so every task
    /// of the previous round is terminal and its counts published.
    pub(super) fn reset(&self) {
        debug_assert!(self.is_done());
        for (i, state) in self.states.iter().enumerate() {
            state.reset(self.graph.dependency_count(TaskId(i as u32)));
        }
        for s in self.suspension.iter() {
            s.store(suspend::IDLE, Ordering::Relaxed);
        }
        for o in self.outcomes.iter() {
            o.store(code::PENDING, Ordering::Relaxed);
        }
        for lane in Lane::ALL {
            while self.queues.pop(lane).is_some() {}
        }
        self.panicked.store(0, Ordering::Relaxed);
        self.first_failed.store(usize::MAX, Ordering::Relaxed);
        let _ = self.first_failure.take_first(|_| true);
        self.cancel_requested.store(false, Ordering::Relaxed);
        self.mode.store(mode::NORMAL, Ordering::Relaxed);
        self.roots_pending.store(false, Ordering::Relaxed);
        self.counts.store(0, Ordering::Release);
        // Still registered if not retired yet; else registered again by the
        // resubmit (or lazily).
        self.all_done.reset();
    }

    /// Tasks that reached a terminal state so far.
    fn terminal(&self) -> usize {
        self.counts.load(Ordering::Acquire) as u32 as usize
    }

    /// Whether every task reached a terminal state.
    pub(super) fn is_done(&self) -> bool {
        self.all_done.is_open()
    }

    /// Adds `n` terminal tasks; the addition that reaches the task count
    /// opens the completion latch and retires the submission from the pool.
    pub(super) fn add_terminal(&self, n: usize) {
        self.add_counts(n, 0);
    }

    /// Adds `n` terminal tasks and `finished` finished runs in one RMW;
    /// the addition that reaches the task count opens the latch.
    fn add_counts(&self, n: usize, finished: usize) {
        if n == 0 && finished == 0 {
            return;
        }
        // Both fit 32 bits: a graph has at most MAX_SCHEDULER_TASKS tasks.
        let add = n as u64 | (finished as u64) << 32;
        // AcqRel: the last addition acquires every earlier one (a release
        // sequence), so the opener's `open` publishes every outcome.
        let before = self.counts.fetch_add(add, Ordering::AcqRel);
        if n > 0 && (before as u32 as usize) + n == self.graph.len() {
            self.all_done.open();
            if self.registered.load(Ordering::Acquire)
                && let Some(pool) = self.pool.upgrade()
            {
                pool.retire();
            }
        }
    }

    /// Records `task`'s terminal `code` and counts it at once (cold paths:
    /// suppression and cancellation).
    fn terminate(&self, task: TaskId, outcome: u32) {
        self.outcomes[task.0 as usize].store(outcome, Ordering::Relaxed);
        // A released, never-run gated task returns its window bytes; what
        // they would release is posted by the caller's next release.
        let _ = self.window_finished(task);
        self.add_terminal(1);
    }

    /// Publishes a worker's batched counts (terminal accounting, claim
    /// step 4).
    pub(super) fn flush(&self, local: &mut LocalWork) {
        let finished = std::mem::take(&mut local.finished);
        let n = std::mem::take(&mut local.terminal);
        self.add_counts(n, finished);
    }

    /// Admit protocol (steps 1–3): a permit for `task`, `Ok(None)` when
    /// admission is off, or `Err(None)` after deferring the task /
    /// `Err(Some(failure))` when it can never be admitted.
    fn admit(
        self: &Arc<Self>,
        task: TaskId,
        priority: Priority,
    ) -> Result<Option<AdmissionPermit<'_>>, Option<TaskFailure>> {
        let Some(admission) = &self.admission else {
            return Ok(None);
        };
        let epoch = admission.epoch();
        match admission.try_admit(
            self.graph.lane(task),
            priority,
            self.graph.domain(task),
            self.graph.estimated_bytes(task),
        ) {
            Ok(permit) => Ok(Some(permit)),
            Err(Refusal::Never(message)) => Err(Some(TaskFailure::new(message))),
            Err(Refusal::Busy) => {
                admission.deferred().push(self.clone(), task);
                // Admit step 3: the deferral is ordered before the epoch
                // re-check; a release after our try either sees the task in
                // `deferred` or changed the epoch we read now.
                fence(Ordering::SeqCst);
                if admission.epoch() != epoch {
                    admission.deferred().retry_all();
                }
                Err(None)
            }
        }
    }

    /// Admit step 4: drops the permit of a task of `lane`.
    fn released(&self, lanes: &Lanes, lane: Lane, permit: AdmissionPermit<'_>) {
        let slot = permit.holds_slot();
        drop(permit);
        if let Some(admission) = &self.admission {
            // Its fence orders the slot's return before the sleeper check.
            admission.deferred().retry_all();
            if slot {
                // A worker of the lane may sleep beside work it could not
                // start (step 0), of this submission or of another one
                // sharing the controller.
                lanes.wake_one(lane);
            }
        }
    }

    /// Admit step 0: whether a worker of `lane` may take a task of
    /// `priority` from this submission's queue now.
    pub(super) fn may_start(&self, lane: Lane, priority: Priority) -> bool {
        priority == Priority::Critical
            || self
                .admission
                .as_ref()
                .is_none_or(|a| a.has_free_slot(lane))
    }

    /// Whether a worker of `lane` finds nothing here it may start now
    /// (admit step 0; sleep/wake step 1's check).
    pub(in crate::scheduler) fn nothing_to_start(&self, lane: Lane) -> bool {
        PRIORITIES
            .iter()
            .all(|&p| self.queues.is_empty_at(lane, p) || !self.may_start(lane, p))
    }

    /// Claim protocol: run `task` if this worker owns its claim (`claimed`:
    /// claimed when it fired; otherwise after admission and a won claim),
    /// then its completion or failure. Fired dependents of a completed task
    /// go to `local` (the first one claimed, as this worker's
    /// continuation) or to the shared queues.
    pub(super) fn execute(
        self: &Arc<Self>,
        lanes: &Lanes,
        lane: Lane,
        task: TaskId,
        claimed: bool,
        local: &mut LocalWork,
    ) {
        let state = &self.states[task.0 as usize];
        let mut permit = None;
        let mut never = None;
        if claimed {
            if self.cancel_requested.load(Ordering::Acquire) {
                // Claimed when it fired, but the run was cancelled before it
                // started: the claimer owns its accounting (cancel step 2).
                self.cancelled_claim(task, local);
                return;
            }
        } else {
            if !self.share() {
                // Owned (own step 1): the entry goes back, for the owner to
                // skip or, should ownership end, for counting to run.
                self.post(lanes, task);
                return;
            }
            let snapshot = state.snapshot();
            if snapshot.is_claimed() || snapshot.is_cancelled() || snapshot.remaining() != 0 {
                return; // What the claim would say, before spending an admission.
            }
            match self.admit(task, self.priority(task, snapshot)) {
                Ok(p) => permit = p,
                Err(None) => return,
                Err(Some(failure)) => never = Some(failure),
            }
            match state.try_claim() {
                TaskClaim::Claimed => {}
                TaskClaim::AlreadyClaimed | TaskClaim::Cancelled | TaskClaim::NotReady => {
                    if let Some(permit) = permit {
                        self.released(lanes, self.graph.lane(task), permit);
                    }
                    return;
                }
            }
        }
        let (result, suspended) = match never {
            Some(failure) => (Err(failure), false),
            None => self.run_claimed(lanes, lane, task, !local.waiter),
        };
        if let Some(permit) = permit {
            self.released(lanes, self.graph.lane(task), permit);
        }
        if suspended {
            match self.settle_suspension(task, result.is_ok()) {
                AfterSuspend::Suspended => return,
                AfterSuspend::RunAgain => {
                    self.push(lanes, TaskId(task.0 | CLAIMED_ENTRY), Priority::Critical);
                    return;
                }
                AfterSuspend::Cancelled => {
                    self.cancelled_claim(task, local);
                    return;
                }
                AfterSuspend::Finished => {}
            }
        }
        local.finished += 1;
        // A failure's suppressed dependents may return window bytes too.
        let release = self.window_finished(task) || (self.window.is_some() && result.is_err());
        match result {
            Ok(()) => {
                self.fire_dependents(lanes, task, local);
                // Completed is the one terminal state left unrecorded: after
                // the latch, a task still `PENDING` completed (hot path: no
                // store).
                local.terminal += 1;
            }
            Err(failure) => {
                self.record_failure(task, failure);
                // Suppress before counting this task: the latch cannot open
                // while dependents are still being marked.
                self.suppress_dependents(task);
                self.outcomes[task.0 as usize].store(code::FAILED, Ordering::Relaxed);
                local.terminal += 1;
            }
        }
        if release {
            self.release_held(lanes);
        }
    }

    /// A claimed `task` that will not run because its submission was
    /// cancelled: its claimer records it (claim step 1, cancel step 2).
    fn cancelled_claim(&self, task: TaskId, local: &mut LocalWork) {
        self.outcomes[task.0 as usize].store(code::CANCELLED, Ordering::Relaxed);
        local.terminal += 1;
    }

    /// Runs claimed `task` through the runner (a panic becomes a failure);
    /// also says whether the run suspended.
    // Inlined into `execute` and `run_owned` (another file, maybe another
    // codegen unit): one call per task.
    #[inline]
    fn run_claimed(
        self: &Arc<Self>,
        lanes: &Lanes,
        lane: Lane,
        task: TaskId,
        on_worker: bool,
    ) -> (Result<(), TaskFailure>, bool) {
        let ctx = TaskContext {
            lanes,
            submission: self,
            task,
            worker_lane: lane,
            on_worker,
            suspended: AtomicBool::new(false),
        };
        let result = catch_unwind(AssertUnwindSafe(|| self.runner.run(task, &ctx))).unwrap_or_else(
            |payload| {
                self.panicked.fetch_add(1, Ordering::Relaxed);
                Err(TaskFailure::from_panic(payload.as_ref()))
            },
        );
        (result, ctx.suspended.load(Ordering::Relaxed))
    }
}
