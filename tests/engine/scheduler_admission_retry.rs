//! Admission retries deferred work after *any* release of the bytes it
//! waits for, not only after another task's permit: here the bytes are held
//! by an ordinary reservation of the same budget (an arena, an output lease)
//! and no permit is ever released while the task waits.
#![allow(clippy::disallowed_types)] // test bookkeeping

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use onnx_prepared::arena::{BudgetLimits, Domain, MemoryBudget};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    Admission, SubmitOptions, TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool,
    WorkerPoolOptions,
};

struct Count(AtomicUsize);

impl TaskRunner for Count {
    fn run(&self, _: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Generous bound on a wait that must end; hitting it is the failure.
const HANG: Duration = Duration::from_secs(60);

#[test]
fn a_task_deferred_for_bytes_runs_when_an_ordinary_reservation_returns_them() {
    for priority in [Priority::Critical, Priority::Background] {
        let budget = MemoryBudget::new(BudgetLimits::unlimited().with_global(1000));
        // An ordinary reservation (not a permit) holds most of the budget.
        let held = budget.reserve(Domain::Execution, 700).unwrap();
        let graph = TaskGraph::new(
            &[ResourceClass::Cpu],
            &[priority],
            &Csr::from_rows(&[Vec::<TaskId>::new()]),
        )
        .unwrap()
        .with_estimates(&[Domain::Preparation], &[500])
        .unwrap();
        let runner = Arc::new(Count(AtomicUsize::new(0)));
        let workers = WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 2,
            io_workers: 1,
            pin_cpu_workers: false,
        });
        let submission = workers
            .submit_with(
                graph,
                runner.clone(),
                SubmitOptions {
                    admission: Some(Arc::new(Admission::new(budget.clone()))),
                    ..SubmitOptions::default()
                },
            )
            .unwrap();
        let admission = submission.admission().unwrap();
        // Refused (500 + 700 > 1000) and deferred; nothing else runs.
        while admission.deferred_tasks() == 0 {
            std::thread::yield_now();
        }
        assert_eq!(runner.0.load(Ordering::SeqCst), 0, "{priority:?}");
        assert!(!submission.is_done());
        drop(held);
        // The release alone must retry it (before the fix it waited for a
        // permit release that never comes).
        let deadline = Instant::now() + HANG;
        while !submission.is_done() {
            if Instant::now() > deadline {
                // Never finishes: leak the stuck pool rather than hang.
                std::mem::forget((submission, workers));
                panic!("{priority:?}: the deferred task was never retried after the release");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let outcome = submission.wait();
        assert_eq!(outcome.completed, 1, "{priority:?}");
        assert_eq!(runner.0.load(Ordering::SeqCst), 1);
        assert_eq!(admission.deferred_tasks(), 0);
        drop(submission);
        drop(workers);
        assert_eq!(budget.total_live(), 0);
    }
}
