//! Loom models of the store's residency word (`store::PreparedObjectStore`):
//! one loader per generation, every waiter woken exactly once with the right
//! outcome, publication visible to whoever is woken or sees `Resident`, and
//! a claim racing an eviction never loses the new generation's object.
#![cfg(loom)]

use loom_tests::model;

use loom::cell::UnsafeCell;
use onnx_prepared::store::{
    Evict, Generation, GenerationOutcome, LoadAttempt, PreparedObjectStore, Residency,
};
use onnx_prepared::sync::{Arc, AtomicUsize, Ordering, thread};

/// Written into a probe when its object is dropped.
const FREED: u64 = u64::MAX;

/// The bytes of a prepared object, as a loom cell: the producer writes them
/// before publishing, readers read them, the object's `Drop` overwrites them.
/// Loom reports any read not ordered after the write (publication without a
/// happens-before edge) or racing the drop (use after free). The probe sits
/// behind an `Arc` so a buggy protocol is caught at the cell, not by reading
/// freed memory.
struct Probe {
    bytes: UnsafeCell<u64>,
    drops: AtomicUsize,
}

// SAFETY: accesses are ordered by the store under test; loom checks that.
unsafe impl Sync for Probe {}

struct Obj(Arc<Probe>);

impl Obj {
    /// Produces an object with `value` (a plain write, before publication).
    fn produce(probe: &Arc<Probe>, value: u64) -> Self {
        // SAFETY: nobody reads the probe before the object is published.
        probe.bytes.with_mut(|p| unsafe { *p = value });
        Self(probe.clone())
    }

    fn read(&self) -> u64 {
        // SAFETY: the store orders this read after the producer's write and
        // before the drop's; loom reports it otherwise.
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

fn probe() -> Arc<Probe> {
    Arc::new(Probe {
        bytes: UnsafeCell::new(0),
        drops: AtomicUsize::new(0),
    })
}

#[derive(Default)]
struct Tally {
    claimed: AtomicUsize,
    in_flight: AtomicUsize,
    woken: AtomicUsize,
    resident: AtomicUsize,
    failed: AtomicUsize,
}

/// One consumer: claim and publish 42, or wait for whoever does; then pin
/// and read the object.
fn consume(store: &PreparedObjectStore<Obj>, probe: &Arc<Probe>, tally: &Tally) -> u64 {
    consume_at(store, probe, tally, Generation(1))
}

/// [`consume`] of the object's `generation` (2: restoring an evicted
/// object is a new generation).
fn consume_at(
    store: &PreparedObjectStore<Obj>,
    probe: &Arc<Probe>,
    tally: &Tally,
    generation: Generation,
) -> u64 {
    match store.try_claim_load(0) {
        LoadAttempt::Claimed(claim) => {
            tally.claimed.fetch_add(1, Ordering::Relaxed);
            assert_eq!(claim.generation(), generation);
            claim.set_preparing();
            claim.publish(Obj::produce(probe, 42), 8);
        }
        LoadAttempt::InFlight(waiter) => {
            tally.in_flight.fetch_add(1, Ordering::Relaxed);
            assert_eq!(waiter.generation(), generation);
            assert_eq!(waiter.wait(), GenerationOutcome::Resident(generation));
            tally.woken.fetch_add(1, Ordering::Relaxed);
        }
        LoadAttempt::Resident(g) => {
            tally.resident.fetch_add(1, Ordering::Relaxed);
            assert_eq!(g, generation);
        }
        LoadAttempt::Failed(g) => panic!("nobody fails here, got {g}"),
    }
    let pinned = store
        .pin(0)
        .expect("woken or told Resident: pinnable (no eviction meanwhile)");
    assert_eq!(pinned.generation(), generation);
    pinned.read()
}

#[test]
fn one_loader_and_the_waiter_sees_the_object() {
    model(|| {
        let store = Arc::new(PreparedObjectStore::<Obj>::new(1));
        let probe = probe();
        let tally = Arc::new(Tally::default());
        let other = {
            let (store, probe, tally) = (store.clone(), probe.clone(), tally.clone());
            thread::spawn(move || consume(&store, &probe, &tally))
        };
        assert_eq!(consume(&store, &probe, &tally), 42);
        assert_eq!(other.join().unwrap(), 42);

        let count = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        assert_eq!(count(&tally.claimed), 1, "exactly one loader");
        assert_eq!(
            count(&tally.in_flight),
            count(&tally.woken),
            "every waiter woken exactly once"
        );
        assert_eq!(count(&tally.in_flight) + count(&tally.resident), 1);
        let s = store.snapshot(0);
        assert_eq!(
            (s.residency(), s.generation(), s.pins()),
            (Residency::Resident, Generation(1), 0)
        );
        assert_eq!(store.readiness_epoch(), 1);
        assert_eq!((store.resident_count(), store.resident_bytes()), (1, 8));
        assert_eq!(count(&probe.drops), 0);
        drop(store);
        assert_eq!(count(&probe.drops), 1, "dropped once, with the store");
    });
}

#[test]
fn two_waiters_are_each_woken_once() {
    model(|| {
        let store = Arc::new(PreparedObjectStore::<Obj>::new(1));
        let probe = probe();
        let tally = Arc::new(Tally::default());
        // The main thread holds the claim before the waiters arrive.
        let LoadAttempt::Claimed(claim) = store.try_claim_load(0) else {
            unreachable!()
        };
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (store, probe, tally) = (store.clone(), probe.clone(), tally.clone());
                thread::spawn(move || consume(&store, &probe, &tally))
            })
            .collect();
        claim.publish(Obj::produce(&probe, 42), 8);
        for waiter in waiters {
            assert_eq!(waiter.join().unwrap(), 42);
        }
        let count = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        assert_eq!(count(&tally.claimed), 0, "the claim was taken");
        assert_eq!(count(&tally.in_flight), count(&tally.woken));
        assert_eq!(count(&tally.in_flight) + count(&tally.resident), 2);
        assert_eq!(store.snapshot(0).pins(), 0);
    });
}

