//! `ForkJoinPool`: persistent threads that help the caller run `n`
//! independent tasks and return when all are done (hot path: every parallel
//! kernel region goes through it).
//!
//! One atomic word, `claim`, describes the current job: a generation (24
//! bits), the task count (20 bits) and the next unclaimed index (20 bits).
//! Workers and the caller claim indices with a CAS on that word, so a task
//! runs exactly once, and a worker that arrives after the job finished finds
//! the index exhausted (or a newer generation) and claims nothing.
//!
//! Protocols:
//! 1. **Publish** (caller): store the job pointer, reset `finished`, then
//!    store `claim = (generation, tasks, 0)` (SeqCst). If `sleepers > 0`,
//!    bump `wake` and wake every parked worker.
//! 2. **Run**: claim an index by CAS; run the task; `finished += 1`. The job
//!    pointer is dereferenced only after a successful claim, and the caller
//!    cannot return (its stack frame owns the job) until `finished == tasks`,
//!    so the pointer is valid whenever it is used.
//! 3. **Sleep** (worker): after spinning `SPIN_LIMIT` checks without a new
//!    generation: `sleepers += 1` (SeqCst), read `wake`, re-check `claim`
//!    (SeqCst), then futex-wait on `wake`. Either the re-check sees the new
//!    job, or the caller's SeqCst load of `sleepers` sees this worker and
//!    bumps `wake`, which ends the wait: no wake-up is lost.
//! 4. **Nesting**: a `run` while another is in progress (from inside a task,
//!    or a second caller) runs its tasks inline on the calling thread.
//! 5. **Shutdown** (drop): set `shutdown`, bump `wake`, wake all, join.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use super::{Arc, AtomicBool, AtomicU64, AtomicUsize, FutexWord, Ordering, thread};

/// A borrowed task; the pool stores a thin pointer to one on the caller's stack.
type Task<'a> = &'a (dyn Fn(usize) + Sync);

const GEN_BITS: u32 = 24;
const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Most tasks one `run` may have.
pub const MAX_TASKS: usize = COUNT_MASK as usize;

#[cfg(not(loom))]
const SPIN_LIMIT: u32 = 1 << 14;
#[cfg(loom)]
const SPIN_LIMIT: u32 = 1;

fn pack(generation: u64, tasks: u64, next: u64) -> u64 {
    (generation << (2 * COUNT_BITS)) | (tasks << COUNT_BITS) | next
}

fn unpack(word: u64) -> (u64, u64, u64) {
    (
        word >> (2 * COUNT_BITS),
        (word >> COUNT_BITS) & COUNT_MASK,
        word & COUNT_MASK,
    )
}

#[derive(Debug)]
struct Shared {
    claim: AtomicU64,
    /// Thin pointer to the caller's `Task`, valid while its job is unfinished.
    job: AtomicUsize,
    finished: AtomicUsize,
    panicked: AtomicBool,
    busy: AtomicBool,
    sleepers: AtomicUsize,
    wake: FutexWord,
    shutdown: AtomicBool,
}

impl Shared {
    /// Claims and runs tasks of generation `generation` until none is left.
    fn help(&self, generation: u64) {
        loop {
            let word = self.claim.load(Ordering::Acquire);
            let (g, tasks, next) = unpack(word);
            if g != generation || next >= tasks {
                return;
            }
            if self
                .claim
                .compare_exchange_weak(word, word + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            let job = self.job.load(Ordering::Acquire) as *const Task<'_>;
            // SAFETY: the claim succeeded, so generation `g` is current and
            // its task `next` is unfinished; the caller that published it is
            // blocked in `run` until `finished == tasks`, so the `Task` it
            // points to (on that caller's stack) is alive. `job` was stored
            // before `claim` (Release/SeqCst), and our Acquire CAS on `claim`
            // makes that store visible.
            let task: Task<'_> = unsafe { *job };
            if catch_unwind(AssertUnwindSafe(|| task(next as usize))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.finished.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn wake_all(&self) {
        self.wake.fetch_add(1, Ordering::SeqCst);
        self.wake.wake_all();
    }
}

/// Persistent helper threads for fork-join parallel regions.
#[derive(Debug)]
pub struct ForkJoinPool {
    shared: Arc<Shared>,
    workers: Vec<thread::JoinHandle<()>>,
    generation: AtomicU64,
}

impl ForkJoinPool {
    /// A pool with `helpers` threads besides the caller.
    pub fn new(helpers: usize) -> Self {
        let shared = Arc::new(Shared {
            claim: AtomicU64::new(0),
            job: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            wake: FutexWord::default(),
            shutdown: AtomicBool::new(false),
        });
        let workers = (0..helpers)
            .map(|_| {
                let shared = shared.clone();
                thread::spawn(move || worker(&shared))
            })
            .collect();
        Self {
            shared,
            workers,
            generation: AtomicU64::new(0),
        }
    }

    /// Threads that run tasks: the helpers plus the caller.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `task(i)` for every `i` in `0..tasks` on the caller and the
    /// helpers; returns when all have finished. A panic in any task is
    /// re-raised here after every task finished.
    pub fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        let inline = tasks <= 1
            || self.workers.is_empty()
            || tasks > MAX_TASKS
            || self
                .shared
                .busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err();
        if inline {
            (0..tasks).for_each(task);
            return;
        }
        let shared = &*self.shared;
        let generation =
            (self.generation.fetch_add(1, Ordering::Relaxed) + 1) & ((1 << GEN_BITS) - 1);
        let job: Task<'_> = task;
        shared
            .job
            .store(&job as *const Task<'_> as usize, Ordering::Release);
        shared.finished.store(0, Ordering::Relaxed);
        shared
            .claim
            .store(pack(generation, tasks as u64, 0), Ordering::SeqCst);
        if shared.sleepers.load(Ordering::SeqCst) > 0 {
            shared.wake_all();
        }
        shared.help(generation);
        let mut spins = 0u32;
        while shared.finished.load(Ordering::Acquire) < tasks {
            spins += 1;
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
        }
        let panicked = shared.panicked.swap(false, Ordering::Relaxed);
        shared.busy.store(false, Ordering::Release);
        if panicked {
            resume_unwind(Box::new("a parallel task panicked"));
        }
    }
}

fn worker(shared: &Shared) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        let generation = loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            let (g, tasks, next) = unpack(shared.claim.load(Ordering::Acquire));
            if g != seen && next < tasks {
                break g;
            }
            seen = g;
            spins += 1;
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
                #[cfg(loom)]
                thread::yield_now();
                continue;
            }
            // Sleep protocol, step 3 of the module docs.
            shared.sleepers.fetch_add(1, Ordering::SeqCst);
            let wake = shared.wake.load(Ordering::SeqCst);
            let (g, tasks, next) = unpack(shared.claim.load(Ordering::SeqCst));
            if (g == seen || next >= tasks) && !shared.shutdown.load(Ordering::SeqCst) {
                shared.wake.wait(wake);
            }
            shared.sleepers.fetch_sub(1, Ordering::SeqCst);
            spins = 0;
        };
        seen = generation;
        shared.help(generation);
    }
}

impl Drop for ForkJoinPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.wake_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}
