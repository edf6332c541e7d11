//! Shapes that depend on values: a `Shape -> ... -> Reshape` chain folds per
//! input-shape set, a shape computed from a small graph input keys the
//! lowering by that input's value, and a shape computed from a large one
//! is evaluated during each run. Reshape-like nodes whose input dies
//! there leave their output in the input's buffer without a copy, and a
//! hot run reads the caller's inputs in place.

use crate::support;

use onnx_prepared::Error;
use onnx_prepared::model::proto::{
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto, attribute_proto,
};
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::{Tensor, TensorData};

fn value(name: &str, elem_type: i32) -> ValueInfoProto {
    support::tensor_value(name, elem_type, None)
}

fn node(
    name: &str,
    op: &str,
    inputs: &[&str],
    output: &str,
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        name: Some(name.into()),
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

fn scalar_i64(name: &str, v: i64) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(7),
        int64_data: vec![v],
        ..Default::default()
    }
}

fn session(
    nodes: Vec<NodeProto>,
    init: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    output: &str,
) -> RuntimeSession {
    session_with_outputs(nodes, init, inputs, &[output])
}

fn session_with_outputs(
    nodes: Vec<NodeProto>,
    init: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: &[&str],
) -> RuntimeSession {
    session_with_options(nodes, init, inputs, outputs, SessionOptions::default())
}

fn session_with_options(
    nodes: Vec<NodeProto>,
    init: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: &[&str],
    options: SessionOptions,
) -> RuntimeSession {
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
            output: outputs.iter().map(|o| value(o, 1)).collect(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let dir = support::tempdir();
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let resolved =
        ResolvedModel::resolve(Model::open(&path).unwrap(), &ResolveOptions::default()).unwrap();
    RuntimeSession::new(PreparedExecutionPlan::build(resolved).unwrap(), options).unwrap()
}

fn run(session: &RuntimeSession, inputs: Vec<(&str, Tensor)>) -> Result<Tensor, Error> {
    let mut ctx = RuntimeContext::new(session);
    for (name, t) in inputs {
        ctx.set_input(name, t).unwrap();
    }
    let mut ctx = session.run(ctx).map_err(|e| e.error)?;
    Ok(ctx.take_outputs().remove(0).1)
}

/// `y = Reshape(x, Concat(Shape(x)[0] * Shape(x)[1], -1))` — flattens the
/// first two dims, whatever they are: folded once per shape set.
#[test]
fn shape_chains_fold_for_each_shape_set() {
    let s = session(
        vec![
            node("shape", "Shape", &["x"], "s", vec![]),
            node(
                "g0",
                "Gather",
                &["s", "zero"],
                "d0",
                vec![int_attr("axis", 0)],
            ),
            node(
                "g1",
                "Gather",
                &["s", "one"],
                "d1",
                vec![int_attr("axis", 0)],
            ),
            node("mul", "Mul", &["d0", "d1"], "rows", vec![]),
            node("u", "Unsqueeze", &["rows", "axes0"], "rows1", vec![]),
            node(
                "cat",
                "Concat",
                &["rows1", "minus1"],
                "target",
                vec![int_attr("axis", 0)],
            ),
            node("reshape", "Reshape", &["x", "target"], "y", vec![]),
        ],
        vec![
            scalar_i64("zero", 0),
            scalar_i64("one", 1),
            TensorProto {
                name: Some("axes0".into()),
                dims: vec![1],
                data_type: Some(7),
                int64_data: vec![0],
                ..Default::default()
            },
            TensorProto {
                name: Some("minus1".into()),
                dims: vec![1],
                data_type: Some(7),
                int64_data: vec![-1],
                ..Default::default()
            },
        ],
        vec![value("x", 1)],
        "y",
    );
    for shape in [vec![2, 3, 4], vec![5, 1, 2], vec![1, 7, 3]] {
        let n: usize = shape.iter().product();
        let x = Tensor::from_f32(shape.clone(), (0..n).map(|i| i as f32).collect()).unwrap();
        let y = run(&s, vec![("x", x)]).unwrap();
        assert_eq!(y.shape(), [shape[0] * shape[1], shape[2]]);
        let onnx_prepared_kernels::DataRef::F32(v) = y.data() else {
            panic!()
        };
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as f32));
    }
}

