//! Loom models of `sync::Latch`: no lost wake-up, everything written
//! before `open` is visible after `wait`, and an `on_open` hook runs exactly
//! once whichever side gets there first.
#![cfg(loom)]

use loom_tests::model;

use loom::cell::UnsafeCell;
use onnx_prepared::sync::{Arc, AtomicUsize, Latch, Ordering, thread};

/// A plain (non-atomic) cell written by the opener and read by the waiter;
/// loom reports a data race if `wait` returned without a happens-before edge.
struct Payload(UnsafeCell<u64>);

// SAFETY: access is ordered by the latch under test; loom checks that claim.
unsafe impl Sync for Payload {}

#[test]
fn waiter_sees_writes_made_before_open() {
    model(|| {
        let latch = Arc::new(Latch::new());
        let payload = Arc::new(Payload(UnsafeCell::new(0)));
        let opener = {
            let (latch, payload) = (latch.clone(), payload.clone());
            thread::spawn(move || {
                // SAFETY: the waiter reads only after `wait`, which returns
                // only after this `open`.
                payload.0.with_mut(|p| unsafe { *p = 42 });
                latch.open();
            })
        };
        latch.wait();
        // SAFETY: `wait` returned, so the opener's write happened before.
        let seen = payload.0.with(|p| unsafe { *p });
        assert_eq!(seen, 42);
        opener.join().unwrap();
    });
}

#[test]
fn every_waiter_is_woken_exactly_once() {
    model(|| {
        let latch = Arc::new(Latch::new());
        let woken = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (latch, woken) = (latch.clone(), woken.clone());
                thread::spawn(move || {
                    latch.wait();
                    woken.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        assert_eq!(
            woken.load(Ordering::Relaxed),
            0,
            "nobody passes a closed latch"
        );
        latch.open();
        latch.open();
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(woken.load(Ordering::Relaxed), 2);
        assert!(latch.is_open());
    });
}

#[test]
fn hook_runs_exactly_once() {
    model(|| {
        let latch = Arc::new(Latch::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let payload = Arc::new(Payload(UnsafeCell::new(0)));
        let opener = {
            let (latch, payload) = (latch.clone(), payload.clone());
            thread::spawn(move || {
                // SAFETY: the hook reads only once the latch is open, after
                // this write.
                payload.0.with_mut(|p| unsafe { *p = 7 });
                latch.open();
            })
        };
        let (r, p) = (runs.clone(), payload.clone());
        latch.on_open(Box::new(move || {
            // SAFETY: the hook runs only after `open`, which follows the
            // opener's write.
            let seen = p.0.with(|v| unsafe { *v });
            assert_eq!(seen, 7);
            r.fetch_add(1, Ordering::Relaxed);
        }));
        opener.join().unwrap();
        assert_eq!(runs.load(Ordering::Relaxed), 1);
    });
}

/// A latch reused (reset) while the opener of its first opening is still
/// on its way to the hook: the first opening's hook runs exactly once
/// (taken by the opener or by the reset), and a hook registered for the
/// second opening runs exactly once, never before that opening.
#[test]
fn a_reset_runs_a_late_opener_s_hook_and_keeps_the_next_one() {
    model(|| {
        let latch = Arc::new(Latch::new());
        let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let reopened = Arc::new(AtomicUsize::new(0));
        let f = first.clone();
        latch.on_open(Box::new(move || {
            f.fetch_add(1, Ordering::SeqCst);
        }));
        let opener = {
            let latch = latch.clone();
            thread::spawn(move || latch.open())
        };
        while !latch.is_open() {
            thread::yield_now();
        }
        latch.reset();
        let (s, r) = (second.clone(), reopened.clone());
        latch.on_open(Box::new(move || {
            assert_eq!(r.load(Ordering::SeqCst), 1, "ran before its opening");
            s.fetch_add(1, Ordering::SeqCst);
        }));
        reopened.store(1, Ordering::SeqCst);
        latch.open();
        opener.join().unwrap();
        assert_eq!(first.load(Ordering::SeqCst), 1);
        assert_eq!(second.load(Ordering::SeqCst), 1);
    });
}
