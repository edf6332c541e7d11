//! The asynchronous session API on real fixtures: streaming cold runs, hot
//! runs, prepare-then-run, one worker, a tight budget — all bit-identical
//! to `DirectReplay`; `run` is `run_async` + `wait`; handles dropped or
//! forgotten mid-run never leave a task touching freed memory.

use crate::support;

use std::sync::Arc;

use crate::support::fixture;
use onnx_prepared::arena::{BudgetLimits, Domain};
use onnx_prepared::exec::{DirectReplay, DirectReplayOptions};
use onnx_prepared::model::{
    FaultInjectingSource, FileSource, Model, PayloadSource, ReadFault, ResolveOptions,
    ResolvedModel, WeightId,
};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions, Status};
use onnx_prepared_kernels::Tensor;

fn plan(name: &str) -> PreparedExecutionPlan {
    let model = Model::open(fixture(name)).unwrap();
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    PreparedExecutionPlan::build(resolved).unwrap()
}

/// Deterministic inputs for each fixture.
fn inputs(name: &str) -> Vec<(String, Tensor)> {
    let f32s = |n: usize, seed: u32| -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0
                    - 0.5
            })
            .collect()
    };
    match name {
        "tiny-llm" => support::tiny_llm_prefill(8),
        "many-small-nodes" => vec![(
            "x".to_owned(),
            Tensor::from_f32(MANY_DIMS.to_vec(), f32s(MANY_DIMS.iter().product(), 3)).unwrap(),
        )],
        _ => vec![(
            "A".to_owned(),
            Tensor::from_f32(vec![3, 256], f32s(768, 7)).unwrap(),
        )],
    }
}

fn direct(name: &str, inputs: &[(String, Tensor)]) -> Vec<(String, Tensor)> {
    let model = Model::open(fixture(name)).unwrap();
    let source = FileSource::open(&model).unwrap();
    let mut replay =
        DirectReplay::new(&model, Arc::new(source), DirectReplayOptions::default()).unwrap();
    let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    replay.run(&refs).unwrap()
}

fn context(session: &RuntimeSession, inputs: &[(String, Tensor)]) -> RuntimeContext {
    let mut ctx = RuntimeContext::new(session);
    for (n, t) in inputs {
        ctx.set_input(n, t.clone()).unwrap();
    }
    ctx
}

fn options(cpu: usize) -> SessionOptions {
    SessionOptions::default()
        .with_cpu_workers(cpu)
        .with_io_workers(2)
}

const MANY_DIMS: [usize; 2] = [1, 16];

const FIXTURES: [&str; 5] = [
    "gemm-chain",
    "gemm-transb0",
    "gemm-shared-weight",
    "many-small-nodes",
    "tiny-llm",
];

/// Runs `ctx` both ways — `run` and `run_async(..).wait()` — on two
/// sessions made by `make`, checks they agree, and returns the outputs.
fn both_ways(
    make: &dyn Fn() -> RuntimeSession,
    inputs: &[(String, Tensor)],
    prepare: bool,
) -> Vec<(String, Tensor)> {
    let a = make();
    let b = make();
    if prepare {
        a.prepare().unwrap();
        b.prepare_async().wait().unwrap();
        assert!(a.is_hot() && b.is_hot());
    }
    let mut sync = a.run(context(&a, inputs)).unwrap();
    let async_ = b.run_async(context(&b, inputs)).wait().unwrap();
    assert_eq!(sync.outputs(), async_.outputs());
    // The outputs are the context's, charged to each session's I/O domain.
    assert!(sync.output_bytes() > 0);
    assert_eq!(sync.output_bytes(), async_.output_bytes());
    assert_eq!(a.memory().domain(Domain::Io).live, sync.output_bytes());
    assert_eq!(b.memory().domain(Domain::Io).live, async_.output_bytes());
    // A bad input fails both ways alike.
    let mut bad = context(&a, inputs);
    let (name, _) = &inputs[0];
    bad.set_input(name, Tensor::from_f32(vec![3], vec![0.0; 3]).unwrap())
        .unwrap();
    let bad_b = {
        let mut ctx = context(&b, inputs);
        ctx.set_input(name, Tensor::from_f32(vec![3], vec![0.0; 3]).unwrap())
            .unwrap();
        ctx
    };
    let e1 = a.run(bad).unwrap_err();
    let e2 = b.run_async(bad_b).wait().unwrap_err();
    assert_eq!(e1.to_string(), e2.to_string());
    assert_eq!(e1.error.kind(), e2.error.kind());
    let outputs = sync.take_outputs();
    assert_eq!(sync.output_bytes(), 0);
    assert_eq!(a.memory().domain(Domain::Io).live, 0);
    outputs
}