/// `y = Cast(Range(0, n + 1, 1))`: the output length is a value of the
/// input, so each value of `n` gets its own lowering.
#[test]
fn a_small_input_that_decides_a_shape_keys_the_lowering() {
    let s = session(
        vec![
            node("add", "Add", &["n", "one"], "m", vec![]),
            node("range", "Range", &["zero", "m", "one"], "r", vec![]),
            node("cast", "Cast", &["r"], "y", vec![int_attr("to", 1)]),
        ],
        vec![scalar_i64("zero", 0), scalar_i64("one", 1)],
        vec![value("n", 7)],
        "y",
    );
    for n in [3i64, 5, 3, 0] {
        let y = run(&s, vec![("n", Tensor::from_i64(vec![], vec![n]).unwrap())]).unwrap();
        let want: Vec<f32> = (0..=n).map(|i| i as f32).collect();
        assert_eq!(&y.data().to_data(), &TensorData::F32(want), "n = {n}");
    }
}

/// `y = Cast(Range(0, Cast(ReduceSum(v)), 1))` for a 2000-element `v`.
fn range_of_a_sum(options: SessionOptions) -> RuntimeSession {
    session_with_options(
        vec![
            node(
                "sum",
                "ReduceSum",
                &["v"],
                "total",
                vec![int_attr("keepdims", 0)],
            ),
            node("len", "Cast", &["total"], "limit", vec![int_attr("to", 7)]),
            node("range", "Range", &["zero", "limit", "one"], "r", vec![]),
            node("cast", "Cast", &["r"], "y", vec![int_attr("to", 1)]),
        ],
        vec![scalar_i64("zero", 0), scalar_i64("one", 1)],
        vec![value("v", 1)],
        &["y"],
        options,
    )
}

/// `v` of 2000 elements summing to `n`.
fn summing_to(n: usize) -> Tensor {
    let mut v = vec![0.0f32; 2000];
    for x in v.iter_mut().take(n) {
        *x = 1.0;
    }
    Tensor::from_f32(vec![2000], v).unwrap()
}

/// A length computed from a 2000-element input cannot key a lowering: the
/// Range and the Cast after it are late — their shapes are evaluated while
/// the model runs, on every run, and their buffers follow each length,
/// growing and shrinking, in the same lowering.
#[test]
fn a_shape_from_a_large_input_is_evaluated_during_the_run() {
    let s = range_of_a_sum(SessionOptions::default());
    for n in [3usize, 7, 0, 1000, 2] {
        let y = run(&s, vec![("v", summing_to(n))]).unwrap();
        let want: Vec<f32> = (0..n).map(|i| i as f32).collect();
        assert_eq!(y.shape(), &[n], "n = {n}");
        assert_eq!(&y.data().to_data(), &TensorData::F32(want), "n = {n}");
    }
}

/// Late outputs are charged to the session's execution budget as they
/// grow: a run whose late outputs would pass the limit is refused with a
/// typed error, and the next, smaller run succeeds.
#[test]
fn late_outputs_are_charged_to_the_execution_budget() {
    use onnx_prepared::{ArenaError, BudgetLimits, Domain};
    // The static buffers (v, the sum, the length) take about 8 KiB; two
    // late outputs of 1000 elements take 12 KB more.
    let limits = BudgetLimits::unlimited().with_domain(Domain::Execution, 16 * 1024);
    let s = range_of_a_sum(SessionOptions::default().with_budget(limits));
    let y = run(&s, vec![("v", summing_to(10))]).unwrap();
    assert_eq!(y.shape(), &[10]);
    let err = run(&s, vec![("v", summing_to(1000))]).unwrap_err();
    match &err {
        Error::Arena(ArenaError::OverBudget { .. }) => {}
        other => panic!("expected an over-budget refusal, got {other:?}"),
    }
    let y = run(&s, vec![("v", summing_to(5))]).unwrap();
    assert_eq!(
        &y.data().to_data(),
        &TensorData::F32(vec![0., 1., 2., 3., 4.])
    );
}

