//! Loom models of `scheduler::TaskState`: the dependency counter fires
//! exactly once, a duplicated ready entry runs exactly once, and a cancel
//! racing a claim leaves exactly one outcome.
#![cfg(loom)]

use loom_tests::model;

use loom::cell::UnsafeCell;
use onnx_prepared::scheduler::{Cancel, DependencyDone, FireClaim, TaskClaim, TaskState};
use onnx_prepared::sync::{Arc, AtomicUsize, Ordering, thread};

/// What the two dependencies produced; plain cells, so loom reports a race
/// if the claimer could read them without a happens-before edge.
struct Outputs([UnsafeCell<u32>; 2]);

// SAFETY: each cell is written by one dependency before `dependency_done`
// and read only by the claimer after `try_claim`; loom checks that claim.
unsafe impl Sync for Outputs {}

#[test]
fn last_dependency_fires_exactly_once_and_publishes_both_outputs() {
    model(|| {
        let state = Arc::new(TaskState::new(2));
        let outputs = Arc::new(Outputs([UnsafeCell::new(0), UnsafeCell::new(0)]));
        let fired = Arc::new(AtomicUsize::new(0));
        let finish = |i: usize| {
            let (state, outputs, fired) = (state.clone(), outputs.clone(), fired.clone());
            thread::spawn(move || {
                // SAFETY: only this thread writes cell `i`, before its
                // dependency_done.
                outputs.0[i].with_mut(|p| unsafe { *p = i as u32 + 1 });
                // Thread 0 uses the plain decrement + claim, thread 1 the
                // claim-on-fire CAS: both pairs must publish the outputs.
                let claimed = if i == 0 {
                    state.dependency_done() == DependencyDone::Fired
                        && state.try_claim() == TaskClaim::Claimed
                } else {
                    state.dependency_done_claiming() == FireClaim::FiredClaimed
                };
                if claimed {
                    fired.fetch_add(1, Ordering::Relaxed);
                    // SAFETY: the claim acquired both decrements.
                    let sum: u32 = outputs.0.iter().map(|c| c.with(|p| unsafe { *p })).sum();
                    assert_eq!(sum, 3);
                }
            })
        };
        let a = finish(0);
        let b = finish(1);
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(fired.load(Ordering::Relaxed), 1);
        let s = state.snapshot();
        assert!(s.is_claimed() && s.remaining() == 0);
    });
}

#[test]
fn duplicate_entries_run_exactly_once() {
    model(|| {
        let state = Arc::new(TaskState::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (state, runs) = (state.clone(), runs.clone());
                thread::spawn(move || match state.try_claim() {
                    TaskClaim::Claimed => {
                        runs.fetch_add(1, Ordering::Relaxed);
                    }
                    TaskClaim::AlreadyClaimed => {}
                    other => panic!("unexpected {other:?}"),
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        assert!(state.snapshot().is_claimed());
    });
}

#[test]
fn cancel_racing_claim_has_one_outcome() {
    model(|| {
        let state = Arc::new(TaskState::new(0));
        let claimer = {
            let state = state.clone();
            thread::spawn(move || state.try_claim())
        };
        let cancel = state.cancel();
        let claim = claimer.join().unwrap();
        match (cancel, claim) {
            (Cancel::Cancelled, TaskClaim::Cancelled) => assert!(!state.snapshot().is_claimed()),
            (Cancel::TooLate, TaskClaim::Claimed) => assert!(!state.snapshot().is_cancelled()),
            other => panic!("inconsistent outcome {other:?}"),
        }
    });
}

#[test]
fn cancel_racing_claim_on_fire_has_one_outcome() {
    model(|| {
        let state = Arc::new(TaskState::new(1));
        let finisher = {
            let state = state.clone();
            thread::spawn(move || state.dependency_done_claiming())
        };
        let cancel = state.cancel();
        let fired = finisher.join().unwrap();
        match (cancel, fired) {
            // Cancelled first: the last decrement fires without claiming, and
            // the claim of the posted entry drops it.
            (Cancel::Cancelled, FireClaim::Fired) => {
                assert_eq!(state.try_claim(), TaskClaim::Cancelled)
            }
            // Claimed on fire first: the cancel is too late, the claimer runs
            // it (or records it cancelled after seeing the run's flag).
            (Cancel::TooLate, FireClaim::FiredClaimed) => {
                assert!(!state.snapshot().is_cancelled())
            }
            other => panic!("inconsistent outcome {other:?}"),
        }
        assert_eq!(state.snapshot().remaining(), 0);
    });
}
