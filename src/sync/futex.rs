//! `FutexWord`: an `AtomicU32` threads can sleep on until its value changes
//! (cold path: parking idle workers).
//!
//! Normally `atomic-wait` (a futex on Linux). Loom has no futex, so under
//! `cfg(loom)` a loom `Mutex` + `Condvar` with the same semantics stands in:
//! `wait` blocks while the word still holds `expected`, and `wake_*` takes
//! the lock before notifying, so a waiter that checked the word under the
//! lock cannot miss the notification. A lost wake-up in a protocol built on
//! it therefore shows up as a loom deadlock.

use super::{AtomicU32, Ordering};

/// A 32-bit word to wait on.
#[derive(Debug, Default)]
pub struct FutexWord {
    word: AtomicU32,
    #[cfg(loom)]
    parked: (loom::sync::Mutex<()>, loom::sync::Condvar),
}

impl FutexWord {
    /// The current value.
    pub fn load(&self, order: Ordering) -> u32 {
        self.word.load(order)
    }

    /// Adds to the value (wrapping) and returns the previous one.
    pub fn fetch_add(&self, value: u32, order: Ordering) -> u32 {
        self.word.fetch_add(value, order)
    }

    /// Blocks while the value is `expected`; may return spuriously.
    pub fn wait(&self, expected: u32) {
        #[cfg(not(loom))]
        atomic_wait::wait(&self.word, expected);
        #[cfg(loom)]
        {
            let mut guard = self.parked.0.lock().unwrap_or_else(|p| p.into_inner());
            while self.word.load(Ordering::SeqCst) == expected {
                guard = self.parked.1.wait(guard).unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    /// Wakes one thread blocked in [`FutexWord::wait`].
    pub fn wake_one(&self) {
        #[cfg(not(loom))]
        atomic_wait::wake_one(&*self.word);
        #[cfg(loom)]
        {
            drop(self.parked.0.lock().unwrap_or_else(|p| p.into_inner()));
            self.parked.1.notify_all();
        }
    }

    /// Wakes every thread blocked in [`FutexWord::wait`].
    pub fn wake_all(&self) {
        #[cfg(not(loom))]
        atomic_wait::wake_all(&*self.word);
        #[cfg(loom)]
        {
            drop(self.parked.0.lock().unwrap_or_else(|p| p.into_inner()));
            self.parked.1.notify_all();
        }
    }
}
