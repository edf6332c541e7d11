//! The residency word: one packed `AtomicU64` per prepared object holding its
//! state, generation and pin count, and every transition of it (hot path:
//! `pin`/`unpin`; the rest is cold path).
//!
//! Bit layout (least significant first):
//!
//! | bits    | field      | meaning |
//! |---------|------------|---------|
//! | 0..3    | state      | [`Residency`] discriminant |
//! | 3..27   | pins       | live [`Pin`](super::Pin)s; non-zero only while `Resident` |
//! | 27..64  | generation | bumped by every claim; 0 = never claimed |
//!
//! Decode only through [`ResidencySnapshot`]. Every transition is one read-modify-write
//! (a CAS loop, or `fetch_sub` for unpin) returning a `#[must_use]` enum, so a
//! caller cannot ignore a lost race.

use std::fmt;

use crate::sync::{AtomicU64, Ordering};

const STATE_BITS: u32 = 3;
const PIN_BITS: u32 = 24;
const GENERATION_BITS: u32 = 37;

const STATE_SHIFT: u32 = 0;
const PIN_SHIFT: u32 = STATE_SHIFT + STATE_BITS;
const GENERATION_SHIFT: u32 = PIN_SHIFT + PIN_BITS;

const STATE_MASK: u64 = ((1 << STATE_BITS) - 1) << STATE_SHIFT;
const PIN_MASK: u64 = ((1 << PIN_BITS) - 1) << PIN_SHIFT;
const GENERATION_MASK: u64 = ((1 << GENERATION_BITS) - 1) << GENERATION_SHIFT;

/// One pin, as added to the word.
const PIN_ONE: u64 = 1 << PIN_SHIFT;

/// Most pins one object may have at once; pinning beyond it panics (a leak).
pub const MAX_PINS: u32 = (1 << PIN_BITS) - 1;

/// Largest generation the word can hold (2^37 - 1 claims: never reached).
pub const MAX_GENERATION: u64 = (1 << GENERATION_BITS) - 1;

const _: () = {
    assert!(STATE_BITS + PIN_BITS + GENERATION_BITS == u64::BITS);
    assert!(STATE_MASK & PIN_MASK == 0);
    assert!(STATE_MASK & GENERATION_MASK == 0);
    assert!(PIN_MASK & GENERATION_MASK == 0);
    assert!(STATE_MASK | PIN_MASK | GENERATION_MASK == u64::MAX);
    // Every state fits in its field.
    assert!((Residency::Failed as u64) < (1 << STATE_BITS));
    // A pin count of MAX_PINS plus one would carry into the generation.
    assert!(MAX_PINS as u64 * PIN_ONE == PIN_MASK);
};

/// Where a prepared object is in its life (see the store's module docs for
/// who may touch its bytes in each state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Residency {
    /// Not in memory; the next consumer claims a load.
    Absent = 0,
    /// A [`LoadClaim`](super::LoadClaim) holder is reading source bytes.
    Loading = 1,
    /// The claim holder is preparing (e.g. prepacking) the object.
    Preparing = 2,
    /// Published: readable through pins and guards.
    Resident = 3,
    /// An evictor is unpublishing it; becomes `Absent`.
    Evicting = 4,
    /// The last claim was dropped without publishing; a retry may claim again.
    Failed = 5,
}

impl Residency {
    fn from_bits(bits: u64) -> Self {
        match bits {
            0 => Self::Absent,
            1 => Self::Loading,
            2 => Self::Preparing,
            3 => Self::Resident,
            4 => Self::Evicting,
            5 => Self::Failed,
            _ => unreachable!("invalid residency state {bits}"),
        }
    }
}

/// Which (re)preparation of an object: every successful claim starts a new
/// generation, so completions, failures and retries name the attempt they
/// belong to. `Generation(0)` means "never claimed".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Generation(pub u64);

impl Generation {
    /// The raw counter.
    pub const fn get(self) -> u64 {
        self.0
    }

