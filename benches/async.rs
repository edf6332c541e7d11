//! Latencies of the asynchronous contract (gemm-chain, fresh sessions
//! built outside the measured spans):
//!
//! * `async/submit`: how long `run_async` takes to return on a hot session
//!   (the run itself is waited for outside the measured span).
//! * `async/resume`: from the publish of a missing object (a continuation of
//!   the bench's own, registered on the object's completion, stamps it on
//!   the publishing thread) to the start of the step that waited for it
//!   (the suspended run continuation resumed, requeued and picked up; from
//!   the session trace); `chain1.weight` is held back by a gate until the
//!   run has suspended.
//! * `async/cancel`: from `cancel()` on a run suspended behind a gated
//!   weight to its `wait()` returning.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use onnx_prepared::model::{
    FaultInjectingSource, FileSource, Model, PayloadSource, ReadFault, ResolveOptions,
    ResolvedModel, WeightId,
};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::scheduler::{WorkerPool, WorkerPoolOptions};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::store::Generation;
use onnx_prepared::sync::{Latch, Lock};
use onnx_prepared_kernels::Tensor;

struct Fixture {
    model: Model,
    pool: Arc<WorkerPool>,
}

impl Fixture {
    fn session(&self, gate: Option<&Arc<Latch>>, trace: bool) -> RuntimeSession {
        let resolved = ResolvedModel::resolve(self.model.clone(), &ResolveOptions::default())
            .expect("resolves");
        let plan = PreparedExecutionPlan::build(resolved).expect("plan");
        let file = FileSource::open(&self.model).expect("source");
        let mut source = FaultInjectingSource::new(file, self.model.weights().len());
        if let Some(gate) = gate {
            let w = self
                .model
                .weights()
                .iter()
                .position(|w| w.name() == "chain1.weight")
                .expect("weight");
            source = source.with_fault(WeightId(w as u32), ReadFault::Gate(gate.clone()));
        }
        let source: Arc<dyn PayloadSource> = Arc::new(source);
        RuntimeSession::with_source(
            plan,
            source,
            SessionOptions::default()
                .with_pool(self.pool.clone())
                .with_trace(trace),
        )
        .expect("session")
    }

    fn context(session: &RuntimeSession) -> RuntimeContext {
        RuntimeContext::new(session)
            .with_input(
                "A",
                Tensor::from_f32(vec![1, 256], vec![0.25; 256]).unwrap(),
            )
            .expect("input")
    }
}

/// Waits until the session's trace shows step `name` finished.
fn until_step(session: &RuntimeSession, name: &str) {
    let trace = session.trace().expect("traced");
    while !trace.events().iter().any(|e| e.name == name) {
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn latencies(c: &mut Criterion) {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let f = Fixture {
        model: Model::open(dir.join("gemm-chain.onnx")).expect("opens"),
        pool: Arc::new(WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 2,
            io_workers: 2,
            pin_cpu_workers: false,
        })),
    };
    let mut group = c.benchmark_group("async");

    let hot = f.session(None, false);
    hot.prepare().expect("prepares");
    let mut ctx = Some(hot.run(Fixture::context(&hot)).expect("runs"));
    group.bench_function("submit", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let handle = hot.run_async(ctx.take().unwrap());
                total += start.elapsed();
                ctx = Some(handle.wait().expect("runs"));
            }
            total
        })
    });

    group.sample_size(20);
    group.bench_function("resume", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let gate = Arc::new(Latch::new());
                let session = f.session(Some(&gate), true);
                // The packed chain1 weight: record when it is published (the
                // continuation runs on the publishing thread, at once).
                let r = session
                    .plan()
                    .resolved()
                    .requirements()
                    .iter()
                    .position(|q| q.name.starts_with("chain1.gemm:gemm"))
                    .expect("packed chain1 weight");
                let published = Arc::new(Lock::new(None));
                let at = published.clone();
                session
                    .internals()
                    .store()
                    .waiter(r, Generation(1))
                    .on_complete(move |_| at.with(|t| *t = Some(Instant::now())));
                let run = session.run_async(Fixture::context(&session));
                until_step(&session, "chain0");
                gate.open();
                run.wait().expect("runs");
                let trace = session.trace().unwrap();
                let resumed = trace
                    .events()
                    .iter()
                    .find(|e| e.name == "chain1")
                    .expect("step chain1")
                    .start;
                let published = published
                    .with(|t| *t)
                    .expect("published")
                    .saturating_duration_since(trace.origin());
                total += resumed.saturating_sub(published);
            }
            total
        })
    });

    group.bench_function("cancel", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let gate = Arc::new(Latch::new());
                let session = f.session(Some(&gate), true);
                let run = session.run_async(Fixture::context(&session));
                until_step(&session, "chain0");
                let start = Instant::now();
                run.cancel();
                let result = run.wait();
                total += start.elapsed();
                assert!(result.is_err());
                gate.open();
                drop(session);
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, latencies);
criterion_main!(benches);
