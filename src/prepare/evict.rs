//! Residency under the prepared arena's limit (cold path: runs only when an
//! admission to the prepared domain is refused, and when a run waits).
//!
//! # Protocol "admit"
//!
//! A producer about to publish requirement `r` asks the prepared arena for
//! the object's bytes. When the arena refuses (the prepared domain's limit
//! or the global limit would be exceeded):
//!
//! 1. **Candidates**: every other requirement that is resident, unpinned
//!    (the store's pin count; a step that is executing pins its needs) and
//!    not *protected* (a run waiting at a step protects that step's needs,
//!    see below), ordered by class, then least recent use (the store's
//!    last-use tick, moved by every publish and pin):
//!    objects with a valid entry in the prepared cache first (restoring
//!    them reads only the packed payload), then objects without one.
//!    Under [`UnpersistedEviction::Keep`] the latter are never candidates.
//! 2. **Evict** the first candidate the store lets go (store protocol 5:
//!    the CAS fails if a pin arrived meanwhile; the next candidate is
//!    tried). Under [`UnpersistedEviction::Persist`] an object without an
//!    entry has its payload written first, on this thread: the room is
//!    needed now, so the write is not left to the background writer.
//! 3. **Reclaim**: an evicted object is destroyed (and its bytes leave the
//!    prepared domain) once no epoch guard can still read it; the producer
//!    nudges the collector and tries the arena again.
//! 4. With no candidate left and nothing waiting to be reclaimed, the
//!    arena's refusal is the error: it names the domain, the bytes needed
//!    and the limit.
//!
//! # Protection of a waiting step
//!
//! A run stops at the first step whose needs are not all resident and
//! drops the pins it took for that step while it waits. Without more, the
//! production it waits for could evict the step's other needs, and their
//! reproduction evict the first again: under a limit that holds one
//! step's needs but little more, the run would never proceed. So a
//! waiting run *protects* its step's needs (a per-requirement count the
//! evictor reads) until it resumes or is dropped (`StepProtection`, `residency.rs`).
//! Protection is advisory: pins alone keep an object's bytes alive while a
//! kernel reads them.

use std::time::{Duration, Instant};

use super::preparation::Producer;
use super::residency::UnpersistedEviction;
use super::error::PrepareError;
use crate::arena::PreparedAllocation;
use crate::model::{Operand, RequirementIndex};
use crate::plan::RequirementId;
use crate::store::Evict;
use crate::sync::Ordering;

/// Most time one admission waits for room that pinned, protected,
/// in-flight or retired objects will give back before it fails.
const ROOM_WAIT: Duration = Duration::from_secs(5);

/// Most time one admission waits for an object in flight that may be
/// publishing (see [`Producer::admit_evicting`]).
const PUBLISH_WAIT: Duration = Duration::from_millis(50);

/// Yields before an admission's waits turn into sleeps.
const YIELDS: u32 = 64;

/// Time an admission waits before it evicts objects waiting runs protect.
const PROTECTION_WAIT: Duration = Duration::from_millis(1);

