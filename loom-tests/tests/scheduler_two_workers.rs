//! Loom model of two CPU workers on one lane (and the waiting thread):
//! the worker that completes a task keeps a fired dependent as its
//! continuation (claim on fire) and keeps or shares the other, while the
//! second worker races it for shared entries (pop, then claim by CAS).
//! Every task runs exactly once, each after its dependency, and `wait`
//! returns (a lost entry or wake-up would deadlock).
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicUsize, Ordering};

struct Runs {
    count: [AtomicUsize; 3],
    /// Runs of task 0 seen by each task when it started.
    saw_root: [AtomicUsize; 3],
}

impl TaskRunner for Runs {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let i = task.0 as usize;
        self.saw_root[i].store(self.count[0].load(Ordering::SeqCst), Ordering::SeqCst);
        self.count[i].fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn two_workers_run_a_fan_out_exactly_once_in_order() {
    model(|| {
        // 0 → {1, 2}, all critical CPU tasks.
        let graph = TaskGraph::new(
            &[ResourceClass::Cpu; 3],
            &[Priority::Critical; 3],
            &Csr::from_rows(&[vec![], vec![TaskId(0)], vec![TaskId(0)]]),
        )
        .unwrap();
        let runs = std::sync::Arc::new(Runs {
            count: Default::default(),
            saw_root: Default::default(),
        });
        let workers = WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 2,
            io_workers: 0,
            pin_cpu_workers: false,
        });
        let run = workers.submit(graph, runs.clone()).unwrap();
        let outcome = run.wait();
        assert_eq!(outcome.completed, 3);
        drop(run);
        drop(workers);
        for i in 0..3 {
            assert_eq!(runs.count[i].load(Ordering::SeqCst), 1, "task {i}");
        }
        assert_eq!(runs.saw_root[0].load(Ordering::SeqCst), 0);
        assert_eq!(runs.saw_root[1].load(Ordering::SeqCst), 1);
        assert_eq!(runs.saw_root[2].load(Ordering::SeqCst), 1);
    });
}