/// A budget with room for every prepared object, one run's execution and
/// io bytes, and one source read (its buffer and decoded copy) — in the
/// preparation domain, far less than every source at once — measured on an
/// unlimited session.
fn tight_budget(name: &str, inputs: &[(String, Tensor)]) -> (BudgetLimits, usize) {
    let session = RuntimeSession::new(plan(name), options(2)).unwrap();
    session.prepare().unwrap();
    let budget = session.internals().budget();
    let prepared = budget.live(Domain::Prepared);
    budget.reset_peaks();
    session.run(context(&session, inputs)).unwrap();
    let run = budget.peak(Domain::Execution) + budget.peak(Domain::Io);
    let model = session.plan().resolved().model();
    let sources: Vec<usize> = model
        .weights()
        .iter()
        .map(|w| w.byte_len() as usize)
        .collect();
    let largest = sources.iter().copied().max().unwrap_or(0);
    let limit = prepared + run + 2 * largest + 4096;
    let limits = BudgetLimits::unlimited()
        .with_global(limit)
        .with_domain(Domain::Preparation, 2 * largest + 4096);
    (limits, prepared + sources.iter().sum::<usize>())
}

/// Every mode — streaming cold, hot, eager (prepare, then run), one worker,
/// a tight budget — gives `DirectReplay`'s outputs bit for bit on every
/// fixture, through `run` and through `run_async(..).wait()` alike.
#[test]
fn every_mode_matches_direct_replay_on_every_fixture() {
    for name in FIXTURES {
        let inputs = inputs(name);
        let expected = direct(name, &inputs);
        // Streaming cold run, then a hot run with the same context.
        for cpu in [1, 2] {
            let session = RuntimeSession::new(plan(name), options(cpu)).unwrap();
            assert!(!session.is_hot());
            let ctx = session
                .run_async(context(&session, &inputs))
                .wait()
                .unwrap();
            assert_eq!(ctx.outputs(), expected.as_slice(), "{name} cold, {cpu} cpu");
            assert!(
                session.is_hot(),
                "{name}: everything resident after the cold run"
            );
            let ctx = session.run(ctx).unwrap();
            assert_eq!(ctx.outputs(), expected.as_slice(), "{name} hot, {cpu} cpu");
            let ctx = session.run_async(ctx).wait().unwrap();
            assert_eq!(ctx.outputs(), expected.as_slice(), "{name} hot async");
        }
        let with = |options: SessionOptions| {
            let name = name.to_owned();
            move || RuntimeSession::new(plan(&name), options.clone()).unwrap()
        };
        // Streaming and eager, each through `run` and `run_async`.
        for prepare in [false, true] {
            let outputs = both_ways(&with(options(2)), &inputs, prepare);
            assert_eq!(outputs, expected, "{name} prepare={prepare}");
            // One worker: one CPU and one I/O thread.
            let one = options(1).with_io_workers(1);
            let outputs = both_ways(&with(one), &inputs, prepare);
            assert_eq!(outputs, expected, "{name} one worker, prepare={prepare}");
            // A tight budget: reads wait for room instead of failing.
            let (budget, all_at_once) = tight_budget(name, &inputs);
            if name == "tiny-llm" {
                assert!(budget.global() < all_at_once, "the budget is tight");
                assert!(budget.domain(Domain::Preparation) < all_at_once / 2);
            }
            let tight = options(2).with_budget(budget);
            let outputs = both_ways(&with(tight), &inputs, prepare);
            assert_eq!(outputs, expected, "{name} tight budget, prepare={prepare}");
        }
    }
}

