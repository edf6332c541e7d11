//! Loom models of failure propagation and cancellation on a real
//! `WorkerPool` (1 CPU + 1 I/O worker + the waiting thread): a failure
//! suppresses the join task exactly once, a cancel racing the run leaves
//! every task in exactly one terminal state, and `wait` returns.
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicUsize, Ordering};

fn config() -> WorkerPoolOptions {
    WorkerPoolOptions {
        cpu_workers: 1,
        io_workers: 1,
        pin_cpu_workers: false,
    }
}

/// Counts runs per task; task `fail` returns an error.
struct Runs {
    count: [AtomicUsize; 3],
    fail: Option<u32>,
}

impl TaskRunner for Runs {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.count[task.0 as usize].fetch_add(1, Ordering::SeqCst);
        if self.fail == Some(task.0) {
            Err(TaskFailure::new("read failed"))
        } else {
            Ok(())
        }
    }
}

#[test]
fn failure_suppresses_the_join_exactly_once() {
    model(|| {
        // 0: io read (fails) ‖ 1: cpu (completes); 2: inline join of both.
        let deps = Csr::from_rows(&[vec![], vec![], vec![TaskId(0), TaskId(1)]]);
        let graph = TaskGraph::new(
            &[ResourceClass::Io, ResourceClass::Cpu, ResourceClass::Inline],
            &[Priority::Critical; 3],
            &deps,
        )
        .unwrap();
        let runs = std::sync::Arc::new(Runs {
            count: Default::default(),
            fail: Some(0),
        });
        let workers = WorkerPool::new(config());
        let pool = workers.submit(graph, runs.clone()).unwrap();
        let outcome = pool.wait();
        assert_eq!(outcome.completed, 1);
        assert_eq!(
            outcome.failed,
            Some((TaskId(0), TaskFailure::new("read failed")))
        );
        assert_eq!(outcome.suppressed, [TaskId(2)]);
        assert_eq!(outcome.cancelled, 0);
        assert_eq!(pool.terminal(), 3);
        drop(pool);
        drop(workers);
        let counts: Vec<usize> = runs
            .count
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect();
        assert_eq!(counts, [1, 1, 0]);
    });
}

#[test]
fn cancel_racing_the_run_gives_one_terminal_state_per_task() {
    model(|| {
        // 0: io read → 1: cpu prepack → 2: inline; cancelled at once.
        let deps = Csr::from_rows(&[vec![], vec![TaskId(0)], vec![TaskId(1)]]);
        let graph = TaskGraph::new(
            &[ResourceClass::Io, ResourceClass::Cpu, ResourceClass::Inline],
            &[Priority::Critical; 3],
            &deps,
        )
        .unwrap();
        let runs = std::sync::Arc::new(Runs {
            count: Default::default(),
            fail: None,
        });
        let workers = WorkerPool::new(config());
        let pool = workers.submit(graph, runs.clone()).unwrap();
        pool.cancel_token().cancel();
        let outcome = pool.wait();
        drop(pool);
        drop(workers);
        let counts: Vec<usize> = runs
            .count
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect();
        // A prefix of the chain ran once; the rest never ran.
        let ran = counts.iter().take_while(|&&c| c == 1).count();
        assert!(counts[ran..].iter().all(|&c| c == 0), "{counts:?}");
        assert_eq!(outcome.completed, ran);
        assert_eq!(outcome.cancelled, 3 - ran);
        assert!(outcome.failed.is_none() && outcome.suppressed.is_empty());
    });
}
