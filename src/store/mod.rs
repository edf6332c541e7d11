//! Prepared-object residency: the registry and state machine that says which
//! prepared objects are in memory, who is producing each one, and who is
//! reading it (cold path, except [`PreparedObjectStore::pin`] and
//! [`ReadGuard::get`], which the hot path uses).
//!
//! The store is created with a fixed number of entries, addressed by index
//! (the plan's `RequirementId` converts to it). Each entry has:
//! * one packed residency word (file `residency.rs`: state, [`Generation`],
//!   pins), decoded only through [`ResidencySnapshot`];
//! * an epoch-protected slot holding the published object
//!   ([`crate::sync::epoch::Slot`]);
//! * its byte size, last-use tick, and a completion [`Event`] stamped per
//!   generation (`2 * generation + failed`).
//!
//! ```text
//! Absent ─claim─▶ Loading ─▶ Preparing ─publish─▶ Resident ─evict─▶ Evicting ─▶ Absent
//!                    │           │                (pins)
//!                    └─drop claim┴─▶ Failed ─retry_load─▶ Loading (g + 1)
//! ```
//!
//! # Who may touch an object's bytes
//!
//! | state       | slot        | may write the object            | may read the object |
//! |-------------|-------------|---------------------------------|---------------------|
//! | `Absent`    | empty       | nobody                          | [`ReadGuard`]s that loaded an earlier generation before it was unpublished (epoch keeps it alive) |
//! | `Loading`   | empty       | the [`LoadClaim`] holder, in its own buffer (not yet published) | nobody |
//! | `Preparing` | empty       | the [`LoadClaim`] holder         | nobody |
//! | `Resident`  | published   | nobody: published objects are immutable | [`Pin`] holders; [`ReadGuard`] holders |
//! | `Evicting`  | being emptied | nobody                        | no pin exists (eviction starts only at 0 pins); `ReadGuard`s that loaded it before the unpublish |
//! | `Failed`    | empty       | nobody                          | nobody |
//!
//! An unpublished object is destroyed (its `Drop` returns its allocation to
//! its arena) only after every epoch guard alive at the unpublish is gone; no
//! pin can exist by then.
//!
//! # Protocols
//!
//! 1. **Claim** ([`PreparedObjectStore::try_claim_load`]): CAS `Absent(g)` →
//!    `Loading(g + 1)`; the winner gets the [`LoadClaim`]. Whoever sees
//!    `Loading`/`Preparing(g)` gets a [`Waiter`] for `g`, so every concurrent
//!    request shares the in-flight generation. A CAS, not a store: exactly one
//!    of several racing claimants may win. `Failed(g)` is reported, not
//!    retried: [`PreparedObjectStore::retry_load`]`(i, g)` claims `Failed(g)` →
//!    `Loading(g + 1)` only while the word still says `g`, so consumers that
//!    saw the same failure start one retry between them. `Evicting` is
//!    transient (the evictor still owns the slot): the claimant yields until it
//!    is `Absent`.
//! 2. **Publish** ([`LoadClaim::publish`]): (a) move the object into the slot
//!    (Release); (b) record bytes, last use, resident counters; (c) CAS
//!    `Loading | Preparing(g)` → `Resident(g)` (Release); (d) bump the
//!    readiness epoch; (e) complete the event with `g`'s *resident* stamp.
//!    (a) before (c): anyone who sees `Resident` can pin and must find the
//!    object. (c) before (e): a woken waiter (it Acquires the stamp) finds the
//!    word at least at `Resident(g)` and the object readable.
//! 3. **Fail** (dropping a [`LoadClaim`]): CAS `Loading | Preparing(g)` →
//!    `Failed(g)`, then complete the event with `g`'s *failed* stamp. The slot
//!    was never written; the resident set, and so the readiness epoch, did not
//!    change.
//! 4. **Pin** ([`PreparedObjectStore::pin`]): CAS `Resident(g, p)` →
//!    `Resident(g, p + 1)` (Acquire), and only then read the slot. The state
//!    check and the increment are one CAS, so an evictor whose CAS saw 0 pins
//!    excludes every later pin. Unpin is `fetch_sub` (Release): the reader's
//!    accesses happen before the evictor's Acquire CAS, hence before the
//!    object's destruction. While `p > 0` the word stays `Resident`, so the
//!    slot stays published and a pin needs no epoch guard.
//! 5. **Evict** ([`PreparedObjectStore::try_evict`]): CAS `Resident(g, 0)` →
//!    `Evicting(g)` (AcqRel); unpublish the slot, retiring the object to the
//!    epoch collector; subtract the resident counters; CAS `Evicting(g)` →
//!    `Absent(g)` (Release); bump the readiness epoch. Why epoch at all when
//!    pins block eviction: a [`ReadGuard`] reads the slot without touching
//!    the word (one guard for a whole run instead of a pin per object), so it
//!    may still hold the object when the evictor unpublishes; destruction waits
//!    for that guard.
//!
//! Waiting ([`Waiter::wait`]) returns the outcome of the newest completed
//! generation, which is never older than the one waited for; when it is newer
//! (the awaited generation was published and evicted, or failed and retried,
//! before the waiter looked), it describes the key's newer settled state,
//! which is what a consumer acts on. A woken waiter that finds the object
//! already evicted again simply claims a new load.
//!
//! Soundness never depends on a destructor running: forgetting a `Pin` leaves
//! the object pinned (never evictable), forgetting a `LoadClaim` leaves the
//! generation in flight (its waiters wait forever), forgetting a `ReadGuard`
//! delays reclamation; none lets anyone touch freed memory.

