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
//! Continuations (registered instead of blocking, [`Event::on_complete`])
//! live beside the condition variable, under the same lock:
//! 4. `on_complete(s, f)` checks the stamp; if it is below `s` it takes the
//!    lock, re-checks and, still below, keeps `f`; otherwise it calls `f` at
//!    once (after releasing the lock).
//! 5. `complete(s)` takes, under the lock, every kept continuation whose
//!    target is now reached and calls them after releasing it. A
//!    continuation is so called exactly once: either its registrant saw the
//!    raised stamp, or it was kept before the completer took the lock and
//!    the completer takes it.
//! 6. `deregister(key)` (the key `on_complete` returned when it kept `f`)
//!    takes `f` back under the lock, unless a completer already took it, and
//!    drops it (after releasing the lock) without calling it. A continuation
//!    is thus either called once or dropped uncalled, never both: whoever
//!    removes it from the list under the lock owns it. Keys are never reused,
//!    so a stale key removes nothing.

use super::{AtomicU64, Condvar, Mutex, Ordering, lock};

/// A continuation kept until its target stamp: called once, with the stamp
/// that satisfied it.
pub type Continuation = Box<dyn FnOnce(u64) + Send>;

/// The continuations kept under the event's lock.
#[derive(Default)]
struct Kept {
    /// `(target, key, f)`, in registration order.
    waiting: Vec<(u64, u64, Continuation)>,
    /// The key of the next kept continuation.
    next_key: u64,
}

/// A kept continuation's key (protocol step 6), returned by
/// [`Event::on_complete`] when it did not call the continuation at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContinuationKey(u64);

/// A completion event whose stamp only grows.
#[derive(Default)]
pub struct Event {
    stamp: AtomicU64,
    /// Continuations waiting for a stamp, with their targets and keys.
    lock: Mutex<Kept>,
    cond: Condvar,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("stamp", &self.stamp())
            .finish_non_exhaustive()
    }
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
        let seen = self.stamp();
        let due: Vec<(u64, u64, Continuation)> = {
            let mut kept = lock(&self.lock);
            self.cond.notify_all();
            if kept.waiting.is_empty() {
                Vec::new()
            } else {
                let (due, waiting) = std::mem::take(&mut kept.waiting)
                    .into_iter()
                    .partition(|(target, _, _)| *target <= seen);
                kept.waiting = waiting;
                due
            }
        };
        for (_, _, f) in due {
            f(seen);
        }
    }

    /// Calls `f` once the stamp is at least `target`: at once (on this
    /// thread) if it already is, else on the thread that completes it
    /// (protocol steps 4–5). `f` must not block. Returns the key that
    /// [`deregister`](Self::deregister) takes `f` back with, or `None` when
    /// `f` was already called.
    pub fn on_complete(&self, target: u64, f: Continuation) -> Option<ContinuationKey> {
        let seen = self.stamp();
        if seen >= target {
            f(seen);
            return None;
        }
        let ready = {
            let mut kept = lock(&self.lock);
            let seen = self.stamp.load(Ordering::Acquire);
            if seen >= target {
                Err((seen, f))
            } else {
                let key = kept.next_key;
                kept.next_key += 1;
                kept.waiting.push((target, key, f));
                Ok(ContinuationKey(key))
            }
        };
        match ready {
            Ok(key) => Some(key),
            Err((seen, f)) => {
                f(seen);
                None
            }
        }
    }

    /// Protocol step 6: drops the continuation kept under `key` without
    /// calling it; `true` if it was still kept (no completer took it).
    /// Its drop runs on this thread, after the lock is released.
    pub fn deregister(&self, key: ContinuationKey) -> bool {
        let removed = {
            let mut kept = lock(&self.lock);
            let at = kept.waiting.iter().position(|(_, k, _)| *k == key.0);
            at.map(|at| kept.waiting.remove(at))
        };
        removed.is_some()
    }

    /// Continuations kept now (registered, not yet called or deregistered).
    pub fn kept(&self) -> usize {
        lock(&self.lock).waiting.len()
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
