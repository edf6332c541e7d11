//! Loom model of protocol "suspend": a task's run suspends and hands its
//! `ResumeHandle` to another thread, which resumes it while the run may
//! still be returning (the handle's resume races the worker's settle). The
//! task runs exactly twice, its dependent exactly once and only after the
//! second run, and `wait` returns — a lost resumption would deadlock.
#![cfg(loom)]

use loom_tests::{model, one_cpu_worker, spawn_resumer};

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{ResumeHandle, TaskContext, TaskFailure, TaskGraph, TaskRunner};
use onnx_prepared::sync::{AtomicUsize, Lock, Ordering};

struct Runner {
    runs: [AtomicUsize; 2],
    dependent_saw: AtomicUsize,
    handle: Lock<Option<ResumeHandle>>,
}

impl TaskRunner for Runner {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let n = self.runs[task.0 as usize].fetch_add(1, Ordering::SeqCst);
        if task.0 == 1 {
            self.dependent_saw
                .store(self.runs[0].load(Ordering::SeqCst), Ordering::SeqCst);
        } else if n == 0 {
            let handle = ctx.suspend();
            self.handle.with(|h| *h = Some(handle));
        }
        Ok(())
    }
}

#[test]
fn resume_racing_the_suspending_run_runs_it_once_more() {
    model(|| {
        let graph = TaskGraph::new(
            &[ResourceClass::Cpu, ResourceClass::Inline],
            &[Priority::Critical; 2],
            &Csr::from_rows(&[vec![], vec![TaskId(0)]]),
        )
        .unwrap();
        let runner = std::sync::Arc::new(Runner {
            runs: Default::default(),
            dependent_saw: AtomicUsize::new(0),
            handle: Lock::new(None),
        });
        let workers = one_cpu_worker();
        let run = workers.submit(graph, runner.clone()).unwrap();
        let resumer = spawn_resumer(runner.clone(), |r| &r.handle);
        let outcome = run.wait();
        resumer.join().unwrap();
        assert_eq!(outcome.completed, 2);
        assert_eq!(runner.runs[0].load(Ordering::SeqCst), 2);
        assert_eq!(runner.runs[1].load(Ordering::SeqCst), 1);
        assert_eq!(runner.dependent_saw.load(Ordering::SeqCst), 2);
        drop(run);
        drop(workers);
    });
}
