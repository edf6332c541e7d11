//! Failure propagation and cancellation on a real `WorkerPool`: a failed
//! task suppresses exactly its transitive dependents while independent work
//! completes; a cancelled run never starts a task that was not claimed yet;
//! `wait` returns once every task is terminal.
#![allow(clippy::disallowed_types)] // test bookkeeping

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::Latch;

fn config(cpu: usize, io: usize) -> WorkerPoolOptions {
    WorkerPoolOptions {
        cpu_workers: cpu,
        io_workers: io,
        pin_cpu_workers: false,
    }
}

fn runs(n: usize) -> Vec<AtomicUsize> {
    (0..n).map(|_| AtomicUsize::new(0)).collect()
}

#[test]
fn failed_branch_suppresses_its_dependents_and_the_other_branch_completes() {
    // 0 → {1, 2} → 3 → 4, plus an independent chain 5 → 6. Task 1 fails;
    // task 2 is slow, so it is still running when 1 fails.
    struct Diamond {
        runs: Vec<AtomicUsize>,
    }
    impl TaskRunner for Diamond {
        fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
            self.runs[task.0 as usize].fetch_add(1, Ordering::SeqCst);
            match task.0 {
                1 => Err(TaskFailure::new("branch 1 broke")),
                2 => {
                    std::thread::sleep(Duration::from_millis(30));
                    Ok(())
                }
                _ => Ok(()),
            }
        }
    }
    let deps = vec![
        vec![],
        vec![TaskId(0)],
        vec![TaskId(0)],
        vec![TaskId(1), TaskId(2)],
        vec![TaskId(3)],
        vec![],
        vec![TaskId(5)],
    ];
    let n = deps.len();
    for round in 0..20 {
        let graph = TaskGraph::new(
            &[
                ResourceClass::Io,
                ResourceClass::Cpu,
                ResourceClass::Cpu,
                ResourceClass::Cpu,
                ResourceClass::Inline,
                ResourceClass::Io,
                ResourceClass::Cpu,
            ],
            &vec![Priority::Critical; n],
            &Csr::from_rows(&deps),
        )
        .unwrap();
        let runner = Arc::new(Diamond { runs: runs(n) });
        let workers = WorkerPool::new(config(2, 1));
        let pool = workers.submit(graph, runner.clone()).unwrap();
        let outcome = pool.wait();
        let ran: Vec<usize> = runner
            .runs
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .collect();
        assert_eq!(ran, [1, 1, 1, 0, 0, 1, 1], "round {round}");
        assert_eq!(outcome.completed, 4);
        assert_eq!(
            outcome.failed,
            Some((TaskId(1), TaskFailure::new("branch 1 broke")))
        );
        assert_eq!(outcome.failed_tasks, [TaskId(1)]);
        assert_eq!(outcome.suppressed, [TaskId(3), TaskId(4)]);
        assert_eq!(outcome.cancelled, 0);
        assert!(!outcome.is_success());
        assert_eq!((pool.finished(), pool.terminal()), (5, n));
        drop(pool);
        drop(workers);
        // Nothing ran late.
        let after: Vec<usize> = runner
            .runs
            .iter()
            .map(|r| r.load(Ordering::SeqCst))
            .collect();
        assert_eq!(after, ran);
    }
}

#[test]
fn two_failures_sharing_a_dependent_suppress_it_once() {
    struct FailRoots;
    impl TaskRunner for FailRoots {
        fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
            if task.0 < 2 {
                Err(TaskFailure::new(format!("root {}", task.0)))
            } else {
                Ok(())
            }
        }
    }
    // 0, 1 fail; 2 after both; 3 after 2; 4 independent.
    let deps = vec![
        vec![],
        vec![],
        vec![TaskId(0), TaskId(1)],
        vec![TaskId(2)],
        vec![],
    ];
    for _ in 0..50 {
        let graph = TaskGraph::new(
            &[ResourceClass::Cpu; 5],
            &[Priority::Prefetch; 5],
            &Csr::from_rows(&deps),
        )
        .unwrap();
        let workers = WorkerPool::new(config(2, 1));
        let pool = workers.submit(graph, Arc::new(FailRoots)).unwrap();
        let outcome = pool.wait();
        assert_eq!(outcome.completed, 1);
        assert_eq!(outcome.failed_tasks, [TaskId(0), TaskId(1)]);
        let (first, _) = outcome.failed.unwrap();
        assert!(first == TaskId(0) || first == TaskId(1));
        assert_eq!(outcome.suppressed, [TaskId(2), TaskId(3)]);
    }
}

