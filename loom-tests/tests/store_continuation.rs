//! Loom model of the store event's continuations (`Event::on_complete`,
//! `Event::deregister`, reached through `store::Waiter::on_complete` and
//! `PreparedObjectStore::deregister`): a continuation registered while the
//! producer publishes is called exactly once, and one taken back while the
//! producer publishes is either called or dropped uncalled — never both,
//! never neither — and is freed either way.
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::store::{Generation, GenerationOutcome, LoadAttempt, PreparedObjectStore};
use onnx_prepared::sync::{Arc, AtomicUsize, Ordering, thread};

#[derive(Default)]
struct Tally {
    called: AtomicUsize,
    dropped: AtomicUsize,
}

/// Owned by a continuation; counts its drop (called or not).
struct Owned(Arc<Tally>);

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// A producer thread that claims generation 1 of entry 0 and publishes it.
fn spawn_producer(store: &Arc<PreparedObjectStore<u64>>) -> thread::JoinHandle<()> {
    let store = store.clone();
    thread::spawn(move || match store.try_claim_load(0) {
        LoadAttempt::Claimed(claim) => claim.publish(7, 8),
        _ => unreachable!("the only producer"),
    })
}

fn continuation(tally: &Arc<Tally>) -> impl FnOnce(GenerationOutcome) + Send + 'static {
    let owned = Owned(tally.clone());
    move |outcome| {
        assert_eq!(outcome, GenerationOutcome::Resident(Generation(1)));
        owned.0.called.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn registration_racing_completion_is_called_once() {
    model(|| {
        let store = Arc::new(PreparedObjectStore::<u64>::new(1));
        let tally = Arc::new(Tally::default());
        let producer = spawn_producer(&store);
        let kept = store
            .waiter(0, Generation(1))
            .on_complete(continuation(&tally));
        producer.join().unwrap();
        assert_eq!(tally.called.load(Ordering::SeqCst), 1);
        assert_eq!(tally.dropped.load(Ordering::SeqCst), 1);
        assert_eq!(store.registered(0), 0);
        if let Some(registration) = kept {
            // Called by the producer: nothing left to take back.
            assert!(!store.deregister(registration));
        }
    });
}

#[test]
fn deregistration_racing_completion_calls_or_drops_exactly_once() {
    model(|| {
        let store = Arc::new(PreparedObjectStore::<u64>::new(1));
        let tally = Arc::new(Tally::default());
        let producer = spawn_producer(&store);
        let taken_back = match store
            .waiter(0, Generation(1))
            .on_complete(continuation(&tally))
        {
            Some(registration) => store.deregister(registration),
            None => false, // completed first: called at once
        };
        if taken_back {
            // Dropped uncalled, here, before `deregister` returned.
            assert_eq!(tally.dropped.load(Ordering::SeqCst), 1);
        }
        producer.join().unwrap();
        let called = tally.called.load(Ordering::SeqCst);
        assert_eq!(called + usize::from(taken_back), 1);
        assert_eq!(tally.dropped.load(Ordering::SeqCst), 1);
        assert_eq!(store.registered(0), 0);
    });
}
