//! The concurrency seam: the only module that names atomics, cells, locks and
//! threads. It re-exports `std` normally and `loom` under `cfg(loom)`, so the
//! `loom-tests` crate model-checks the same code the runtime runs.
//!
//! Depends on nothing else in the crate. `clippy.toml` forbids the `std` types
//! everywhere but here.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

mod bounded_queue;
pub mod epoch;
mod event;
mod fork_join;
mod futex;
mod latch;
mod lock;
mod free_list;

pub use bounded_queue::BoundedQueue;
pub use event::{ContinuationKey, Event};
pub use fork_join::{JobBoard, MAX_TASKS};
pub use futex::FutexWord;
pub use latch::Latch;
pub use lock::Lock;
pub use free_list::FreeList;

#[cfg(not(loom))]
pub use std::sync::Arc;
/// A value set once and read ever after (the allocation ceiling's budget, an
/// embedded weight's digest). `std`'s under `cfg(loom)` too: a set-once memo
/// whose only effect is to skip recomputing a pure value, which loom does not
/// model.
pub use std::sync::OnceLock;
#[cfg(not(loom))]
use std::sync::atomic as imp;
#[cfg(not(loom))]
pub use std::sync::atomic::{Ordering, fence};
#[cfg(not(loom))]
use std::sync::{Condvar, Mutex, MutexGuard};

#[cfg(loom)]
pub use loom::sync::Arc;
#[cfg(loom)]
use loom::sync::atomic as imp;
#[cfg(loom)]
pub use loom::sync::atomic::{Ordering, fence};
#[cfg(loom)]
use loom::sync::{Condvar, Mutex, MutexGuard};

/// Declares a transparent wrapper over the `std` (or `loom`) atomic of the
/// same name. The wrapper is what the rest of the crate names, so the
/// `disallowed-types` lint can tell seam users from direct users; every
/// method of the wrapped atomic is reached through `Deref`.
macro_rules! atomic {
    ($(#[$doc:meta])* $name:ident($int:ty)) => {
        $(#[$doc])*
        #[derive(Debug)]
        #[repr(transparent)]
        pub struct $name(imp::$name);

        impl $name {
            /// A new atomic holding `value`.
            #[cfg(not(loom))]
            pub const fn new(value: $int) -> Self {
                Self(imp::$name::new(value))
            }

            /// A new atomic holding `value`.
            #[cfg(loom)]
            pub fn new(value: $int) -> Self {
                Self(imp::$name::new(value))
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new(<$int>::default())
            }
        }

        impl std::ops::Deref for $name {
            type Target = imp::$name;

            fn deref(&self) -> &Self::Target {
                &self.0
            }
        }
    };
}

atomic!(
    /// `AtomicBool` through the seam.
    AtomicBool(bool)
);
atomic!(
    /// `AtomicU32` through the seam.
    AtomicU32(u32)
);
atomic!(
    /// `AtomicU64` through the seam.
    AtomicU64(u64)
);
atomic!(
    /// `AtomicUsize` through the seam.
    AtomicUsize(usize)
);

/// Threads, through the same seam.
pub mod thread {
    #[cfg(not(loom))]
    use std::thread as imp;

    #[cfg(loom)]
    use loom::thread as imp;

    pub use imp::{JoinHandle, yield_now};

    /// Spawns a thread (`std::thread::spawn`, or loom's under `cfg(loom)`).
    pub fn spawn<F, T>(f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        imp::spawn(f)
    }

    /// Spawns a thread, or says why the system could not create one
    /// (`std::thread::Builder::spawn`; loom's threads always start).
    pub fn try_spawn<F, T>(f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        #[cfg(not(loom))]
        return imp::Builder::new().spawn(f);
        #[cfg(loom)]
        return Ok(imp::spawn(f));
    }

    /// Sleeps the current thread. Loom has no clock: under `cfg(loom)` a
    /// sleep is a yield.
    pub fn sleep(duration: std::time::Duration) {
        #[cfg(not(loom))]
        imp::sleep(duration);
        #[cfg(loom)]
        {
            let _ = duration;
            imp::yield_now();
        }
    }
}

/// Locks `mutex`, ignoring poisoning: the seam's own primitives keep no
/// invariant that a panicking holder could break halfway.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A relaxed counter that no protocol depends on (a heuristic hint, e.g.
/// "some worker is looking for work"). It is `std`'s atomic even under
/// `cfg(loom)`: loom would explore every interleaving of its updates for
/// nothing, since any value read is acceptable to its users.
#[derive(Debug, Default)]
pub struct HintCounter(std::sync::atomic::AtomicUsize);

impl HintCounter {
    /// Adds one.
    pub fn increment(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Subtracts one.
    pub fn decrement(&self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The current value (relaxed).
    pub fn get(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}
