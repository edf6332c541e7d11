//! Loom model of the promote protocol on a tiny `WorkerPool`: promoting a
//! chain while its producer fires and runs leaves every task running
//! exactly once, after its dependency, and `wait` returns.
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicUsize, Ordering};

/// Counts runs and records, per task, how many runs had finished before it.
struct Runs {
    count: [AtomicUsize; 2],
    started_after: [AtomicUsize; 2],
    total: AtomicUsize,
}

impl TaskRunner for Runs {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let i = task.0 as usize;
        self.started_after[i].store(self.total.load(Ordering::SeqCst), Ordering::SeqCst);
        self.count[i].fetch_add(1, Ordering::SeqCst);
        self.total.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn promoted_chain_runs_exactly_once() {
    model(|| {
        // 0: background io read; 1: background cpu prepack after 0.
        let deps = Csr::from_rows(&[vec![], vec![TaskId(0)]]);
        let graph = TaskGraph::new(
            &[ResourceClass::Io, ResourceClass::Cpu],
            &[Priority::Background, Priority::Background],
            &deps,
        )
        .unwrap();
        let runs = std::sync::Arc::new(Runs {
            count: Default::default(),
            started_after: Default::default(),
            total: AtomicUsize::new(0),
        });
        let workers = WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 1,
            io_workers: 1,
            pin_cpu_workers: false,
        });
        let pool = workers.submit(graph, runs.clone()).unwrap();
        // Races the I/O worker's claim of 0 and its firing of 1: pushes a
        // duplicate of 0 if unclaimed, marks 1 if it has not fired.
        let pushed = pool.promote(TaskId(1));
        assert!(pushed <= 2);
        let outcome = pool.wait();
        assert_eq!(outcome.completed, 2);
        drop(pool);
        drop(workers);
        assert_eq!(runs.count[0].load(Ordering::SeqCst), 1);
        assert_eq!(runs.count[1].load(Ordering::SeqCst), 1);
        assert_eq!(runs.started_after[1].load(Ordering::SeqCst), 1);
    });
}
