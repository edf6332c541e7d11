//! `WorkerPool`: persistent CPU and I/O workers that run one [`TaskGraph`]
//! (hot path: the worker loop). Protocols are numbered in the module docs of
//! [`crate::scheduler`].

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::limits::SCHEDULER_SPIN_POLLS;
use crate::plan::{Priority, TaskId};
use crate::sync::{
    Arc, AtomicBool, AtomicU32, AtomicUsize, BoundedQueue, FutexWord, Latch, Ordering, Pool, fence,
    thread,
};

use super::admission::{Admission, AdmissionPermit, Refusal};
use super::graph::TaskGraph;
use super::outcome::{RunOutcome, TaskFailure, code};
use super::queue::{Lane, ReadyQueues};
use super::task_state::{Cancel, Claim, DependencyDone, Snapshot, TaskState};

/// Runs a task by id; the scheduler never knows what a task does.
pub trait TaskRunner: Send + Sync {
    /// Runs `task`. Called at most once per task, on a worker of the task's
    /// lane, after every dependency's `run` returned `Ok` (and with its
    /// effects visible). An `Err` or a panic (caught) fails the task: its
    /// transitive dependents are suppressed and never run.
    fn run(&self, task: TaskId) -> Result<(), TaskFailure>;
}

/// How many workers of each kind a pool starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// CPU workers (at least one).
    pub cpu_workers: usize,
    /// I/O workers (at least one).
    pub io_workers: usize,
    /// Pin CPU worker `i` to core `i % cores` (best effort).
    pub pin_cpu_workers: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            cpu_workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            io_workers: 2,
            pin_cpu_workers: true,
        }
    }
}

/// Sleepers of one worker lane and the futex word they park on.
#[derive(Debug, Default)]
struct Parking {
    sleepers: AtomicUsize,
    /// Bumped by every wake-up; a parked worker waits while it is unchanged.
    wake: FutexWord,
}

impl Parking {
    /// Sleep/wake step 2 (poster side): wakes one parked worker, if any.
    fn wake_one(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.wake.fetch_add(1, Ordering::SeqCst);
            self.wake.wake_one();
        }
    }

    fn wake_all(&self) {
        self.wake.fetch_add(1, Ordering::SeqCst);
        self.wake.wake_all();
    }

    /// Futex wait: returns once `wake != expected` (or spuriously).
    fn wait(&self, expected: u32) {
        self.wake.wait(expected);
    }
}

#[derive(Debug)]
struct Shared {
    graph: TaskGraph,
    states: Box<[TaskState]>,
    queues: ReadyQueues,
    /// `[io, cpu]`.
    parking: [Parking; 2],
    has_cpu_workers: bool,
    /// Runs that finished (completed or failed).
    finished: AtomicUsize,
    panicked: AtomicUsize,
    /// Tasks that reached a terminal state; the last one opens `all_done`.
    terminal: AtomicUsize,
    /// Per task, its [`code`]: written once by the owner of its accounting.
    outcomes: Box<[AtomicU32]>,
    /// Id of the first failed task, `usize::MAX` while none failed.
    first_failed: AtomicUsize,
    /// The first failure (capacity 1, only `first_failed`'s winner puts).
    first_failure: Pool<(TaskId, TaskFailure)>,
    cancel_requested: AtomicBool,
    admission: Option<Admission>,
    /// Tasks refused admission, waiting for a permit release (admit step 3).
    deferred: BoundedQueue<TaskId>,
    all_done: Latch,
    shutdown: AtomicBool,
    runner: RunnerBox,
}

/// `Arc<dyn TaskRunner>` with a `Debug` impl.
struct RunnerBox(std::sync::Arc<dyn TaskRunner>);

impl std::fmt::Debug for RunnerBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TaskRunner")
    }
}

