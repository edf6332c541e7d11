//! Suspension on a real `WorkerPool`: a task that waits for an event
//! suspends instead of blocking its worker, runs again when resumed, and
//! only then completes and fires its dependents; resumption racing the run,
//! a dropped handle, failure and cancellation each end in one terminal
//! state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    ResumeHandle, TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicUsize, Lock, Ordering};

fn pool() -> WorkerPool {
    WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 1,
        io_workers: 1,
        pin_cpu_workers: false,
    })
}

/// 0: cpu, suspends `suspensions` times; 1: cpu after 0; 2: cpu, independent.
fn graph() -> TaskGraph {
    TaskGraph::new(
        &[ResourceClass::Cpu; 3],
        &[Priority::Critical; 3],
        &Csr::from_rows(&[vec![], vec![TaskId(0)], vec![]]),
    )
    .unwrap()
}

#[derive(Default)]
struct Suspender {
    suspensions: usize,
    /// Resume from inside the run, before it returns.
    resume_early: bool,
    /// Fail on the second run of task 0.
    fail_on_resume: bool,
    runs: [AtomicUsize; 3],
    parked: Lock<Vec<ResumeHandle>>,
    /// Order of events: (task, run number).
    log: Lock<Vec<(u32, usize)>>,
}

impl TaskRunner for Suspender {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let n = self.runs[task.0 as usize].fetch_add(1, Ordering::SeqCst);
        self.log.with(|l| l.push((task.0, n)));
        if task.0 != 0 {
            return Ok(());
        }
        if self.fail_on_resume && n == 1 {
            return Err(TaskFailure::new("resumed run fails"));
        }
        if n < self.suspensions {
            let handle = ctx.suspend();
            if self.resume_early {
                handle.resume();
            } else {
                self.parked.with(|p| p.push(handle));
            }
        }
        Ok(())
    }
}

impl Suspender {
    fn wait_parked(&self, n: usize) -> Vec<ResumeHandle> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let taken = self.parked.with(|p| {
                if p.len() >= n {
                    std::mem::take(p)
                } else {
                    Vec::new()
                }
            });
            if !taken.is_empty() {
                return taken;
            }
            assert!(Instant::now() < deadline, "task never suspended");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn suspended_task_frees_its_worker_and_completes_after_resume() {
    let runner = Arc::new(Suspender {
        suspensions: 2,
        ..Suspender::default()
    });
    let workers = pool();
    let run = workers.submit(graph(), runner.clone()).unwrap();
    for round in 0..2 {
        let handles = runner.wait_parked(1);
        // While 0 is parked, its dependent has not run, the independent
        // task ran on the only CPU worker, and the submission is not done.
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(runner.runs[1].load(Ordering::SeqCst), 0, "round {round}");
        assert_eq!(runner.runs[2].load(Ordering::SeqCst), 1, "round {round}");
        assert!(!run.is_done());
        for h in handles {
            h.resume();
        }
    }
    let outcome = run.wait();
    assert!(outcome.is_success(), "{outcome:?}");
    assert_eq!(outcome.completed, 3);
    assert_eq!(runner.runs[0].load(Ordering::SeqCst), 3);
    assert_eq!(runner.runs[1].load(Ordering::SeqCst), 1);
    let log = runner.log.with(|l| l.clone());
    let at = |e: (u32, usize)| log.iter().position(|&x| x == e).unwrap();
    assert!(
        at((0, 2)) < at((1, 0)),
        "dependent ran before the last run of 0"
    );
}

#[test]
fn resume_before_the_run_returns_runs_again() {
    let runner = Arc::new(Suspender {
        suspensions: 3,
        resume_early: true,
        ..Suspender::default()
    });
    let workers = pool();
    let run = workers.submit(graph(), runner.clone()).unwrap();
    assert!(run.wait().is_success());
    assert_eq!(runner.runs[0].load(Ordering::SeqCst), 4);
    assert_eq!(runner.runs[1].load(Ordering::SeqCst), 1);
}

#[test]
fn dropped_handle_resumes() {
    let runner = Arc::new(Suspender {
        suspensions: 1,
        ..Suspender::default()
    });
    let workers = pool();
    let run = workers.submit(graph(), runner.clone()).unwrap();
    drop(runner.wait_parked(1));
    assert!(run.wait().is_success());
    assert_eq!(runner.runs[0].load(Ordering::SeqCst), 2);
}

#[test]
fn failing_resumed_run_suppresses_dependents() {
    let runner = Arc::new(Suspender {
        suspensions: 1,
        fail_on_resume: true,
        ..Suspender::default()
    });
    let workers = pool();
    let run = workers.submit(graph(), runner.clone()).unwrap();
    for h in runner.wait_parked(1) {
        h.resume();
    }
    let outcome = run.wait();
    assert_eq!(outcome.failed_tasks, vec![TaskId(0)]);
    assert_eq!(outcome.suppressed, vec![TaskId(1)]);
    assert_eq!(outcome.completed, 1);
    assert_eq!(runner.runs[1].load(Ordering::SeqCst), 0);
}

#[test]
fn cancel_ends_a_suspended_task_and_a_late_resume_does_nothing() {
    let runner = Arc::new(Suspender {
        suspensions: 1,
        ..Suspender::default()
    });
    let workers = pool();
    let run = workers.submit(graph(), runner.clone()).unwrap();
    let handles = runner.wait_parked(1);
    run.cancel_token().cancel();
    let outcome = run.wait();
    // 0 cancelled while parked, 1 never ran, 2 completed before.
    assert_eq!(outcome.cancelled, 2);
    assert_eq!(outcome.completed, 1);
    for h in handles {
        h.resume();
    }
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(runner.runs[0].load(Ordering::SeqCst), 1);
    assert_eq!(runner.runs[1].load(Ordering::SeqCst), 0);
}
