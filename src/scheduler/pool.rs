//! `WorkerPool`: persistent CPU and I/O workers that run the
//! graphs submitted to them and the kernels' parallel regions (hot path:
//! the worker loop), and the registry of live submissions they serve
//! (reached by a submission through [`PoolHost`]). Protocols are numbered
//! in the module docs of [`crate::scheduler`].

use std::sync::Arc;

use crate::limits::{MAX_WORKER_THREADS, SCHEDULER_JOB_SPIN_POLLS, SCHEDULER_SPIN_POLLS};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Lock, Ordering, fence, thread};

use super::graph::TaskGraph;
use super::lanes::{Lanes, Lease, Parking, WorkerPoolOptions};
use super::local::LocalWork;
use super::queue::{Lane, PRIORITIES};
use super::submission::{
    CLAIMED_ENTRY, PoolHost, Submission, SubmissionInner, SubmitError, SubmitOptions, TaskRunner,
};
use crate::scheduler::TaskId;

/// State shared by a pool's workers, its submissions and its leases.
#[derive(Debug)]
pub(super) struct PoolShared {
    /// What a submission's hot path needs of the pool (configuration,
    /// parking, the kernels' board); submissions hold it directly.
    lanes: Arc<Lanes>,
    /// Submissions not yet retired; workers cache a copy.
    registry: Lock<Vec<Arc<SubmissionInner>>>,
    /// Bumped (SeqCst) whenever `registry` changes.
    version: AtomicU64,
    shutdown: AtomicBool,
    pinned: AtomicUsize,
}

/// The registry side of a submission's pool: called once per (lazy)
/// registration and once per retirement, never per task.
impl PoolHost for PoolShared {
    /// Submit step 3: joins the registry, bumps `version`, wakes parked
    /// workers of the lanes that got tasks (`wake`).
    fn register(&self, inner: &Arc<SubmissionInner>, wake: bool) {
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
                let p = self.lanes.parking(lane);
                if p.sleepers.load(Ordering::SeqCst) > 0 {
                    p.wake_all();
                }
            }
        }
    }

    /// Retire step: a finished submission leaves the registry; workers drop
    /// their copies at their next refresh.
    fn retire(&self) {
        self.registry.with(prune);
        // Parked workers are not woken for this (a futex wake per finished
        // submission would cost the hot path); they drop their copies when
        // they next wake.
        self.version.fetch_add(1, Ordering::SeqCst);
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
                let submission = &self.submissions[i];
                let queues = &submission.queues;
                let found = submission
                    .may_start(lane, p)
                    .then(|| queues.pop_at(lane, p))
                    .flatten()
                    .or_else(|| inline.then(|| queues.pop_at(Lane::Inline, p)).flatten());
                if let Some(task) = found {
                    self.next = (i + 1) % n;
                    return Some((i, task));
                }
            }
        }
        None
    }

    /// Whether every queue this worker serves looked empty, or held only
    /// tasks it may not start now (admit step 0).
    fn idle(&self, lane: Lane) -> bool {
        let inline = matches!(lane, Lane::Cpu | Lane::Io);
        self.submissions
            .iter()
            .all(|s| s.nothing_to_start(lane) && (!inline || s.queues.is_empty(Lane::Inline)))
    }
}

/// The worker loop: local work, then kernel regions (CPU workers), then the
/// shared queues; spin, yield, then park (sleep/wake protocol).
fn worker(pool: &PoolShared, lane: Lane) {
    let lanes = &*pool.lanes;
    let parking = &lanes.parking[match lane {
        Lane::Inline => Lane::Cpu.index(),
        other => other.index(),
    }];
    let mut cache = Cache {
        version: u64::MAX,
        submissions: Vec::new(),
        next: 0,
    };
    let exclusive = match lane {
        Lane::Cpu => lanes.config.cpu_workers == 1,
        Lane::Io => lanes.config.io_workers == 1,
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
            run_local(lanes, lane, &cache.submissions[current], entry, &mut local);
            continue;
        }
        if current != usize::MAX {
            cache.submissions[current].flush(&mut local);
            current = usize::MAX;
        }
        if let Some(g) = (lane == Lane::Cpu)
            .then(|| lanes.board.new_job(&mut seen_job))
            .flatten()
        {
            if searching {
                parking.searching.decrement();
                searching = false;
            }
            lanes.board.help(g);
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
                submission.run_owned(lanes, task, &mut local);
                continue;
            }
            submission.execute(lanes, lane, task, claimed, &mut local);
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
        park(pool, parking, &cache, lane, &mut seen_job);
        polls = 0;
        spin_limit = SCHEDULER_SPIN_POLLS;
    }
    if searching {
        parking.searching.decrement();
    }
}

