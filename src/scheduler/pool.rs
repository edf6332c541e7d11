//! `WorkerPool`: persistent CPU and I/O workers that run the
//! graphs submitted to them and the kernels' parallel regions (hot path:
//! the worker loop). Protocols are numbered in the module docs of
//! [`crate::scheduler`].

use crossbeam_utils::CachePadded;
use std::sync::Arc;

use onnx_prepared_kernels::ParallelFor;

use crate::limits::{
    MAX_WORKER_THREADS, SCHEDULER_JOB_SPIN_POLLS, SCHEDULER_LOCAL_CAPACITY, SCHEDULER_SPIN_POLLS,
};
use crate::sync::{
    AtomicBool, AtomicU64, AtomicUsize, FutexWord, HintCounter, JobBoard, Lock, Ordering, fence,
    thread,
};

use super::graph::TaskGraph;
use super::queue::{Lane, PRIORITIES};
use super::submission::{
    CLAIMED_ENTRY, Submission, SubmissionInner, SubmitError, SubmitOptions, TaskRunner,
};
use crate::plan::TaskId;

/// How many workers of each kind a pool starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// CPU workers: serve the CPU and inline lanes and help kernels'
    /// parallel regions.
    pub cpu_workers: usize,
    /// I/O workers: serve the I/O and inline lanes (blocking reads never
    /// occupy a CPU worker).
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
    /// Workers of the lane that found no work and are spinning or parked.
    searching: HintCounter,
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
}

/// State shared by a pool's workers, its submissions and its leases.
#[derive(Debug)]
pub(super) struct PoolShared {
    config: PoolConfig,
    /// By dense lane index: io, cpu, (inline: unused). Each on
    /// lines of its own: a lane's workers write `searching` whenever they
    /// run dry, and every post reads the posted lane's `sleepers`.
    parking: Box<[CachePadded<Parking>]>,
    /// Submissions not yet retired; workers cache a copy.
    registry: Lock<Vec<Arc<SubmissionInner>>>,
    /// Bumped (SeqCst) whenever `registry` changes.
    version: AtomicU64,
    /// Kernels' fork-join regions, helped by idle CPU workers.
    board: JobBoard,
    shutdown: AtomicBool,
    pinned: AtomicUsize,
}

impl PoolShared {
    /// The parking lot whose workers serve `lane` (inline: the CPU
    /// workers', or the I/O workers' when there are no CPU workers).
    fn parking(&self, lane: Lane) -> &Parking {
        let index = match lane {
            Lane::Inline if self.config.cpu_workers > 0 => Lane::Cpu.index(),
            Lane::Inline => Lane::Io.index(),
            other => other.index(),
        };
        &self.parking[index]
    }

    /// Sleep/wake step 2 for a task posted on `lane`.
    pub(super) fn wake_one(&self, lane: Lane) {
        self.parking(lane).wake_one();
    }

    /// Whether a worker that could run a task of `lane` is out of work
    /// (relaxed hint for work sharing).
    pub(super) fn searching(&self, lane: Lane) -> bool {
        match lane {
            Lane::Inline => {
                self.parking[Lane::Cpu.index()].searching.get()
                    + self.parking[Lane::Io.index()].searching.get()
                    > 0
            }
            other => self.parking[other.index()].searching.get() > 0,
        }
    }

    /// Whether some worker serves `lane`.
    fn serves(&self, lane: Lane) -> bool {
        match lane {
            Lane::Io => self.config.io_workers > 0,
            Lane::Cpu => self.config.cpu_workers > 0,
            Lane::Inline => self.config.cpu_workers + self.config.io_workers > 0,
        }
    }

    /// Submit step 3: joins the registry, bumps `version`, wakes parked
    /// workers of the lanes that got tasks (`wake`).
    pub(super) fn register(&self, inner: &Arc<SubmissionInner>, wake: bool) {
        self.registry.with(|r| {
            prune(r);
            // A resubmitted submission may not have been retired yet.
            if !r.iter().any(|s| Arc::ptr_eq(s, inner)) {
                r.push(inner.clone());
            }
            inner.set_registered(true);
        });
        self.version.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !wake {
            return;
        }
        for lane in Lane::ALL {
            if !inner.queues.is_empty(lane) {
                let p = self.parking(lane);
                if p.sleepers.load(Ordering::SeqCst) > 0 {
                    p.wake_all();
                }
            }
        }
    }

