//! The kernels' concurrency seam: the only module of the crate that names a
//! lock (`clippy.toml` forbids the `std` types everywhere else, so that the
//! runtime's own seam, `onnx_prepared::sync`, can switch them to loom).
//!
//! Kernels run inside the runtime's parallel regions and share no mutable
//! state, with one exception: the slab packed parts are carved from
//! (`tensor::slab`), whose bump pointer [`Lock`] guards on the cold path.
//! It is `std`'s under `cfg(loom)` too: it orders nothing but the hand-out
//! of disjoint byte ranges, which loom has nothing to model in.
#![allow(clippy::disallowed_types)]

use std::sync::Mutex;

/// A value behind a lock, reached only inside [`Lock::with`].
#[derive(Debug, Default)]
pub(crate) struct Lock<T>(Mutex<T>);

impl<T> Lock<T> {
    /// `value` behind a lock (usable in a `static`).
    pub(crate) const fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    /// Runs `f` on the value while holding the lock. A panic in an earlier
    /// `f` does not poison it: every `f` here leaves the value whole.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut guard = self.0.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }
}