#[test]
fn a_failed_read_fails_the_run_with_diagnostics_and_returns_the_context() {
    let model = Model::open(fixture("gemm-chain")).unwrap();
    let file = FileSource::open(&model).unwrap();
    let weight = model
        .weights()
        .iter()
        .position(|w| w.name() == "chain1.weight")
        .expect("second layer weight");
    let source = FaultInjectingSource::new(file, model.weights().len())
        .with_fault(WeightId(weight as u32), ReadFault::Fail);
    let source: Arc<dyn PayloadSource> = Arc::new(source);
    let session = RuntimeSession::with_source(plan("gemm-chain"), source, options(2)).unwrap();
    let inputs = inputs("gemm-chain");
    let handle = session.run_async(context(&session, &inputs));
    let err = handle.wait().unwrap_err();
    assert!(err.to_string().contains("chain1.weight"), "{err}");
    let ctx = err.context.expect("the context comes back");
    assert_eq!(ctx.inputs().len(), 1);
    assert!(ctx.outputs().is_empty());
    // Preparation reports the failing read and what it suppressed.
    let err = session.prepare().unwrap_err();
    let (task, why) = err.diagnostics.failed_task.expect("failing task");
    assert!(task.contains("chain1.weight"), "{task}");
    assert!(why.contains("inject"), "{why}");
}

#[test]
fn dropping_or_forgetting_live_handles_is_sound() {
    let inputs = inputs("tiny-llm");
    let expected = direct("tiny-llm", &inputs);
    let session = RuntimeSession::new(plan("tiny-llm"), options(2)).unwrap();
    // Forgotten mid-run: the submission owns the context and the state.
    std::mem::forget(session.run_async(context(&session, &inputs)));
    // Dropped: waits.
    let handle = session.run_async(context(&session, &inputs));
    drop(handle);
    let prepare = session.prepare_async();
    let status_before = prepare.status();
    drop(prepare);
    assert!(matches!(status_before, Status::Running | Status::Succeeded));
    let ctx = session.run(context(&session, &inputs)).unwrap();
    assert_eq!(ctx.outputs(), expected.as_slice());
    drop(session);
}

#[test]
fn run_and_run_async_wait_fail_alike() {
    let session = RuntimeSession::new(plan("gemm-chain"), options(2)).unwrap();
    let bad = || {
        RuntimeContext::new(&session)
            .with_input("A", Tensor::from_i64(vec![1, 256], vec![0; 256]).unwrap())
            .unwrap()
    };
    let sync = session.run(bad()).unwrap_err();
    let async_ = session.run_async(bad()).wait().unwrap_err();
    assert_eq!(sync.to_string(), async_.to_string());
    assert_eq!(sync.error.kind(), async_.error.kind());
    assert_eq!(sync.diagnostics, async_.diagnostics);
    // An unknown input is refused before any run.
    assert!(
        RuntimeContext::new(&session)
            .with_input("nope", Tensor::from_f32(vec![1], vec![0.0]).unwrap())
            .is_err()
    );
}

/// A traced session over gemm-chain reading through `source`.
fn traced_gemm_chain(source: Arc<FaultInjectingSource<FileSource>>) -> RuntimeSession {
    RuntimeSession::with_source(
        plan("gemm-chain"),
        source as Arc<dyn PayloadSource>,
        options(2).with_trace(true),
    )
    .unwrap()
}

