//! Loom model of the session's run protocol around a missing object (run
//! steps 3–4 and the cancel path of `ExecutionHandle`), on a real
//! `WorkerPool` and `PreparedObjectStore`: a run that finds its object
//! absent suspends and registers `resume` on the object's completion; a
//! producer publishes it (resuming the run) while the caller cancels and
//! takes the continuation back, as `ExecutionHandle::cancel`, `wait` and
//! `drop` do. Whatever the interleaving: one terminal state, the run
//! finishes only after seeing the object, `wait` returns (a lost resume
//! would deadlock), and nothing is left registered on the store holding
//! the submission (and so the runner and its context) alive.
#![cfg(loom)]

use loom_tests::{model, one_cpu_worker};

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{TaskContext, TaskFailure, TaskGraph, TaskRunner};
use onnx_prepared::store::{Generation, LoadAttempt, PreparedObjectStore, Registration};
use onnx_prepared::sync::{Arc, AtomicUsize, Lock, Ordering, thread};

/// The run continuation's stand-in: the session's `RunContinuation` with
/// the store for its state.
struct Run {
    store: Arc<PreparedObjectStore<u64>>,
    runs: AtomicUsize,
    /// Runs that saw the object and finished.
    finished: AtomicUsize,
    /// The continuation registered by the last suspension (run step 3).
    waiting: Lock<Option<Registration>>,
}

impl Run {
    /// `RunContinuation::deregister`.
    fn deregister(&self) {
        if let Some(registration) = self.waiting.with(Option::take) {
            self.store.deregister(registration);
        }
    }
}

impl TaskRunner for Run {
    fn run(&self, _task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if self.store.snapshot(0).is_resident() {
            self.finished.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        let handle = ctx.suspend();
        let registration = self
            .store
            .waiter(0, Generation(1))
            .on_complete(move |_| handle.resume());
        self.waiting.with(|w| *w = registration);
        Ok(())
    }
}

#[test]
fn suspended_run_racing_resume_and_cancel_ends_once_and_leaves_nothing_registered() {
    model(|| {
        let store = Arc::new(PreparedObjectStore::<u64>::new(1));
        let graph = TaskGraph::new(
            &[ResourceClass::Cpu],
            &[Priority::Critical],
            &Csr::from_rows(&[Vec::<TaskId>::new()]),
        )
        .unwrap();
        let runner = std::sync::Arc::new(Run {
            store: store.clone(),
            runs: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            waiting: Lock::new(None),
        });
        let workers = one_cpu_worker();
        let run = workers.submit(graph, runner.clone()).unwrap();
        let producer = {
            let store = store.clone();
            thread::spawn(move || match store.try_claim_load(0) {
                LoadAttempt::Claimed(claim) => claim.publish(7, 8),
                _ => unreachable!("the only producer"),
            })
        };
        // `ExecutionHandle::cancel`: cancel, and take the continuation
        // back if the run is already terminal (buried while suspended).
        run.cancel_token().cancel();
        if run.is_done() {
            runner.deregister();
        }
        // `wait` / `drop`: once terminal no run executes, so no new
        // registration can follow this one.
        let outcome = run.wait();
        runner.deregister();
        // Whether or not the producer has published yet: the continuation
        // was called or taken back.
        assert_eq!(store.registered(0), 0);
        producer.join().unwrap();
        assert_eq!(outcome.completed + outcome.cancelled, 1);
        let finished = runner.finished.load(Ordering::SeqCst);
        assert_eq!(finished, outcome.completed);
        assert!(runner.runs.load(Ordering::SeqCst) <= 2);
        assert_eq!(store.registered(0), 0);
        drop(run);
        drop(workers);
        // No continuation keeps the submission, hence the runner, alive.
        assert_eq!(std::sync::Arc::strong_count(&runner), 1);
    });
}
