//! Every transition of the store, one test each (std build; the loom models
//! in `loom-tests/tests/store_*.rs` cover the races).

use std::time::Duration;

use super::*;
use crate::sync::{Arc, epoch};

/// A prepared object that counts its drops.
#[derive(Debug)]
struct Obj {
    value: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Obj {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn obj(value: u64, drops: &Arc<AtomicUsize>) -> Obj {
    Obj {
        value,
        drops: drops.clone(),
    }
}

fn claim<T: Send + Sync + 'static>(
    store: &PreparedObjectStore<T>,
    index: usize,
) -> LoadClaim<'_, T> {
    match store.try_claim_load(index) {
        LoadAttempt::Claimed(claim) => claim,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Drives epoch reclamation until `drops` reaches `expected` (bounded).
fn reclaim_until(drops: &AtomicUsize, expected: usize) {
    for _ in 0..100_000 {
        if drops.load(Ordering::SeqCst) >= expected {
            break;
        }
        epoch::flush();
        crate::sync::thread::yield_now();
    }
    assert_eq!(drops.load(Ordering::SeqCst), expected);
}

/// Publishes entry `index` with `value`, `bytes`.
fn load(store: &PreparedObjectStore<u64>, index: usize, value: u64, bytes: usize) {
    claim(store, index).publish(value, bytes);
}

#[test]
fn absent_loading_preparing_resident() {
    let store = PreparedObjectStore::<u64>::new(2);
    let s = store.snapshot(0);
    assert_eq!(
        (s.residency(), s.generation(), s.pins()),
        (Residency::Absent, Generation(0), 0)
    );
    let epoch0 = store.readiness_epoch();

    let c = claim(&store, 0);
    assert_eq!(c.generation(), Generation(1));
    assert_eq!(c.index(), 0);
    assert_eq!(store.snapshot(0).residency(), Residency::Loading);
    assert_eq!(store.snapshot(0).generation(), Generation(1));
    assert!(store.snapshot(0).is_in_flight());
    assert!(store.pin(0).is_none(), "loading is not pinnable");
    assert_eq!(store.read_guard().get(0), None);

    c.set_preparing();
    assert_eq!(store.snapshot(0).residency(), Residency::Preparing);
    assert!(store.pin(0).is_none(), "preparing is not pinnable");
    assert_eq!(store.readiness_epoch(), epoch0, "nothing resident yet");

    c.publish(42, 100);
    let s = store.snapshot(0);
    assert_eq!(
        (s.residency(), s.generation(), s.pins()),
        (Residency::Resident, Generation(1), 0)
    );
    assert_ne!(store.readiness_epoch(), epoch0);
    assert_eq!(*store.pin(0).unwrap(), 42);
    assert_eq!(store.read_guard().get(0), Some(&42));
    assert!(matches!(
        store.try_claim_load(0),
        LoadAttempt::Resident(Generation(1))
    ));
    assert_eq!(store.snapshot(1).residency(), Residency::Absent);
    assert_eq!(store.resident_set().iter_ones().collect::<Vec<_>>(), [0]);
}

#[test]
fn publish_straight_from_loading() {
    let store = PreparedObjectStore::<u64>::new(1);
    claim(&store, 0).publish(7, 8);
    assert!(store.snapshot(0).is_resident());
}

#[test]
fn claim_while_in_flight_shares_the_generation() {
    let store = PreparedObjectStore::<u64>::new(1);
    let c = claim(&store, 0);
    let LoadAttempt::InFlight(loading) = store.try_claim_load(0) else {
        panic!("second claim while loading must share the load")
    };
    c.set_preparing();
    let LoadAttempt::InFlight(preparing) = store.try_claim_load(0) else {
        panic!("second claim while preparing must share the load")
    };
    assert_eq!(loading.generation(), c.generation());
    assert_eq!(preparing.generation(), c.generation());
    assert!(!loading.is_complete());
    assert_eq!(loading.outcome(), None);
    assert_eq!(
        store.snapshot(0).generation(),
        Generation(1),
        "no new generation"
    );

    c.publish(1, 1);
    assert!(loading.is_complete());
    assert_eq!(loading.outcome(), Some(GenerationOutcome::Resident(Generation(1))));
    assert_eq!(preparing.wait(), GenerationOutcome::Resident(Generation(1)));
}

#[test]
fn waiter_on_another_thread_is_woken_by_publish() {
    let store = Arc::new(PreparedObjectStore::<u64>::new(1));
    let c = claim(&store, 0);
    let waiter = {
        let store = store.clone();
        crate::sync::thread::spawn(move || {
            let LoadAttempt::InFlight(w) = store.try_claim_load(0) else {
                panic!("the main thread holds the claim")
            };
            let outcome = w.wait();
            let value = *store.pin(0).expect("resident after a Resident outcome");
            (outcome, value)
        })
    };
    // Give the waiter time to block (correctness does not depend on it).
    crate::sync::thread::sleep(Duration::from_millis(20));
    c.publish(99, 8);
    assert_eq!(
        waiter.join().unwrap(),
        (GenerationOutcome::Resident(Generation(1)), 99)
    );
}

#[test]
fn dropped_claim_fails_the_generation_and_wakes_waiters() {
    let store = Arc::new(PreparedObjectStore::<u64>::new(1));
    let epoch0 = store.readiness_epoch();
    let c = claim(&store, 0);
    c.set_preparing();
    let waiter = {
        let store = store.clone();
        crate::sync::thread::spawn(move || {
            let LoadAttempt::InFlight(w) = store.try_claim_load(0) else {
                panic!("the main thread holds the claim")
            };
            (w.wait(), store.snapshot(0).residency())
        })
    };
    crate::sync::thread::sleep(Duration::from_millis(20));
    drop(c);
    assert_eq!(
        waiter.join().unwrap(),
        (GenerationOutcome::Failed(Generation(1)), Residency::Failed)
    );
    let s = store.snapshot(0);
    assert_eq!(
        (s.residency(), s.generation()),
        (Residency::Failed, Generation(1))
    );
    assert_eq!(store.readiness_epoch(), epoch0, "resident set unchanged");
    assert_eq!(store.resident_count(), 0);
    assert!(store.pin(0).is_none());
    assert!(matches!(
        store.try_claim_load(0),
        LoadAttempt::Failed(Generation(1))
    ));
    assert_eq!(store.try_evict(0), Evict::NotResident);
}

#[test]
fn retry_after_failure_starts_the_next_generation_once() {
    let store = PreparedObjectStore::<u64>::new(1);
    drop(claim(&store, 0));
    // A stale failed generation does not retry.
    assert!(matches!(
        store.retry_load(0, Generation(0)),
        LoadAttempt::Failed(Generation(1))
    ));
    let LoadAttempt::Claimed(retry) = store.retry_load(0, Generation(1)) else {
        panic!("first retry of g1 claims")
    };
    assert_eq!(retry.generation(), Generation(2));
    // A second consumer retrying the same failure shares the retry.
    let LoadAttempt::InFlight(w) = store.retry_load(0, Generation(1)) else {
        panic!("second retry of g1 shares g2")
    };
    assert_eq!(w.generation(), Generation(2));
    drop(retry);
    assert_eq!(w.wait(), GenerationOutcome::Failed(Generation(2)));
    assert!(matches!(
        store.retry_load(0, Generation(1)),
        LoadAttempt::Failed(Generation(2))
    ));
    let LoadAttempt::Claimed(retry) = store.retry_load(0, Generation(2)) else {
        panic!("retry of g2 claims")
    };
    retry.publish(5, 5);
    assert!(matches!(
        store.retry_load(0, Generation(2)),
        LoadAttempt::Resident(Generation(3))
    ));
    assert_eq!(store.pin(0).unwrap().generation(), Generation(3));
}

#[test]
fn pin_blocks_eviction_and_evict_returns_to_absent() {
    let store = PreparedObjectStore::<u64>::new(1);
    load(&store, 0, 3, 64);
    let epoch_resident = store.readiness_epoch();

    let p1 = store.pin(0).unwrap();
    let p2 = store.pin(0).unwrap();
    assert_eq!(store.snapshot(0).pins(), 2);
    assert_eq!(store.try_evict(0), Evict::Pinned { pins: 2 });
    drop(p1);
    assert_eq!(store.try_evict(0), Evict::Pinned { pins: 1 });
    assert_eq!(*p2, 3);
    drop(p2);
    assert_eq!(store.snapshot(0).pins(), 0);
    assert_eq!(
        store.readiness_epoch(),
        epoch_resident,
        "pins do not move it"
    );

    assert_eq!(
        store.try_evict(0),
        Evict::Evicted {
            generation: Generation(1),
            bytes: 64
        }
    );
    let s = store.snapshot(0);
    assert_eq!(
        (s.residency(), s.generation(), s.pins()),
        (Residency::Absent, Generation(1), 0)
    );
    assert_ne!(store.readiness_epoch(), epoch_resident);
    assert_eq!((store.resident_count(), store.resident_bytes()), (0, 0));
    assert!(store.pin(0).is_none(), "pin after evict fails");
    assert_eq!(store.read_guard().get(0), None);
    assert_eq!(store.try_evict(0), Evict::NotResident);

    // Eviction removes residency, not identity: the next claim is g2.
    let c = claim(&store, 0);
    assert_eq!(c.generation(), Generation(2));
    c.publish(4, 64);
    assert_eq!(*store.pin(0).unwrap(), 4);
}

#[test]
fn readiness_epoch_moves_exactly_on_publish_and_evict() {
    let store = PreparedObjectStore::<u64>::new(2);
    let mut last = store.readiness_epoch();
    let mut moved = |store: &PreparedObjectStore<u64>| {
        let now = store.readiness_epoch();
        let changed = now != last;
        last = now;
        changed
    };
    let c = claim(&store, 0);
    assert!(!moved(&store), "claim");
    c.set_preparing();
    assert!(!moved(&store), "preparing");
    c.publish(1, 1);
    assert!(moved(&store), "publish");
    drop(claim(&store, 1));
    assert!(!moved(&store), "failure");
    drop(store.pin(0));
    assert!(!moved(&store), "pin");
    assert!(matches!(store.try_evict(0), Evict::Evicted { .. }));
    assert!(moved(&store), "evict");
    assert_eq!(store.try_evict(0), Evict::NotResident);
    assert!(!moved(&store), "refused evict");
}

#[test]
fn bytes_and_last_use_accounting() {
    let store = PreparedObjectStore::<u64>::new(3);
    assert_eq!((store.last_use(0), store.bytes(0)), (0, 0));
    load(&store, 0, 0, 10);
    load(&store, 1, 1, 20);
    assert_eq!((store.resident_count(), store.resident_bytes()), (2, 30));
    assert_eq!(
        (store.bytes(0), store.bytes(1), store.bytes(2)),
        (10, 20, 0)
    );
    assert!(
        store.last_use(1) > store.last_use(0),
        "publish counts as use"
    );

    drop(store.pin(0));
    assert!(
        store.last_use(0) > store.last_use(1),
        "pin refreshes last use"
    );
    assert_eq!(store.last_use(2), 0);

    assert!(matches!(
        store.try_evict(1),
        Evict::Evicted { bytes: 20, .. }
    ));
    assert_eq!((store.resident_count(), store.resident_bytes()), (1, 10));
    assert_eq!(store.bytes(1), 20, "size of the last published generation");

    let mut needed = BitVec::repeat(false, 3);
    needed.set(0, true);
    assert!(store.all_resident(&needed));
    needed.set(1, true);
    assert!(!store.all_resident(&needed));
    assert_eq!(store.resident_set().iter_ones().collect::<Vec<_>>(), [0]);
}

#[test]
fn object_is_dropped_once_after_eviction_never_while_pinned() {
    let drops = Arc::new(AtomicUsize::new(0));
    let store = PreparedObjectStore::<Obj>::new(1);
    claim(&store, 0).publish(obj(11, &drops), 1);

    let pinned = store.pin(0).unwrap();
    assert_eq!(store.try_evict(0), Evict::Pinned { pins: 1 });
    for _ in 0..1000 {
        epoch::flush();
    }
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "never dropped while pinned"
    );
    assert_eq!(pinned.value, 11);
    drop(pinned);

    assert!(matches!(store.try_evict(0), Evict::Evicted { .. }));
    reclaim_until(&drops, 1);
    for _ in 0..1000 {
        epoch::flush();
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped exactly once");
    drop(store);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "not again with the store");
}

#[test]
fn read_guard_keeps_an_evicted_object_alive() {
    let drops = Arc::new(AtomicUsize::new(0));
    let store = PreparedObjectStore::<Obj>::new(1);
    claim(&store, 0).publish(obj(12, &drops), 1);

    let guard = store.read_guard();
    let read = guard.get(0).unwrap();
    // A guard does not block eviction ...
    assert!(matches!(store.try_evict(0), Evict::Evicted { .. }));
    assert_eq!(guard.get(0).map(|o| o.value), None, "unpublished");
    // ... but the object it read outlives the eviction.
    for _ in 0..1000 {
        epoch::flush();
    }
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert_eq!(read.value, 12);
    drop(guard);
    reclaim_until(&drops, 1);
}

#[test]
fn dropping_the_store_drops_resident_objects_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let store = PreparedObjectStore::<Obj>::new(3);
    claim(&store, 0).publish(obj(0, &drops), 1);
    claim(&store, 2).publish(obj(2, &drops), 1);
    drop(claim(&store, 1));
    drop(store);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

#[test]
fn waiter_of_a_superseded_generation_reports_the_newest() {
    let store = PreparedObjectStore::<u64>::new(1);
    let waiter = store.waiter(0, Generation(1));
    assert!(!waiter.is_complete());
    load(&store, 0, 1, 1);
    assert_eq!(waiter.outcome(), Some(GenerationOutcome::Resident(Generation(1))));
    assert!(matches!(store.try_evict(0), Evict::Evicted { .. }));
    drop(claim(&store, 0));
    let outcome = waiter.wait();
    assert_eq!(outcome, GenerationOutcome::Failed(Generation(2)));
    assert!(outcome.generation() > waiter.generation());
    assert!(!store.waiter(0, Generation(3)).is_complete());
}

#[test]
fn auto_traits() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PreparedObjectStore<Vec<u8>>>();
    send_sync::<Pin<'static, Vec<u8>>>();
    send_sync::<Waiter<'static>>();
    send_sync::<LoadClaim<'static, Vec<u8>>>();
}