mod claim;
mod pin;
mod residency;

use bitvec::prelude::{BitSlice, BitVec};

use crate::sync::epoch::Slot;
use crate::sync::{AtomicU64, AtomicUsize, Event, Ordering, thread};

pub use claim::{LoadAttempt, LoadClaim, GenerationOutcome, Registration, Waiter};
pub use pin::{Evict, Pin, ReadGuard};
pub use residency::{Generation, MAX_GENERATION, MAX_PINS, Residency, ResidencySnapshot};

use residency::{ResidencyWord, TransitionToLoading};

/// One prepared object's residency, slot and bookkeeping.
#[derive(Debug)]
struct Entry<T> {
    residency: ResidencyWord,
    object: Slot<T>,
    /// Byte size of the last published generation (written before `Resident`).
    bytes: AtomicUsize,
    /// Store tick of the last publish or pin (Relaxed: a hint for eviction).
    /// The evictor orders its candidates by it, least recently used first.
    last_use: AtomicU64,
    /// Completion of every generation: stamp `2 * generation + failed`.
    event: Event,
}

impl<T> Entry<T> {
    fn new() -> Self {
        Self {
            residency: ResidencyWord::new(),
            object: Slot::new(),
            bytes: AtomicUsize::new(0),
            last_use: AtomicU64::new(0),
            event: Event::new(),
        }
    }
}

/// The residency registry of a session's prepared objects (see module docs).
pub struct PreparedObjectStore<T> {
    entries: Box<[Entry<T>]>,
    /// Bumped whenever the resident set changes (publish, evict).
    readiness: AtomicU64,
    resident_count: AtomicUsize,
    resident_bytes: AtomicUsize,
    /// Source of last-use ticks.
    clock: AtomicU64,
}

impl<T> std::fmt::Debug for PreparedObjectStore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedObjectStore")
            .field("len", &self.entries.len())
            .field("readiness_epoch", &self.readiness_epoch())
            .field("resident_count", &self.resident_count())
            .field("resident_bytes", &self.resident_bytes())
            .finish()
    }
}

