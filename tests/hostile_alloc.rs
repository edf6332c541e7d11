//! Allocations sized by a model or its inputs are checked before they are
//! made (a typed error, never an abort), and nodes of any arity run: folded
//! values at resolution, activation buffers at lowering (broadcasting two
//! large inputs, a huge folded constant), a 40-input `Concat` and `Max`
//! through both executors.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_prepared::arena::{ArenaError, BudgetLimits, Domain};
use onnx_prepared::exec::{DirectReplay, DirectReplayOptions};
use onnx_prepared::model::proto::{
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto, attribute_proto,
};
use onnx_prepared::model::{FileSource, Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::sync::{AtomicUsize, Ordering};
use onnx_prepared::{Error, ErrorKind};
use onnx_prepared_kernels::Tensor;

/// The largest single allocation any thread of this binary asked for.
/// Every test here refuses its large request before making it, so no
/// allocation anywhere in the binary comes near [`LARGE`].
static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// An allocation this size or larger is a request the checks should have
/// refused first (the tests' legitimate tensors are a few MiB).
const LARGE: usize = 64 << 20;

struct LargestAlloc;

// SAFETY: every call is forwarded unchanged to the system allocator; the
// maximum is a plain atomic, updated without allocating.
unsafe impl GlobalAlloc for LargestAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: LargestAlloc = LargestAlloc;

fn assert_nothing_large_was_allocated() {
    let largest = LARGEST.load(Ordering::SeqCst);
    assert!(
        largest < LARGE,
        "an allocation of {largest} bytes was made before the check refused it"
    );
}

/// A graph value of element type `elem` (1 = f32, 7 = i64) with `dims`
/// (`Ok(n)` fixed, `Err(name)` symbolic); no shape when `dims` is `None`.
fn value(name: &str, elem: i32, dims: Option<&[Result<i64, &str>]>) -> ValueInfoProto {
    support::tensor_value(name, elem, dims)
}

fn node(op: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        name: Some(format!("{op}_{output}")),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| (*s).to_owned()).collect(),
        output: vec![output.into()],
        attribute: attrs,
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn i64_tensor(name: &str, values: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(7),
        dims: vec![values.len() as i64],
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

fn write_model(
    dir: &Path,
    nodes: Vec<NodeProto>,
    init: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> PathBuf {
    let model = ModelProto {
        ir_version: Some(11),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: init,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("m.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

/// `y = a + b` with `a: [n, 1]` and `b: [1, m]` (symbolic `n`, `m`): the
/// output's size is the product of two input sizes.
fn broadcast_add(dir: &Path) -> PathBuf {
    write_model(
        dir,
        vec![node("Add", &["a", "b"], "y", vec![])],
        vec![],
        vec![
            value("a", 1, Some(&[Err("n"), Ok(1)])),
            value("b", 1, Some(&[Ok(1), Err("m")])),
        ],
        vec![value("y", 1, None)],
    )
}

fn session(path: &Path, budget: BudgetLimits) -> RuntimeSession {
    let resolved =
        ResolvedModel::resolve(Model::open(path).unwrap(), &ResolveOptions::default()).unwrap();
    RuntimeSession::new(
        PreparedExecutionPlan::build(resolved).unwrap(),
        SessionOptions::default().with_budget(budget),
    )
    .unwrap()
}

fn run_session(s: &RuntimeSession, inputs: &[(&str, Tensor)]) -> Result<Vec<Tensor>, Error> {
    let mut ctx = RuntimeContext::new(s);
    for (name, t) in inputs {
        ctx.set_input(name, t.clone()).unwrap();
    }
    let mut ctx = s.run(ctx).map_err(|e| e.error)?;
    Ok(ctx.take_outputs().into_iter().map(|(_, t)| t).collect())
}

/// `err` is the session's execution budget refusing a request.
fn assert_execution_over_budget(err: &Error) {
    assert!(
        matches!(
            err,
            Error::Arena(ArenaError::OverBudget {
                domain: Domain::Execution,
                ..
            })
        ),
        "{err:?}"
    );
}

fn run_direct(path: &Path, inputs: &[(&str, Tensor)]) -> Result<Vec<Tensor>, Error> {
    let model = Model::open(path).unwrap();
    let source = FileSource::open(&model).unwrap();
    let mut replay = DirectReplay::new(&model, Arc::new(source), DirectReplayOptions::default())?;
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (*n, t)).collect();
    Ok(replay.run(&named)?.into_iter().map(|(_, t)| t).collect())
}

/// `y = a + b` with `a: [n, 1]` and `b: [1, m]`: `n = m = 2^20` asks for a
/// 4 TiB output, refused before any buffer is allocated.
#[test]
fn broadcasting_two_large_inputs_is_a_budget_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = broadcast_add(dir.path());
    let n = 1 << 20;
    let inputs = [
        ("a", Tensor::from_f32(vec![n, 1], vec![1.0; n]).unwrap()),
        ("b", Tensor::from_f32(vec![1, n], vec![2.0; n]).unwrap()),
    ];
    let s = session(&path, BudgetLimits::unlimited());
    let err = run_session(&s, &inputs).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Budget, "{err}");
    assert!(
        matches!(
            err,
            Error::Arena(ArenaError::AboveCeiling {
                domain: Domain::Execution,
                requested,
                ..
            }) if requested >= 4 << 40
        ),
        "{err:?}"
    );
    let err = run_direct(&path, &inputs).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Budget, "{err}");

    // Small inputs still run through the same session and lowering code.
    let small = [
        ("a", Tensor::from_f32(vec![2, 1], vec![1.0, 2.0]).unwrap()),
        (
            "b",
            Tensor::from_f32(vec![1, 3], vec![10.0, 20.0, 30.0]).unwrap(),
        ),
    ];
    let out = run_session(&s, &small).unwrap();
    assert_eq!(
        out[0].as_f32().unwrap(),
        &[11.0, 21.0, 31.0, 12.0, 22.0, 32.0]
    );
    assert_eq!(run_direct(&path, &small).unwrap(), out);
}

/// A session's execution budget refuses a lowering whose buffers it cannot
/// hold: `OverBudget` from the budget, before the buffers are allocated
/// (no allocation of their size was ever requested).
#[test]
fn a_session_budget_refuses_activation_buffers_before_they_exist() {
    let dir = tempfile::tempdir().unwrap();
    let path = broadcast_add(dir.path());
    let s = session(
        &path,
        BudgetLimits::unlimited().with_domain(Domain::Execution, 1 << 20),
    );
    // A 1 GiB output: under the default ceiling of any machine that runs
    // the tests, so only the session's budget refuses it.
    let n = 1 << 14;
    let inputs = [
        ("a", Tensor::from_f32(vec![n, 1], vec![1.0; n]).unwrap()),
        ("b", Tensor::from_f32(vec![1, n], vec![2.0; n]).unwrap()),
    ];
    let err = run_session(&s, &inputs).unwrap_err();
    assert_nothing_large_was_allocated();
    assert_execution_over_budget(&err);
    assert_eq!(s.memory().domain(Domain::Execution).live, 0);
}

/// `ConstantOfShape` of a constant shape `[2^20, 2^20]` folds at resolution:
/// 4 TiB, refused by the folding ceiling with a typed error.
#[test]
fn a_huge_value_folded_at_resolution_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(
        dir.path(),
        vec![
            node("ConstantOfShape", &["shape"], "big", vec![]),
            node("Add", &["x", "big"], "y", vec![]),
        ],
        vec![i64_tensor("shape", &[1 << 20, 1 << 20])],
        vec![value("x", 1, Some(&[Ok(1)]))],
        vec![value("y", 1, None)],
    );
    let err = Error::from(
        ResolvedModel::resolve(Model::open(&path).unwrap(), &ResolveOptions::default())
            .unwrap_err(),
    );
    assert!(
        matches!(err, Error::Arena(ArenaError::AboveCeiling { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("ConstantOfShape_big"), "{err}");
}

/// `ResolveOptions::fold_limit` lowers the folding ceiling: a 4 MiB folded
/// constant resolves by default and is refused, naming its node, under a
/// 1 MiB limit.
#[test]
fn the_fold_limit_is_the_caller_s() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(
        dir.path(),
        vec![
            node("ConstantOfShape", &["shape"], "big", vec![]),
            node("Add", &["x", "big"], "y", vec![]),
        ],
        vec![i64_tensor("shape", &[1 << 20])],
        vec![value("x", 1, Some(&[Ok(1)]))],
        vec![value("y", 1, None)],
    );
    ResolvedModel::resolve(Model::open(&path).unwrap(), &ResolveOptions::default()).unwrap();
    let limited = ResolveOptions {
        fold_limit: 1 << 20,
        ..ResolveOptions::default()
    };
    let err =
        Error::from(ResolvedModel::resolve(Model::open(&path).unwrap(), &limited).unwrap_err());
    match &err {
        Error::Arena(ArenaError::AboveCeiling {
            requested, limit, ..
        }) => {
            assert_eq!((*requested, *limit), (4 << 20, 1 << 20), "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("ConstantOfShape_big"), "{err}");
}

/// `Range` over scalar inputs: its length is computed from the input
/// values (`(limit - start) / delta`), so only the lowering for these
/// values knows it. 2^27 f32 elements (512 MiB, under the machine's
/// ceiling) are refused by a 16 MiB execution budget before the buffer
/// exists; a short range runs in the same session.
#[test]
fn a_length_computed_from_input_values_is_charged_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(
        dir.path(),
        vec![node("Range", &["start", "limit", "delta"], "y", vec![])],
        vec![],
        vec![
            value("start", 1, Some(&[])),
            value("limit", 1, Some(&[])),
            value("delta", 1, Some(&[])),
        ],
        vec![value("y", 1, None)],
    );
    let scalar = |v: f32| Tensor::from_f32(vec![], vec![v]).unwrap();
    let s = session(
        &path,
        BudgetLimits::unlimited().with_domain(Domain::Execution, 16 << 20),
    );
    let huge = [
        ("start", scalar(0.0)),
        ("limit", scalar((1u32 << 27) as f32)),
        ("delta", scalar(1.0)),
    ];
    let err = run_session(&s, &huge).unwrap_err();
    assert_nothing_large_was_allocated();
    assert_execution_over_budget(&err);
    let short = [
        ("start", scalar(0.0)),
        ("limit", scalar(3.0)),
        ("delta", scalar(0.5)),
    ];
    let out = run_session(&s, &short).unwrap();
    let onnx_prepared_kernels::DataRef::F32(y) = out[0].data() else {
        panic!("Range of f32 gave {:?}", out[0].dtype());
    };
    assert_eq!(y, &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
}

/// A value folded at lowering (a shape computed from an input's shape) is
/// checked before it is allocated.
#[test]
fn a_huge_value_folded_at_lowering_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // big = ConstantOfShape(Concat(Shape(x), Shape(x))): [n, n] for x: [n].
    let path = write_model(
        dir.path(),
        vec![
            node("Shape", &["x"], "s", vec![]),
            node("Concat", &["s", "s"], "ss", vec![int_attr("axis", 0)]),
            node("ConstantOfShape", &["ss"], "y", vec![]),
        ],
        vec![],
        vec![value("x", 1, Some(&[Err("n")]))],
        vec![value("y", 1, None)],
    );
    let n = 1 << 21;
    let inputs = [("x", Tensor::from_f32(vec![n], vec![0.0; n]).unwrap())];
    let s = session(&path, BudgetLimits::unlimited());
    let err = run_session(&s, &inputs).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Budget, "{err}");
    let err = run_direct(&path, &inputs).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Budget, "{err}");
    let small = [("x", Tensor::from_f32(vec![3], vec![0.0; 3]).unwrap())];
    assert_eq!(run_session(&s, &small).unwrap()[0].shape(), &[3, 3]);
}

/// A 40-input `Concat` and a 40-input `Max` (more operands than any fixed
/// array of the replay loop held) run through the session and direct
/// replay, twice each (the second run replays the kept lowering).
#[test]
fn nodes_with_forty_inputs_run() {
    const N: usize = 40;
    let names: Vec<String> = (0..N).map(|i| format!("x{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(
        dir.path(),
        vec![
            node("Concat", &refs, "cat", vec![int_attr("axis", 0)]),
            node("Max", &refs, "max", vec![]),
        ],
        vec![],
        names.iter().map(|n| value(n, 1, Some(&[Ok(2)]))).collect(),
        vec![value("cat", 1, None), value("max", 1, None)],
    );
    let inputs: Vec<(&str, Tensor)> = refs
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let v = i as f32;
            (*n, Tensor::from_f32(vec![2], vec![v, -v]).unwrap())
        })
        .collect();
    let cat: Vec<f32> = (0..N).flat_map(|i| [i as f32, -(i as f32)]).collect();
    let s = session(&path, BudgetLimits::unlimited());
    for _ in 0..2 {
        let out = run_session(&s, &inputs).unwrap();
        assert_eq!(out[0].as_f32().unwrap(), cat.as_slice());
        assert_eq!(out[1].as_f32().unwrap(), &[(N - 1) as f32, 0.0]);
        assert_eq!(run_direct(&path, &inputs).unwrap(), out);
    }
}

/// Kernel temporaries are charged with the activation buffers: `Gemm` with
/// `transA` copies `A` transposed while it runs, so a budget that holds the
/// buffers (A, B, Y: about 4 MiB) but not the copy as well is refused
/// before the run, and a budget that holds both runs.
#[test]
fn kernel_temporaries_are_charged_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(
        dir.path(),
        vec![node("Gemm", &["a", "b"], "y", vec![int_attr("transA", 1)])],
        vec![],
        vec![
            value("a", 1, Some(&[Ok(1024), Ok(1024)])),
            value("b", 1, Some(&[Ok(1024), Ok(1)])),
        ],
        vec![value("y", 1, None)],
    );
    let k = 1024;
    let inputs = [
        ("a", Tensor::from_f32(vec![k, k], vec![0.5; k * k]).unwrap()),
        ("b", Tensor::from_f32(vec![k, 1], vec![2.0; k]).unwrap()),
    ];
    let budget = |mib: usize| BudgetLimits::unlimited().with_domain(Domain::Execution, mib << 20);
    let tight = session(&path, budget(6));
    let Err(err) = run_session(&tight, &inputs) else {
        panic!("a budget without room for the transposed copy ran");
    };
    assert_execution_over_budget(&err);
    let roomy = session(&path, budget(10));
    let y = run_session(&roomy, &inputs).unwrap();
    assert!(y[0].as_f32().unwrap().iter().all(|&v| v == 1024.0));
}