    fn next(self) -> Self {
        assert!(self.0 < MAX_GENERATION, "generation counter exhausted");
        Self(self.0 + 1)
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

/// One decoded reading of a residency word.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResidencySnapshot(u64);

impl ResidencySnapshot {
    fn pack(residency: Residency, generation: Generation, pins: u32) -> Self {
        debug_assert!(generation.0 <= MAX_GENERATION && pins <= MAX_PINS);
        Self(
            ((residency as u64) << STATE_SHIFT)
                | (u64::from(pins) << PIN_SHIFT)
                | (generation.0 << GENERATION_SHIFT),
        )
    }

    /// The state.
    pub fn residency(self) -> Residency {
        Residency::from_bits((self.0 & STATE_MASK) >> STATE_SHIFT)
    }

    /// The current (or last) generation.
    pub fn generation(self) -> Generation {
        Generation((self.0 & GENERATION_MASK) >> GENERATION_SHIFT)
    }

    /// Live pins (0 unless resident).
    pub fn pins(self) -> u32 {
        ((self.0 & PIN_MASK) >> PIN_SHIFT) as u32
    }

    /// Whether the object is published and pinnable.
    pub fn is_resident(self) -> bool {
        self.residency() == Residency::Resident
    }

    /// Whether a load or preparation is in flight.
    pub fn is_in_flight(self) -> bool {
        matches!(self.residency(), Residency::Loading | Residency::Preparing)
    }

    /// The raw word (for dumps and tests).
    pub fn bits(self) -> u64 {
        self.0
    }
}

impl fmt::Debug for ResidencySnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResidencySnapshot")
            .field("residency", &self.residency())
            .field("generation", &self.generation())
            .field("pins", &self.pins())
            .finish()
    }
}

/// Outcome of [`ResidencyWord::transition_to_loading`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransitionToLoading {
    /// This caller won: the word is `Loading` at this new generation.
    Claimed(Generation),
    /// Someone else's load of this generation is in flight.
    InFlight(Generation),
    /// Already resident at this generation.
    Resident(Generation),
    /// This generation failed and the caller did not ask to retry it.
    Failed(Generation),
    /// An eviction is finishing; try again in a moment.
    Evicting,
}

/// Outcome of a transition only the claim holder (or the evictor) makes.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HolderTransition {
    /// The word moved.
    Done,
    /// The word was not in a state the holder owns: a protocol bug.
    Unexpected(ResidencySnapshot),
}

/// Outcome of [`ResidencyWord::pin`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransitionToPinned {
    /// One more pin; the snapshot is the word after the increment.
    Pinned(ResidencySnapshot),
    /// Not resident: no pin taken.
    NotResident(ResidencySnapshot),
}

/// Outcome of [`ResidencyWord::transition_to_evicting`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransitionToEvicting {
    /// This caller is the evictor of this generation.
    Evicting(Generation),
    /// Resident but pinned: left alone.
    Pinned(u32),
    /// Not resident (absent, in flight, failed, or already being evicted).
    NotResident,
}

/// The packed residency word of one entry.
#[derive(Debug)]
pub(crate) struct ResidencyWord(AtomicU64);

impl ResidencyWord {
    /// `Absent`, generation 0, no pins.
    pub(crate) fn new() -> Self {
        Self(AtomicU64::new(
            ResidencySnapshot::pack(Residency::Absent, Generation(0), 0).0,
        ))
    }

    pub(crate) fn load(&self, order: Ordering) -> ResidencySnapshot {
        ResidencySnapshot(self.0.load(order))
    }

    /// The first reading of a CAS loop: a plain load normally; under loom an
    /// RMW that writes nothing (`fetch_or(0)`). Loom 0.7's DPOR compares an
    /// operation with the *last* access to the atomic only, so when a thread
    /// loads and then CASes, another thread's earlier load is hidden behind its
    /// own load and the order "this CAS before that load" is never explored
    /// (tokio-rs/loom#166, #392). An RMW read makes the first access itself a
    /// dependent one. It only removes stale first readings, which a CAS
    /// failure and retry would absorb anyway.
    fn load_for_update(&self) -> ResidencySnapshot {
        #[cfg(not(loom))]
        {
            ResidencySnapshot(self.0.load(Ordering::Acquire))
        }
        #[cfg(loom)]
        {
            ResidencySnapshot(self.0.fetch_or(0, Ordering::Acquire))
        }
    }