impl<T: Send + Sync + 'static> PreparedObjectStore<T> {
    /// A store of `len` entries, all `Absent` at generation 0.
    pub fn new(len: usize) -> Self {
        Self {
            entries: (0..len).map(|_| Entry::new()).collect(),
            readiness: AtomicU64::new(0),
            resident_count: AtomicUsize::new(0),
            resident_bytes: AtomicUsize::new(0),
            clock: AtomicU64::new(0),
        }
    }

    /// Claims the load of entry `index` (protocol 1).
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn try_claim_load(&self, index: usize) -> LoadAttempt<'_, T> {
        self.claim(index, None)
    }

    /// Claims a retry of entry `index` after its generation `failed` failed
    /// (protocol 1): only the first of several callers naming the same failed
    /// generation claims; the others share its load.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn retry_load(&self, index: usize, failed: Generation) -> LoadAttempt<'_, T> {
        self.claim(index, Some(failed))
    }

    fn claim(&self, index: usize, retry: Option<Generation>) -> LoadAttempt<'_, T> {
        let entry = &self.entries[index];
        loop {
            return match entry.residency.transition_to_loading(retry) {
                TransitionToLoading::Claimed(generation) => {
                    LoadAttempt::Claimed(LoadClaim::new(self, index, generation))
                }
                TransitionToLoading::InFlight(generation) => {
                    LoadAttempt::InFlight(Waiter::new(&entry.event, index, generation))
                }
                TransitionToLoading::Resident(generation) => LoadAttempt::Resident(generation),
                TransitionToLoading::Failed(generation) => LoadAttempt::Failed(generation),
                TransitionToLoading::Evicting => {
                    // The evictor holds `Evicting` for a few instructions.
                    thread::yield_now();
                    continue;
                }
            };
        }
    }

    /// A waiter for generation `generation` of entry `index` (for a consumer
    /// that learned the generation earlier, e.g. from a snapshot).
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn waiter(&self, index: usize, generation: Generation) -> Waiter<'_> {
        Waiter::new(&self.entries[index].event, index, generation)
    }

    /// Takes back a continuation registered by [`Waiter::on_complete`]
    /// (event protocol step 6): if no completion called it yet, it is
    /// dropped, uncalled, on this thread, and `true` is returned. A
    /// consumer that stops waiting (a cancelled run) calls this so that
    /// what the continuation owns is freed now, not at the next completion.
    ///
    /// # Panics
    /// If the registration's index is `>= self.len()`.
    pub fn deregister(&self, registration: Registration) -> bool {
        self.entries[registration.index]
            .event
            .deregister(registration.key)
    }

    /// Continuations registered on entry `index` and not yet called or
    /// deregistered.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn registered(&self, index: usize) -> usize {
        self.entries[index].event.kept()
    }

    /// Pins entry `index` if it is resident (protocol 4); the object cannot
    /// be evicted until the returned `Pin` is dropped.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn pin(&self, index: usize) -> Option<Pin<'_, T>> {
        let entry = &self.entries[index];
        let pinned = pin::pin(entry)?;
        entry.last_use.store(self.tick(), Ordering::Relaxed);
        Some(pinned)
    }

    /// An epoch guard for reading resident objects without pinning each one
    /// (protocol 5): objects read through it stay alive while it lives, even
    /// if evicted meanwhile. Keep it short (one run): while it lives, nothing
    /// evicted after it was taken can be freed.
    pub fn read_guard(&self) -> ReadGuard<'_, T> {
        ReadGuard::new(self)
    }

    /// Evicts entry `index` if it is resident and unpinned (protocol 5).
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn try_evict(&self, index: usize) -> Evict {
        pin::evict(self, index)
    }
}

impl<T> PreparedObjectStore<T> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the store has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A reading of entry `index`'s residency word (Acquire).
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn snapshot(&self, index: usize) -> ResidencySnapshot {
        self.entries[index].residency.load(Ordering::Acquire)
    }

    /// Byte size of the last generation published for entry `index` (0 if
    /// none was ever published).
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn bytes(&self, index: usize) -> usize {
        self.entries[index].bytes.load(Ordering::Relaxed)
    }

    /// Store tick of entry `index`'s last publish or pin (0: never used);
    /// larger is more recent.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn last_use(&self, index: usize) -> u64 {
        self.entries[index].last_use.load(Ordering::Relaxed)
    }

    /// Changes whenever the resident set changes (every publish and every
    /// eviction). Equal readings around a check mean the set did not change.
    pub fn readiness_epoch(&self) -> u64 {
        self.readiness.load(Ordering::Acquire)
    }

    /// Entries counted resident: exact when no publish or eviction is in
    /// progress; during one it errs high (publish counts before `Resident`,
    /// evict uncounts after unpublishing).
    pub fn resident_count(&self) -> usize {
        self.resident_count.load(Ordering::Relaxed)
    }

    /// Bytes of the entries counted by [`resident_count`](Self::resident_count).
    pub fn resident_bytes(&self) -> usize {
        self.resident_bytes.load(Ordering::Relaxed)
    }

    /// Bit `i` set when entry `i` is resident now (one Acquire load each).
    pub fn resident_set(&self) -> BitVec {
        self.entries
            .iter()
            .map(|e| e.residency.load(Ordering::Acquire).is_resident())
            .collect()
    }

    /// Whether every entry whose bit is set in `needed` is resident now.
    ///
    /// # Panics
    /// If a set bit's index is `>= self.len()`.
    pub fn all_resident(&self, needed: &BitSlice) -> bool {
        needed.iter_ones().all(|i| self.snapshot(i).is_resident())
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn bump_readiness(&self) {
        self.readiness.fetch_add(1, Ordering::Release);
    }
}

/// The event stamp of generation `generation`'s completion.
fn stamp(generation: Generation, failed: bool) -> u64 {
    (generation.get() << 1) | u64::from(failed)
}

#[cfg(all(test, not(loom)))]
mod tests;
