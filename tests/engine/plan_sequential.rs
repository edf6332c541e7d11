//! Sequential execution of the scoped plan through the prepared-object
//! store: DirectReplay's outputs bit for bit, steps that wait for exactly
//! their requirements, unused weights never read, preparation bytes returned.

use crate::support;

use std::sync::Arc;

use crate::support::fixture;
use onnx_prepared::Error;
use onnx_prepared::arena::{Domain, MemoryBudget};
use onnx_prepared::exec::{
    DirectReplay, DirectReplayOptions, InvocationState, PreparedExecutionState, RunError,
};
use onnx_prepared::model::{
    FaultInjectingSource, FileSource, Model, PayloadSource, ReadFault, ResolveOptions,
    ResolvedModel,
};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::sync::{AtomicUsize, Ordering};
use onnx_prepared_kernels::{CpuFeatures, Sequential, Tensor};

fn state(path: &std::path::Path, source: Arc<dyn PayloadSource>) -> PreparedExecutionState {
    let model = Model::open(path).unwrap();
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    let plan = Arc::new(PreparedExecutionPlan::build(resolved).unwrap());
    PreparedExecutionState::new(plan, source, MemoryBudget::unlimited())
}

fn direct(path: &std::path::Path, inputs: &[(&str, &Tensor)]) -> Vec<(String, Tensor)> {
    let model = Model::open(path).unwrap();
    let source = FileSource::open(&model).unwrap();
    let options = DirectReplayOptions {
        threads: 1,
        cpu: CpuFeatures::detect(),
        ..DirectReplayOptions::default()
    };
    DirectReplay::new(&model, Arc::new(source), options)
        .unwrap()
        .run(inputs)
        .unwrap()
}

fn ramp(shape: Vec<usize>) -> Tensor {
    let n = shape.iter().product::<usize>();
    Tensor::from_f32(
        shape,
        (0..n).map(|i| ((i % 23) as f32 - 11.0) / 16.0).collect(),
    )
    .unwrap()
}

#[test]
fn gemm_fixtures_match_direct_replay_bit_for_bit() {
    for name in [
        "gemm-transb0",
        "gemm-transb1",
        "gemm-chain",
        "gemm-shared-weight",
    ] {
        let path = fixture(name);
        let model = Model::open(&path).unwrap();
        let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
        let s = state(&path, source);
        let a = ramp(vec![3, 256]);
        let inputs = [("A", &a)];
        let got = s.run(&mut InvocationState::default(), &inputs).unwrap();
        assert_eq!(got, direct(&path, &inputs), "{name}");
        assert_eq!(
            s.budget().live(Domain::Preparation),
            0,
            "{name}: preparation bytes returned"
        );
        assert_eq!(
            s.budget().live(Domain::Prepared),
            s.store().resident_bytes(),
            "{name}"
        );
    }
}

#[test]
fn tiny_llm_matches_direct_replay_and_loads_layer_by_layer() {
    let path = fixture("tiny-llm");
    let model = Model::open(&path).unwrap();
    let file = FileSource::open(&model).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(file);
    let s = state(&path, source.clone());
    let owned = support::tiny_llm_prefill(8);
    let inputs: Vec<(&str, &Tensor)> = owned.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut inv = InvocationState::default();
    let got = s.run(&mut inv, &inputs).unwrap();
    assert_eq!(got, direct(&path, &inputs), "bit for bit");
    assert_eq!(s.store().resident_count(), s.plan().requirements().len());
    assert_eq!(s.budget().live(Domain::Preparation), 0);
    // Every external weight was read exactly once.
    let external: u64 = model
        .weights()
        .iter()
        .filter(|w| w.is_external())
        .map(|w| w.byte_len())
        .sum();
    assert_eq!(source.counters().total(), external);
    // A second run finds everything resident and reads nothing more.
    let again = s.run(&mut inv, &inputs).unwrap();
    assert_eq!(again, got);
    assert_eq!(source.counters().total(), external);
}

#[test]
fn unused_initializer_is_never_read() {
    use onnx_prepared::model::proto::{Message, ModelProto, TypeProto, ValueInfoProto, type_proto};
    use support::{Init, write_data};
    let dir = support::tempdir();
    write_data(dir.path(), "w.bin", 64);
    let mut proto = ModelProto::decode(
        &support::model_bytes(&[
            Init::external("used", &[8], &[("location", "w.bin")]),
            Init::external("unused", &[8], &[("location", "w.bin"), ("offset", "32")]),
        ])[..],
    )
    .unwrap();
    let value = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: None,
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    proto.graph.as_mut().unwrap().output = vec![value("used.out")];
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, proto.encode_to_vec()).unwrap();
    let model = Model::open(&path).unwrap();
    let (used, unused) = (
        model.weight_by_name("used").unwrap().id(),
        model.weight_by_name("unused").unwrap().id(),
    );
    let source = Arc::new(FileSource::open(&model).unwrap());
    let s = state(&path, source.clone());
    let out = s.run(&mut InvocationState::default(), &[]).unwrap();
    assert_eq!(out[0].1.as_f32().unwrap().len(), 8);
    assert_eq!(source.counters().bytes_read(used), 32);
    assert_eq!(
        source.counters().bytes_read(unused),
        0,
        "the unused initializer is never read"
    );
}

