//! Loom model of admission on a real `WorkerPool` (1 CPU + 1 I/O worker +
//! the waiting thread): two tasks that cannot both hold their bytes never
//! run at once, and the one refused is re-queued by the other's permit
//! release (admit steps 3–4: no lost retry, else `wait` deadlocks).
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::arena::{BudgetLimits, Domain, MemoryBudget};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    Admission, SubmitOptions, TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool,
    WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Runs {
    budget: MemoryBudget,
    count: [AtomicUsize; 2],
    max_live: AtomicUsize,
}

impl TaskRunner for Runs {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.count[task.0 as usize].fetch_add(1, Ordering::SeqCst);
        self.max_live
            .fetch_max(self.budget.total_live(), Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn refused_task_is_retried_on_release_and_never_over_budget() {
    model(|| {
        let graph = TaskGraph::new(
            &[ResourceClass::Io, ResourceClass::Cpu],
            &[Priority::Critical; 2],
            &Csr::from_rows(&[Vec::<TaskId>::new(), Vec::new()]),
        )
        .unwrap()
        .with_estimates(&[Domain::Preparation; 2], &[60, 60])
        .unwrap();
        let budget = MemoryBudget::new(BudgetLimits::unlimited().with_global(100));
        let runs = std::sync::Arc::new(Runs {
            budget: budget.clone(),
            count: Default::default(),
            max_live: AtomicUsize::new(0),
        });
        let workers = WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 1,
            io_workers: 1,
            pin_cpu_workers: false,
        });
        let pool = workers
            .submit_with(
                graph,
                runs.clone(),
                SubmitOptions {
                    admission: Some(Arc::new(Admission::new(budget.clone()))),
                    ..SubmitOptions::default()
                },
            )
            .unwrap();
        let outcome = pool.wait();
        assert_eq!(outcome.completed, 2);
        drop(pool);
        drop(workers);
        assert_eq!(runs.count[0].load(Ordering::SeqCst), 1);
        assert_eq!(runs.count[1].load(Ordering::SeqCst), 1);
        assert_eq!(runs.max_live.load(Ordering::SeqCst), 60);
        assert_eq!(budget.total_live(), 0);
    });
}
