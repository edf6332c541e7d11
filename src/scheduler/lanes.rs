//! A pool's worker lanes as submissions see them ([`Lanes`]): the
//! configuration, the parking lot of each lane (sleep/wake protocol), the
//! work-sharing hint and the kernels' fork-join board with its [`Lease`]
//! (protocol "lease"). Hot path: every post wakes through [`Lanes`].

use crossbeam_utils::CachePadded;

use onnx_prepared_kernels::ParallelFor;

use crate::sync::{AtomicUsize, FutexWord, HintCounter, JobBoard, Ordering, fence};

use super::queue::Lane;

/// How many workers of each kind a pool starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerPoolOptions {
    /// CPU workers: serve the CPU and inline lanes and help kernels'
    /// parallel regions.
    pub cpu_workers: usize,
    /// I/O workers: serve the I/O and inline lanes (blocking reads never
    /// occupy a CPU worker).
    pub io_workers: usize,
    /// Pin CPU worker `i` to core `i % cores` (best effort).
    pub pin_cpu_workers: bool,
}

impl Default for WorkerPoolOptions {
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
pub(super) struct Parking {
    pub(super) sleepers: AtomicUsize,
    /// Bumped by every wake-up; a parked worker waits while it is unchanged.
    pub(super) wake: FutexWord,
    /// Workers of the lane that found no work and are spinning or parked.
    pub(super) searching: HintCounter,
}

impl Parking {
    /// Sleep/wake step 2 (poster side): wakes one parked worker, if any.
    fn wake_one(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.wake.fetch_add(1, Ordering::SeqCst);
            self.wake.wake_one();
        }
    }

    pub(super) fn wake_all(&self) {
        self.wake.fetch_add(1, Ordering::SeqCst);
        self.wake.wake_all();
    }
}

/// The lanes of one pool: what a submission's hot path (post, fire,
/// execute) needs of its pool, without the registry.
#[derive(Debug)]
pub(super) struct Lanes {
    pub(super) config: WorkerPoolOptions,
    /// By dense lane index: io, cpu, (inline: unused). Each on lines of its
    /// own: a lane's workers write `searching` whenever they run dry, and
    /// every post reads the posted lane's `sleepers`.
    pub(super) parking: Box<[CachePadded<Parking>]>,
    /// Kernels' fork-join regions, helped by idle CPU workers.
    pub(super) board: JobBoard,
}

impl Lanes {
    pub(super) fn new(config: WorkerPoolOptions) -> Self {
        Self {
            config,
            parking: Lane::ALL
                .iter()
                .map(|_| CachePadded::new(Parking::default()))
                .collect(),
            board: JobBoard::new(),
        }
    }

    /// The parking lot whose workers serve `lane` (inline: the CPU
    /// workers', or the I/O workers' when there are no CPU workers).
    pub(super) fn parking(&self, lane: Lane) -> &Parking {
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
    pub(super) fn serves(&self, lane: Lane) -> bool {
        match lane {
            Lane::Io => self.config.io_workers > 0,
            Lane::Cpu => self.config.cpu_workers > 0,
            Lane::Inline => self.config.cpu_workers + self.config.io_workers > 0,
        }
    }

    /// A lease of the CPU workers for kernel parallelism, from a CPU worker
    /// (`from_worker`) or from any other thread.
    pub(super) fn lease(&self, from_worker: bool) -> Lease<'_> {
        let helpers = self
            .config
            .cpu_workers
            .saturating_sub(usize::from(from_worker));
        Lease {
            lanes: self,
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

/// Kernel parallelism on a pool's CPU workers: a [`ParallelFor`] whose
/// regions run on the calling thread plus whichever CPU workers are idle
/// (protocol "lease"). A region started while another is running (from a
/// task inside a region, or a second caller) runs inline.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    lanes: &'a Lanes,
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
        let lanes = self.lanes;
        lanes
            .board
            .run(self.helpers, tasks, task, || lanes.wake_helpers());
    }
}