#[test]
fn a_failed_read_fails_the_run_and_exactly_that_requirement() {
    let path = fixture("gemm-chain");
    let model = Model::open(&path).unwrap();
    let b2 = model.weight_by_name("chain1.weight").unwrap().id();
    let faulty =
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(b2, ReadFault::Fail);
    let s = state(&path, Arc::new(faulty));
    let a = ramp(vec![2, 256]);
    let err = Error::from(
        s.run(&mut InvocationState::default(), &[("A", &a)])
            .unwrap_err(),
    );
    assert!(err.to_string().contains("injected"), "{err}");
    // The first layer's weight was published; the failed one is marked failed.
    assert!(s.store().resident_count() >= 1);
    let failed = (0..s.store().len())
        .filter(|&i| s.store().snapshot(i).residency() == onnx_prepared::store::Residency::Failed)
        .count();
    assert_eq!(failed, 1);
    assert_eq!(
        s.budget().live(Domain::Preparation),
        0,
        "a failed producer returns its bytes"
    );
}

#[test]
fn preparation_bytes_return_after_each_producing_task() {
    // gemm-chain: every source feeds one requirement, so nothing stays held.
    let path = fixture("gemm-chain");
    let model = Model::open(&path).unwrap();
    let s = state(&path, Arc::new(FileSource::open(&model).unwrap()));
    let mut seen = 0;
    s.prepare_each(|_| {
        assert_eq!(s.budget().live(Domain::Preparation), 0);
        seen += 1;
    })
    .unwrap();
    assert_eq!(seen, s.plan().requirements().len());

    // gemm-shared-weight: the one read feeds two prepacks; its bytes are
    // held after the first and returned after the second.
    let path = fixture("gemm-shared-weight");
    let model = Model::open(&path).unwrap();
    let s = state(&path, Arc::new(FileSource::open(&model).unwrap()));
    let mut live = Vec::new();
    s.prepare_each(|_| live.push(s.budget().live(Domain::Preparation)))
        .unwrap();
    assert_eq!(live, vec![256 * 256 * 4, 0]);
    assert_eq!(
        s.budget().live(Domain::Prepared),
        s.store().resident_bytes()
    );
}

#[test]
fn activation_buffers_count_against_the_execution_limit() {
    use onnx_prepared::Error;
    use onnx_prepared::arena::{ArenaError, BudgetLimits};
    let path = fixture("gemm-chain");
    let model = Model::open(&path).unwrap();
    let resolved = ResolvedModel::resolve(model.clone(), &ResolveOptions::default()).unwrap();
    let plan = Arc::new(PreparedExecutionPlan::build(resolved).unwrap());
    let a = ramp(vec![4, 256]);
    // Input [4,256] plus two [4,256] activations: 12 KiB of f32.
    let tight =
        MemoryBudget::new(BudgetLimits::unlimited().with_domain(Domain::Execution, 8 * 1024));
    let s = PreparedExecutionState::new(
        plan.clone(),
        Arc::new(FileSource::open(&model).unwrap()),
        tight,
    );
    let err = Error::from(
        s.run(&mut InvocationState::default(), &[("A", &a)])
            .unwrap_err(),
    );
    assert!(
        matches!(
            err,
            Error::Arena(ArenaError::OverBudget {
                domain: Domain::Execution,
                ..
            })
        ),
        "{err}"
    );
    let roomy =
        MemoryBudget::new(BudgetLimits::unlimited().with_domain(Domain::Execution, 64 * 1024));
    let s = PreparedExecutionState::new(plan, Arc::new(FileSource::open(&model).unwrap()), roomy);
    let mut inv = InvocationState::default();
    s.run(&mut inv, &[("A", &a)]).unwrap();
    assert_eq!(s.budget().live(Domain::Execution), 3 * 4 * 256 * 4);
    drop(inv);
    assert_eq!(s.budget().live(Domain::Execution), 0);
}

#[test]
fn a_stopped_hot_run_ends_cancelled_between_kernels_and_the_next_one_runs() {
    let path = fixture("tiny-llm");
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let s = state(&path, source);
    let mut owned = support::tiny_llm_prefill(8);
    let inputs: Vec<(&str, &Tensor)> = owned.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let want = direct(&path, &inputs);
    let mut inv = InvocationState::default();
    s.run(&mut inv, &inputs).unwrap(); // everything resident: runs go hot
    let order: Vec<u32> = s
        .plan()
        .resolved()
        .inputs()
        .iter()
        .map(|d| owned.iter().position(|(n, _)| *n == d.name).unwrap() as u32)
        .collect();
    let asked = AtomicUsize::new(0);
    let stop_at_fifth = || asked.fetch_add(1, Ordering::Relaxed) + 1 == 5;
    let stopped = s.run_hot_in_place(
        &mut inv,
        &mut owned,
        &order,
        &|_| false,
        &Sequential,
        &stop_at_fifth,
    );
    assert!(matches!(stopped, Err(RunError::Cancelled)), "{stopped:?}");
    assert_eq!(
        asked.load(Ordering::Relaxed),
        5,
        "asked once per kernel, before it runs"
    );
    // The inputs came back to the caller, and the next run is whole.
    assert_eq!(owned, support::tiny_llm_prefill(8));
    assert!(
        s.run_hot_in_place(
            &mut inv,
            &mut owned,
            &order,
            &|_| false,
            &Sequential,
            &|| false
        )
        .unwrap()
    );
    assert_eq!(s.outputs(&inv), want, "bit for bit");
}