/// `y = Gather(x, Reshape(NonZero(x > 0), [-1]))`: the positive elements of
/// `x`, whose count only the run knows. Each run sizes the late outputs
/// anew, on one thread and on several, and the static nodes before them
/// keep their buffers.
#[test]
fn nonzero_then_gather_runs_with_a_count_known_only_during_the_run() {
    let zero = TensorProto {
        name: Some("zero".into()),
        data_type: Some(1),
        float_data: vec![0.0],
        ..Default::default()
    };
    for threads in [1, 2] {
        let s = session_with_options(
            vec![
                node("pos", "Greater", &["x", "zero"], "mask", vec![]),
                node("nz", "NonZero", &["mask"], "idx", vec![]),
                node("flat", "Reshape", &["idx", "minus_one"], "at", vec![]),
                node(
                    "pick",
                    "Gather",
                    &["x", "at"],
                    "y",
                    vec![int_attr("axis", 0)],
                ),
            ],
            vec![zero.clone(), ints("minus_one", &[-1])],
            vec![value("x", 1)],
            &["y"],
            SessionOptions::default().with_threads(threads),
        );
        for (seed, positives) in [(1u32, 700usize), (2, 0), (3, 2000), (4, 13)] {
            // 2000 elements (too many to key a lowering by), `positives`
            // of them above zero, at positions spread by the seed.
            let v: Vec<f32> = (0..2000u32)
                .map(|i| {
                    let at = (i.wrapping_mul(2654435761).wrapping_add(seed) % 2000) as usize;
                    if at < positives {
                        i as f32 + 1.0
                    } else {
                        -(i as f32)
                    }
                })
                .collect();
            let want: Vec<f32> = v.iter().copied().filter(|&e| e > 0.0).collect();
            let x = Tensor::from_f32(vec![2000], v).unwrap();
            let y = run(&s, vec![("x", x)]).unwrap();
            assert_eq!(y.shape(), &[want.len()], "threads {threads}, seed {seed}");
            assert_eq!(&y.data().to_data(), &TensorData::F32(want));
        }
    }
}

