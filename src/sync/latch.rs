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
//! The Release store in `open` pairs with the Acquire loads in `wait`, so
//! everything the opener wrote before opening is visible to every waiter after
//! `wait` returns.

use super::{AtomicBool, AtomicUsize, Condvar, Mutex, Ordering, lock};

/// A gate that starts closed and, once opened, stays open.
#[derive(Debug, Default)]
pub struct Latch {
    open: AtomicBool,
    /// Threads inside the locked part of `wait`.
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cond: Condvar,
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
            let _guard = lock(&self.lock);
            self.cond.notify_all();
        }
    }

    /// Closes an open latch again, for reuse. Only sound to call when no
    /// thread is waiting and none can start waiting on the old opening (the
    /// owner of the latch has observed it open and hands it out again).
    pub fn reset(&self) {
        self.open.store(false, Ordering::Release);
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
