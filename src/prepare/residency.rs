//! What residency under a limit keeps per state (cold path): the policy
//! for objects without a cache entry, the protection a waiting run puts on
//! its step's objects, and the eviction counters. The admission protocol
//! that uses them is `evict.rs`.

use std::sync::Arc;

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// What the evictor does with a resident object that has no entry in the
/// prepared cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnpersistedEviction {
    /// Write its payload to the prepared cache first (on the thread that
    /// needs the room), then evict it; it is restored from the cache when
    /// needed again. Without a cache that writes (none, or a policy other
    /// than build-if-missing), the same as [`Rebuild`](Self::Rebuild).
    #[default]
    Persist,
    /// Evict it; it is read and packed from its sources again when needed.
    Rebuild,
    /// Never evict it (objects with a cache entry are still evicted).
    Keep,
}

/// Per requirement, how many waiting runs protect it (`evict.rs`).
#[derive(Debug)]
pub(crate) struct Protection {
    counts: Box<[AtomicU32]>,
}

impl Protection {
    pub(crate) fn new(len: usize) -> Arc<Self> {
        Arc::new(Self {
            counts: (0..len).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    pub(crate) fn is_protected(&self, r: usize) -> bool {
        self.counts[r].load(Ordering::Acquire) > 0
    }
}

/// A waiting run's protection of its step's needs; dropping it (the run
/// resumed, finished or was dropped) lifts it.
#[derive(Debug)]
pub struct StepProtection {
    protection: Arc<Protection>,
    requirements: Vec<u32>,
}

impl StepProtection {
    pub(crate) fn new(protection: &Arc<Protection>, requirements: Vec<u32>) -> Self {
        for &r in &requirements {
            protection.counts[r as usize].fetch_add(1, Ordering::AcqRel);
        }
        Self {
            protection: protection.clone(),
            requirements,
        }
    }
}

impl Drop for StepProtection {
    fn drop(&mut self) {
        for &r in &self.requirements {
            self.protection.counts[r as usize].fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Eviction and restore counters of one state.
#[derive(Debug, Default)]
pub(crate) struct ResidencyCounters {
    /// Objects evicted to make room.
    pub(crate) evictions: AtomicU64,
    /// Objects produced again after an eviction (from the cache or from
    /// their sources).
    pub(crate) restores: AtomicU64,
    /// Payloads written on the admitting thread before an eviction.
    pub(crate) persisted_on_evict: AtomicU64,
}
