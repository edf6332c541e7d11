//! Loom models of the scheduler's `ReadyQueues` (loom stand-in) and a tiny
//! `WorkerPool`: every ready task is popped and run exactly once, in
//! dependency order, and shutdown joins.
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    Lane, ReadyQueues, TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool,
    WorkerPoolOptions,
};
use onnx_prepared::sync::{Arc, AtomicUsize, Ordering, thread};

// The runner is held in a `std` `Arc` (see `WorkerPool::new`).

#[test]
fn queue_pops_every_push_once_critical_first() {
    use onnx_prepared::sync::AtomicBool;

    model(|| {
        let queues = Arc::new(ReadyQueues::with_capacity(2));
        let pushed = Arc::new(AtomicBool::new(false));
        let producer = {
            let (queues, pushed) = (queues.clone(), pushed.clone());
            thread::spawn(move || {
                queues
                    .push(Lane::Cpu, Priority::Background, TaskId(0))
                    .unwrap();
                queues
                    .push(Lane::Cpu, Priority::Critical, TaskId(1))
                    .unwrap();
                pushed.store(true, Ordering::SeqCst);
            })
        };
        let critical = (Priority::Critical, TaskId(1));
        let background = (Priority::Background, TaskId(0));
        // A pop that starts after both pushes returned takes the critical
        // entry, although it was pushed last.
        let both_in = pushed.load(Ordering::SeqCst);
        let first = queues.pop(Lane::Cpu);
        if both_in {
            assert_eq!(first, Some(critical));
        }
        producer.join().unwrap();
        let mut rest = Vec::new();
        while let Some(e) = queues.pop(Lane::Cpu) {
            rest.push(e);
        }
        // Every push popped exactly once; whatever was still queued after
        // the producer finished comes out critical first.
        let expected_rest: Vec<_> = match first {
            None => vec![critical, background],
            Some(e) if e == critical => vec![background],
            Some(e) => {
                assert_eq!(e, background);
                vec![critical]
            }
        };
        assert_eq!(rest, expected_rest);
        assert!(queues.is_empty(Lane::Cpu));
    });
}

/// Counts runs and records, per task, how many tasks had finished before it.
struct Runs {
    count: [AtomicUsize; 3],
    started_after: [AtomicUsize; 3],
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
fn pool_runs_a_read_then_prepack_exactly_once() {
    model(|| {
        // 0: io read; 1: cpu prepack after 0; 2: inline after 0.
        let deps = Csr::from_rows(&[vec![], vec![TaskId(0)], vec![TaskId(0)]]);
        let graph = TaskGraph::new(
            &[ResourceClass::Io, ResourceClass::Cpu, ResourceClass::Inline],
            &[Priority::Critical, Priority::Prefetch, Priority::Background],
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
        pool.wait();
        assert_eq!(pool.finished(), 3);
        drop(pool);
        drop(workers);
        for i in 0..3 {
            assert_eq!(runs.count[i].load(Ordering::SeqCst), 1);
        }
        assert_eq!(runs.started_after[0].load(Ordering::SeqCst), 0);
        assert!(runs.started_after[1].load(Ordering::SeqCst) >= 1);
        assert!(runs.started_after[2].load(Ordering::SeqCst) >= 1);
    });
}
