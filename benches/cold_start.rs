//! Time to first output on tiny-llm (prefill T = 128, P = 0): streaming —
//! `run_async` on a fresh session, weights read and packed while the first
//! layers already run — against the eager baseline — `prepare()` then
//! `run` on a fresh session. Each iteration builds a fresh session
//! (fresh store and budget, same immutable plan) outside the measured span
//! and measures from the first call to the run's outputs.
//!
//! Checksums are verified (`ChecksumPolicy::Strict`, the default) except
//! in the `checksums-off` cases, which measure what verification costs.
//!
//! Two cache states: `warm` (the model's files were read by the previous
//! iteration) and `cold` (before each iteration, outside the measured span,
//! `posix_fadvise(POSIX_FADV_DONTNEED)` asks the kernel to drop the data
//! file's pages). Whether the pages really went is checked once and
//! printed: the time to read the whole file after the advice against a warm
//! read.

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use onnx_prepared::model::{ChecksumPolicy, Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::scheduler::{WorkerPool, WorkerPoolOptions};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};

/// Asks the kernel to drop `path`'s cached pages.
fn drop_cache(path: &Path) {
    let file = std::fs::File::open(path).expect("data file");
    rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).expect("fadvise");
}

fn read_all(path: &Path) -> Duration {
    let start = Instant::now();
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .expect("data file")
        .read_to_end(&mut bytes)
        .expect("reads");
    start.elapsed()
}

fn cold_start(c: &mut Criterion) {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let model = Model::open(dir.join("tiny-llm.onnx")).expect("opens");
    let data = dir.join("tiny-llm.data");
    let warm_read = read_all(&data);
    drop_cache(&data);
    let cold_read = read_all(&data);
    eprintln!(
        "cold_start: reading tiny-llm.data warm {warm_read:?}, after DONTNEED {cold_read:?} \
         ({:.1}x)",
        cold_read.as_secs_f64() / warm_read.as_secs_f64()
    );
    let inputs = support::tiny_llm_prefill(128);
    // One pool for every session (sessions share it), so thread start-up
    // is not measured either.
    let pool = Arc::new(WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 2,
        io_workers: 2,
        pin_cpu_workers: false,
    }));
    let fresh = |checksums| {
        let resolved =
            ResolvedModel::resolve(model.clone(), &ResolveOptions::default()).expect("resolves");
        let plan = PreparedExecutionPlan::build(resolved).expect("plan");
        let session = RuntimeSession::new(
            plan,
            SessionOptions::default()
                .with_pool(pool.clone())
                .with_checksums(checksums),
        )
        .expect("session");
        let mut ctx = RuntimeContext::new(&session);
        for (n, t) in &inputs {
            ctx.set_input(n, t.clone()).expect("input");
        }
        (session, ctx)
    };
    let mut group = c.benchmark_group("cold_start/tiny-llm-prefill-128");
    group.sample_size(20);
    let (strict, off) = (ChecksumPolicy::Strict, ChecksumPolicy::Off);
    for (cache, mode, checksums) in [
        ("warm", "eager", strict),
        ("warm", "streaming", strict),
        ("cold", "eager", strict),
        ("cold", "streaming", strict),
        ("warm", "eager", off),
        ("warm", "streaming", off),
    ] {
        let suffix = if checksums == off {
            "/checksums-off"
        } else {
            ""
        };
        group.bench_function(format!("{cache}/{mode}{suffix}"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (session, ctx) = fresh(checksums);
                    if cache == "cold" {
                        drop_cache(&data);
                    }
                    let start = Instant::now();
                    if mode == "eager" {
                        session.prepare().expect("prepares");
                    }
                    let ctx = session.run_async(ctx).wait().expect("runs");
                    total += start.elapsed();
                    assert_eq!(ctx.outputs().len(), 9);
                    drop(session);
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, cold_start);
criterion_main!(benches);
