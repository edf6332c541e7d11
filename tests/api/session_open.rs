//! `RuntimeSession::open` is `Model::open` + `ResolvedModel::resolve` (with
//! `SessionOptions::resolve`) + `PreparedExecutionPlan::build` +
//! `RuntimeSession::new`: the same plan and the same outputs as those four
//! calls, and the errors of the step that failed.

use crate::support;

use std::path::Path;

use crate::support::fixtures;
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::{PlanDump, PreparedExecutionPlan};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::{Error, ErrorKind};
use onnx_prepared_kernels::{CpuFeatures, Tensor};

/// Deterministic kernels: one thread per parallel region in both sessions.
fn options(cpu: CpuFeatures) -> SessionOptions {
    SessionOptions::default()
        .with_cpu_workers(2)
        .with_io_workers(1)
        .with_intra_op_threads(1)
        .with_resolve(ResolveOptions {
            cpu,
            ..ResolveOptions::default()
        })
}

/// The four calls `open` replaces.
fn four_calls(path: &Path, options: SessionOptions) -> RuntimeSession {
    let model = Model::open(path).unwrap();
    let resolved = ResolvedModel::resolve(model, &options.resolve()).unwrap();
    let plan = PreparedExecutionPlan::build(resolved).unwrap();
    RuntimeSession::new(plan, options).unwrap()
}

fn outputs(session: &RuntimeSession, inputs: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    let mut ctx = RuntimeContext::new(session);
    for (name, value) in inputs {
        ctx.set_input(name, value.clone()).unwrap();
    }
    session.run(ctx).unwrap().take_outputs()
}

fn plan_json(session: &RuntimeSession) -> String {
    serde_json::to_string(&PlanDump::new(session.plan())).unwrap()
}

fn assert_same(path: &Path, cpu: CpuFeatures, inputs: &[(String, Tensor)]) {
    let opened = RuntimeSession::open(path, options(cpu)).unwrap();
    let reference = four_calls(path, options(cpu));
    assert_eq!(opened.plan().resolved().cpu(), cpu);
    assert_eq!(plan_json(&opened), plan_json(&reference));
    let got = outputs(&opened, inputs);
    let want = outputs(&reference, inputs);
    assert!(!want.is_empty());
    assert_eq!(got.len(), want.len());
    for ((gn, gt), (wn, wt)) in got.iter().zip(&want) {
        assert_eq!(gn, wn);
        assert_eq!(gt.shape(), wt.shape(), "{gn}");
        assert_eq!(gt, wt, "{gn}: `open` and the four calls differ");
    }
}

#[test]
fn open_matches_the_four_calls_on_gemm_chain() {
    let path = fixtures().join("gemm-chain.onnx");
    let a = Tensor::from_f32(
        vec![2, 256],
        (0..512).map(|i| (i % 17) as f32 * 0.125 - 1.0).collect(),
    )
    .unwrap();
    let inputs = [("A".to_owned(), a)];
    assert_same(&path, CpuFeatures::detect(), &inputs);
    assert_same(&path, CpuFeatures::portable(), &inputs);
}

#[test]
fn open_matches_the_four_calls_on_tiny_llm() {
    let path = fixtures().join("tiny-llm.onnx");
    let inputs = support::tiny_llm_prefill(4);
    assert_same(&path, CpuFeatures::detect(), &inputs);
}

#[test]
fn open_uses_the_session_options_resolve() {
    let path = fixtures().join("gemm-chain.onnx");
    let default = RuntimeSession::open(&path, SessionOptions::default()).unwrap();
    assert_eq!(default.plan().resolved().cpu(), CpuFeatures::detect());
    let portable = RuntimeSession::open(&path, options(CpuFeatures::portable())).unwrap();
    assert_eq!(portable.plan().resolved().cpu(), CpuFeatures::portable());
}

#[test]
fn open_fails_like_model_open() {
    let dir = support::tempdir();
    let missing = dir.path().join("missing.onnx");
    let opened = RuntimeSession::open(&missing, SessionOptions::default()).unwrap_err();
    let direct = Error::from(Model::open(&missing).unwrap_err());
    assert_eq!(opened.kind(), direct.kind());
    assert_eq!(opened.kind(), ErrorKind::Model);
    assert_eq!(opened.to_string(), direct.to_string());

    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"not a model").unwrap();
    let opened = RuntimeSession::open(&garbage, SessionOptions::default()).unwrap_err();
    assert_eq!(
        opened.kind(),
        Error::from(Model::open(&garbage).unwrap_err()).kind()
    );
}
