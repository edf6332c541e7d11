//! Fork-join parallel regions (hot path: every parallel kernel region goes
//! through them): [`JobBoard`], the protocol by which a caller publishes `n`
//! independent tasks that idle threads help run. The scheduler's
//! `WorkerPool` serves it from its CPU workers (its kernel lease); there is
//! no second pool.
//!
//! One atomic word, `claim`, describes the current job: a generation (24
//! bits), the task count (20 bits) and the next unclaimed index (20 bits).
//! Helpers and the caller claim indices with a CAS on that word, so a task
//! runs exactly once, and a helper that arrives after the job finished finds
//! the index exhausted (or a newer generation) and claims nothing.
//!
//! Protocols:
//! 1. **Publish** (caller, [`JobBoard::run`]): take the board (`busy` CAS;
//!    taken → run inline, step 4); store the job pointer, reset `finished`,
//!    then store `claim = (generation, tasks, 0)` (SeqCst) and call the
//!    owner's `wake` hook (a SeqCst fence, then wake every parked helper if
//!    any sleeps).
//! 2. **Run**: claim an index by CAS; run the task; `finished += 1`. The job
//!    pointer is dereferenced only after a successful claim, and the caller
//!    cannot return (its stack frame owns the job) until `finished == tasks`,
//!    so the pointer is valid whenever it is used.
//! 3. **Sleep** (helper, in the owner's worker loop): after spinning without a new generation:
//!    `sleepers += 1` (SeqCst), read the wake word, re-check `claim`
//!    ([`JobBoard::new_job`], SeqCst), then futex-wait on the wake word.
//!    Either the re-check sees the new job, or the caller's SeqCst load of
//!    `sleepers` sees this helper and bumps the word, which ends the wait:
//!    no wake-up is lost.
//! 4. **Nesting**: a `run` while another is in progress (from inside a task,
//!    or a second caller) runs its tasks inline on the calling thread.
//! 5. **Shutdown** (drop of the owner): set `shutdown`, bump the wake word,
//!    wake all, join.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use super::{AtomicBool, AtomicU64, AtomicUsize, Ordering, thread};

/// A borrowed task; the board stores a thin pointer to one on the caller's stack.
type Task<'a> = &'a (dyn Fn(usize) + Sync);

const GEN_BITS: u32 = 24;
const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Most tasks one `run` may have.
pub const MAX_TASKS: usize = COUNT_MASK as usize;

/// Polls of `finished` by a caller waiting for helpers before it yields.
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

/// The shared state of fork-join jobs: one job at a time, helped by any
/// thread that polls [`JobBoard::new_job`].
#[derive(Debug, Default)]
pub struct JobBoard {
    claim: AtomicU64,
    /// Thin pointer to the caller's `Task`, valid while its job is unfinished.
    job: AtomicUsize,
    finished: AtomicUsize,
    panicked: AtomicBool,
    busy: AtomicBool,
    generation: AtomicU64,
}

impl JobBoard {
    /// An idle board.
    pub fn new() -> Self {
        Self::default()
    }

    /// The generation of a job published after `*seen` that still has
    /// unclaimed tasks; otherwise records the generation it saw in `seen`
    /// and returns `None` (SeqCst: the re-check of sleep step 3).
    pub fn new_job(&self, seen: &mut u64) -> Option<u64> {
        let (g, tasks, next) = unpack(self.claim.load(Ordering::SeqCst));
        if g != *seen && next < tasks {
            Some(g)
        } else {
            *seen = g;
            None
        }
    }

    /// Run protocol: claims and runs tasks of generation `generation` until
    /// none is left.
    pub fn help(&self, generation: u64) {
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

    /// Runs `task(i)` for every `i` in `0..tasks` on the caller and whoever
    /// helps; returns when all have finished. `wake` is called once the job
    /// is published (publish step 1). With `helpers == 0`, a single task, or
    /// the board taken (nesting, step 4) the tasks run inline. A panic in
    /// any task is re-raised here after every task finished.
    pub fn run(
        &self,
        helpers: usize,
        tasks: usize,
        task: &(dyn Fn(usize) + Sync),
        wake: impl FnOnce(),
    ) {
        let inline = tasks <= 1
            || helpers == 0
            || tasks > MAX_TASKS
            || self
                .busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err();
        if inline {
            (0..tasks).for_each(task);
            return;
        }
        let generation =
            (self.generation.fetch_add(1, Ordering::Relaxed) + 1) & ((1 << GEN_BITS) - 1);
        let job: Task<'_> = task;
        self.job
            .store(&job as *const Task<'_> as usize, Ordering::Release);
        self.finished.store(0, Ordering::Relaxed);
        self.claim
            .store(pack(generation, tasks as u64, 0), Ordering::SeqCst);
        wake();
        self.help(generation);
        let mut spins = 0u32;
        while self.finished.load(Ordering::Acquire) < tasks {
            spins += 1;
            if spins < SPIN_LIMIT {
                std::hint::spin_loop();
            } else {
                thread::yield_now();
            }
        }
        let panicked = self.panicked.swap(false, Ordering::Relaxed);
        self.busy.store(false, Ordering::Release);
        if panicked {
            resume_unwind(Box::new("a parallel task panicked"));
        }
    }
}