impl Shared {
    fn parking(&self, lane: Lane) -> &Parking {
        match lane {
            Lane::Io => &self.parking[0],
            Lane::Cpu => &self.parking[1],
            Lane::Inline if self.has_cpu_workers => &self.parking[1],
            Lane::Inline => &self.parking[0],
        }
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

    /// Post-ready protocol: enqueue a fired task, then wake one sleeper of
    /// its lane.
    fn post(&self, task: TaskId) {
        // Read after the caller's decrement of the same word (or after the
        // task's deferral): promote step 3.
        let snapshot = self.states[task.0 as usize].snapshot();
        self.push(task, self.priority(task, snapshot));
    }

    /// Enqueues `task` at `priority`, then runs sleep/wake step 2.
    fn push(&self, task: TaskId, priority: Priority) {
        let lane = self.graph.lane(task);
        self.queues
            .push(lane, priority, task)
            .expect("ready queues hold two entries per task: one from firing, one from promotion");
        // Sleep/wake step 2: the push is ordered before the sleeper check.
        fence(Ordering::SeqCst);
        self.parking(lane).wake_one();
    }

    /// Promote protocol (steps 1–3): marks `task` and its unfinished
    /// transitive dependencies promoted and pushes each one that is ready
    /// but unclaimed into its lane's critical queue. Returns how many were
    /// pushed.
    fn promote(&self, task: TaskId) -> usize {
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
                self.push(t, Priority::Critical);
                pushed += 1;
            } else {
                stack.extend_from_slice(self.graph.dependencies(t));
            }
        }
        pushed
    }

    fn next(&self, lane: Lane) -> Option<TaskId> {
        self.queues
            .pop(lane)
            .or_else(|| self.queues.pop(Lane::Inline))
            .map(|(_, task)| task)
    }

    /// Records `task`'s terminal `code` and counts it; the last terminal
    /// task opens the completion latch. Called exactly once per task, by the
    /// owner of its accounting.
    fn terminate(&self, task: TaskId, outcome: u32) {
        self.outcomes[task.0 as usize].store(outcome, Ordering::Relaxed);
        // AcqRel: the last increment acquires every earlier one (a release
        // sequence), so the opener's `open` publishes every outcome.
        if self.terminal.fetch_add(1, Ordering::AcqRel) + 1 == self.graph.len() {
            self.all_done.open();
        }
    }

    /// Admit protocol (steps 1–3): a permit for `task`, `Ok(None)` when
    /// admission is off, or `Err(None)` after deferring the task /
    /// `Err(Some(failure))` when it can never be admitted.
    fn admit(
        &self,
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
                self.deferred
                    .push(task)
                    .expect("at most two entries per task circulate (promote step 4)");
                // Admit step 3: the deferral is ordered before the epoch
                // re-check; a release after our try either sees the task in
                // `deferred` or changed the epoch we read now.
                fence(Ordering::SeqCst);
                if admission.epoch() != epoch {
                    self.retry_deferred();
                }
                Err(None)
            }
        }
    }

    /// Admit step 4: after a permit release, every deferred task is posted
    /// again.
    fn retry_deferred(&self) {
        fence(Ordering::SeqCst);
        while let Some(task) = self.deferred.pop() {
            self.post(task);
        }
    }

    /// Claim protocol: run `task` if this worker wins its claim (after
    /// admission, when enabled), then its completion or failure.
    fn execute(&self, task: TaskId) {
        let state = &self.states[task.0 as usize];
        let snapshot = state.snapshot();
        if snapshot.is_claimed() || snapshot.is_cancelled() || snapshot.remaining() != 0 {
            return; // What the claim would say, before spending an admission.
        }
        let (permit, never) = match self.admit(task, self.priority(task, snapshot)) {
            Ok(permit) => (permit, None),
            Err(None) => return,
            Err(Some(failure)) => (None, Some(failure)),
        };
        match state.try_claim() {
            Claim::Claimed => {}
            Claim::AlreadyClaimed | Claim::Cancelled | Claim::NotReady => {
                if permit.is_some() {
                    drop(permit);
                    self.retry_deferred();
                }
                return;
            }
        }
        let result = match never {
            Some(failure) => Err(failure),
            None => catch_unwind(AssertUnwindSafe(|| self.runner.0.run(task))).unwrap_or_else(
                |payload| {
                    self.panicked.fetch_add(1, Ordering::Relaxed);
                    Err(TaskFailure::from_panic(payload.as_ref()))
                },
            ),
        };
        if permit.is_some() {
            drop(permit);
            self.retry_deferred();
        }
        state.complete();
        self.finished.fetch_add(1, Ordering::AcqRel);
        match result {
            Ok(()) => {
                for &d in self.graph.dependents(task) {
                    match self.states[d.0 as usize].dependency_done() {
                        DependencyDone::Fired => self.post(d),
                        DependencyDone::Pending => {}
                    }
                }
                self.terminate(task, code::COMPLETED);
            }
            Err(failure) => {
                self.record_failure(task, failure);
                // Suppress before counting this task: the latch cannot open
                // while dependents are still being marked.
                self.suppress_dependents(task);
                self.terminate(task, code::FAILED);
            }
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
    fn cancel_all(&self) {
        self.cancel_requested.store(true, Ordering::SeqCst);
        for (i, state) in self.states.iter().enumerate() {
            match state.cancel() {
                Cancel::Cancelled => self.terminate(TaskId(i as u32), code::CANCELLED),
                Cancel::AlreadyCancelled | Cancel::TooLate => {}
            }
        }
    }

    /// The summary of a finished run (after `all_done` opened).
    fn outcome(&self) -> RunOutcome {
        let mut outcome = RunOutcome::default();
        for (i, o) in self.outcomes.iter().enumerate() {
            let task = TaskId(i as u32);
            match o.load(Ordering::Relaxed) {
                code::COMPLETED => outcome.completed += 1,
                code::FAILED => outcome.failed_tasks.push(task),
                code::SUPPRESSED => outcome.suppressed.push(task),
                code::CANCELLED => outcome.cancelled += 1,
                _ => debug_assert!(false, "outcome of a run that is not over"),
            }
        }
        if let Some(first) = self.first_failure.take_first(|_| true) {
            outcome.failed = Some(first.clone());
            let _ = self.first_failure.put(first);
        }
        outcome
    }

    /// Sleep/wake step 1 (worker side). Returns when woken, when work or
    /// shutdown is visible, or spuriously; the caller re-polls either way.
    fn sleep(&self, lane: Lane) {
        let parking = self.parking(lane);
        parking.sleepers.fetch_add(1, Ordering::SeqCst);
        let wake = parking.wake.load(Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let idle = self.queues.is_empty(lane)
            && self.queues.is_empty(Lane::Inline)
            && !self.shutdown.load(Ordering::SeqCst);
        if idle {
            parking.wait(wake);
        }
        parking.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

fn worker(shared: &Shared, lane: Lane) {
    let mut polls = 0u32;
    loop {
        if let Some(task) = shared.next(lane) {
            polls = 0;
            shared.execute(task);
            continue;
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        polls += 1;
        if polls < SCHEDULER_SPIN_POLLS {
            std::hint::spin_loop();
            #[cfg(loom)]
            thread::yield_now();
            continue;
        }
        shared.sleep(lane);
        polls = 0;
    }
}

/// Cancels one run: a cheap handle (clone it freely) to a pool's shared
/// state. Tasks not claimed when [`CancelToken::cancel`] returns never run;
/// running tasks finish and are joined by [`WorkerPool::wait`].
#[derive(Debug, Clone)]
pub struct CancelToken {
    shared: Arc<Shared>,
}

impl CancelToken {
    /// Cancel steps 1–2: marks the run cancelled and cancels every task not
    /// yet claimed. Idempotent; several callers may race.
    pub fn cancel(&self) {
        self.shared.cancel_all();
    }

    /// Whether `cancel` was called.
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancel_requested.load(Ordering::Acquire)
    }
}

/// Persistent workers running one [`TaskGraph`]: CPU workers serve the CPU
/// lane, I/O workers the I/O lane, both serve the inline lane. Dropping the
/// pool stops and joins every worker.
#[derive(Debug)]
pub struct WorkerPool {
    shared: Arc<Shared>,
    /// `(lane, handle)` of every worker.
    workers: Vec<(Lane, thread::JoinHandle<()>)>,
    pinned: Arc<AtomicUsize>,
}

impl WorkerPool {
    /// Starts `config`'s workers on `graph`; tasks without dependencies are
    /// queued before any worker starts.
    ///
    /// # Panics
    /// If `config` has no CPU or no I/O worker.
    ///
    /// The runner is shared through a `std` `Arc` in every build (its
    /// reference count is no scheduler protocol; loom's `Arc` cannot hold a
    /// trait object).
    pub fn new(
        config: PoolConfig,
        graph: TaskGraph,
        runner: std::sync::Arc<dyn TaskRunner>,
    ) -> Self {
        Self::start(config, graph, runner, None)
    }

    /// Like [`WorkerPool::new`], with every task admitted through
    /// `admission` before it runs (protocol "admit"; its worker slots are
    /// set from `config`).
    ///
    /// # Panics
    /// If `config` has no CPU or no I/O worker.
    pub fn with_admission(
        config: PoolConfig,
        graph: TaskGraph,
        runner: std::sync::Arc<dyn TaskRunner>,
        mut admission: Admission,
    ) -> Self {
        admission.set_workers(config.io_workers, config.cpu_workers);
        Self::start(config, graph, runner, Some(admission))
    }

    fn start(
        config: PoolConfig,
        graph: TaskGraph,
        runner: std::sync::Arc<dyn TaskRunner>,
        admission: Option<Admission>,
    ) -> Self {
        assert!(
            config.cpu_workers > 0 && config.io_workers > 0,
            "a pool needs both worker kinds"
        );
        let states: Box<[TaskState]> = (0..graph.len())
            .map(|i| TaskState::new(graph.dependency_count(TaskId(i as u32))))
            .collect();
        let shared = Arc::new(Shared {
            // Promote step 4: at most two entries per task are in
            // circulation.
            queues: ReadyQueues::with_capacity(graph.len().saturating_mul(2)),
            states,
            parking: [Parking::default(), Parking::default()],
            has_cpu_workers: config.cpu_workers > 0,
            finished: AtomicUsize::new(0),
            panicked: AtomicUsize::new(0),
            terminal: AtomicUsize::new(0),
            outcomes: (0..graph.len())
                .map(|_| AtomicU32::new(code::PENDING))
                .collect(),
            first_failed: AtomicUsize::new(usize::MAX),
            first_failure: Pool::new(1),
            cancel_requested: AtomicBool::new(false),
            admission,
            deferred: BoundedQueue::new(graph.len().saturating_mul(2).max(1)),
            all_done: Latch::new(),
            shutdown: AtomicBool::new(false),
            runner: RunnerBox(runner),
            graph,
        });
        if shared.graph.is_empty() {
            shared.all_done.open();
        }
        for i in 0..shared.graph.len() {
            let task = TaskId(i as u32);
            if shared.graph.dependency_count(task) == 0 {
                shared.post(task);
            }
        }
        let pinned = Arc::new(AtomicUsize::new(0));
        // Captured once, before any pinning: the list is the calling
        // thread's affinity mask.
        #[cfg(not(loom))]
        let cores = if config.pin_cpu_workers {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        let mut workers = Vec::with_capacity(config.cpu_workers + config.io_workers);
        for i in 0..config.cpu_workers {
            let shared = shared.clone();
            #[cfg(not(loom))]
            let core = (!cores.is_empty()).then(|| cores[i % cores.len()]);
            #[cfg(loom)]
            let _ = i;
            let pinned = pinned.clone();
            workers.push((
                Lane::Cpu,
                thread::spawn(move || {
                    #[cfg(not(loom))]
                    if core.is_some_and(core_affinity::set_for_current) {
                        pinned.fetch_add(1, Ordering::Relaxed);
                    }
                    #[cfg(loom)]
                    let _ = pinned;
                    worker(&shared, Lane::Cpu);
                }),
            ));
        }
        for _ in 0..config.io_workers {
            let shared = shared.clone();
            workers.push((Lane::Io, thread::spawn(move || worker(&shared, Lane::Io))));
        }
        Self {
            shared,
            workers,
            pinned,
        }
    }

    /// Blocks until every task of the graph reached a terminal state
    /// (completed, failed, suppressed or cancelled; running tasks are always
    /// joined) and returns the summary.
    pub fn wait(&self) -> RunOutcome {
        self.shared.all_done.wait();
        self.shared.outcome()
    }

    /// A token that cancels this pool's run (protocol "cancel").
    ///
    /// The token keeps the pool's shared state alive; a runner must not own
    /// a token of its own pool (the cycle would leak that state, though
    /// dropping the pool still joins every worker).
    pub fn cancel_token(&self) -> CancelToken {
        CancelToken {
            shared: self.shared.clone(),
        }
    }

    /// Promote protocol: raises `task` and the producer chain it still waits
    /// for to critical priority. Every unfinished transitive dependency (and
    /// `task`) is marked promoted; each one that is ready but not yet claimed
    /// is pushed again into its lane's critical queue (its earlier entry is
    /// dropped by the claim), and each one not yet fired is posted at critical
    /// priority when it fires. Returns how many tasks were pushed now.
    /// Promoting a task twice, or a finished one, does nothing. Cold path:
    /// allocates a walk stack.
    ///
    /// # Panics
    /// If `task` is not a task of the pool's graph.
    pub fn promote(&self, task: TaskId) -> usize {
        assert!((task.0 as usize) < self.shared.graph.len(), "no such task");
        self.shared.promote(task)
    }

    /// The admission controller, if the pool has one.
    pub fn admission(&self) -> Option<&Admission> {
        self.shared.admission.as_ref()
    }

    /// Tasks that reached a terminal state so far.
    pub fn terminal(&self) -> usize {
        self.shared.terminal.load(Ordering::Acquire)
    }

    /// Tasks whose run finished (completed or failed) so far.
    pub fn finished(&self) -> usize {
        self.shared.finished.load(Ordering::Acquire)
    }

    /// Runs that panicked so far.
    pub fn panicked(&self) -> usize {
        self.shared.panicked.load(Ordering::Acquire)
    }

    /// CPU workers that pinned themselves to a core so far (0 where pinning
    /// is refused or off).
    pub fn pinned_workers(&self) -> usize {
        self.pinned.load(Ordering::Acquire)
    }

    /// Thread ids of the workers of `lane` ([`Lane::Io`] or [`Lane::Cpu`]).
    #[cfg(not(loom))]
    pub fn thread_ids(&self, lane: Lane) -> Vec<std::thread::ThreadId> {
        self.workers
            .iter()
            .filter(|(l, _)| *l == lane)
            .map(|(_, h)| h.thread().id())
            .collect()
    }
}

impl Drop for WorkerPool {
    /// Shutdown protocol: set `shutdown`, wake every lane, join every worker.
    /// Running tasks finish; queued tasks that no worker claimed never run.
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for parking in &self.shared.parking {
            parking.wake_all();
        }
        for (_, handle) in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}