    /// Retire step: a finished submission leaves the registry; workers drop
    /// their copies at their next refresh.
    pub(super) fn retire(&self) {
        self.registry.with(prune);
        // Parked workers are not woken for this (a futex wake per finished
        // submission would cost the hot path); they drop their copies when
        // they next wake.
        self.version.fetch_add(1, Ordering::SeqCst);
    }

    /// A lease of the CPU workers for kernel parallelism, from a CPU worker
    /// (`from_worker`) or from any other thread.
    pub(super) fn lease(&self, from_worker: bool) -> Lease<'_> {
        let helpers = self
            .config
            .cpu_workers
            .saturating_sub(usize::from(from_worker));
        Lease {
            pool: self,
            helpers,
        }
    }

    /// Publish step 1's wake hook: wakes every parked CPU worker.
    fn wake_helpers(&self) {
        fence(Ordering::SeqCst);
        let cpu = &self.parking[Lane::Cpu.index()];
        if cpu.sleepers.load(Ordering::SeqCst) > 0 {
            cpu.wake_all();
        }
    }
}

/// Drops finished submissions from a registry (under its lock).
fn prune(registry: &mut Vec<Arc<SubmissionInner>>) {
    registry.retain(|s| {
        let keep = !s.is_done();
        if !keep {
            s.set_registered(false);
        }
        keep
    });
}

/// Kernel parallelism on a pool's CPU workers: a [`ParallelFor`] whose
/// regions run on the calling thread plus whichever CPU workers are idle
/// (protocol "lease"). A region started while another is running (from a
/// task inside a region, or a second caller) runs inline.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    pool: &'a PoolShared,
    helpers: usize,
}

impl Lease<'_> {
    /// This lease limited to `threads` threads in all (the caller
    /// included; at least one: `1` runs every region inline).
    pub fn at_most(self, threads: usize) -> Self {
        Self {
            helpers: self.helpers.min(threads.saturating_sub(1)),
            ..self
        }
    }
}

// SAFETY: `JobBoard::run` (protocol "lease", model-checked by
// `loom-tests/tests/fork_join.rs`) hands out each index of `0..tasks` once
// through an atomic counter, whichever thread takes it, and returns only
// after the count of finished tasks reaches `tasks`; a panicking task is
// caught and resumed after that, so no call outlives `run`.
unsafe impl ParallelFor for Lease<'_> {
    fn threads(&self) -> usize {
        self.helpers + 1
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        let pool = self.pool;
        pool.board
            .run(self.helpers, tasks, task, || pool.wake_helpers());
    }
}

/// A worker's private state: its lane, fired tasks it keeps for itself
/// (claim-on-fire continuation first) and counts not yet published.
#[derive(Debug)]
pub(super) struct LocalWork {
    lane: Lane,
    /// This worker is the only one of its lane: nobody could take a shared
    /// entry of it, so every task it keeps is claimed when it fires.
    pub(super) exclusive: bool,
    /// Task ids of the current submission; [`CLAIMED_ENTRY`] marks a task
    /// this worker claimed when it fired. Never grows past its capacity.
    pub(super) tasks: Vec<u32>,
    pub(super) terminal: usize,
    pub(super) finished: usize,
    /// A waiting caller helping its own submission, not a pool worker (it
    /// keeps no local work and leases every CPU worker for kernels).
    pub(super) waiter: bool,
}

