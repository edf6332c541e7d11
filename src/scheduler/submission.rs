//! One run of a [`TaskGraph`] on a [`super::WorkerPool`]: its task words,
//! ready queues and terminal accounting ([`SubmissionInner`]), the caller's
//! handle ([`Submission`]), the cancel token and the context a running task
//! sees ([`TaskContext`]). Hot path: `execute`, once per task.

use crossbeam_utils::CachePadded;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Weak};

use crate::plan::{Priority, TaskId};
use crate::sync::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Latch, Lock, Ordering, Pool, fence,
};

use super::admission::{Admission, AdmissionPermit, Refusal};
use super::graph::TaskGraph;
use super::outcome::{RunOutcome, TaskFailure, code};
use super::pool::{Lease, LocalWork, PoolShared};
use super::queue::{Lane, PRIORITIES, ReadyQueues};
use super::task_state::{Cancel, Claim, DependencyDone, FireClaim, Snapshot, TaskState};
use super::window::{LookAhead, LookAheadOptions, Offer};

/// Runs a task by id; the scheduler never knows what a task does.
pub trait TaskRunner: Send + Sync {
    /// Runs `task`. Called at most once per task, on a worker of the task's
    /// lane, after every dependency's `run` returned `Ok` (and with its
    /// effects visible). An `Err` or a panic (caught) fails the task: its
    /// transitive dependents are suppressed and never run. `ctx` reaches
    /// the submission (promotion, cancellation) and the pool's CPU workers
    /// (kernel parallelism).
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure>;
}

/// A runner of a renumbered graph: graph task `i` runs as `ids[i]` of the
/// inner runner (e.g. the session tasks of a plan, [`TaskGraph::session_graph`]).
#[derive(Debug)]
pub struct Remapped<R> {
    /// The runner of the original ids.
    pub runner: R,
    /// Original id of each graph task.
    pub ids: Box<[TaskId]>,
}

impl<R: TaskRunner> TaskRunner for Remapped<R> {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.runner.run(self.ids[task.0 as usize], ctx)
    }
}

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

/// A task's suspension state (protocol "suspend").
mod suspend {
    /// Not suspended (or resumed and queued).
    pub const IDLE: u32 = 0;
    /// Its run called `suspend` and has not returned yet.
    pub const SUSPENDING: u32 = 1;
    /// Its run returned suspended; waits for `resume`.
    pub const SUSPENDED: u32 = 2;
    /// Resumed before its run returned: the worker runs it again.
    pub const RESUMED_EARLY: u32 = 3;
    /// Never resumed again: the run failed or the submission was cancelled.
    pub const DEAD: u32 = 4;
}

/// Who runs a submission's tasks (protocol "own").
mod mode {
    /// No task claimed yet: the exclusive CPU worker may still own it.
    pub const NORMAL: u32 = 0;
    /// One worker runs every task in id order, counting nothing.
    pub const OWNED: u32 = 1;
    /// Dependency counting: any participant claims ready tasks.
    pub const SHARED: u32 = 2;
}

/// What the worker does after a run that suspended.
enum Settled {
    /// Parked until resumed.
    Suspended,
    /// Resumed meanwhile: run it again now.
    RunAgain,
    /// Cancelled while suspending: record it cancelled.
    Cancelled,
    /// It failed: finish it as usual.
    Finished,
}

/// The shared state of one submission.
pub(super) struct SubmissionInner {
    pub(super) pool: Weak<PoolShared>,
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
    first_failure: Pool<(TaskId, TaskFailure)>,
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

/// Deferred tasks of one [`Admission`], with the submissions they belong
/// to (admit step 3; cold path).
#[derive(Debug, Default)]
pub struct Deferred {
    entries: Lock<Vec<(Arc<SubmissionInner>, TaskId)>>,
    len: AtomicUsize,
}

impl Deferred {
    fn push(&self, submission: Arc<SubmissionInner>, task: TaskId) {
        self.entries.with(|e| {
            e.push((submission, task));
            self.len.store(e.len(), Ordering::SeqCst);
        });
    }

