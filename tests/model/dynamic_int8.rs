//! `quantize_dynamic`'s product chain (`DynamicQuantizeLinear ->
//! MatMulInteger -> Cast -> Mul(x_scale * w_scale) [-> Add(bias)]`)
//! resolves to one MatMulIntegerToFloat, and its output is the chain's
//! value computed here in f64 from the quantized operands; a chain whose
//! intermediate value is read elsewhere stays as it is.

use crate::support;

use onnx_prepared::model::proto::{
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto, attribute_proto,
};
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::{DataRef, Tensor};

const M: usize = 5;
const K: usize = 24;
const N: usize = 40;

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        name: Some(format!("{op}_{}", outputs[0])),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    support::tensor_value(name, 1, Some(&support::fixed(dims)))
}

fn w(i: usize) -> i8 {
    ((i * 37 + i / 7) % 255) as i8
}

fn w_scale(n: usize) -> f32 {
    0.002 + n as f32 * 0.0001
}

fn bias(n: usize) -> f32 {
    n as f32 * 0.25 - 3.0
}

/// The chain; `with_bias` ends it in an Add, `leak` also makes the Cast's
/// output a graph output (so the chain cannot be fused).
fn model(with_bias: bool, leak: bool) -> ModelProto {
    let mut cast = node("Cast", &["i32"], &["f"]);
    cast.attribute.push(AttributeProto {
        name: Some("to".into()),
        r#type: Some(attribute_proto::AttributeType::Int as i32),
        i: Some(1),
        ..Default::default()
    });
    let mut nodes = vec![
        node("DynamicQuantizeLinear", &["x"], &["xq", "xs", "xz"]),
        node("Mul", &["xs", "ws"], &["s"]),
        node("MatMulInteger", &["xq", "wq", "xz"], &["i32"]),
        cast,
        node("Mul", &["f", "s"], &["scaled"]),
    ];
    let mut outputs = vec![value(
        if with_bias { "y" } else { "scaled" },
        &[M as i64, N as i64],
    )];
    if with_bias {
        nodes.push(node("Add", &["bias", "scaled"], &["y"]));
    }
    if leak {
        outputs.push(value("f", &[M as i64, N as i64]));
    }
    let init = vec![
        TensorProto {
            name: Some("wq".into()),
            dims: vec![K as i64, N as i64],
            data_type: Some(3),
            raw_data: Some((0..K * N).map(|i| w(i) as u8).collect::<Vec<u8>>().into()),
            ..Default::default()
        },
        TensorProto {
            name: Some("ws".into()),
            dims: vec![N as i64],
            data_type: Some(1),
            float_data: (0..N).map(w_scale).collect(),
            ..Default::default()
        },
        TensorProto {
            name: Some("bias".into()),
            dims: vec![N as i64],
            data_type: Some(1),
            float_data: (0..N).map(bias).collect(),
            ..Default::default()
        },
    ];
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: init,
            input: vec![value("x", &[M as i64, K as i64])],
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn dynamic_products_resolve_to_matmul_integer_to_float() {
    for (with_bias, leak) in [(true, false), (false, false), (true, true)] {
        let dir = support::tempdir();
        let path = dir.path().join("dynamic.onnx");
        std::fs::write(&path, model(with_bias, leak).encode_to_vec()).unwrap();
        let resolved =
            ResolvedModel::resolve(Model::open(&path).unwrap(), &ResolveOptions::default())
                .unwrap();
        let ops: Vec<&str> = resolved.nodes().iter().map(|n| n.op.name()).collect();
        if leak {
            assert!(ops.contains(&"MatMulInteger"), "{ops:?}");
            assert!(!ops.contains(&"MatMulIntegerToFloat"), "{ops:?}");
        } else {
            // The scales' Mul is read by the chain alone: it goes too.
            assert_eq!(
                ops,
                ["DynamicQuantizeLinear", "MatMulIntegerToFloat"],
                "bias {with_bias}"
            );
        }

        let session = RuntimeSession::new(
            PreparedExecutionPlan::build(resolved).unwrap(),
            SessionOptions::default(),
        )
        .unwrap();
        let x: Vec<f32> = (0..M * K)
            .map(|i| ((i * 53 % 97) as f32 - 40.0) / 13.0)
            .collect();
        let mut ctx = RuntimeContext::new(&session);
        ctx.set_input("x", Tensor::from_f32(vec![M, K], x.clone()).unwrap())
            .unwrap();
        let ctx = session.run(ctx).map_err(|e| e.error).unwrap();
        let out = if with_bias { "y" } else { "scaled" };
        let DataRef::F32(y) = ctx.output(out).unwrap().data() else {
            panic!("f32 output")
        };

        // Reference: ONNX's DynamicQuantizeLinear (range including 0, uint8,
        // zero point rounded half to even), the exact integer product, then
        // scale and bias.
        let lo = x.iter().fold(0f32, |a, &v| a.min(v));
        let hi = x.iter().fold(0f32, |a, &v| a.max(v));
        let xs = (hi - lo) / 255.0;
        let xz = (-lo / xs).round_ties_even().clamp(0.0, 255.0) as i32;
        let xq: Vec<i32> = x
            .iter()
            .map(|&v| ((v / xs).round_ties_even() as i32 + xz).clamp(0, 255))
            .collect();
        let mut worst = 0f64;
        for m in 0..M {
            for n in 0..N {
                let acc: i64 = (0..K)
                    .map(|k| (xq[m * K + k] - xz) as i64 * w(k * N + n) as i64)
                    .sum();
                let mut want = acc as f64 * xs as f64 * w_scale(n) as f64;
                if with_bias {
                    want += bias(n) as f64;
                }
                let got = y[m * N + n] as f64;
                worst = worst.max((got - want).abs() / want.abs().max(1.0));
            }
        }
        assert!(
            worst < 1e-5,
            "bias {with_bias}, leak {leak}: worst relative error {worst}"
        );
    }
}