fn ints(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: vec![v.len() as i64],
        data_type: Some(7),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

/// Reshape, Flatten, Squeeze, Unsqueeze and Identity either copy (their
/// input is read again later, or is a graph input) or hand their input's
/// buffer on under the new shape (their input dies there). Either way the
/// values are the same, the buffer keeps its own shape for its producer in
/// the next run, and a buffer handed on is not given to another value
/// while the view is live (`z = r - Neg(r)` would read `Neg(r)` twice).
#[test]
fn reshape_like_nodes_hand_on_a_dying_buffer_without_changing_values() {
    let s = session(
        vec![
            node("a", "Add", &["x", "x"], "a", vec![]),
            node("r", "Reshape", &["a", "shape64"], "r", vec![]),
            node("n", "Neg", &["r"], "n", vec![]),
            node("z", "Sub", &["r", "n"], "z", vec![]),
            node("f", "Flatten", &["z"], "f", vec![int_attr("axis", 1)]),
            node("u", "Unsqueeze", &["z", "axes0"], "u", vec![]),
            node("s", "Squeeze", &["u", "axes0"], "s", vec![]),
            node("i", "Identity", &["s"], "i", vec![]),
            node("y", "Add", &["i", "f"], "y", vec![]),
            node("r2", "Reshape", &["y", "flat"], "y2", vec![]),
        ],
        vec![
            ints("shape64", &[6, 4]),
            ints("axes0", &[0]),
            ints("flat", &[-1]),
        ],
        vec![value("x", 1)],
        "y2",
    );
    for shape in [vec![2, 3, 4], vec![2, 3, 4], vec![3, 2, 4], vec![1, 6, 4]] {
        let xs: Vec<f32> = (0..24).map(|i| i as f32 * 0.5 - 3.0).collect();
        let x = Tensor::from_f32(shape.clone(), xs.clone()).unwrap();
        let y = run(&s, vec![("x", x)]).unwrap();
        // a = 2x, r = a, n = -2x, z = r - n = 4x, y = z + z = 8x.
        let want: Vec<f32> = xs.iter().map(|v| v * 8.0).collect();
        assert_eq!(y.shape(), [24], "x {shape:?}");
        assert_eq!(y.as_f32(), Some(&want[..]), "x {shape:?}");
    }
}

/// A hot run reads the context's inputs in place (swapped into the
/// lowering for the run) and hands them back unchanged; a graph output
/// that is a graph input makes the run copy its inputs instead, and its
/// value is the run's input, not a previous one.
#[test]
fn hot_runs_read_inputs_in_place_and_give_them_back() {
    let nodes = || vec![node("y", "Add", &["x", "x"], "y", vec![])];
    for outputs in [&["y"][..], &["y", "x"][..]] {
        let s = session_with_outputs(nodes(), vec![], vec![value("x", 1)], outputs);
        s.prepare().unwrap();
        let mut ctx = RuntimeContext::new(&s);
        for (round, shape) in [vec![2, 3], vec![2, 3], vec![3, 2], vec![3, 2]]
            .into_iter()
            .enumerate()
        {
            let xs: Vec<f32> = (0..6).map(|i| (i + 10 * round) as f32).collect();
            ctx.set_input("x", Tensor::from_f32(shape.clone(), xs.clone()).unwrap())
                .unwrap();
            ctx = s.run(ctx).map_err(|e| e.error).unwrap();
            let twice: Vec<f32> = xs.iter().map(|v| v * 2.0).collect();
            assert_eq!(
                ctx.output("y").unwrap().as_f32(),
                Some(&twice[..]),
                "{outputs:?}"
            );
            assert_eq!(ctx.output("y").unwrap().shape(), &shape[..]);
            if outputs.len() == 2 {
                assert_eq!(ctx.output("x").unwrap().as_f32(), Some(&xs[..]));
            }
            let (name, x) = &ctx.inputs()[0];
            assert_eq!((name.as_str(), x.shape()), ("x", &shape[..]));
            assert_eq!(x.as_f32(), Some(&xs[..]), "the input came back");
        }
    }
}

/// Outputs taken after every run (as the Python binding takes them) are
/// the run's own: handed over whole, they keep their values while later
/// runs write fresh buffers.
#[test]
fn outputs_taken_every_run_keep_their_values() {
    let s = session(
        vec![
            node("y", "Add", &["x", "x"], "a", vec![]),
            node("r", "Reshape", &["a", "flat"], "y", vec![]),
        ],
        vec![ints("flat", &[-1])],
        vec![value("x", 1)],
        "y",
    );
    s.prepare().unwrap();
    let mut ctx = RuntimeContext::new(&s);
    let mut taken = Vec::new();
    for round in 0..4 {
        let xs: Vec<f32> = (0..6).map(|i| (i + 100 * round) as f32).collect();
        ctx.set_input("x", Tensor::from_f32(vec![2, 3], xs).unwrap())
            .unwrap();
        ctx = s.run(ctx).map_err(|e| e.error).unwrap();
        taken.push(ctx.take_outputs().remove(0).1);
    }
    for (round, y) in taken.iter().enumerate() {
        let want: Vec<f32> = (0..6).map(|i| 2.0 * (i + 100 * round) as f32).collect();
        assert_eq!(
            (y.shape(), y.as_f32()),
            (&[6][..], Some(&want[..])),
            "run {round}"
        );
    }
}
