//! Loom model of the admission gate over a shared `MemoryBudget` (admit
//! steps 3–4 with arena reservation protocol step 5): a task refused
//! because an ordinary reservation (not a permit) holds the bytes is
//! retried when that reservation is dropped, whichever comes first — the
//! refusal, the deferral, or the release. A lost retry would deadlock
//! `wait`; the task never runs over the limit.
#![cfg(loom)]

use loom_tests::{model, one_cpu_worker};

use onnx_prepared::arena::{BudgetLimits, Domain, MemoryBudget};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    Admission, SubmitOptions, TaskContext, TaskFailure, TaskGraph, TaskRunner,
};
use onnx_prepared::sync::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Runs {
    budget: MemoryBudget,
    count: AtomicUsize,
    live_at_run: AtomicUsize,
}

impl TaskRunner for Runs {
    fn run(&self, _: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.live_at_run
            .store(self.budget.total_live(), Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn a_task_refused_for_bytes_runs_once_an_ordinary_reservation_is_dropped() {
    model(|| {
        let budget = MemoryBudget::new(BudgetLimits::unlimited().with_global(100));
        let held = budget.reserve(Domain::Execution, 60).unwrap();
        let graph = TaskGraph::new(
            &[ResourceClass::Cpu],
            &[Priority::Critical],
            &Csr::from_rows(&[Vec::<TaskId>::new()]),
        )
        .unwrap()
        .with_estimates(&[Domain::Preparation], &[60])
        .unwrap();
        let runs = Arc::new(Runs {
            budget: budget.clone(),
            count: AtomicUsize::new(0),
            live_at_run: AtomicUsize::new(0),
        });
        let workers = one_cpu_worker();
        let run = workers
            .submit_with(
                graph,
                runs.clone(),
                SubmitOptions {
                    admission: Some(Arc::new(Admission::new(budget.clone()))),
                    ..SubmitOptions::default()
                },
            )
            .unwrap();
        drop(held); // races the worker's admission of the task
        let outcome = run.wait();
        assert_eq!(outcome.completed, 1);
        assert_eq!(runs.count.load(Ordering::SeqCst), 1);
        // It ran holding its own 60 bytes only: the reservation was gone.
        assert_eq!(runs.live_at_run.load(Ordering::SeqCst), 60);
        drop(run);
        drop(workers);
        assert_eq!(budget.total_live(), 0);
    });
}