    /// CAS from `current` to `next`; on failure returns the fresh reading.
    fn cas(&self, current: ResidencySnapshot, next: ResidencySnapshot, success: Ordering) -> Result<(), ResidencySnapshot> {
        self.0
            .compare_exchange_weak(current.0, next.0, success, Ordering::Acquire)
            .map(drop)
            .map_err(ResidencySnapshot)
    }

    /// `Absent(g)` → `Loading(g + 1)`, and `Failed(g)` → `Loading(g + 1)` when
    /// `retry == Some(g)` (store protocol 1). AcqRel on success: the new
    /// loader sees the previous eviction complete.
    pub(crate) fn transition_to_loading(&self, retry: Option<Generation>) -> TransitionToLoading {
        let mut current = self.load_for_update();
        loop {
            let generation = current.generation();
            match current.residency() {
                Residency::Absent => {}
                Residency::Failed if retry == Some(generation) => {}
                Residency::Failed => return TransitionToLoading::Failed(generation),
                Residency::Loading | Residency::Preparing => {
                    return TransitionToLoading::InFlight(generation);
                }
                Residency::Resident => return TransitionToLoading::Resident(generation),
                Residency::Evicting => return TransitionToLoading::Evicting,
            }
            let next = generation.next();
            match self.cas(
                current,
                ResidencySnapshot::pack(Residency::Loading, next, 0),
                Ordering::AcqRel,
            ) {
                Ok(()) => return TransitionToLoading::Claimed(next),
                Err(actual) => current = actual,
            }
        }
    }

    /// Moves the holder's generation `generation` from one of `from` to `to`
    /// (pins are always 0 outside `Resident`).
    fn holder_transition(
        &self,
        generation: Generation,
        from: &[Residency],
        to: Residency,
        success: Ordering,
    ) -> HolderTransition {
        let mut current = self.load_for_update();
        loop {
            if current.generation() != generation
                || current.pins() != 0
                || !from.contains(&current.residency())
            {
                return HolderTransition::Unexpected(current);
            }
            match self.cas(current, ResidencySnapshot::pack(to, generation, 0), success) {
                Ok(()) => return HolderTransition::Done,
                Err(actual) => current = actual,
            }
        }
    }

    /// `Loading(g)` → `Preparing(g)` (`Preparing(g)` stays): claim holder only.
    pub(crate) fn transition_to_preparing(&self, generation: Generation) -> HolderTransition {
        if self.load_for_update() == ResidencySnapshot::pack(Residency::Preparing, generation, 0) {
            return HolderTransition::Done;
        }
        self.holder_transition(
            generation,
            &[Residency::Loading],
            Residency::Preparing,
            Ordering::Relaxed,
        )
    }

    /// `Loading | Preparing (g)` → `Resident(g)`, Release: the published
    /// pointer and byte size become visible to whoever Acquires `Resident`.
    pub(crate) fn transition_to_resident(&self, generation: Generation) -> HolderTransition {
        self.holder_transition(
            generation,
            &[Residency::Loading, Residency::Preparing],
            Residency::Resident,
            Ordering::AcqRel,
        )
    }

    /// `Loading | Preparing (g)` → `Failed(g)`: claim dropped unpublished.
    pub(crate) fn transition_to_failed(&self, generation: Generation) -> HolderTransition {
        self.holder_transition(
            generation,
            &[Residency::Loading, Residency::Preparing],
            Residency::Failed,
            Ordering::AcqRel,
        )
    }

