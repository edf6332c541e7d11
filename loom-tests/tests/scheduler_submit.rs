//! Loom model of two submissions racing onto one `WorkerPool` (1 CPU worker,
//! no I/O worker): each submitted from its own thread while the worker may
//! be spinning, parking or refreshing its copy of the registry. Each task
//! runs exactly once and both `wait`s return — a lost wake-up at submit, or
//! a submission missed by the worker's registry copy, would deadlock the
//! model (protocol "submit" and sleep/wake step 1's `version` re-check).
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicUsize, Ordering, thread};

struct Count(AtomicUsize);

impl TaskRunner for Count {
    fn run(&self, _: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn two_racing_submissions_each_run_once() {
    model(|| {
        let graph = TaskGraph::new(
            &[ResourceClass::Cpu],
            &[Priority::Critical],
            &Csr::from_rows(&[Vec::<TaskId>::new()]),
        )
        .unwrap();
        let workers = std::sync::Arc::new(WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 1,
            io_workers: 0,
            pin_cpu_workers: false,
        }));
        let counts: [std::sync::Arc<Count>; 2] =
            std::array::from_fn(|_| std::sync::Arc::new(Count(AtomicUsize::new(0))));
        let other = {
            let (workers, graph, count) = (workers.clone(), graph.clone(), counts[1].clone());
            thread::spawn(move || {
                let run = workers.submit(graph, count).unwrap();
                run.wait().completed
            })
        };
        let run = workers.submit(graph, counts[0].clone()).unwrap();
        assert_eq!(run.wait().completed, 1);
        assert_eq!(other.join().unwrap(), 1);
        for c in &counts {
            assert_eq!(c.0.load(Ordering::SeqCst), 1);
        }
        drop(run);
        drop(workers);
    });
}