#[test]
fn dropped_claim_fails_and_wakes_the_waiter() {
    model(|| {
        let store = Arc::new(PreparedObjectStore::<Obj>::new(1));
        let tally = Arc::new(Tally::default());
        let attempt =
            |store: &PreparedObjectStore<Obj>, tally: &Tally| match store.try_claim_load(0) {
                LoadAttempt::Claimed(claim) => {
                    tally.claimed.fetch_add(1, Ordering::Relaxed);
                    claim.set_preparing();
                    drop(claim);
                }
                LoadAttempt::InFlight(waiter) => {
                    tally.in_flight.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(waiter.wait(), GenerationOutcome::Failed(Generation(1)));
                    tally.woken.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(store.snapshot(0).residency(), Residency::Failed);
                }
                LoadAttempt::Failed(generation) => {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                    assert_eq!(generation, Generation(1));
                }
                LoadAttempt::Resident(generation) => panic!("nothing published, got {generation}"),
            };
        let other = {
            let (store, tally) = (store.clone(), tally.clone());
            thread::spawn(move || attempt(&store, &tally))
        };
        attempt(&store, &tally);
        other.join().unwrap();

        let count = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        assert_eq!(count(&tally.claimed), 1, "exactly one loader");
        assert_eq!(count(&tally.in_flight), count(&tally.woken));
        assert_eq!(count(&tally.in_flight) + count(&tally.failed), 1);
        assert_eq!(store.readiness_epoch(), 0, "resident set never changed");

        // The retry is a new generation, published normally.
        let LoadAttempt::Claimed(retry) = store.retry_load(0, Generation(1)) else {
            panic!("retry of the failed generation claims")
        };
        assert_eq!(retry.generation(), Generation(2));
        let probe = probe();
        retry.publish(Obj::produce(&probe, 7), 1);
        assert_eq!(store.pin(0).unwrap().read(), 7);
    });
}

#[test]
fn claim_racing_eviction_keeps_the_new_generation() {
    model(|| {
        let store = Arc::new(PreparedObjectStore::<Obj>::new(1));
        let (old, new) = (probe(), probe());
        let LoadAttempt::Claimed(claim) = store.try_claim_load(0) else {
            unreachable!()
        };
        claim.publish(Obj::produce(&old, 1), 4);

        let evictor = {
            let store = store.clone();
            thread::spawn(move || store.try_evict(0))
        };
        let reloaded = match store.try_claim_load(0) {
            LoadAttempt::Resident(generation) => {
                assert_eq!(generation, Generation(1));
                false
            }
            LoadAttempt::Claimed(claim) => {
                // Only after the eviction finished (Evicting is waited out).
                assert_eq!(claim.generation(), Generation(2));
                claim.publish(Obj::produce(&new, 2), 4);
                true
            }
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(
            evictor.join().unwrap(),
            Evict::Evicted {
                generation: Generation(1),
                bytes: 4
            }
        );
        assert_eq!(
            old.drops.load(Ordering::Relaxed),
            1,
            "old object freed once"
        );
        let s = store.snapshot(0);
        if reloaded {
            assert_eq!(
                (s.residency(), s.generation()),
                (Residency::Resident, Generation(2))
            );
            assert_eq!(store.pin(0).unwrap().read(), 2, "eviction kept off g2");
            assert_eq!(store.readiness_epoch(), 3);
            assert_eq!(store.resident_count(), 1);
        } else {
            assert_eq!(
                (s.residency(), s.generation()),
                (Residency::Absent, Generation(1))
            );
            assert_eq!(store.readiness_epoch(), 2);
            assert_eq!(store.resident_count(), 0);
        }
        drop(store);
        assert_eq!(new.drops.load(Ordering::Relaxed), usize::from(reloaded));
    });
}

/// An evicted object needed by two runs at once: exactly one restores it
/// (a new generation), the other waits for that generation and is woken
/// once; both read the restored bytes, never the evicted ones.
#[test]
fn restore_racing_a_second_waiter_restores_once() {
    model(|| {
        let store = Arc::new(PreparedObjectStore::<Obj>::new(1));
        let (old, new) = (probe(), probe());
        let LoadAttempt::Claimed(claim) = store.try_claim_load(0) else {
            unreachable!()
        };
        claim.publish(Obj::produce(&old, 1), 8);
        assert_eq!(
            store.try_evict(0),
            Evict::Evicted {
                generation: Generation(1),
                bytes: 8
            }
        );
        let tally = Arc::new(Tally::default());
        let other = {
            let (store, new, tally) = (store.clone(), new.clone(), tally.clone());
            thread::spawn(move || consume_at(&store, &new, &tally, Generation(2)))
        };
        assert_eq!(consume_at(&store, &new, &tally, Generation(2)), 42);
        assert_eq!(other.join().unwrap(), 42);

        let count = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        assert_eq!(count(&tally.claimed), 1, "exactly one restore");
        assert_eq!(count(&tally.in_flight), count(&tally.woken));
        assert_eq!(count(&tally.in_flight) + count(&tally.resident), 1);
        let s = store.snapshot(0);
        assert_eq!(
            (s.residency(), s.generation(), s.pins()),
            (Residency::Resident, Generation(2), 0)
        );
        assert_eq!(count(&new.drops), 0);
        drop(store);
        assert_eq!(count(&old.drops), 1, "the evicted object freed once");
        assert_eq!(count(&new.drops), 1, "the restored object freed once");
    });
}