/// Design step 8: the two-Gemm chain with each weight behind a gate. The
/// first Gemm executes while the second weight is still held back (the
/// trace shows step `chain0` finished before the gate of `chain1.weight`
/// opens — event order, never timing); then the run completes. A second run
/// reuses both resident objects: 0 bytes read, 0 prepacks.
#[test]
fn first_gemm_runs_before_the_second_weight_is_read() {
    use onnx_prepared::session::TraceLane;
    use onnx_prepared::sync::Latch;
    use std::time::{Duration, Instant};

    let model = Model::open(fixture("gemm-chain")).unwrap();
    let id = |name: &str| {
        WeightId(
            model
                .weights()
                .iter()
                .position(|w| w.name() == name)
                .unwrap() as u32,
        )
    };
    let gates = [Arc::new(Latch::new()), Arc::new(Latch::new())];
    let source = Arc::new(
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(id("chain0.weight"), ReadFault::Gate(gates[0].clone()))
            .with_fault(id("chain1.weight"), ReadFault::Gate(gates[1].clone())),
    );
    let session = traced_gemm_chain(source.clone());
    let trace = session.trace().unwrap().clone();
    let inputs = inputs("gemm-chain");
    let run = session.run_async(context(&session, &inputs));
    assert!(!run.is_ready(), "nothing can run before the first weight");
    gates[0].open();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !trace
        .events()
        .iter()
        .any(|e| e.lane == TraceLane::Inference && e.name == "chain0")
    {
        assert!(Instant::now() < deadline, "step chain0 never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Step chain0 finished; chain1.weight is still behind its gate.
    assert_eq!(source.counters().bytes_read(id("chain1.weight")), 0);
    assert!(!run.is_ready());
    assert!(
        !trace.events().iter().any(|e| e.name == "chain1"),
        "step chain1 cannot have run"
    );
    gates[1].open();
    let ctx = run.wait().unwrap();
    assert_eq!(ctx.outputs(), direct("gemm-chain", &inputs).as_slice());
    let events = trace.events();
    let end_of = |name: &str| events.iter().find(|e| e.name == name).unwrap().end;
    let read_end = events
        .iter()
        .find(|e| e.lane == TraceLane::Io && e.name.contains("chain1.weight"))
        .unwrap()
        .end;
    assert!(
        end_of("chain0") < read_end,
        "chain0 ran before chain1.weight was read"
    );

    // The second run: hot, nothing read, nothing prepacked.
    assert!(session.is_hot());
    let read_before = source.counters().total();
    let prepacks_before = trace
        .events()
        .iter()
        .filter(|e| e.lane == TraceLane::Prepack)
        .count();
    let ctx = session.run(ctx).unwrap();
    assert_eq!(ctx.outputs(), direct("gemm-chain", &inputs).as_slice());
    assert_eq!(source.counters().total(), read_before, "0 bytes read");
    let events = trace.events();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.lane == TraceLane::Prepack)
            .count(),
        prepacks_before,
        "0 prepacks"
    );
    assert!(events.iter().any(|e| e.name == "run (hot)"));
    assert!(trace.to_chrome_json().starts_with("{\"traceEvents\":["));
}

/// Cancelling one of two inferences waiting for the same gated weight ends
/// it (its context comes back, error `Cancelled`) without touching the
/// shared preparation: once the weight arrives the other inference
/// completes, and later runs are hot.
#[test]
fn cancelling_one_inference_leaves_the_other_and_the_preparation() {
    use onnx_prepared::ErrorKind;
    use onnx_prepared::sync::Latch;

    let model = Model::open(fixture("gemm-chain")).unwrap();
    let weight = WeightId(
        model
            .weights()
            .iter()
            .position(|w| w.name() == "chain1.weight")
            .unwrap() as u32,
    );
    let gate = Arc::new(Latch::new());
    let source: Arc<dyn PayloadSource> = Arc::new(
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(weight, ReadFault::Gate(gate.clone())),
    );
    let session = RuntimeSession::with_source(plan("gemm-chain"), source, options(2)).unwrap();
    let inputs = inputs("gemm-chain");
    let expected = direct("gemm-chain", &inputs);
    let first = session.run_async(context(&session, &inputs));
    let second = session.run_async(context(&session, &inputs));
    assert!(!first.is_ready() && !second.is_ready());
    first.cancel();
    let err = first.wait().unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Cancelled, "{err}");
    assert_eq!(err.context.expect("context back").inputs().len(), 1);
    assert_eq!(second.status(), Status::Running);
    gate.open();
    let ctx = second.wait().unwrap();
    assert_eq!(ctx.outputs(), expected.as_slice());
    assert!(session.is_hot());
}

/// A run that fails (bad input shape) does not disturb a concurrent one.
#[test]
fn a_failing_run_does_not_affect_a_concurrent_one() {
    let session = RuntimeSession::new(plan("gemm-chain"), options(2)).unwrap();
    let inputs = inputs("gemm-chain");
    let bad = RuntimeContext::new(&session)
        .with_input("A", Tensor::from_f32(vec![2, 7], vec![0.0; 14]).unwrap())
        .unwrap();
    let good = session.run_async(context(&session, &inputs));
    let failing = session.run_async(bad);
    let err = failing.wait().unwrap_err();
    assert!(err.to_string().contains('A'), "{err}");
    assert_eq!(
        good.wait().unwrap().outputs(),
        direct("gemm-chain", &inputs).as_slice()
    );
}