/// Runs `entry`, popped from the worker's local work of `submission`;
/// first shares the unclaimed rest with a searching peer.
#[inline]
fn run_local(
    lanes: &Lanes,
    lane: Lane,
    submission: &Arc<SubmissionInner>,
    entry: u32,
    local: &mut LocalWork,
) {
    if local.tasks.len() > 1 && lanes.searching(lane) {
        local.tasks.retain(|&e| {
            if e & CLAIMED_ENTRY == 0 {
                submission.post(lanes, TaskId(e));
                false
            } else {
                true
            }
        });
    }
    submission.execute(
        lanes,
        lane,
        TaskId(entry & !CLAIMED_ENTRY),
        entry & CLAIMED_ENTRY != 0,
        local,
    );
}

/// Sleep/wake step 1: announce the sleeper, check once more that nothing
/// can start, and sleep until a poster wakes the lane.
fn park(pool: &PoolShared, parking: &Parking, cache: &Cache, lane: Lane, seen_job: &mut u64) {
    let lanes = &*pool.lanes;
    parking.sleepers.fetch_add(1, Ordering::SeqCst);
    let wake = parking.wake.load(Ordering::SeqCst);
    fence(Ordering::SeqCst);
    let idle = pool.version.load(Ordering::SeqCst) == cache.version
        && cache.idle(lane)
        && (lane != Lane::Cpu || lanes.board.new_job(seen_job).is_none())
        && !pool.shutdown.load(Ordering::SeqCst);
    if idle {
        parking.wake.wait(wake);
    }
    parking.sleepers.fetch_sub(1, Ordering::SeqCst);
}

/// Persistent workers that run submitted `TaskGraph`s: CPU workers serve
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
    pub fn new(config: WorkerPoolOptions) -> Self {
        Self::try_new(config).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts `config`'s workers, or says why it could not: too many asked
    /// for, or the system refused a thread (those started are joined).
    pub fn try_new(config: WorkerPoolOptions) -> Result<Self, SpawnError> {
        Self::start(config, thread::try_spawn)
    }

    /// [`WorkerPool::try_new`] with `spawn` creating each thread.
    fn start(
        config: WorkerPoolOptions,
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
            lanes: Arc::new(Lanes::new(config)),
            // Reserved so that (re)submitting does not allocate while at most
            // this many submissions are live.
            registry: Lock::new(Vec::with_capacity(64)),
            version: AtomicU64::new(0),
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
            if !self.shared.lanes.serves(lane) {
                return Err(SubmitError::NoWorkers { task, lane });
            }
        }
        if let Some(admission) = &options.admission {
            let config = self.shared.lanes.config;
            admission.set_workers(config.io_workers, config.cpu_workers);
        }
        let host: Arc<dyn PoolHost> = self.shared.clone();
        let inner = Arc::new_cyclic(|this| {
            SubmissionInner::new(
                Arc::downgrade(&host),
                Arc::downgrade(&self.shared.lanes),
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
            pool: host,
            lanes: self.shared.lanes.clone(),
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
    /// (`Submission::wait_helping`; a plain `wait` posts them first), so
    /// no worker races it and no futex wake is paid. Work the roots fire,
    /// or a suspended task's resumption, goes through the queues as usual.
    pub fn resubmit_with(
        &self,
        submission: Submission,
        wake: bool,
    ) -> Result<Submission, Submission> {
        let same_pool = std::ptr::addr_eq(Arc::as_ptr(&submission.pool), Arc::as_ptr(&self.shared));
        if !submission.is_done() || !same_pool {
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
        self.shared.lanes.lease(false)
    }

    /// The configuration the pool started with.
    pub fn config(&self) -> WorkerPoolOptions {
        self.shared.lanes.config
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
        for parking in self.shared.lanes.parking.iter() {
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

    fn config(cpu_workers: usize) -> WorkerPoolOptions {
        WorkerPoolOptions {
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
