//! Loom models of pin/unpin and epoch reads against eviction
//! (`store::PreparedObjectStore`): an object is never freed while pinned or
//! while a read guard may still hold it, eviction succeeds only at 0 pins,
//! and every object is dropped exactly once.
#![cfg(loom)]

use loom_tests::model;

use loom::cell::UnsafeCell;
use onnx_prepared::store::{Evict, Generation, LoadAttempt, PreparedObjectStore, Residency};
use onnx_prepared::sync::{Arc, AtomicUsize, Ordering, thread};

/// Written into the probe when its object is dropped.
const FREED: u64 = u64::MAX;

/// The object's bytes as a loom cell; its `Drop` overwrites them. A read that
/// is not ordered before the drop (use after free) is a loom causality
/// violation; a read after it sees `FREED`. The probe sits behind an `Arc` so
/// a buggy protocol is caught here, not by reading freed memory.
struct Probe {
    bytes: UnsafeCell<u64>,
    drops: AtomicUsize,
}

// SAFETY: accesses are ordered by the store under test; loom checks that.
unsafe impl Sync for Probe {}

struct Obj(Arc<Probe>);

impl Obj {
    fn read(&self) -> u64 {
        // SAFETY: the store orders this read before the drop's write; loom
        // reports it otherwise.
        self.0.bytes.with(|p| unsafe { *p })
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        // SAFETY: as in `read`.
        self.0.bytes.with_mut(|p| unsafe { *p = FREED });
        self.0.drops.fetch_add(1, Ordering::Relaxed);
    }
}

/// A one-entry store with 42 resident at generation 1 (8 bytes).
fn resident() -> (Arc<PreparedObjectStore<Obj>>, Arc<Probe>) {
    let store = Arc::new(PreparedObjectStore::new(1));
    let probe = Arc::new(Probe {
        bytes: UnsafeCell::new(42),
        drops: AtomicUsize::new(0),
    });
    let LoadAttempt::Claimed(claim) = store.try_claim_load(0) else {
        unreachable!()
    };
    claim.publish(Obj(probe.clone()), 8);
    (store, probe)
}

const EVICTED: Evict = Evict::Evicted {
    generation: Generation(1),
    bytes: 8,
};

#[test]
fn pinned_object_is_never_freed() {
    model(|| {
        let (store, probe) = resident();
        let reader = {
            let store = store.clone();
            thread::spawn(move || match store.pin(0) {
                Some(pinned) => {
                    assert_eq!(pinned.read(), 42, "read a live object");
                    true
                }
                None => false,
            })
        };
        let first = store.try_evict(0);
        let pinned = reader.join().unwrap();
        match first {
            EVICTED => {}
            Evict::Pinned { pins } => {
                assert!(pinned, "Pinned only when the reader held a pin");
                assert_eq!(pins, 1);
                assert_eq!(probe.drops.load(Ordering::Relaxed), 0);
                // The pin is gone now: eviction succeeds at 0 pins.
                assert_eq!(store.try_evict(0), EVICTED);
            }
            other => panic!("unexpected {other:?}"),
        }
        if !pinned {
            assert_eq!(first, EVICTED, "a failed pin means it was evicted");
        }
        assert_eq!(
            probe.drops.load(Ordering::Relaxed),
            1,
            "dropped exactly once"
        );
        let s = store.snapshot(0);
        assert_eq!((s.residency(), s.pins()), (Residency::Absent, 0));
        assert!(store.pin(0).is_none());
        assert_eq!(store.resident_bytes(), 0);
        drop(store);
        assert_eq!(probe.drops.load(Ordering::Relaxed), 1, "not again");
    });
}

#[test]
fn two_readers_and_an_evictor() {
    model(|| {
        let (store, probe) = resident();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let store = store.clone();
                thread::spawn(move || {
                    if let Some(pinned) = store.pin(0) {
                        assert_eq!(pinned.read(), 42);
                    }
                })
            })
            .collect();
        let first = store.try_evict(0);
        assert!(
            matches!(first, EVICTED | Evict::Pinned { pins: 1 | 2 }),
            "{first:?}"
        );
        for reader in readers {
            reader.join().unwrap();
        }
        if first != EVICTED {
            assert_eq!(probe.drops.load(Ordering::Relaxed), 0);
            assert_eq!(store.try_evict(0), EVICTED);
        }
        assert_eq!(probe.drops.load(Ordering::Relaxed), 1);
    });
}

#[test]
fn read_guard_keeps_an_evicted_object_alive() {
    model(|| {
        let (store, probe) = resident();
        let reader = {
            let store = store.clone();
            thread::spawn(move || {
                let guard = store.read_guard();
                let object = guard.get(0);
                thread::yield_now();
                object.map(Obj::read)
            })
        };
        // A guard never blocks eviction.
        assert_eq!(store.try_evict(0), EVICTED);
        let seen = reader.join().unwrap();
        assert!(matches!(seen, None | Some(42)), "{seen:?}");
        // Every guard is gone: the retired object was freed, exactly once.
        assert_eq!(probe.drops.load(Ordering::Relaxed), 1);
    });
}
