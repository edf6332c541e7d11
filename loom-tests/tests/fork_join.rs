//! Loom models of the kernel lease (`WorkerPool::lease`, protocol "lease"
//! over `sync::JobBoard`): every task of a job runs exactly once, `run`
//! returns only after all of them finished, consecutive jobs never run a
//! task of the wrong job (the claim word's generation check), and a region
//! started inside a region runs inline.
#![cfg(loom)]

use loom_tests::{model, one_cpu_worker};

use onnx_prepared::sync::{AtomicUsize, Ordering};
use onnx_prepared_kernels::ParallelFor;

#[test]
fn each_task_runs_exactly_once_per_job() {
    model(|| {
        let pool = one_cpu_worker();
        let lease = pool.lease();
        assert_eq!(lease.threads(), 2);
        for round in 0..2 {
            let hits = [AtomicUsize::new(0), AtomicUsize::new(0)];
            lease.run(2, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            // `run` returned: every task of this job finished, exactly once.
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(h.load(Ordering::Relaxed), 1, "round {round} task {i}");
            }
        }
        drop(pool);
    });
}

#[test]
fn nested_run_executes_inline() {
    model(|| {
        let pool = one_cpu_worker();
        let lease = pool.lease();
        let total = AtomicUsize::new(0);
        lease.run(2, &|_| {
            // A run from inside a task must not wait for the busy board.
            lease.run(2, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 4);
    });
}