/// A caller-owned KV cache: with `present_*` bound to `past_*`, a prefill
/// and three decode steps through the session give exactly the logits of
/// `DirectReplay` fed by hand with the previous presents.
#[test]
fn kv_cache_binding_feeds_presents_back() {
    let session = RuntimeSession::new(plan("tiny-llm"), options(2)).unwrap();
    let mut ctx = context(&session, &inputs("tiny-llm"));
    assert_eq!(ctx.bind_kv_cache(), 8);
    assert!(ctx.bind_cache("logits", "nope").is_err());
    assert!(ctx.bind_cache("nope", "past_key_0").is_err());

    let model = Model::open(fixture("tiny-llm")).unwrap();
    let source = FileSource::open(&model).unwrap();
    let mut replay =
        DirectReplay::new(&model, Arc::new(source), DirectReplayOptions::default()).unwrap();
    let mut manual = inputs("tiny-llm");
    let mut total = 8; // the prefill's T
    for step in 0..4 {
        let refs: Vec<(&str, &Tensor)> = manual.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let expected = replay.run(&refs).unwrap();
        ctx = session.run(ctx).unwrap();
        let logits =
            |o: &[(String, Tensor)]| o.iter().find(|(n, _)| n == "logits").unwrap().1.clone();
        assert_eq!(logits(ctx.outputs()), logits(&expected), "step {step}");
        // Bound outputs moved into the inputs; the rest stay.
        assert!(ctx.output("present_key_0").unwrap().shape().is_empty());
        let past = &ctx
            .inputs()
            .iter()
            .find(|(n, _)| n == "past_key_0")
            .unwrap()
            .1;
        assert_eq!(past.shape(), &[1, 8, total, 64]);
        // Next decode step: one token, the bias over every cached position.
        total += 1;
        let ids = Tensor::from_i64(vec![1, 1], vec![step as i64 * 31 + 5]).unwrap();
        let bias = Tensor::from_f32(vec![1, 1, 1, total], vec![0.0; total]).unwrap();
        ctx.set_input("input_ids", ids.clone()).unwrap();
        ctx.set_input("attn_bias", bias.clone()).unwrap();
        for (name, value) in manual.iter_mut() {
            match name.as_str() {
                "input_ids" => *value = ids.clone(),
                "attn_bias" => *value = bias.clone(),
                past if past.starts_with("past") => {
                    let present = format!("present{}", &past["past".len()..]);
                    *value = expected
                        .iter()
                        .find(|(n, _)| *n == present)
                        .unwrap()
                        .1
                        .clone();
                }
                _ => {}
            }
        }
    }
}

/// tiny-llm with every weight's read behind one gate: at most one read per
/// I/O worker can be in progress until the gate opens.
fn gated_tiny_llm(
    options: SessionOptions,
) -> (
    RuntimeSession,
    Arc<FaultInjectingSource<FileSource>>,
    Arc<onnx_prepared::sync::Latch>,
) {
    let model = Model::open(fixture("tiny-llm")).unwrap();
    let gate = Arc::new(onnx_prepared::sync::Latch::new());
    let mut source =
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len());
    for w in 0..model.weights().len() {
        source = source.with_fault(WeightId(w as u32), ReadFault::Gate(gate.clone()));
    }
    let source = Arc::new(source);
    let session = RuntimeSession::with_source(
        plan("tiny-llm"),
        source.clone() as Arc<dyn PayloadSource>,
        options,
    )
    .unwrap();
    (session, source, gate)
}

/// Whether `wait_idle` returns within `limit` (a watchdog thread, so a
/// preparation that never ends fails the test instead of hanging it).
fn idles_within(session: &Arc<RuntimeSession>, limit: std::time::Duration) -> bool {
    let (done, idle) = std::sync::mpsc::channel();
    let waiting = session.clone();
    onnx_prepared::sync::thread::spawn(move || {
        waiting.wait_idle();
        let _ = done.send(());
    });
    idle.recv_timeout(limit).is_ok()
}