#[test]
fn continuations_run_once_on_publish_or_failure() {
    let store: PreparedObjectStore<u64> = PreparedObjectStore::new(2);
    let seen = Arc::new(crate::sync::Lock::new(Vec::new()));
    let record = |tag: &'static str| {
        let seen = seen.clone();
        move |o: GenerationOutcome| seen.with(|s| s.push((tag, o)))
    };
    // Registered while in flight: called by the publisher, once.
    let c = claim(&store, 0);
    let g = c.generation();
    let before = store.waiter(0, g).on_complete(record("before"));
    assert!(seen.with(|s| s.is_empty()));
    assert_eq!(store.registered(0), 1);
    c.publish(7, 8);
    assert_eq!(
        seen.with(|s| s.clone()),
        vec![("before", GenerationOutcome::Resident(g))]
    );
    assert_eq!(store.registered(0), 0);
    // Taken back after it was called: nothing to take.
    assert!(!store.deregister(before.expect("kept while in flight")));
    // Registered after: called at once, nothing kept.
    assert!(store.waiter(0, g).on_complete(record("after")).is_none());
    assert_eq!(seen.with(|s| s.len()), 2);
    // A dropped claim fails the generation: the continuation sees it.
    let c = claim(&store, 1);
    let g1 = c.generation();
    store.waiter(1, g1).on_complete(record("failed"));
    drop(c);
    assert_eq!(seen.with(|s| s[2]), ("failed", GenerationOutcome::Failed(g1)));
    assert_eq!(seen.with(|s| s.len()), 3);
}

/// Event protocol step 6: a deregistered continuation is dropped uncalled
/// at once (what it owns is freed), and a later completion calls only the
/// others.
#[test]
fn a_deregistered_continuation_is_dropped_uncalled() {
    let store: PreparedObjectStore<u64> = PreparedObjectStore::new(1);
    let called = Arc::new(crate::sync::AtomicUsize::new(0));
    let owned = Arc::new(());
    let c = claim(&store, 0);
    let g = c.generation();
    let register = || {
        let (called, owned) = (called.clone(), owned.clone());
        store.waiter(0, g).on_complete(move |_| {
            let _owned = owned;
            called.fetch_add(1, crate::sync::Ordering::Relaxed);
        })
    };
    let first = register().expect("kept while in flight");
    let _second = register().expect("kept while in flight");
    assert_eq!((store.registered(0), Arc::strong_count(&owned)), (2, 3));
    assert!(store.deregister(first));
    assert_eq!((store.registered(0), Arc::strong_count(&owned)), (1, 2));
    assert!(!store.deregister(first), "a key removes at most once");
    c.publish(7, 8);
    assert_eq!(called.load(crate::sync::Ordering::Relaxed), 1);
    assert_eq!((store.registered(0), Arc::strong_count(&owned)), (0, 1));
}