impl Producer {
    /// Protocol "admit" for `r`'s object of `bytes` bytes.
    pub(crate) fn admit_evicting(
        &self,
        r: RequirementId,
        bytes: usize,
    ) -> Result<PreparedAllocation, PrepareError> {
        // Set at the first refusal; waits yield first, then sleep longer.
        let mut since: Option<Instant> = None;
        let mut pause = Duration::from_micros(20);
        let mut yields = 0;
        // Consecutive refusals with nothing held or pending.
        let mut idle = 0;
        loop {
            let refused = match self.prepared_arena().admit(bytes) {
                Ok(allocation) => return Ok(allocation),
                Err(e) if e.is_over_budget() => e,
                Err(e) => return Err(e.into()),
            };
            let limit = self
                .prepared_arena()
                .limit()
                .min(self.prepared_arena().budget().global_limit());
            if bytes > limit {
                // No eviction can make room for it.
                return Err(refused.into());
            }
            if self.evict_one(r, false) {
                crate::sync::epoch::flush();
                continue;
            }
            let waited = since.get_or_insert_with(Instant::now).elapsed();
            // Protection is advisory: two runs waiting at different steps
            // must not hold each other's room for long.
            if waited >= PROTECTION_WAIT && self.evict_one(r, true) {
                crate::sync::epoch::flush();
                continue;
            }
            // Room that will come back by itself: an object pinned (a step
            // executing, in this run or another) or protected (a run that
            // will resume) or raced by a pin, an object admitted by a
            // producer that has not published yet (or is publishing), an
            // evicted one not yet destroyed. Wait for it, a bounded time.
            let store = self.store();
            let held = (0..store.len()).any(|i| {
                i != r.0 as usize
                    && store.snapshot(i).is_resident()
                    && store.bytes(i) > 0
                    && self.evictable(i)
            });
            let pending = store.resident_bytes() < self.prepared_live();
            // An object being published counts its bytes as resident just
            // before it becomes resident (then evictable): a publisher
            // preempted in between is waited for briefly. (Another
            // producer waiting for room here is in flight too: the bound
            // keeps two refused producers from waiting on each other.)
            let publishing = waited < PUBLISH_WAIT
                && (0..store.len()).any(|i| i != r.0 as usize && store.snapshot(i).is_in_flight());
            if (held || pending || publishing) && waited < ROOM_WAIT {
                idle = 0;
                crate::sync::epoch::flush();
                if yields < YIELDS {
                    // A step holding a pin usually ends within microseconds.
                    yields += 1;
                    crate::sync::thread::yield_now();
                } else {
                    crate::sync::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(2));
                }
                continue;
            }
            // Nothing held, nothing pending — as observed after the
            // refusal, which a run moving on may already have made stale:
            // the arena is asked once more before the refusal stands.
            idle += 1;
            if idle < 2 {
                continue;
            }
            return Err(refused.into());
        }
    }

    /// Steps 1–2: evicts one candidate (`protected`: among the objects
    /// waiting runs protect, else among the others); `false` when none
    /// could be evicted.
    fn evict_one(&self, needed: RequirementId, protected: bool) -> bool {
        let store = self.store();
        let mut candidates: Vec<(bool, u64, usize)> = (0..store.len())
            .filter(|&i| i != needed.0 as usize)
            .filter(|&i| {
                let s = store.snapshot(i);
                s.is_resident() && s.pins() == 0 && self.protection().is_protected(i) == protected
            })
            // A protected object that a step needing `needed` needs too
            // would only be produced again for that step: under a limit
            // that cannot hold the step, that is a loop, not progress.
            .filter(|&i| !protected || !self.share_a_step(needed, i))
            // Evicting an object of no bytes (a row table) frees nothing.
            .filter(|&i| store.bytes(i) > 0 && self.evictable(i))
            .map(|i| (!self.has_entry(RequirementId(i as u32)), store.last_use(i), i))
            .collect();
        candidates.sort_unstable();
        for (unpersisted, _, i) in candidates {
            if unpersisted && self.unpersisted() == UnpersistedEviction::Persist {
                self.persist_now(i);
            }
            if let Evict::Evicted { .. } = store.try_evict(i) {
                self.residency_counters()
                    .evictions
                    .fetch_add(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Whether object `i` may be evicted at all: never a graph output (its
    /// object is read after the run's last step, unpinned), and under
    /// [`UnpersistedEviction::Keep`] only objects with a cache entry.
    fn evictable(&self, i: usize) -> bool {
        let resolved = self.plan().resolved();
        let output = resolved
            .outputs()
            .iter()
            .any(|(_, o)| *o == Operand::Prepared(RequirementIndex(i as u32)));
        !output
            && (self.unpersisted() != UnpersistedEviction::Keep
                || self.has_entry(RequirementId(i as u32)))
    }

    /// Whether some step needs both `r` and `i`.
    fn share_a_step(&self, r: RequirementId, i: usize) -> bool {
        self.plan()
            .steps()
            .iter()
            .any(|s| s.needs[r.0 as usize] && s.needs[i])
    }

    /// Writes resident object `i`'s payload now (step 2 under `Persist`);
    /// a write that cannot be made is in the cache's diagnostics and the
    /// object is evicted anyway (rebuilt from its sources later).
    fn persist_now(&self, i: usize) {
        let Some(cache) = self.cache() else {
            return;
        };
        let object = {
            let Some(pin) = self.store().pin(i) else {
                return;
            };
            let Some(object) = pin.object.to_persist() else {
                return;
            };
            object
        };
        let resolved = self.plan().resolved();
        if let Some(job) = cache.persist_job(resolved.model(), &resolved.requirements()[i], object)
            && job.run().is_ok()
        {
            self.residency_counters()
                .persisted_on_evict
                .fetch_add(1, Ordering::Relaxed);
        }
    }
}
