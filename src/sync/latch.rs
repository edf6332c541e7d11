//! `Latch`: a one-shot gate that threads wait on until someone opens it
//! (cold path: fault injection now, completion events later).
//!
//! Protocol (why no wake-up is lost):
//! 1. `open` stores `open = true` (Release), then takes the lock and notifies.
//! 2. `wait` checks `open` (Acquire); if it is still closed it takes the lock,
//!    re-checks under the lock and sleeps on the condition variable, which
//!    releases the lock atomically.
//! 3. A waiter that saw "closed" under the lock is asleep before the opener can
//!    take the lock in step 1, so the notification reaches it; a waiter that
//!    arrives later sees `open == true` at its first or second check.
//!
//! The Release store in `open` pairs with the Acquire loads in `wait`, so
//! everything the opener wrote before opening is visible to every waiter after
//! `wait` returns.

use super::{AtomicBool, Condvar, Mutex, Ordering, lock};

/// A gate that starts closed and, once opened, stays open.
#[derive(Debug, Default)]
pub struct Latch {
    open: AtomicBool,
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
        self.open.store(true, Ordering::Release);
        let _guard = lock(&self.lock);
        self.cond.notify_all();
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
        while !self.open.load(Ordering::Acquire) {
            guard = self
                .cond
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}
