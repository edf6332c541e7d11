//! A run cancelled while suspended on a missing object, then dropped,
//! frees its context at once: the continuation it registered on the
//! store's completion event is taken back, so neither the context nor its
//! execution and I/O budget charges wait for the object's read, which here
//! never completes until the test lets it.
use std::sync::Arc;

use onnx_prepared::arena::Domain;
use onnx_prepared::model::{
    FaultInjectingSource, FileSource, Model, ReadFault, ResolveOptions, ResolvedModel, WeightId,
};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::store::Evict;
use onnx_prepared::sync::Latch;
use onnx_prepared_kernels::Tensor;

fn context(session: &RuntimeSession) -> RuntimeContext {
    let a = Tensor::from_f32(vec![3, 256], (0..768).map(|i| i as f32 / 768.0).collect()).unwrap();
    RuntimeContext::new(session).with_input("A", a).unwrap()
}

#[test]
fn a_cancelled_suspended_run_frees_its_context_before_the_read_completes() {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let model = Model::open(dir.join("gemm-chain.onnx")).unwrap();
    let weight = WeightId(
        model
            .weights()
            .iter()
            .position(|w| w.name() == "chain1.weight")
            .unwrap() as u32,
    );
    // Open for the first run; closed again before the second.
    let gate = Arc::new(Latch::new());
    gate.open();
    let source = Arc::new(
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(weight, ReadFault::Gate(gate.clone())),
    );
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    let plan = PreparedExecutionPlan::build(resolved).unwrap();
    let options = SessionOptions::default()
        .with_cpu_workers(2)
        .with_io_workers(1);
    let session = RuntimeSession::with_source(plan, source.clone(), options).unwrap();
    let budget = session.internals().budget();
    let store = session.internals().store();

    // A finished run: its context holds outputs (I/O domain) and its
    // activation buffers (execution domain).
    let ctx = session.run(context(&session)).unwrap();
    assert!(budget.live(Domain::Io) > 0 && budget.live(Domain::Execution) > 0);

    // Evict what chain1's weight became; its next read blocks.
    let chain1: Vec<usize> = (0..store.len())
        .filter(|&r| {
            session.plan().resolved().requirements()[r]
                .name
                .starts_with("chain1")
        })
        .collect();
    assert!(!chain1.is_empty());
    for &r in &chain1 {
        assert!(matches!(store.try_evict(r), Evict::Evicted { .. }));
    }
    assert_eq!(source.reads_started(weight), 1);
    gate.reset(); // nobody waits on it now

    let run = session.run_async(ctx);
    // The run suspends on chain1's object (its continuation is registered)
    // while the object's read waits at the gate.
    let registered = || (0..store.len()).map(|r| store.registered(r)).sum::<usize>();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while registered() == 0 || source.reads_started(weight) < 2 {
        if std::time::Instant::now() > deadline {
            gate.open();
            panic!("the run never suspended on chain1's object");
        }
        std::thread::yield_now();
    }
    assert!(!run.is_ready());
    run.cancel();
    drop(run);

    // Observed while the read is still held at the gate (the gate opens
    // before the checks, so that a failing check cannot hang the test) ...
    let held = (
        !gate.is_open(),
        source.reads_started(weight),
        chain1.iter().any(|&r| store.snapshot(r).is_resident()),
    );
    let (kept, io, execution) = (
        registered(),
        budget.live(Domain::Io),
        budget.live(Domain::Execution),
    );
    gate.open();
    assert_eq!(held, (true, 2, false), "(gate closed, reads, resident)");
    // ... the continuation and the context were gone, with their charges.
    assert_eq!(kept, 0, "the cancelled run's continuation was kept");
    assert_eq!(io, 0, "the context's outputs stayed charged");
    assert_eq!(execution, 0, "the context's activations stayed charged");

    // The session still works once the read completes.
    let ctx = session.run(context(&session)).unwrap();
    assert_eq!(ctx.outputs().len(), 1);
}