impl LocalWork {
    fn new(lane: Lane, exclusive: bool) -> Self {
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

/// A worker's copy of the registry.
struct Cache {
    version: u64,
    submissions: Vec<Arc<SubmissionInner>>,
    /// Where the next scan starts (round robin across submissions).
    next: usize,
}

impl Cache {
    /// Refreshes the copy (cold path: after a submit or a retirement).
    fn refresh(&mut self, pool: &PoolShared) {
        self.version = pool.version.load(Ordering::SeqCst);
        pool.registry.with(|r| {
            self.submissions.clear();
            self.submissions
                .extend(r.iter().filter(|s| !s.is_done()).cloned());
        });
    }

    /// The oldest task of the highest priority across submissions: own lane
    /// first, then inline (CPU and I/O workers), per priority.
    fn pop(&mut self, lane: Lane) -> Option<(usize, TaskId)> {
        let n = self.submissions.len();
        let inline = matches!(lane, Lane::Cpu | Lane::Io);
        for p in PRIORITIES {
            for k in 0..n {
                let i = (self.next + k) % n;
                let queues = &self.submissions[i].queues;
                let found = queues
                    .pop_at(lane, p)
                    .or_else(|| inline.then(|| queues.pop_at(Lane::Inline, p)).flatten());
                if let Some(task) = found {
                    self.next = (i + 1) % n;
                    return Some((i, task));
                }
            }
        }
        None
    }

    /// Whether every queue this worker serves looked empty.
    fn idle(&self, lane: Lane) -> bool {
        let inline = matches!(lane, Lane::Cpu | Lane::Io);
        self.submissions
            .iter()
            .all(|s| s.queues.is_empty(lane) && (!inline || s.queues.is_empty(Lane::Inline)))
    }
}

/// The worker loop: local work, then kernel regions (CPU workers), then the
/// shared queues; spin, yield, then park (sleep/wake protocol).
fn worker(pool: &PoolShared, lane: Lane) {
    let parking = &pool.parking[match lane {
        Lane::Inline => Lane::Cpu.index(),
        other => other.index(),
    }];
    let mut cache = Cache {
        version: u64::MAX,
        submissions: Vec::new(),
        next: 0,
    };
    let exclusive = match lane {
        Lane::Cpu => pool.config.cpu_workers == 1,
        Lane::Io => pool.config.io_workers == 1,
        Lane::Inline => false,
    };
    let mut local = LocalWork::new(lane, exclusive);
    // Index in `cache` of the submission `local` belongs to.
    let mut current = usize::MAX;
    let mut seen_job = 0u64;
    let mut polls = 0u32;
    let mut spin_limit = SCHEDULER_SPIN_POLLS;
    let mut searching = false;
    loop {
        if let Some(entry) = local.tasks.pop() {
            let submission = &cache.submissions[current];
            // Work sharing: a searching peer gets the unclaimed entries.
            if local.tasks.len() > 1 && pool.searching(lane) {
                local.tasks.retain(|&e| {
                    if e & CLAIMED_ENTRY == 0 {
                        submission.post(pool, TaskId(e));
                        false
                    } else {
                        true
                    }
                });
            }
            submission.execute(
                pool,
                lane,
                TaskId(entry & !CLAIMED_ENTRY),
                entry & CLAIMED_ENTRY != 0,
                &mut local,
            );
            continue;
        }
        if current != usize::MAX {
            cache.submissions[current].flush(&mut local);
            current = usize::MAX;
        }
        if let Some(g) = (lane == Lane::Cpu)
            .then(|| pool.board.new_job(&mut seen_job))
            .flatten()
        {
            if searching {
                parking.searching.decrement();
                searching = false;
            }
            pool.board.help(g);
            seen_job = g;
            polls = 0;
            spin_limit = SCHEDULER_JOB_SPIN_POLLS;
            continue;
        }
        if pool.version.load(Ordering::Acquire) != cache.version {
            cache.refresh(pool);
        }
        if let Some((i, task)) = cache.pop(lane) {
            if searching {
                parking.searching.decrement();
                searching = false;
            }
            current = i;
            polls = 0;
            spin_limit = SCHEDULER_SPIN_POLLS;
            // A marked entry is a resumed suspension (already claimed).
            let claimed = task.0 & CLAIMED_ENTRY != 0;
            let task = TaskId(task.0 & !CLAIMED_ENTRY);
            let submission = &cache.submissions[i];
            if local.exclusive && lane == Lane::Cpu && !claimed && submission.try_own() {
                // Protocol "own": alone on the CPU lane, run it in id order.
                current = i;
                submission.run_owned(pool, task, &mut local);
                continue;
            }
            submission.execute(pool, lane, task, claimed, &mut local);
            continue;
        }
        if pool.shutdown.load(Ordering::Acquire) {
            break;
        }
        if !searching {
            parking.searching.increment();
            searching = true;
        }
        polls += 1;
        if polls < spin_limit {
            std::hint::spin_loop();
            #[cfg(loom)]
            thread::yield_now();
            continue;
        }
        if polls < spin_limit + SCHEDULER_SPIN_POLLS / 8 {
            // Back-off: with more runnable threads than cores, let the one
            // that will post work have this core.
            thread::yield_now();
            continue;
        }
        // Sleep/wake step 1.
        parking.sleepers.fetch_add(1, Ordering::SeqCst);
        let wake = parking.wake.load(Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let idle = pool.version.load(Ordering::SeqCst) == cache.version
            && cache.idle(lane)
            && (lane != Lane::Cpu || pool.board.new_job(&mut seen_job).is_none())
            && !pool.shutdown.load(Ordering::SeqCst);
        if idle {
            parking.wake.wait(wake);
        }
        parking.sleepers.fetch_sub(1, Ordering::SeqCst);
        polls = 0;
        spin_limit = SCHEDULER_SPIN_POLLS;
    }
    if searching {
        parking.searching.decrement();
    }
}

/// Persistent workers that run submitted [`TaskGraph`]s: CPU workers serve
/// the CPU lane, I/O workers the I/O lane, both serve the inline lane; CPU
/// workers also help
/// kernels' parallel regions ([`WorkerPool::lease`]). Several submissions
/// (from one session or several sharing the pool) run at once, critical
/// work of any of them before prefetch before background. Dropping the pool
/// cancels what never started, then stops and joins every worker.
#[derive(Debug)]
pub struct WorkerPool {
    shared: Arc<PoolShared>,
    /// `(lane, handle)` of every worker.
    workers: Vec<(Lane, thread::JoinHandle<()>)>,
}

/// Why a [`WorkerPool`] could not start; the workers it had started are
/// stopped and joined.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The configuration asks for more threads than
    /// [`crate::limits::MAX_WORKER_THREADS`].
    #[error("{requested} worker threads asked for; at most {limit} are allowed")]
    TooManyWorkers {
        /// Worker threads of the configuration (CPU + I/O).
        requested: usize,
        /// The limit.
        limit: usize,
    },
    /// The system refused to create a thread (out of memory or thread slots).
    #[error("the system could not start worker thread {index} of {requested}: {source}")]
    Thread {
        /// Index of the thread that failed (0-based, CPU workers first).
        index: usize,
        /// Worker threads of the configuration.
        requested: usize,
        /// What the system said.
        source: std::io::Error,
    },
}

/// A worker's body, as handed to the thread spawner.
type WorkerBody = Box<dyn FnOnce() + Send + 'static>;

impl WorkerPool {
    /// Starts `config`'s workers; they park until work arrives.
    ///
    /// # Panics
    ///
    /// When [`WorkerPool::try_new`] fails; sessions use that.
    pub fn new(config: PoolConfig) -> Self {
        Self::try_new(config).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts `config`'s workers, or says why it could not: too many asked
    /// for, or the system refused a thread (those started are joined).
    pub fn try_new(config: PoolConfig) -> Result<Self, SpawnError> {
        Self::start(config, thread::try_spawn)
    }

    /// [`WorkerPool::try_new`] with `spawn` creating each thread.
    fn start(
        config: PoolConfig,
        mut spawn: impl FnMut(WorkerBody) -> std::io::Result<thread::JoinHandle<()>>,
    ) -> Result<Self, SpawnError> {
        let requested = config.cpu_workers.saturating_add(config.io_workers);
        if requested > MAX_WORKER_THREADS {
            return Err(SpawnError::TooManyWorkers {
                requested,
                limit: MAX_WORKER_THREADS,
            });
        }
        let shared = Arc::new(PoolShared {
            config,
            parking: Lane::ALL
                .iter()
                .map(|_| CachePadded::new(Parking::default()))
                .collect(),
            // Reserved so that (re)submitting does not allocate while at most
            // this many submissions are live.
            registry: Lock::new(Vec::with_capacity(64)),
            version: AtomicU64::new(0),
            board: JobBoard::new(),
            shutdown: AtomicBool::new(false),
            pinned: AtomicUsize::new(0),
        });
        // Captured once, before any pinning: the list is the calling
        // thread's affinity mask.
        #[cfg(not(loom))]
        let cores = if config.pin_cpu_workers {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        // Built up in place: on a refused thread, dropping `pool` stops and
        // joins the workers already started (the shutdown protocol).
        let mut pool = Self {
            shared: shared.clone(),
            workers: Vec::with_capacity(requested),
        };
        let mut add = |lane: Lane, body: WorkerBody| -> Result<(), SpawnError> {
            let index = pool.workers.len();
            let handle = spawn(body).map_err(|source| SpawnError::Thread {
                index,
                requested,
                source,
            })?;
            pool.workers.push((lane, handle));
            Ok(())
        };
        for i in 0..config.cpu_workers {
            let shared = shared.clone();
            #[cfg(not(loom))]
            let core = (!cores.is_empty()).then(|| cores[i % cores.len()]);
            #[cfg(loom)]
            let _ = i;
            add(
                Lane::Cpu,
                Box::new(move || {
                    #[cfg(not(loom))]
                    if core.is_some_and(core_affinity::set_for_current) {
                        shared.pinned.fetch_add(1, Ordering::Relaxed);
                    }
                    worker(&shared, Lane::Cpu);
                }),
            )?;
        }
        for _ in 0..config.io_workers {
            let shared = shared.clone();
            add(Lane::Io, Box::new(move || worker(&shared, Lane::Io)))?;
        }
        Ok(pool)
    }

    /// Submits `graph` to run with `runner` (protocol "submit").
    pub fn submit(
        &self,
        graph: impl Into<Arc<TaskGraph>>,
        runner: Arc<dyn TaskRunner>,
    ) -> Result<Submission, SubmitError> {
        self.submit_with(graph, runner, SubmitOptions::default())
    }

    /// Submits `graph` with `options` (protocol "submit"):
    /// 1. Check that every task's lane has a worker.
    /// 2. Build the submission's task words and queues; push every task
    ///    without dependencies.
    /// 3. Add it to the registry, bump `version` (SeqCst), fence, and wake
    ///    every parked worker of each lane that got a task; a worker's
    ///    sleep re-check compares `version`, so none sleeps through it.
    pub fn submit_with(
        &self,
        graph: impl Into<Arc<TaskGraph>>,
        runner: Arc<dyn TaskRunner>,
        options: SubmitOptions,
    ) -> Result<Submission, SubmitError> {
        let graph = graph.into();
        for i in 0..graph.len() {
            let task = TaskId(i as u32);
            let lane = graph.lane(task);
            if !self.shared.serves(lane) {
                return Err(SubmitError::NoWorkers { task, lane });
            }
        }
        if let Some(admission) = &options.admission {
            admission.set_workers(
                self.shared.config.io_workers,
                self.shared.config.cpu_workers,
            );
        }
        let inner = Arc::new_cyclic(|this| {
            SubmissionInner::new(
                Arc::downgrade(&self.shared),
                this.clone(),
                graph,
                runner,
                options,
            )
        });
        if inner.graph.is_empty() {
            inner.finish_empty();
        } else {
            inner.post_roots();
            self.register(&inner, true);
        }
        Ok(Submission {
            inner,
            pool: self.shared.clone(),
        })
    }

    /// Runs a finished submission's graph again with the same runner
    /// (protocol "resubmit"): its words, queues and counts are rearmed in
    /// place, so a steady stream of identical submissions (one per inference,
    /// say) allocates nothing. Hands the submission back unchanged if it is
    /// not finished or belongs to another pool.
    pub fn resubmit(&self, submission: Submission) -> Result<Submission, Submission> {
        self.resubmit_with(submission, true)
    }

    /// [`WorkerPool::resubmit`]; with `wake == false` the roots are neither
    /// posted nor announced (nor is the submission registered until one of
    /// its tasks is queued): the caller waits at once and runs them itself
    /// ([`Submission::wait_helping`]; a plain `wait` posts them first), so
    /// no worker races it and no futex wake is paid. Work the roots fire,
    /// or a suspended task's resumption, goes through the queues as usual.
    pub fn resubmit_with(
        &self,
        submission: Submission,
        wake: bool,
    ) -> Result<Submission, Submission> {
        if !submission.is_done() || !Arc::ptr_eq(&submission.pool, &self.shared) {
            return Err(submission);
        }
        let inner = &submission.inner;
        inner.reset();
        if inner.graph.is_empty() {
            inner.finish_empty();
            return Ok(submission);
        }
        if wake {
            inner.post_roots();
            self.register(inner, true);
        } else {
            // Registered only if a task is ever queued (a fired dependent,
            // a resumed suspension): a run its waiter completes alone never
            // touches the registry.
            inner.defer_roots();
        }
        Ok(submission)
    }

    fn register(&self, inner: &Arc<SubmissionInner>, wake: bool) {
        self.shared.register(inner, wake);
    }

    /// Kernel parallelism on this pool's CPU workers from a thread that is
    /// not one of them (e.g. a replay on the caller's thread): regions run
    /// on the caller plus every idle CPU worker.
    pub fn lease(&self) -> Lease<'_> {
        self.shared.lease(false)
    }

    /// The configuration the pool started with.
    pub fn config(&self) -> PoolConfig {
        self.shared.config
    }

    /// CPU workers that pinned themselves to a core so far (0 where pinning
    /// is refused or off).
    pub fn pinned_workers(&self) -> usize {
        self.shared.pinned.load(Ordering::Acquire)
    }

    /// Thread ids of the workers of `lane`.
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
    /// Shutdown protocol: cancel every registered submission (its unclaimed
    /// tasks never run, its `wait` returns), set `shutdown`, wake every
    /// lane, join every worker. Running tasks finish.
    fn drop(&mut self) {
        let live = self.shared.registry.with(std::mem::take);
        for s in &live {
            s.cancel_all();
        }
        drop(live);
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for parking in self.shared.parking.iter() {
            parking.wake_all();
        }
        for (_, handle) in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn config(cpu_workers: usize) -> PoolConfig {
        PoolConfig {
            cpu_workers,
            io_workers: 1,
            pin_cpu_workers: false,
        }
    }

    /// A thread the system refuses is a typed error naming it; the workers
    /// started before it are stopped and joined (none is left running).
    #[test]
    fn a_refused_thread_is_an_error_and_the_started_workers_are_joined() {
        let finished = Arc::new(AtomicUsize::new(0));
        let mut started = 0;
        let result = WorkerPool::start(config(3), |body| {
            if started == 2 {
                return Err(std::io::Error::other("no more threads"));
            }
            started += 1;
            let finished = finished.clone();
            thread::try_spawn(move || {
                body();
                finished.fetch_add(1, Ordering::SeqCst);
            })
        });
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                SpawnError::Thread {
                    index: 2,
                    requested: 4,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("no more threads"), "{err}");
        assert_eq!(finished.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn too_many_workers_are_refused_before_any_starts() {
        let mut spawned = 0;
        let err = WorkerPool::start(config(MAX_WORKER_THREADS), |body| {
            spawned += 1;
            thread::try_spawn(body)
        })
        .unwrap_err();
        assert!(
            matches!(
                err,
                SpawnError::TooManyWorkers { requested, limit }
                    if requested == MAX_WORKER_THREADS + 1 && limit == MAX_WORKER_THREADS
            ),
            "{err:?}"
        );
        assert_eq!(spawned, 0);
        assert!(WorkerPool::try_new(config(2)).is_ok());
    }
}
