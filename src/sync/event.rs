//! `Event`: a reusable completion event stamped with a monotonic `u64` (cold
//! path: prepared-object completion, one per store entry).
//!
//! Where [`Latch`](super::Latch) opens once, an `Event` completes many times:
//! each completion stores a larger *stamp* and wakes everyone. A waiter asks
//! for a stamp (`wait_for(s)`) and returns once the event's stamp is `>= s`.
//! Users encode a generation in the high bits of the stamp, so one event
//! serves every generation of an object: a waiter for generation `g` is not
//! satisfied by generation `g - 1`'s completion, and is satisfied by `g`'s or
//! any later one's.
//!
//! Protocol (why no wake-up is lost; the latch's, with a stamp for a flag):
//! 1. `complete(s)` raises the stamp to `s` (`fetch_max`, Release), then takes
//!    the lock and notifies every sleeper.
//! 2. `wait_for(s)` checks the stamp (Acquire); if it is still below `s` it
//!    takes the lock, re-checks under the lock and sleeps on the condition
//!    variable, which releases the lock atomically.
//! 3. A waiter that saw a low stamp under the lock is asleep before the
//!    completer can take the lock in step 1, so the notification reaches it; a
//!    waiter that arrives later sees the raised stamp at one of its checks.
//!
//! The Release in `complete` pairs with the Acquire loads in `wait_for` and
//! `stamp`, so everything the completer wrote before completing is visible to
//! a waiter that observed the stamp.
//!
//! The core is this small struct so that a list of continuations (registered
//! instead of blocking) can later live beside the condition variable.

use super::{AtomicU64, Condvar, Mutex, Ordering, lock};

/// A completion event whose stamp only grows.
#[derive(Debug, Default)]
pub struct Event {
    stamp: AtomicU64,
    lock: Mutex<()>,
    cond: Condvar,
}

impl Event {
    /// An event with stamp 0 (nothing completed yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The latest completed stamp (Acquire).
    pub fn stamp(&self) -> u64 {
        self.stamp.load(Ordering::Acquire)
    }

    /// Raises the stamp to `stamp` and wakes every waiter. A stamp not above
    /// the current one leaves it unchanged (but still wakes, harmlessly).
    pub fn complete(&self, stamp: u64) {
        self.stamp.fetch_max(stamp, Ordering::Release);
        let _guard = lock(&self.lock);
        self.cond.notify_all();
    }

    /// Blocks until the stamp is at least `target`; returns the stamp seen.
    pub fn wait_for(&self, target: u64) -> u64 {
        let seen = self.stamp();
        if seen >= target {
            return seen;
        }
        let mut guard = lock(&self.lock);
        loop {
            let seen = self.stamp.load(Ordering::Acquire);
            if seen >= target {
                return seen;
            }
            guard = self
                .cond
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}