/// Weights whose read has started.
fn reads_started(source: &FaultInjectingSource<FileSource>, session: &RuntimeSession) -> usize {
    let weights = session.plan().resolved().model().weights().len();
    (0..weights)
        .filter(|&w| source.reads_started(WeightId(w as u32)) > 0)
        .count()
}

/// Cancelling the only run cancels the preparation it started: reads
/// already in progress finish (at most one per I/O worker), nothing else
/// starts. A later run starts a new preparation and completes.
#[test]
fn cancelling_the_only_run_cancels_its_preparation() {
    use onnx_prepared::ErrorKind;
    use std::time::{Duration, Instant};

    let (session, source, gate) = gated_tiny_llm(options(2));
    let session = Arc::new(session);
    let inputs = inputs("tiny-llm");
    let run = session.run_async(context(&session, &inputs));
    // The run waits for its first weight: its preparation is reading.
    let deadline = Instant::now() + Duration::from_secs(20);
    while reads_started(&source, &session) == 0 {
        assert!(Instant::now() < deadline, "no read started");
        std::thread::sleep(Duration::from_millis(1));
    }
    run.cancel();
    let err = run.wait().unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Cancelled, "{err}");
    gate.open();
    // A cancelled preparation ends; one left running would wait for its
    // window forever.
    assert!(
        idles_within(&session, Duration::from_secs(20)),
        "the preparation ends once its only run was cancelled"
    );
    let started = reads_started(&source, &session);
    assert!(started <= 2, "{started} reads started after the cancel");
    assert!(!session.residency().all_resident());
    let ctx = session.run(*err.context.unwrap()).unwrap();
    assert_eq!(ctx.outputs(), direct("tiny-llm", &inputs).as_slice());
}

/// A run cancelled while an eager `prepare` handle is live leaves the
/// preparation running: the handle completes with every object resident.
#[test]
fn cancelling_a_run_keeps_a_live_eager_preparation() {
    use onnx_prepared::ErrorKind;

    let (session, _source, gate) = gated_tiny_llm(options(2));
    let inputs = inputs("tiny-llm");
    let prepare = session.prepare_async();
    let run = session.run_async(context(&session, &inputs));
    run.cancel();
    assert_eq!(run.wait().unwrap_err().error.kind(), ErrorKind::Cancelled);
    gate.open();
    prepare.wait().unwrap();
    assert!(session.residency().all_resident());
    assert!(session.is_hot());
}

/// Cancelling the only eager `prepare` handle cancels the preparation:
/// `wait` reports `Cancelled` once the reads in progress are joined; a
/// later `prepare` makes what is still missing.
#[test]
fn cancelling_the_only_prepare_handle_cancels_it() {
    use onnx_prepared::ErrorKind;

    let (session, source, gate) = gated_tiny_llm(options(2));
    let prepare = session.prepare_async();
    prepare.cancel();
    gate.open();
    let err = prepare.wait().unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Cancelled, "{err}");
    let started = reads_started(&source, &session);
    assert!(started <= 2, "{started} reads started after the cancel");
    assert!(!session.residency().all_resident());
    session.prepare().unwrap();
    assert!(session.residency().all_resident());
}

