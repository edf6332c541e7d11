//! `WorkerPool`: persistent CPU and I/O workers that run one [`TaskGraph`]
//! (hot path: the worker loop). Protocols are numbered in the module docs of
//! [`crate::scheduler`].

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::limits::SCHEDULER_SPIN_POLLS;
use crate::plan::TaskId;
use crate::sync::{Arc, AtomicBool, AtomicUsize, FutexWord, Latch, Ordering, fence, thread};

use super::graph::TaskGraph;
use super::queue::{Lane, ReadyQueues};
use super::task_state::{Claim, DependencyDone, TaskState};

/// Runs a task by id; the scheduler never knows what a task does.
pub trait TaskRunner: Send + Sync {
    /// Runs `task`. Called at most once per task, on a worker of the task's
    /// lane, after every dependency's `run` returned (and with its effects
    /// visible). A panic is caught and counted; dependents still run.
    fn run(&self, task: TaskId);
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
    finished: AtomicUsize,
    panicked: AtomicUsize,
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

    /// Post-ready protocol: enqueue a fired task, then wake one sleeper of
    /// its lane.
    fn post(&self, task: TaskId) {
        let lane = self.graph.lane(task);
        self.queues
            .push(lane, self.graph.priority(task), task)
            .expect("ready queues hold every task of the graph: each fires once");
        // Sleep/wake step 2: the push is ordered before the sleeper check.
        fence(Ordering::SeqCst);
        self.parking(lane).wake_one();
    }

    fn next(&self, lane: Lane) -> Option<TaskId> {
        self.queues
            .pop(lane)
            .or_else(|| self.queues.pop(Lane::Inline))
            .map(|(_, task)| task)
    }

    /// Claim protocol: run `task` if this worker wins its claim.
    fn execute(&self, task: TaskId) {
        let state = &self.states[task.0 as usize];
        match state.try_claim() {
            Claim::Claimed => {}
            Claim::AlreadyClaimed | Claim::Cancelled | Claim::NotReady => return,
        }
        if catch_unwind(AssertUnwindSafe(|| self.runner.0.run(task))).is_err() {
            self.panicked.fetch_add(1, Ordering::Relaxed);
        }
        state.complete();
        for &d in self.graph.dependents(task) {
            match self.states[d.0 as usize].dependency_done() {
                DependencyDone::Fired => self.post(d),
                DependencyDone::Pending => {}
            }
        }
        if self.finished.fetch_add(1, Ordering::AcqRel) + 1 == self.graph.len() {
            self.all_done.open();
        }
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
        assert!(
            config.cpu_workers > 0 && config.io_workers > 0,
            "a pool needs both worker kinds"
        );
        let states: Box<[TaskState]> = (0..graph.len())
            .map(|i| TaskState::new(graph.dependency_count(TaskId(i as u32))))
            .collect();
        let shared = Arc::new(Shared {
            queues: ReadyQueues::with_capacity(graph.len()),
            states,
            parking: [Parking::default(), Parking::default()],
            has_cpu_workers: config.cpu_workers > 0,
            finished: AtomicUsize::new(0),
            panicked: AtomicUsize::new(0),
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

    /// Blocks until every task of the graph finished.
    pub fn wait(&self) {
        self.shared.all_done.wait();
    }

    /// Tasks whose run finished so far.
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
