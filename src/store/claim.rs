//! Producing a prepared object: the [`LoadClaim`] token of the one producer of
//! a generation, and the [`Waiter`] every other requester of that generation
//! gets (cold path; store protocols 1–3).

use std::fmt;

use super::residency::HolderTransition;
use super::{Entry, Generation, PreparedObjectStore, stamp};
use crate::sync::{ContinuationKey, Event, Ordering, epoch};

/// What [`PreparedObjectStore::try_claim_load`] found.
#[must_use]
pub enum LoadAttempt<'a, T> {
    /// This caller produces the new generation: publish it or drop the claim.
    Claimed(LoadClaim<'a, T>),
    /// Another producer's generation is in flight; wait for it.
    InFlight(Waiter<'a>),
    /// Already resident at this generation: pin it.
    Resident(Generation),
    /// This generation failed; [`PreparedObjectStore::retry_load`] may retry.
    Failed(Generation),
}

impl<T> fmt::Debug for LoadAttempt<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Claimed(claim) => f.debug_tuple("Claimed").field(claim).finish(),
            Self::InFlight(waiter) => f.debug_tuple("InFlight").field(waiter).finish(),
            Self::Resident(g) => f.debug_tuple("Resident").field(g).finish(),
            Self::Failed(g) => f.debug_tuple("Failed").field(g).finish(),
        }
    }
}

/// How a generation settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GenerationOutcome {
    /// Published (it may have been evicted since: pin to find out).
    Resident(Generation),
    /// Its claim was dropped without publishing.
    Failed(Generation),
}

impl GenerationOutcome {
    fn from_stamp(stamp: u64) -> Self {
        let generation = Generation(stamp >> 1);
        if stamp & 1 == 1 {
            Self::Failed(generation)
        } else {
            Self::Resident(generation)
        }
    }

    /// The generation this outcome is about.
    pub fn generation(self) -> Generation {
        match self {
            Self::Resident(g) | Self::Failed(g) => g,
        }
    }
}

/// The right to produce one generation of one entry: only its holder writes
/// the object. Publishing consumes it; dropping it unpublished fails the
/// generation and wakes its waiters (store protocols 2 and 3).
#[must_use = "dropping a LoadClaim fails its generation"]
pub struct LoadClaim<'a, T> {
    store: &'a PreparedObjectStore<T>,
    index: usize,
    generation: Generation,
}

impl<T> fmt::Debug for LoadClaim<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadClaim")
            .field("index", &self.index)
            .field("generation", &self.generation)
            .finish()
    }
}

impl<'a, T> LoadClaim<'a, T> {
    pub(super) fn new(
        store: &'a PreparedObjectStore<T>,
        index: usize,
        generation: Generation,
    ) -> Self {
        Self {
            store,
            index,
            generation,
        }
    }

    fn entry(&self) -> &'a Entry<T> {
        &self.store.entries[self.index]
    }

    /// The entry this claim produces.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The generation this claim produces.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Marks the source bytes read and preparation started (`Loading` →
    /// `Preparing`; harmless when already `Preparing`).
    pub fn set_preparing(&self) {
        let transition = self
            .entry()
            .residency
            .transition_to_preparing(self.generation);
        assert_eq!(
            transition,
            HolderTransition::Done,
            "LoadClaim {self:?}: entry left the claim holder's states"
        );
    }
}

impl<T: Send + Sync + 'static> LoadClaim<'_, T> {
    /// Publishes `object` (of `bytes` bytes) as this generation (store
    /// protocol 2): when this returns, the object is pinnable, the readiness
    /// epoch has moved, and every waiter of the generation is woken.
    pub fn publish(self, object: T, bytes: usize) {
        let (store, index, generation) = (self.store, self.index, self.generation);
        // From here on the claim is being honoured: its drop must not fail it.
        std::mem::forget(self);
        let entry = &store.entries[index];
        {
            let guard = epoch::pin();
            let replaced = entry.object.publish(object, &guard);
            debug_assert!(!replaced, "a non-resident entry's slot must be empty");
        }
        entry.bytes.store(bytes, Ordering::Relaxed);
        entry.last_use.store(store.tick(), Ordering::Relaxed);
        store.resident_bytes.fetch_add(bytes, Ordering::Relaxed);
        store.resident_count.fetch_add(1, Ordering::Relaxed);
        let transition = entry.residency.transition_to_resident(generation);
        assert_eq!(
            transition,
            HolderTransition::Done,
            "publishing entry {index} {generation}: entry left the claim holder's states"
        );
        store.bump_readiness();
        entry.event.complete(stamp(generation, false));
    }
}

impl<T> Drop for LoadClaim<'_, T> {
    /// Store protocol 3: the generation fails and its waiters wake.
    fn drop(&mut self) {
        let entry = self.entry();
        let transition = entry.residency.transition_to_failed(self.generation);
        debug_assert_eq!(transition, HolderTransition::Done, "{self:?}");
        entry.event.complete(stamp(self.generation, true));
    }
}

/// A handle on one generation's completion (store protocol 1: shared by
/// every requester of an in-flight generation).
#[derive(Clone, Copy)]
pub struct Waiter<'a> {
    event: &'a Event,
    index: usize,
    generation: Generation,
}

/// A continuation kept by [`Waiter::on_complete`] until its generation
/// completes; [`PreparedObjectStore::deregister`](super::PreparedObjectStore::deregister)
/// takes it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a registration is the only way to take the continuation back"]
pub struct Registration {
    pub(super) index: usize,
    pub(super) key: ContinuationKey,
}

impl Registration {
    /// The store entry it was registered on.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl fmt::Debug for Waiter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("generation", &self.generation)
            .field("outcome", &self.outcome())
            .finish()
    }
}

impl<'a> Waiter<'a> {
    pub(super) fn new(event: &'a Event, index: usize, generation: Generation) -> Self {
        Self {
            event,
            index,
            generation,
        }
    }

    /// The generation waited for.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// Whether the generation (or a later one) has completed.
    pub fn is_complete(&self) -> bool {
        self.outcome().is_some()
    }

    /// The outcome, if complete (see [`wait`](Self::wait)).
    pub fn outcome(&self) -> Option<GenerationOutcome> {
        let seen = self.event.stamp();
        (seen >= stamp(self.generation, false)).then(|| GenerationOutcome::from_stamp(seen))
    }

    /// Blocks until the generation completes; returns the outcome of the
    /// newest completed generation, never older than the one waited for
    /// (module docs, "Waiting"). Everything the producer wrote before
    /// completing is visible afterwards.
    pub fn wait(&self) -> GenerationOutcome {
        GenerationOutcome::from_stamp(self.event.wait_for(stamp(self.generation, false)))
    }

    /// Calls `f` with the outcome once the generation completes, instead of
    /// blocking: at once if it already has, else on the producer's thread
    /// as it publishes or fails (it must not block; e.g. it resumes a
    /// suspended task). Returns the registration that takes `f` back
    /// uncalled (`None`: `f` was called at once).
    pub fn on_complete(&self, f: impl FnOnce(GenerationOutcome) + Send + 'static) -> Option<Registration> {
        self.event
            .on_complete(
                stamp(self.generation, false),
                Box::new(move |seen| f(GenerationOutcome::from_stamp(seen))),
            )
            .map(|key| Registration {
                index: self.index,
                key,
            })
    }
}
