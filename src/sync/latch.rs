//! `Latch`: a one-shot gate that threads wait on until someone opens it
//! (cold path: fault injection now, completion events later).
//!
//! Protocol (why no wake-up is lost):
//! 1. `open` stores `open = true`, then reads `waiters` with a read-modify-
//!    write (`fetch_add(0)`, SeqCst); only if someone may sleep does it take
//!    the lock and notify (an uncontended open — the common case — touches
//!    no lock).
//! 2. `wait` checks `open` (Acquire); if it is still closed it takes the lock,
//!    increments `waiters` (SeqCst), re-checks `open` (SeqCst) under the lock
//!    and sleeps on the condition variable, which releases the lock
//!    atomically; it decrements `waiters` when it returns.
//! 3. Both sides touch `waiters` with RMWs, which are totally ordered. If
//!    the opener's comes first, the waiter's increment reads from it
//!    (acquire), so the opener's earlier store of `open` is visible to the
//!    waiter's re-check; if the waiter's comes first, the opener reads a
//!    non-zero count and takes the lock — which it can only get once the
//!    waiter sleeps — and notifies it. No wake-up is lost (loom model
//!    `latch::every_waiter_is_woken_exactly_once`).
//!
//! 4. `on_open` registers a hook the way `wait` registers a sleeper: under
//!    the lock it increments `waiters`, then re-checks `open` (SeqCst). Open
//!    already: it undoes the increment and runs the hook itself, after
//!    releasing the lock. Still closed: it stores the hook (chained after any
//!    earlier one) and keeps the increment, so the opener's RMW of step 1
//!    reads a non-zero count, takes the lock and the hook, and runs it after
//!    releasing the lock. By the argument of step 3 exactly one of the two
//!    runs it (loom model `latch::hook_runs_exactly_once`). An opener
//!    takes the hook only while the latch is still open under the lock; a
//!    [`Latch::reset`] (the latch reused) takes, under the lock, a hook its
//!    opener has not taken yet and runs it: an opener delayed past the reset
//!    runs neither that hook nor one stored for the next opening (loom model
//!    `latch::a_reset_runs_a_late_opener_s_hook_and_keeps_the_next_one`).
//!
//! The Release store in `open` pairs with the Acquire loads in `wait`, so
//! everything the opener wrote before opening is visible to every waiter after
//! `wait` returns (and to a hook, which runs after the lock or the SeqCst
//! load that saw the latch open).

use super::{AtomicBool, AtomicUsize, Condvar, Mutex, Ordering, lock};

/// What [`Latch::on_open`] runs once the latch is open.
type Hook = Box<dyn FnOnce() + Send>;

/// A gate that starts closed and, once opened, stays open.
#[derive(Default)]
pub struct Latch {
    open: AtomicBool,
    /// Threads inside the locked part of `wait`, plus one while a hook is
    /// stored.
    waiters: AtomicUsize,
    /// The hook registered by `on_open` while the latch was closed.
    lock: Mutex<Option<Hook>>,
    cond: Condvar,
}

impl std::fmt::Debug for Latch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latch")
            .field("open", &self.is_open())
            .finish_non_exhaustive()
    }
}

impl Latch {
    /// A closed latch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens the latch and wakes every waiter. Opening twice is harmless.
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        // An RMW, not a load: it reads the latest `waiters` and — being a
        // release in the counter's modification order — makes the store
        // above visible to any waiter whose increment comes after it.
        if self.waiters.fetch_add(0, Ordering::SeqCst) > 0 {
            let hook = {
                let mut guard = lock(&self.lock);
                self.cond.notify_all();
                // A latch reset (and reused) since this opening is closed
                // again: a hook stored now belongs to its next opening,
                // which takes it.
                if guard.is_some() && self.open.load(Ordering::SeqCst) {
                    guard.take()
                } else {
                    None
                }
            };
            if let Some(hook) = hook {
                self.waiters.fetch_sub(1, Ordering::SeqCst);
                hook();
            }
        }
    }

    /// Runs `hook` exactly once, once the latch is open (protocol step 4):
    /// at once on the calling thread when it is open already, else on the
    /// thread whose [`Latch::open`] opens it, after that thread has woken the
    /// waiters. Several hooks run in the order they were registered. A hook
    /// of a latch that never opens is dropped with it, never run.
    pub fn on_open(&self, hook: Hook) {
        let mut guard = lock(&self.lock);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        if self.open.load(Ordering::SeqCst) {
            // A hook stored before the opening that its opener has not
            // taken yet runs first, here (the opener then finds none).
            let earlier = guard.take();
            let stored = usize::from(earlier.is_some());
            self.waiters.fetch_sub(1 + stored, Ordering::SeqCst);
            drop(guard);
            if let Some(earlier) = earlier {
                earlier();
            }
            hook();
            return;
        }
        *guard = Some(match guard.take() {
            Some(first) => {
                // The stored hook already holds its increment.
                self.waiters.fetch_sub(1, Ordering::SeqCst);
                Box::new(move || {
                    first();
                    hook();
                })
            }
            None => hook,
        });
    }

    /// Closes an open latch again, for reuse. Only sound to call when no
    /// thread is waiting and none can start waiting on the old opening (the
    /// owner of the latch has observed it open and hands it out again).
    pub fn reset(&self) {
        // A hook of the opening being reset that its opener has not taken
        // yet (the opener was delayed before the lock) runs here, once: the
        // opener, finding the latch closed under the lock, leaves it. Hooks
        // imply a non-zero count, so a reset without one takes no lock.
        if self.waiters.load(Ordering::SeqCst) == 0 {
            self.open.store(false, Ordering::Release);
            return;
        }
        let hook = {
            let mut guard = lock(&self.lock);
            self.open.store(false, Ordering::SeqCst);
            guard.take()
        };
        if let Some(hook) = hook {
            self.waiters.fetch_sub(1, Ordering::SeqCst);
            hook();
        }
    }

    /// Whether the latch has been opened.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Blocks until the latch is open.
    pub fn wait(&self) {
        if self.is_open() {
            return;
        }
        let mut guard = lock(&self.lock);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        while !self.open.load(Ordering::SeqCst) {
            guard = self
                .cond
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}