    /// `Resident(g, p)` → `Resident(g, p + 1)`, Acquire (store protocol 4).
    /// A CAS, not `fetch_add`: the state check and the increment must be one
    /// step, or a pin could land on a word an evictor already took.
    pub(crate) fn pin(&self) -> TransitionToPinned {
        let mut current = self.load_for_update();
        loop {
            if !current.is_resident() {
                return TransitionToPinned::NotResident(current);
            }
            assert!(
                current.pins() < MAX_PINS,
                "pin count overflow (leaked pins?)"
            );
            let next = ResidencySnapshot(current.0 + PIN_ONE);
            match self.0.compare_exchange_weak(
                current.0,
                next.0,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return TransitionToPinned::Pinned(next),
                Err(actual) => current = ResidencySnapshot(actual),
            }
        }
    }

    /// Drops one pin (Release: the reader's accesses happen before the
    /// evictor's Acquire CAS, hence before destruction). Returns the word
    /// before the decrement. A plain `fetch_sub` is enough: while a pin is
    /// held the word stays `Resident`, so nothing else can change state.
    pub(crate) fn unpin(&self) -> ResidencySnapshot {
        let previous = ResidencySnapshot(self.0.fetch_sub(PIN_ONE, Ordering::Release));
        debug_assert!(
            previous.is_resident() && previous.pins() > 0,
            "{previous:?}"
        );
        previous
    }

    /// `Resident(g, 0)` → `Evicting(g)`, AcqRel (store protocol 5): Acquire
    /// pairs with every unpin's Release; the 0-pin check is part of the CAS.
    pub(crate) fn transition_to_evicting(&self) -> TransitionToEvicting {
        let mut current = self.load_for_update();
        loop {
            if !current.is_resident() {
                return TransitionToEvicting::NotResident;
            }
            if current.pins() > 0 {
                return TransitionToEvicting::Pinned(current.pins());
            }
            let generation = current.generation();
            match self.cas(
                current,
                ResidencySnapshot::pack(Residency::Evicting, generation, 0),
                Ordering::AcqRel,
            ) {
                Ok(()) => return TransitionToEvicting::Evicting(generation),
                Err(actual) => current = actual,
            }
        }
    }

    /// `Evicting(g)` → `Absent(g)`, Release: the slot is empty before anyone
    /// can claim the next generation. Evictor only.
    pub(crate) fn transition_to_absent(&self, generation: Generation) -> HolderTransition {
        self.holder_transition(
            generation,
            &[Residency::Evicting],
            Residency::Absent,
            Ordering::Release,
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn snapshot_round_trips_every_field() {
        for residency in [
            Residency::Absent,
            Residency::Loading,
            Residency::Preparing,
            Residency::Resident,
            Residency::Evicting,
            Residency::Failed,
        ] {
            for (generation, pins) in [(0, 0), (1, 7), (MAX_GENERATION, MAX_PINS)] {
                let s = ResidencySnapshot::pack(residency, Generation(generation), pins);
                assert_eq!(s.residency(), residency);
                assert_eq!(s.generation(), Generation(generation));
                assert_eq!(s.pins(), pins);
            }
        }
    }

    #[test]
    fn pins_never_carry_into_the_generation() {
        let s = ResidencySnapshot::pack(Residency::Resident, Generation(5), MAX_PINS - 1);
        let next = ResidencySnapshot(s.0 + PIN_ONE);
        assert_eq!(next.pins(), MAX_PINS);
        assert_eq!(next.generation(), Generation(5));
    }

    #[test]
    fn holder_transitions_reject_a_foreign_generation() {
        let word = ResidencyWord::new();
        assert_eq!(
            word.transition_to_loading(None),
            TransitionToLoading::Claimed(Generation(1))
        );
        assert!(matches!(
            word.transition_to_resident(Generation(2)),
            HolderTransition::Unexpected(_)
        ));
        assert_eq!(
            word.transition_to_preparing(Generation(1)),
            HolderTransition::Done
        );
        // Idempotent.
        assert_eq!(
            word.transition_to_preparing(Generation(1)),
            HolderTransition::Done
        );
        assert_eq!(
            word.transition_to_failed(Generation(1)),
            HolderTransition::Done
        );
        assert_eq!(
            word.transition_to_loading(None),
            TransitionToLoading::Failed(Generation(1))
        );
        assert_eq!(
            word.transition_to_loading(Some(Generation(0))),
            TransitionToLoading::Failed(Generation(1))
        );
    }
}
