//! The session's hot path against `DirectReplay`, same process, same
//! inputs, same thread budget (the goal: ≤ 2 % on tiny-llm decode, ≤ 5 % on
//! many-small-nodes).
//!
//! * `hot_path/<model>/direct`: `DirectReplay::run` with 2 threads (the
//!   caller plus one helper of its own pool).
//! * `hot_path/<model>/session`: `RuntimeSession::run` on a prepared session
//!   with one CPU worker: the caller runs the continuation (protocol "help")
//!   and the worker helps its kernels — the same two threads. Each
//!   iteration is one whole run: readiness-epoch check, run-level guard,
//!   replay, outputs.
//!
//! * `hot_path/<model>/session_async`: `run_async(ctx).wait()` on the same
//!   session (a submission handed to the CPU worker, the caller parked).
//!
//! Models: tiny-llm decode (T = 1 after P = 128), many-small-nodes
//! (1,000 small Gemm/Add/Mul nodes on a [1, 16] value) and one-node (one
//! Relu on a [1, 16] value: the fixed cost of a run). Setup (open, prepare,
//! first run) is outside the measured loop.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use onnx_prepared::exec::{DirectReplay, DirectReplayOptions};
use onnx_prepared::model::{FileSource, Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::Tensor;

fn decode_inputs() -> Vec<(String, Tensor)> {
    let (t, p) = (1usize, 128usize);
    let mut v = vec![
        (
            "input_ids".to_owned(),
            Tensor::from_i64(vec![1, t], vec![42]).unwrap(),
        ),
        (
            "attn_bias".to_owned(),
            Tensor::from_f32(vec![1, 1, t, p + t], vec![0.0; p + t]).unwrap(),
        ),
    ];
    for b in 0..4 {
        for kv in ["key", "value"] {
            let values = (0..8 * p * 64).map(|i| (i % 17) as f32 * 0.01).collect();
            v.push((
                format!("past_{kv}_{b}"),
                Tensor::from_f32(vec![1, 8, p, 64], values).unwrap(),
            ));
        }
    }
    v
}

fn many_inputs() -> Vec<(String, Tensor)> {
    vec![(
        "x".to_owned(),
        Tensor::from_f32(vec![1, 16], (0..16).map(|i| i as f32 * 0.1).collect()).unwrap(),
    )]
}

/// A model of one Relu on `x: f32[1, 16]`, written into `dir`.
fn one_node(dir: &std::path::Path) -> std::path::PathBuf {
    use onnx_prepared::model::proto::tensor_proto::DataType;
    use onnx_prepared::model::proto::{
        GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto,
        TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
    };
    let value = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto {
                    dim: [1, 16]
                        .map(|d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .to_vec(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("one-node".into()),
            node: vec![NodeProto {
                op_type: Some("Relu".into()),
                input: vec!["x".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![value("x")],
            output: vec![value("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("one-node.onnx");
    std::fs::write(&path, model.encode_to_vec()).expect("writes");
    path
}

fn hot_path(c: &mut Criterion) {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let scratch = tempfile::tempdir().expect("tempdir");
    let one = one_node(scratch.path());
    let mut group = c.benchmark_group("hot_path");
    for (name, inputs) in [
        ("tiny-llm", decode_inputs()),
        ("many-small-nodes", many_inputs()),
        ("one-node", many_inputs()),
    ] {
        let path = match name {
            "one-node" => one.clone(),
            _ => dir.join(format!("{name}.onnx")),
        };
        let model = Model::open(path).expect("opens");
        let refs: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();

        let source = FileSource::open(&model).expect("source");
        let mut direct = DirectReplay::new(
            &model,
            Arc::new(source),
            DirectReplayOptions {
                threads: 2,
                ..DirectReplayOptions::default()
            },
        )
        .expect("direct");
        let expected = direct.run(&refs).expect("runs");

        let resolved =
            ResolvedModel::resolve(model.clone(), &ResolveOptions::default()).expect("resolves");
        let plan = PreparedExecutionPlan::build(resolved).expect("plan");
        let session = RuntimeSession::new(
            plan,
            SessionOptions::default()
                .with_cpu_workers(1)
                .with_io_workers(1),
        )
        .expect("session");
        session.prepare().expect("prepares");
        let mut ctx = RuntimeContext::new(&session);
        for (n, t) in &inputs {
            ctx.set_input(n, t.clone()).expect("input");
        }
        let mut ctx = Some(session.run(ctx).expect("runs"));
        assert_eq!(ctx.as_ref().unwrap().outputs(), expected.as_slice());
        assert!(session.is_hot());

        group.bench_function(format!("{name}/direct"), |b| {
            b.iter(|| black_box(direct.run(&refs).expect("runs")))
        });
        group.bench_function(format!("{name}/session"), |b| {
            b.iter(|| {
                let done = session.run(ctx.take().unwrap()).expect("runs");
                black_box(done.outputs());
                ctx = Some(done);
            })
        });
        group.bench_function(format!("{name}/session_async"), |b| {
            b.iter(|| {
                let done = session.run_async(ctx.take().unwrap()).wait().expect("runs");
                black_box(done.outputs());
                ctx = Some(done);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