    /// Tasks deferred now.
    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::SeqCst)
    }

    /// Admit step 4: posts every deferred task again (on its own pool).
    fn retry_all(&self) {
        fence(Ordering::SeqCst);
        if self.len.load(Ordering::SeqCst) == 0 {
            return;
        }
        let taken = self.entries.with(|e| {
            self.len.store(0, Ordering::SeqCst);
            std::mem::take(e)
        });
        for (submission, task) in taken {
            if let Some(pool) = submission.pool.upgrade() {
                submission.post(&pool, task);
            }
        }
    }
}

/// Admit step 4 after a release of the budget's bytes by anyone.
impl crate::arena::ReleaseWatcher for Deferred {
    fn released(&self) {
        self.retry_all();
    }
}

impl SubmissionInner {
    pub(super) fn new(
        pool: Weak<PoolShared>,
        this: Weak<SubmissionInner>,
        graph: Arc<TaskGraph>,
        runner: Arc<dyn TaskRunner>,
        options: SubmitOptions,
        lanes: usize,
    ) -> Self {
        let mut capacities = vec![0usize; lanes];
        for (i, &n) in graph.lane_tasks().iter().enumerate() {
            // Promote step 4: at most two entries per task circulate.
            capacities[i] = n.saturating_mul(2);
        }
        Self {
            pool,
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
            first_failure: Pool::new(1),
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
        for lane in 0..self.queues.lanes() {
            while self.queues.pop(Lane::from_index(lane)).is_some() {}
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

    /// The priority `task` is queued and admitted at: critical once
    /// promoted (promote step 3), else its graph priority.
    fn priority(&self, task: TaskId, snapshot: Snapshot) -> Priority {
        if snapshot.is_promoted() {
            Priority::Critical
        } else {
            self.graph.priority(task)
        }
    }

    /// Post-ready step 2: enqueue a fired task at its priority, then wake
    /// one sleeper of its lane.
    pub(super) fn post(&self, pool: &PoolShared, task: TaskId) {
        // Read after the caller's decrement of the same word (or after the
        // task's deferral): promote step 3.
        let snapshot = self.states[task.0 as usize].snapshot();
        self.push(pool, task, self.priority(task, snapshot));
    }

    /// Enqueues `task` at `priority`, then runs sleep/wake step 2.
    fn push(&self, pool: &PoolShared, task: TaskId, priority: Priority) {
        if !self.registered.load(Ordering::Acquire) {
            // A quiet resubmit registers on its first queued task.
            if let Some(me) = self.this.upgrade() {
                pool.register(&me, false);
            }
        }
        let lane = self.graph.lane(TaskId(task.0 & !CLAIMED_ENTRY));
        self.queues
            .push(lane, priority, task)
            .expect("ready queues hold two entries per task: one from firing, one from promotion");
        // Sleep/wake step 2: the push is ordered before the sleeper check.
        fence(Ordering::SeqCst);
        pool.wake_one(lane);
    }

    /// The distance of `task` if this submission's window gates it.
    fn gated(&self, task: TaskId) -> Option<u32> {
        self.window.as_ref().and_then(|_| self.graph.distance(task))
    }

    /// Whether a fired `task` may be queued now (window step 1): ungated,
    /// or released by the window (else it is held, or already finished
    /// through a promoted entry).
    fn release(&self, task: TaskId) -> bool {
        match (self.gated(task), &self.window) {
            (Some(distance), Some(window)) => {
                window.offer(task, distance, self.graph.estimated_bytes(task)) == Offer::Released
            }
            _ => true,
        }
    }

    /// Post-ready for a task that just fired: through the window, then
    /// [`SubmissionInner::post`].
    fn fire(&self, pool: &PoolShared, task: TaskId) {
        if self.release(task) {
            self.post(pool, task);
        }
    }

    /// Window steps 2 and 4: posts the held tasks that fit now.
    fn release_held(&self, pool: &PoolShared) {
        if let Some(window) = &self.window {
            let graph = &self.graph;
            for t in window.release_held(
                |t| graph.distance(t).unwrap_or(0),
                |t| graph.estimated_bytes(t),
            ) {
                self.post(pool, t);
            }
        }
    }

    /// A gated task reached its terminal state: its bytes leave the
    /// window's in-flight count. Returns whether held tasks may fit now.
    fn window_finished(&self, task: TaskId) -> bool {
        match (self.gated(task), &self.window) {
            (Some(_), Some(window)) => window.finished(task, self.graph.estimated_bytes(task)),
            _ => false,
        }
    }

    /// Whether the roots were left to the waiter, clearing the mark (a plain
    /// load first: most waits find nothing to take).
    fn take_pending_roots(&self) -> bool {
        self.roots_pending.load(Ordering::Acquire)
            && self.roots_pending.swap(false, Ordering::AcqRel)
    }

    /// A quiet resubmit leaves the roots to the waiter.
    pub(super) fn defer_roots(&self) {
        self.roots_pending.store(true, Ordering::Release);
    }

    /// Posts every task without dependencies (submit step 2; no wake-up).
    pub(super) fn post_roots(&self) {
        for task in self.graph.roots() {
            if self.release(task) {
                self.queues
                    .push(self.graph.lane(task), self.graph.priority(task), task)
                    .expect("a queue holds every task of its lane twice");
            }
        }
    }

    /// Window step 2: the invocation reached `step`.
    pub(super) fn advance(&self, pool: &PoolShared, step: u32) {
        if let Some(window) = &self.window {
            window.advance(step);
            self.release_held(pool);
        }
    }

    /// Window step 3: the invocation waited on I/O.
    pub(super) fn stalled(&self, pool: &PoolShared) {
        if let Some(window) = &self.window {
            window.stalled();
            self.release_held(pool);
        }
    }

    fn window_state(&self) -> Option<WindowState> {
        self.window.as_ref().map(|w| WindowState {
            frontier: w.frontier(),
            distance: w.distance(),
            bytes_in_flight: w.in_flight(),
        })
    }

    /// Promote protocol (steps 1–3): marks `task` and its unfinished
    /// transitive dependencies promoted and pushes each one that is ready
    /// but unclaimed into its lane's critical queue. Returns how many were
    /// pushed.
    pub(super) fn promote(&self, pool: &PoolShared, task: TaskId) -> usize {
        let mut pushed = 0;
        let mut stack = vec![task];
        while let Some(t) = stack.pop() {
            let before = self.states[t.0 as usize].promote();
            if before.is_promoted() || before.is_claimed() || before.is_cancelled() {
                // Step 2: its promoter walks on from it, or it is running,
                // done or will never run (and so are all its producers).
                continue;
            }
            if before.remaining() == 0 {
                // Step 3: fired before our mark, so its poster may have
                // queued it at its own priority; queue it again as critical.
                self.push(pool, t, Priority::Critical);
                pushed += 1;
            } else {
                stack.extend_from_slice(self.graph.dependencies(t));
            }
        }
        pushed
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

    /// Admit step 4 after a permit drop.
    fn released(&self) {
        if let Some(admission) = &self.admission {
            admission.deferred().retry_all();
        }
    }

    /// Claim protocol: run `task` if this worker owns its claim (`claimed`:
    /// claimed when it fired; otherwise after admission and a won claim),
    /// then its completion or failure. Fired dependents of a completed task
    /// go to `local` (the first one claimed, as this worker's
    /// continuation) or to the shared queues.
    pub(super) fn execute(
        self: &Arc<Self>,
        pool: &PoolShared,
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
                self.post(pool, task);
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
                Claim::Claimed => {}
                Claim::AlreadyClaimed | Claim::Cancelled | Claim::NotReady => {
                    if permit.is_some() {
                        drop(permit);
                        self.released();
                    }
                    return;
                }
            }
        }
        let (result, suspended) = match never {
            Some(failure) => (Err(failure), false),
            None => self.run_claimed(pool, lane, task, !local.waiter),
        };
        if permit.is_some() {
            drop(permit);
            self.released();
        }
        if suspended {
            match self.settle_suspension(task, result.is_ok()) {
                Settled::Suspended => return,
                Settled::RunAgain => {
                    self.push(pool, TaskId(task.0 | CLAIMED_ENTRY), Priority::Critical);
                    return;
                }
                Settled::Cancelled => {
                    self.cancelled_claim(task, local);
                    return;
                }
                Settled::Finished => {}
            }
        }
        local.finished += 1;
        // A failure's suppressed dependents may return window bytes too.
        let release = self.window_finished(task) || (self.window.is_some() && result.is_err());
        match result {
            Ok(()) => {
                self.fire_dependents(pool, task, local);
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
            self.release_held(pool);
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
    fn run_claimed(
        self: &Arc<Self>,
        pool: &PoolShared,
        lane: Lane,
        task: TaskId,
        on_worker: bool,
    ) -> (Result<(), TaskFailure>, bool) {
        let ctx = TaskContext {
            pool,
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

    /// Own step 1 for every participant but the owner: before its first
    /// claim of a task of this submission, it makes the submission shared
    /// (`false`: it is owned, leave its tasks to the owner).
    fn share(&self) -> bool {
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
    pub(super) fn is_owned(&self) -> bool {
        self.mode.load(Ordering::Acquire) == mode::OWNED
    }

    /// Own step 1 for the exclusive CPU worker: takes the whole submission
    /// when nothing of it was claimed yet and its graph runs in id order
    /// without admission or window.
    pub(super) fn try_own(&self) -> bool {
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
    pub(super) fn run_owned(
        self: &Arc<Self>,
        pool: &PoolShared,
        entry: TaskId,
        local: &mut LocalWork,
    ) {
        let n = self.graph.len();
        let mut t = 0;
        while t < n {
            let task = TaskId(t as u32);
            t += 1;
            if self.states[task.0 as usize].try_claim_in_order() != Claim::Claimed {
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
                let (result, suspended) = self.run_claimed(pool, Lane::Cpu, task, true);
                if suspended {
                    match self.settle_suspension(task, result.is_ok()) {
                        Settled::Suspended => {
                            self.abandon_ownership(pool, task, entry);
                            return;
                        }
                        Settled::RunAgain if self.cancel_requested.load(Ordering::Acquire) => {
                            // Resumed, but cancelled meanwhile: as a
                            // resumed entry would be (claim step 1).
                            self.cancelled_claim(task, local);
                            break;
                        }
                        Settled::RunAgain => continue,
                        Settled::Cancelled => {
                            self.cancelled_claim(task, local);
                            break;
                        }
                        Settled::Finished => {}
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
    fn abandon_ownership(&self, pool: &PoolShared, suspended: TaskId, entry: TaskId) {
        self.mode.store(mode::SHARED, Ordering::SeqCst);
        if entry.0 > suspended.0 {
            // The entry the owner consumed to take the submission belongs
            // to a task it never reached: put it back (helpers put back
            // theirs, step 1).
            self.post(pool, entry);
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
                self.post(pool, task);
            }
        }
    }

    /// Suspend steps 2 and 5: after a run that called
    /// [`TaskContext::suspend`] returned.
    fn settle_suspension(&self, task: TaskId, ok: bool) -> Settled {
        let word = &self.suspension[task.0 as usize];
        if !ok {
            // A failed run is never resumed.
            word.store(suspend::DEAD, Ordering::SeqCst);
            return Settled::Finished;
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
                    return Settled::Cancelled;
                }
                Settled::Suspended
            }
            Err(_) => {
                // Resumed while still running (step 3): run again.
                word.store(suspend::IDLE, Ordering::SeqCst);
                Settled::RunAgain
            }
        }
    }

    /// Suspend step 5: a suspended task `i` never runs again; `true` for the
    /// one caller that made it so (it records the task cancelled).
    fn bury(&self, i: usize) -> bool {
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
    fn resume(&self, task: TaskId) {
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
                    if let Some(pool) = self.pool.upgrade() {
                        self.push(&pool, TaskId(task.0 | CLAIMED_ENTRY), Priority::Critical);
                    }
                    return;
                }
                Ok(_) => return,
                Err(actual) => state = actual,
            }
        }
    }

    /// Post-ready step 2 for every dependent of the completed `task`: the
    /// first critical one this worker may run is claimed as it fires (its
    /// continuation); further ones are kept unclaimed (claimed too when the
    /// worker is alone on its lane) unless a peer is searching or the
    /// buffer is full; the rest are posted.
    fn fire_dependents(&self, pool: &PoolShared, task: TaskId, local: &mut LocalWork) {
        // Claim-on-fire skips admission, so only without it.
        let claiming = self.admission.is_none();
        let mut continuation = None;
        for &d in self.graph.dependents(task) {
            let lane = self.graph.lane(d);
            let keep = local.accepts(lane)
                && self.graph.priority(d) == Priority::Critical
                && local.has_room()
                && self.gated(d).is_none();
            let state = &self.states[d.0 as usize];
            if keep
                && claiming
                && (continuation.is_none() || (local.exclusive && lane != Lane::Inline))
            {
                match state.dependency_done_claiming() {
                    FireClaim::FiredClaimed if continuation.is_none() => continuation = Some(d),
                    FireClaim::FiredClaimed => local.tasks.push(d.0 | CLAIMED_ENTRY),
                    FireClaim::Fired => self.fire(pool, d),
                    FireClaim::Pending => {}
                }
                continue;
            }
            if let DependencyDone::Fired = state.dependency_done() {
                if keep && !pool.searching(lane) {
                    local.tasks.push(d.0);
                } else {
                    self.fire(pool, d);
                }
            }
        }
        if let Some(d) = continuation {
            // Last in, first out: the continuation runs next.
            local.tasks.push(d.0 | CLAIMED_ENTRY);
        }
    }

    /// Failure step 2: the first failure is kept for the outcome.
    fn record_failure(&self, task: TaskId, failure: TaskFailure) {
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
    fn suppress_dependents(&self, task: TaskId) {
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
    pub(super) fn cancel_all(&self) {
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
    fn outcome(&self) -> RunOutcome {
        let mut outcome = RunOutcome::default();
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

/// The caller's handle to one submitted graph. Dropping it neither cancels
/// nor waits: the pool keeps the submission's state alive until every task
/// is terminal (and the pool's shutdown cancels what never started).
#[derive(Debug)]
pub struct Submission {
    pub(super) inner: Arc<SubmissionInner>,
    pub(super) pool: Arc<PoolShared>,
}

impl Submission {
    /// Blocks until every task reached a terminal state (completed, failed,
    /// suppressed or cancelled; running tasks are always joined) and returns
    /// the summary.
    pub fn wait(&self) -> RunOutcome {
        if self.inner.take_pending_roots() {
            for task in self.inner.graph.roots() {
                self.inner.post(&self.pool, task);
            }
        }
        self.inner.all_done.wait();
        self.inner.outcome()
    }

    /// [`Submission::wait`], running ready CPU and inline tasks of this
    /// submission on the calling thread meanwhile (protocol "help"): for a
    /// caller that would otherwise only block, e.g. a synchronous inference.
    pub fn wait_helping(&self) -> RunOutcome {
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
                inner.execute(&self.pool, Lane::Cpu, task, false, &mut local);
                inner.flush(&mut local);
            }
        }
        while !inner.is_done() {
            let next = PRIORITIES.iter().find_map(|&p| {
                inner
                    .queues
                    .pop_at(Lane::Cpu, p)
                    .or_else(|| inner.queues.pop_at(Lane::Inline, p))
            });
            let Some(task) = next else { break };
            let claimed = task.0 & CLAIMED_ENTRY != 0;
            let task = TaskId(task.0 & !CLAIMED_ENTRY);
            inner.execute(&self.pool, Lane::Cpu, task, claimed, &mut local);
            inner.flush(&mut local);
            if inner.is_owned() {
                break; // Its owner runs the rest (own step 1).
            }
        }
    }

    /// Whether every task reached a terminal state.
    pub fn is_done(&self) -> bool {
        self.inner.is_done()
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
        self.inner.promote(&self.pool, task)
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
        self.inner.advance(&self.pool, step);
    }

    /// Window step 3: the invocation had to wait for an object (I/O is the
    /// bottleneck); the window doubles up to its maximum.
    pub fn stalled(&self) {
        self.inner.stalled(&self.pool);
    }

    /// The look-ahead window's state, if the submission has one.
    pub fn window(&self) -> Option<WindowState> {
        self.inner.window_state()
    }
}

/// Cancels one submission: a cheap handle (clone it freely) that does not
/// keep the submission alive. Tasks not claimed when [`CancelToken::cancel`]
/// returns never run; running tasks finish and are joined by
/// [`Submission::wait`].
#[derive(Debug, Clone)]
pub struct CancelToken {
    inner: Weak<SubmissionInner>,
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

/// Resumes a suspended task (protocol "suspend"). Owns what the resumed
/// run needs (`Send`, `'static`), so it can be handed to any event source.
/// Dropping it resumes too: a suspended task is never forgotten.
#[derive(Debug)]
pub struct ResumeHandle {
    submission: Arc<SubmissionInner>,
    task: TaskId,
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

/// What a running task sees of its submission and pool.
#[derive(Debug)]
pub struct TaskContext<'a> {
    pool: &'a PoolShared,
    submission: &'a Arc<SubmissionInner>,
    task: TaskId,
    worker_lane: Lane,
    /// Runs on a pool worker (not on a caller helping in `wait`).
    on_worker: bool,
    /// Set by [`TaskContext::suspend`].
    suspended: AtomicBool,
}

impl TaskContext<'_> {
    /// Suspend step 1: when this run returns `Ok`, the task is not finished
    /// but parked (still claimed, its dependents not fired, no worker held);
    /// it runs again — with the same task id, on a worker of its lane, at
    /// critical priority — after the returned handle's
    /// [`ResumeHandle::resume`] (or drop). This is how a task waits for an
    /// event without blocking a worker. A run that returns `Err` is never
    /// resumed. Call at most once per run.
    pub fn suspend(&self) -> ResumeHandle {
        let word = &self.submission.suspension[self.task.0 as usize];
        let before = word.swap(suspend::SUSPENDING, Ordering::SeqCst);
        debug_assert_eq!(before, suspend::IDLE, "suspend called twice in one run");
        self.suspended.store(true, Ordering::Relaxed);
        ResumeHandle {
            submission: self.submission.clone(),
            task: self.task,
        }
    }

    /// The running task.
    pub fn task(&self) -> TaskId {
        self.task
    }

    /// The lane of the worker running it (an inline task runs on a CPU or
    /// an I/O worker).
    pub fn worker_lane(&self) -> Lane {
        self.worker_lane
    }

    /// Promote protocol from inside a task (see [`Submission::promote`]):
    /// e.g. an invocation that found a requirement not resident raises its
    /// producer chain. Returns how many tasks this call pushed.
    ///
    /// # Panics
    /// If `task` is not a task of this submission's graph.
    pub fn promote(&self, task: TaskId) -> usize {
        assert!(
            (task.0 as usize) < self.submission.graph.len(),
            "no such task"
        );
        self.submission.promote(self.pool, task)
    }

    /// Window step 2 from inside a task (see [`Submission::advance`]).
    pub fn advance(&self, step: u32) {
        self.submission.advance(self.pool, step);
    }

    /// Window step 3 from inside a task (see [`Submission::stalled`]).
    pub fn stalled(&self) {
        self.submission.stalled(self.pool);
    }

    /// Whether the submission was cancelled (a long task may stop early and
    /// return an error).
    pub fn is_cancelled(&self) -> bool {
        self.submission.cancel_requested.load(Ordering::Acquire)
    }

    /// A token cancelling this submission.
    pub fn cancel_token(&self) -> CancelToken {
        CancelToken {
            inner: Arc::downgrade(self.submission),
        }
    }

    /// Kernel parallelism on the pool's CPU workers (protocol "lease"):
    /// `parallel_for` regions started from this task run on this thread
    /// and whichever CPU workers are idle, never on a second pool.
    pub fn parallel(&self) -> Lease<'_> {
        self.pool
            .lease(self.on_worker && self.worker_lane == Lane::Cpu)
    }
}
