//! Promote protocol on real threads: a promoted producer chain runs before
//! background work already queued in its lane, and still runs exactly once.
#![allow(clippy::disallowed_types)] // test bookkeeping

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};

const GATE: usize = 0;
const BACKGROUND: std::ops::Range<usize> = 1..41;
/// Ready at start, background: pushed again into the critical queue.
const READY_PRODUCER: usize = 41;
/// Background, fires only after the gate: posted critical when it fires.
const PENDING_PRODUCER: usize = 42;
/// The needed task (CPU), waiting for both producers.
const NEEDED: usize = 43;
const N: usize = 44;

/// Task 0 blocks the single I/O worker until `open`; every run records its
/// sequence number and run count.
struct Gate {
    started: AtomicBool,
    open: AtomicBool,
    seq: AtomicU64,
    order: Vec<AtomicU64>,
    runs: Vec<AtomicU64>,
}

impl TaskRunner for Gate {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let i = task.0 as usize;
        if i == GATE {
            self.started.store(true, Ordering::SeqCst);
            while !self.open.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
        self.runs[i].fetch_add(1, Ordering::SeqCst);
        let s = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.order[i].store(s, Ordering::SeqCst);
        Ok(())
    }
}

fn run(promote: bool) -> (Arc<Gate>, usize) {
    let mut resources = vec![ResourceClass::Io; N];
    resources[NEEDED] = ResourceClass::Cpu;
    let mut priorities = vec![Priority::Background; N];
    priorities[GATE] = Priority::Critical;
    priorities[NEEDED] = Priority::Critical;
    let mut deps: Vec<Vec<TaskId>> = vec![Vec::new(); N];
    deps[PENDING_PRODUCER].push(TaskId(GATE as u32));
    deps[NEEDED].push(TaskId(READY_PRODUCER as u32));
    deps[NEEDED].push(TaskId(PENDING_PRODUCER as u32));
    let graph = TaskGraph::new(&resources, &priorities, &Csr::from_rows(&deps)).unwrap();
    let gate = Arc::new(Gate {
        started: AtomicBool::new(false),
        open: AtomicBool::new(false),
        seq: AtomicU64::new(0),
        order: (0..N).map(|_| AtomicU64::new(0)).collect(),
        runs: (0..N).map(|_| AtomicU64::new(0)).collect(),
    });
    let workers = WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 1,
        io_workers: 1,
        pin_cpu_workers: false,
    });
    let pool = workers.submit(graph, gate.clone()).unwrap();
    // The only I/O worker took the critical gate; the background tasks and
    // the ready producer wait in its queues.
    while !gate.started.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    let pushed = if promote {
        let pushed = pool.promote(TaskId(NEEDED as u32));
        // A second promotion finds everything marked.
        assert_eq!(pool.promote(TaskId(NEEDED as u32)), 0);
        pushed
    } else {
        0
    };
    gate.open.store(true, Ordering::SeqCst);
    let outcome = pool.wait();
    assert_eq!(outcome.completed, N);
    for i in 0..N {
        assert_eq!(gate.runs[i].load(Ordering::SeqCst), 1, "task {i} ran once");
    }
    (gate, pushed)
}

fn at(gate: &Gate, task: usize) -> u64 {
    gate.order[task].load(Ordering::SeqCst)
}

#[test]
fn promoted_producers_run_before_queued_background_work() {
    let (gate, pushed) = run(true);
    // Only the ready producer was pushed; the pending one was marked.
    assert_eq!(pushed, 1);
    let first_background = BACKGROUND.map(|i| at(&gate, i)).min().unwrap();
    assert!(at(&gate, GATE) < at(&gate, READY_PRODUCER));
    assert!(
        at(&gate, READY_PRODUCER) < first_background,
        "ready producer ran at {} after background work at {first_background}",
        at(&gate, READY_PRODUCER)
    );
    assert!(
        at(&gate, PENDING_PRODUCER) < first_background,
        "pending producer ran at {} after background work at {first_background}",
        at(&gate, PENDING_PRODUCER)
    );
    assert!(at(&gate, NEEDED) > at(&gate, PENDING_PRODUCER));
}

#[test]
fn without_promotion_the_producers_wait_their_turn() {
    let (gate, _) = run(false);
    let last_background = BACKGROUND.map(|i| at(&gate, i)).max().unwrap();
    // FIFO within the background queue: both producers were queued after
    // every background task.
    assert!(at(&gate, READY_PRODUCER) > last_background);
    assert!(at(&gate, PENDING_PRODUCER) > last_background);
}

#[test]
fn promoting_a_finished_task_does_nothing() {
    let graph = TaskGraph::new(
        &[ResourceClass::Cpu, ResourceClass::Io],
        &[Priority::Background, Priority::Background],
        &Csr::from_rows(&[vec![], vec![TaskId(0)]]),
    )
    .unwrap();
    let gate = Arc::new(Gate {
        started: AtomicBool::new(false),
        open: AtomicBool::new(true),
        seq: AtomicU64::new(0),
        order: (0..2).map(|_| AtomicU64::new(0)).collect(),
        runs: (0..2).map(|_| AtomicU64::new(0)).collect(),
    });
    let workers = WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 1,
        io_workers: 1,
        pin_cpu_workers: false,
    });
    let pool = workers.submit(graph, gate.clone()).unwrap();
    let outcome = pool.wait();
    assert_eq!(outcome.completed, 2);
    assert_eq!(pool.promote(TaskId(1)), 0);
    assert_eq!(gate.runs[0].load(Ordering::SeqCst), 1);
    assert_eq!(gate.runs[1].load(Ordering::SeqCst), 1);
}
