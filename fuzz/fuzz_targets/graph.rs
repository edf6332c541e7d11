//! Resolution and lowering of small arbitrary graphs: a few nodes of
//! supported operators over small inputs and inline initializers, then
//! `ResolvedModel::resolve`, `PreparedExecutionPlan::build` and one run of
//! a `RuntimeSession` (on one shared pool) with generated inputs.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use onnx_prepared::model::proto::Message;
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::{WorkerPoolOptions, WorkerPool};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
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
    let Ok(resolved) = ResolvedModel::resolve(model, &ResolveOptions::default()) else {
        return;
    };
    let Ok(plan) = PreparedExecutionPlan::build(resolved) else {
        return;
    };
    let options = SessionOptions {
        cpu_threads: 1,
        io_workers: 1,
        pool: Some(pool()),
        intra_op_threads: Some(1),
        ..SessionOptions::default()
    };
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
