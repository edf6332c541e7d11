//! Resolution and lowering of small arbitrary graphs: a few nodes of
//! supported operators over small inputs and inline initializers, then
//! `ResolvedModel::resolve`, `PreparedExecutionPlan::build` and one run of
//! a `RuntimeSession` (on one shared pool) with generated inputs.
//!
//! Values computed from the case's constants can ask for any size (a
//! `Range` whose step is a `Pow` of small numbers), so resolution folds at
//! most [`FOLD_LIMIT`] bytes and the session runs under a [`RUN_LIMIT`]
//! budget: the runtime must refuse larger requests with a typed error
//! before allocating, and libFuzzer's `-malloc_limit_mb` (above both
//! limits) catches any allocation that escapes them.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use onnx_prepared::model::proto::Message;
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::{BudgetLimits, Domain, WorkerPool, WorkerPoolOptions};

/// Most bytes resolution may fold.
const FOLD_LIMIT: usize = 32 << 20;
/// The session's global budget, and its execution and I/O limits.
const RUN_LIMIT: usize = 64 << 20;
use onnx_prepared_fuzz::graph::GraphCase;

fn pool() -> Arc<WorkerPool> {
    static POOL: OnceLock<Arc<WorkerPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        Arc::new(WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 1,
            io_workers: 1,
            pin_cpu_workers: false,
        }))
    })
    .clone()
}

fuzz_target!(|case: GraphCase| {
    let Some(built) = case.build() else {
        return;
    };
    let dir = onnx_prepared_fuzz::scratch();
    let path = dir.path().join("graph.onnx");
    std::fs::write(&path, built.model.encode_to_vec()).expect("write the model");
    let Ok(model) = Model::open(&path) else {
        return;
    };
    let resolve = ResolveOptions {
        fold_limit: FOLD_LIMIT,
        ..ResolveOptions::default()
    };
    let Ok(resolved) = ResolvedModel::resolve(model, &resolve) else {
        return;
    };
    let Ok(plan) = PreparedExecutionPlan::build(resolved) else {
        return;
    };
    let options = SessionOptions::default()
.with_cpu_workers(1)
.with_io_workers(1)
.with_pool(pool())
.with_intra_op_threads(1)
.with_budget(BudgetLimits::unlimited()
            .with_global(RUN_LIMIT)
            .with_domain(Domain::Execution, RUN_LIMIT)
            .with_domain(Domain::Io, RUN_LIMIT));
    let Ok(session) = RuntimeSession::new(plan, options) else {
        return;
    };
    let mut ctx = RuntimeContext::new(&session);
    for (name, tensor) in built.inputs {
        if ctx.set_input(&name, tensor).is_err() {
            return;
        }
    }
    let _ = session.run(ctx);
});