/// Eviction invalidates the readiness epoch: the next run takes the cold
/// path, produces the evicted object again (reading only its sources) and
/// gives the same outputs; the run after it is hot again.
#[test]
fn an_evicted_object_sends_the_next_run_down_the_cold_path() {
    use onnx_prepared::session::TraceLane;
    use onnx_prepared::store::Evict;

    let model = Model::open(fixture("gemm-chain")).unwrap();
    let source = Arc::new(FaultInjectingSource::new(
        FileSource::open(&model).unwrap(),
        model.weights().len(),
    ));
    let session = traced_gemm_chain(source.clone());
    let inputs = inputs("gemm-chain");
    let expected = direct("gemm-chain", &inputs);
    session.prepare().unwrap();
    let ctx = session.run(context(&session, &inputs)).unwrap();
    assert!(session.is_hot());
    let read_before = source.counters().total();

    // Evict one resident object: the last requirement.
    let store = session.internals().store();
    let last = store.len() - 1;
    assert!(matches!(store.try_evict(last), Evict::Evicted { .. }));
    assert!(!session.is_hot(), "eviction moves the readiness epoch");
    let hot_runs = |s: &RuntimeSession| {
        s.trace()
            .unwrap()
            .events()
            .iter()
            .filter(|e| e.lane == TraceLane::Inference && e.name == "run (hot)")
            .count()
    };
    let hot_before = hot_runs(&session);
    let ctx = session.run(ctx).unwrap();
    assert_eq!(ctx.outputs(), expected.as_slice());
    assert_eq!(hot_runs(&session), hot_before, "the run took the cold path");
    let reread = source.counters().total() - read_before;
    let one_weight = 256 * 256 * 4;
    assert!(
        reread > 0 && reread <= one_weight,
        "only the evicted object's source is read again ({reread} bytes)"
    );
    assert!(session.is_hot());
    let ctx = session.run(ctx).unwrap();
    assert_eq!(ctx.outputs(), expected.as_slice());
    assert_eq!(hot_runs(&session), hot_before + 1, "hot again");
}

/// An output charge the I/O domain refuses fails the run before anything
/// of the context changed: it comes back with the previous run's outputs,
/// and a run that fits succeeds after it.
#[test]
fn a_refused_output_charge_leaves_the_context_as_it_was() {
    use onnx_prepared::ErrorKind;

    let y_bytes = 256 * 4; // Y is [rows, 256] f32
    let session = RuntimeSession::new(
        plan("gemm-chain"),
        options(2).with_budget(BudgetLimits::unlimited().with_domain(Domain::Io, y_bytes)),
    )
    .unwrap();
    let one_row = Tensor::from_f32(vec![1, 256], vec![0.25; 256]).unwrap();
    let ctx = session
        .run(
            RuntimeContext::new(&session)
                .with_input("A", one_row)
                .unwrap(),
        )
        .unwrap();
    let first = ctx.outputs().to_vec();
    assert_eq!(ctx.output_bytes(), y_bytes);
    let mut ctx = ctx;
    ctx.set_input("A", Tensor::from_f32(vec![3, 256], vec![0.5; 768]).unwrap())
        .unwrap();
    let err = session.run(ctx).unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Budget, "{err}");
    let mut ctx = *err.context.unwrap();
    assert_eq!(ctx.outputs(), first.as_slice(), "outputs untouched");
    assert_eq!(ctx.output_bytes(), y_bytes);
    ctx.set_input(
        "A",
        Tensor::from_f32(vec![1, 256], vec![0.25; 256]).unwrap(),
    )
    .unwrap();
    let ctx = session.run(ctx).unwrap();
    assert_eq!(ctx.outputs(), first.as_slice());
}

/// A streaming run that fails leaves no preparation stuck behind its
/// window: the rest completes in the background and `wait_idle` returns.
#[test]
fn wait_idle_returns_after_a_failed_streaming_run() {
    use onnx_prepared::scheduler::LookAheadOptions;
    use std::time::Duration;

    let model = Model::open(fixture("tiny-llm")).unwrap();
    let first = model
        .weights()
        .iter()
        .position(|w| w.name() == "embed.weight")
        .unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(WeightId(first as u32), ReadFault::Fail),
    );
    let session = Arc::new(
        RuntimeSession::with_source(
            plan("tiny-llm"),
            source,
            options(2).with_look_ahead(LookAheadOptions {
                initial_distance: 1,
                max_distance: 1,
                ..LookAheadOptions::default()
            }),
        )
        .unwrap(),
    );
    let inputs = inputs("tiny-llm");
    let err = session
        .run_async(context(&session, &inputs))
        .wait()
        .unwrap_err();
    assert!(err.to_string().contains("embed.weight"), "{err}");
    assert!(
        idles_within(&session, Duration::from_secs(20)),
        "the failed run's preparation completes in the background"
    );
    // Everything but the object the failed read makes is resident.
    let store = session.internals().store();
    let missing = (0..store.len())
        .filter(|&r| !store.snapshot(r).is_resident())
        .count();
    assert_eq!(missing, 1, "of {} objects", store.len());
}
