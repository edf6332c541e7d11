//! `Lock`: a mutex for cold paths outside the seam (registries, deferred
//! lists). Hot paths never take it.

use super::{Mutex, lock};

/// A value behind a mutex, reached only through [`Lock::with`] so no guard
/// type leaks out of the seam. Poisoning is ignored: holders keep no
/// invariant a panic could break halfway.
#[derive(Debug, Default)]
pub struct Lock<T>(Mutex<T>);

impl<T> Lock<T> {
    /// A lock around `value`.
    pub fn new(value: T) -> Self {
        Self(Mutex::new(value))
    }

    /// Runs `f` on the value while holding the lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut lock(&self.0))
    }
}
