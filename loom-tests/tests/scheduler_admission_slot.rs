//! Loom model of admit step 0 on a real `WorkerPool` (2 I/O workers, hence
//! one non-critical I/O slot, + the waiting thread): a worker takes a
//! prefetch task only while a slot is free and otherwise sleeps beside it
//! (the queue counts as empty); both tasks run exactly once, never at
//! once, and `wait` returns (no worker sleeps through the slot's return).
//! Preemption bound 1: step 0's race (a slot seen free, then taken by the
//! other worker before this one's admission) needs one forced switch, and
//! three threads under a bound of 2 take minutes.
#![cfg(loom)]

use onnx_prepared::arena::{BudgetLimits, MemoryBudget};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    Admission, SubmitOptions, TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool,
    WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Default)]
struct Runs {
    count: [AtomicUsize; 2],
    running: AtomicUsize,
    max_running: AtomicUsize,
}

impl TaskRunner for Runs {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        self.count[task.0 as usize].fetch_add(1, Ordering::SeqCst);
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn prefetch_tasks_wait_in_the_queue_for_the_one_slot() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(1);
    builder.check(|| {
        let graph = TaskGraph::new(
            &[ResourceClass::Io; 2],
            &[Priority::Prefetch; 2],
            &Csr::from_rows(&[Vec::<TaskId>::new(), Vec::new()]),
        )
        .unwrap();
        let budget = MemoryBudget::new(BudgetLimits::unlimited());
        let runs = Arc::new(Runs::default());
        let admission = Arc::new(Admission::new(budget));
        let workers = WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 0,
            io_workers: 2,
            pin_cpu_workers: false,
        });
        let pool = workers
            .submit_with(
                graph,
                runs.clone(),
                SubmitOptions {
                    admission: Some(admission.clone()),
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
        assert_eq!(runs.max_running.load(Ordering::SeqCst), 1);
        assert_eq!(admission.deferred_tasks(), 0);
    });
}
