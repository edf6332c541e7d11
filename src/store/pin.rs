//! Reading and evicting a resident object: [`Pin`] (a counted reference that
//! blocks eviction), [`ReadGuard`] (an epoch guard that delays destruction)
//! and eviction itself (hot path: pin, unpin, guarded reads; eviction is cold
//! path; store protocols 4 and 5).

use std::fmt;
use std::ops::Deref;

use super::residency::{HolderTransition, TransitionToEvicting, TransitionToPinned};
use super::{Entry, Generation, PreparedObjectStore};
use crate::sync::{Ordering, epoch};

/// What [`PreparedObjectStore::try_evict`] did.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evict {
    /// Unpublished; `bytes` (the generation's size) left the resident set.
    /// The object is destroyed once no epoch guard can still read it.
    Evicted {
        /// The generation evicted.
        generation: Generation,
        /// Its byte size.
        bytes: usize,
    },
    /// Resident but pinned: nothing changed.
    Pinned {
        /// Pins seen.
        pins: u32,
    },
    /// Not resident (absent, in flight, failed, or being evicted by another).
    NotResident,
}

/// A pinned resident object: derefs to it; dropping unpins. While any pin of
/// an entry lives, the entry stays `Resident` and cannot be evicted.
pub struct Pin<'a, T> {
    entry: &'a Entry<T>,
    object: &'a T,
    generation: Generation,
}

impl<T> fmt::Debug for Pin<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pin")
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl<T> Pin<'_, T> {
    /// The generation pinned.
    pub fn generation(&self) -> Generation {
        self.generation
    }
}

impl<T> Deref for Pin<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.object
    }
}

impl<T> Drop for Pin<'_, T> {
    fn drop(&mut self) {
        let _previous = self.entry.residency.unpin();
    }
}

/// Store protocol 4.
pub(super) fn pin<T>(entry: &Entry<T>) -> Option<Pin<'_, T>> {
    let snapshot = match entry.residency.pin() {
        TransitionToPinned::Pinned(snapshot) => snapshot,
        TransitionToPinned::NotResident(_) => return None,
    };
    // SAFETY: `load_unguarded`'s contract holds because we hold a pin, taken by an Acquire CAS
    // that saw `Resident`:
    // * the object was published before the Release transition to
    //   `Resident` that our CAS synchronizes with, so the slot holds it;
    // * only eviction unpublishes, and it needs the word at `Resident` with
    //   0 pins; our pin keeps it above 0 until `Pin::drop`, which ends `'a`
    //   (the returned `Pin` holds the reference), so the object stays
    //   published, hence alive, for all of `'a`;
    // * the slot lives in the store, borrowed for `'a`.
    let object = unsafe { entry.object.load_unguarded() };
    debug_assert!(object.is_some(), "a pinned entry's slot is published");
    let Some(object) = object else {
        let _ = entry.residency.unpin();
        return None;
    };
    Some(Pin {
        entry,
        object,
        generation: snapshot.generation(),
    })
}

/// Store protocol 5.
pub(super) fn evict<T: Send + Sync + 'static>(
    store: &PreparedObjectStore<T>,
    index: usize,
) -> Evict {
    let entry = &store.entries[index];
    let generation = match entry.residency.transition_to_evicting() {
        TransitionToEvicting::Evicting(generation) => generation,
        TransitionToEvicting::Pinned(pins) => return Evict::Pinned { pins },
        TransitionToEvicting::NotResident => return Evict::NotResident,
    };
    let bytes = entry.bytes.load(Ordering::Relaxed);
    {
        let guard = epoch::pin();
        let had_object = entry.object.unpublish(&guard);
        debug_assert!(had_object, "a resident entry's slot is published");
    }
    store.resident_bytes.fetch_sub(bytes, Ordering::Relaxed);
    store.resident_count.fetch_sub(1, Ordering::Relaxed);
    let transition = entry.residency.transition_to_absent(generation);
    assert_eq!(
        transition,
        HolderTransition::Done,
        "evicting entry {index} {generation}: entry left the evictor's state"
    );
    store.bump_readiness();
    Evict::Evicted { generation, bytes }
}

/// An epoch guard over a store: objects read through it stay alive until it
/// is dropped, even if evicted meanwhile (store protocol 5). It does not
/// block eviction; a [`Pin`] does.
pub struct ReadGuard<'a, T> {
    store: &'a PreparedObjectStore<T>,
    guard: epoch::Guard,
}

impl<T> fmt::Debug for ReadGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard").finish_non_exhaustive()
    }
}

impl<'a, T> ReadGuard<'a, T> {
    pub(super) fn new(store: &'a PreparedObjectStore<T>) -> Self {
        Self {
            store,
            guard: epoch::pin(),
        }
    }

    /// Entry `index`'s published object, if any, alive while this guard is.
    ///
    /// # Panics
    /// If `index >= store.len()`.
    pub fn get(&self, index: usize) -> Option<&T> {
        self.store.entries[index].object.load(&self.guard)
    }
}