/// Task 0 blocks on a gate; everything else waits behind it (or behind the
/// single CPU worker it occupies).
struct Gated {
    started: Latch,
    gate: Latch,
    runs: Vec<AtomicUsize>,
}

impl TaskRunner for Gated {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.runs[task.0 as usize].fetch_add(1, Ordering::SeqCst);
        if task.0 == 0 {
            self.started.open();
            self.gate.wait();
        }
        Ok(())
    }
}

#[test]
fn cancel_mid_run_starts_nothing_new_and_joins_the_running_task() {
    // 0: critical gate; 1..=10 after 0; 11..=20 independent background CPU
    // tasks, queued behind the one CPU worker the gate occupies.
    let n = 21;
    let deps: Vec<Vec<TaskId>> = (0..n)
        .map(|i| {
            if (1..=10).contains(&i) {
                vec![TaskId(0)]
            } else {
                vec![]
            }
        })
        .collect();
    let priorities: Vec<Priority> = (0..n)
        .map(|i| {
            if i == 0 {
                Priority::Critical
            } else {
                Priority::Background
            }
        })
        .collect();
    for _ in 0..10 {
        let graph = TaskGraph::new(
            &vec![ResourceClass::Cpu; n],
            &priorities,
            &Csr::from_rows(&deps),
        )
        .unwrap();
        let runner = Arc::new(Gated {
            started: Latch::new(),
            gate: Latch::new(),
            runs: runs(n),
        });
        let workers = WorkerPool::new(config(1, 1));
        let pool = workers.submit(graph, runner.clone()).unwrap();
        let token = pool.cancel_token();
        let other = token.clone();
        runner.started.wait();
        assert!(!other.is_cancelled());
        token.cancel();
        assert!(other.is_cancelled());
        assert_eq!(pool.terminal(), n - 1, "everything but the running gate");
        runner.gate.open();
        let outcome = pool.wait();
        assert_eq!(outcome.completed, 1);
        assert_eq!(outcome.cancelled, n - 1);
        assert!(outcome.failed.is_none() && outcome.suppressed.is_empty());
        other.cancel(); // idempotent after the run
        drop(pool);
        drop(workers);
        for i in 1..n {
            assert_eq!(runner.runs[i].load(Ordering::SeqCst), 0, "task {i} ran");
        }
        assert_eq!(runner.runs[0].load(Ordering::SeqCst), 1);
    }
}

#[test]
fn cancel_before_any_worker_claims_and_after_the_run_is_harmless() {
    struct Count(AtomicUsize);
    impl TaskRunner for Count {
        fn run(&self, _: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
    let n = 2000;
    let deps: Vec<Vec<TaskId>> = (0..n)
        .map(|i| {
            if i == 0 {
                vec![]
            } else {
                vec![TaskId(i as u32 - 1)]
            }
        })
        .collect();
    let graph = TaskGraph::new(
        &vec![ResourceClass::Cpu; n],
        &vec![Priority::Prefetch; n],
        &Csr::from_rows(&deps),
    )
    .unwrap();
    let runner = Arc::new(Count(AtomicUsize::new(0)));
    let workers = WorkerPool::new(config(2, 1));
    let pool = workers.submit(graph, runner.clone()).unwrap();
    pool.cancel_token().cancel();
    let outcome = pool.wait();
    // A chain: whatever ran before the cancel completed, the rest cancelled.
    assert_eq!(outcome.completed + outcome.cancelled, n);
    assert_eq!(outcome.completed, runner.0.load(Ordering::SeqCst));
    assert_eq!(pool.finished(), outcome.completed);
}
