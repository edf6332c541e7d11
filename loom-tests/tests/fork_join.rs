//! Loom models of `sync::ForkJoinPool`: every task of a job runs exactly
//! once, `run` returns only after all of them finished, and consecutive jobs
//! never run a task of the wrong job (the claim word's generation check).
#![cfg(loom)]

use loom_tests::model;

use onnx_prepared::sync::{AtomicUsize, ForkJoinPool, Ordering};

#[test]
fn each_task_runs_exactly_once_per_job() {
    model(|| {
        let pool = ForkJoinPool::new(1);
        for round in 0..2 {
            let hits = [AtomicUsize::new(0), AtomicUsize::new(0)];
            pool.run(2, &|i| {
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
        let pool = ForkJoinPool::new(1);
        let total = AtomicUsize::new(0);
        pool.run(2, &|_| {
            // A run from inside a task must not wait for the busy pool.
            pool.run(2, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 4);
    });
}
