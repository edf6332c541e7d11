//! Graph outputs that are external initializers: the weight is in the
//! payload manifest and every way of running returns its values —
//! streaming, after `prepare`, and direct replay.

use crate::support;

use onnx_prepared::exec::{DirectReplay, DirectReplayOptions};
use onnx_prepared::model::proto::tensor_proto::DataLocation;
use onnx_prepared::model::proto::{
    GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto, ValueInfoProto,
};
use onnx_prepared::model::{FileSource, Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::Tensor;
use std::sync::Arc;

const W: [f32; 6] = [1.5, -2.0, 0.25, 8.0, -0.5, 3.0];

fn value(name: &str) -> ValueInfoProto {
    support::tensor_value(name, 1, None)
}

/// How the graph holds the external weight output `w`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// No nodes and no inputs: `w` is the only output.
    Alone,
    /// `y = Relu(x)`, outputs `y` and `w`.
    Beside,
    /// Also `z = Add(x, w)`, a third output.
    Used,
}

const SHAPES: [Shape; 3] = [Shape::Alone, Shape::Beside, Shape::Used];

/// The model of `shape`, with `w` (`[2, 3]`) in `w.bin`.
fn write_model(dir: &std::path::Path, shape: Shape) -> std::path::PathBuf {
    let used = shape == Shape::Used;
    let bytes: Vec<u8> = W.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("w.bin"), &bytes).unwrap();
    let mut node = vec![NodeProto {
        op_type: Some("Relu".into()),
        input: vec!["x".into()],
        output: vec!["y".into()],
        ..Default::default()
    }];
    let mut output = vec![value("y"), value("w")];
    let mut input = vec![value("x")];
    if shape == Shape::Alone {
        node.clear();
        output.remove(0);
        input.clear();
    }
    if used {
        node.push(NodeProto {
            op_type: Some("Add".into()),
            input: vec!["x".into(), "w".into()],
            output: vec!["z".into()],
            ..Default::default()
        });
        output.push(value("z"));
    }
    let model = ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            node,
            initializer: vec![TensorProto {
                name: Some("w".into()),
                data_type: Some(1),
                dims: vec![2, 3],
                data_location: Some(DataLocation::External as i32),
                external_data: vec![StringStringEntryProto {
                    key: Some("location".into()),
                    value: Some("w.bin".into()),
                }],
                ..Default::default()
            }],
            input,
            output,
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("m.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

fn x() -> Tensor {
    Tensor::from_f32(vec![2, 3], vec![-1.0, 2.0, -3.0, 4.0, -5.0, 6.0]).unwrap()
}

fn expected(shape: Shape) -> Vec<(String, Tensor)> {
    let used = shape == Shape::Used;
    let x = x();
    let xs = x.as_f32().unwrap();
    let mut out = vec![
        (
            "y".to_owned(),
            Tensor::from_f32(vec![2, 3], xs.iter().map(|v| v.max(0.0)).collect()).unwrap(),
        ),
        (
            "w".to_owned(),
            Tensor::from_f32(vec![2, 3], W.to_vec()).unwrap(),
        ),
    ];
    if shape == Shape::Alone {
        out.remove(0);
    }
    if used {
        out.push((
            "z".to_owned(),
            Tensor::from_f32(vec![2, 3], xs.iter().zip(W).map(|(a, b)| a + b).collect()).unwrap(),
        ));
    }
    out
}

fn session(path: &std::path::Path) -> RuntimeSession {
    let resolved =
        ResolvedModel::resolve(Model::open(path).unwrap(), &ResolveOptions::default()).unwrap();
    let w = resolved.model().weight_by_name("w").unwrap().id();
    assert!(
        resolved.manifest().contains(w),
        "w is in the payload manifest"
    );
    RuntimeSession::new(
        PreparedExecutionPlan::build(resolved).unwrap(),
        SessionOptions::default(),
    )
    .unwrap()
}

fn run(session: &RuntimeSession, shape: Shape) -> Vec<(String, Tensor)> {
    let mut ctx = RuntimeContext::new(session);
    if shape != Shape::Alone {
        ctx.set_input("x", x()).unwrap();
    }
    let mut ctx = session.run(ctx).unwrap();
    ctx.take_outputs()
}

#[test]
fn an_external_weight_output_streams() {
    for shape in SHAPES {
        let dir = support::tempdir();
        let path = write_model(dir.path(), shape);
        let s = session(&path);
        assert_eq!(run(&s, shape), expected(shape), "cold, {shape:?}");
        assert_eq!(run(&s, shape), expected(shape), "second run, {shape:?}");
    }
}

#[test]
fn an_external_weight_output_runs_after_prepare() {
    for shape in SHAPES {
        let dir = support::tempdir();
        let path = write_model(dir.path(), shape);
        let s = session(&path);
        s.prepare().unwrap();
        assert!(s.is_hot());
        assert_eq!(run(&s, shape), expected(shape), "hot, {shape:?}");
    }
}

#[test]
fn an_external_weight_output_runs_in_direct_replay() {
    for shape in SHAPES {
        let dir = support::tempdir();
        let path = write_model(dir.path(), shape);
        let model = Model::open(&path).unwrap();
        let source = FileSource::open(&model).unwrap();
        let mut replay =
            DirectReplay::new(&model, Arc::new(source), DirectReplayOptions::default()).unwrap();
        let x = x();
        let inputs: &[(&str, &Tensor)] = if shape == Shape::Alone {
            &[]
        } else {
            &[("x", &x)]
        };
        assert_eq!(replay.run(inputs).unwrap(), expected(shape), "{shape:?}");
    }
}
