//! The QDQ 4-bit MatMul pattern (`DequantizeLinear(INT4/UINT4 [K, N],
//! axis 0, blocked) -> MatMul`) on a weight large enough to be a prepared
//! object: it becomes one object in the MatMulNBits layout, and the result
//! equals dequantize-then-matmul computed here in f64.

use crate::support;

use onnx_prepared::model::proto::{
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto, attribute_proto,
};
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::{DataRef, Tensor};

const K: usize = 288; // 9 blocks of 32
const N: usize = 480;
const BLOCK: usize = 32;
const M: usize = 3;

fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    support::tensor_value(name, 1, Some(&support::fixed(dims)))
}

/// The 4-bit value of element `i` (in [-8, 7] signed, [0, 15] unsigned).
fn q(i: usize, signed: bool) -> i32 {
    let u = ((i * 7 + i / 13) % 16) as i32;
    if signed { u - 8 } else { u }
}

fn pack4(values: &[i32]) -> Vec<u8> {
    values
        .chunks(2)
        .map(|c| (c[0] as u8 & 0x0f) | ((c.get(1).copied().unwrap_or(0) as u8 & 0x0f) << 4))
        .collect()
}

fn model(signed: bool, zero_points: bool) -> ModelProto {
    let dtype = if signed { 22 } else { 21 };
    let w: Vec<i32> = (0..K * N).map(|i| q(i, signed)).collect();
    let blocks = K / BLOCK;
    let scales: Vec<f32> = (0..blocks * N)
        .map(|i| 0.01 + (i % 11) as f32 * 0.003)
        .collect();
    let zp: Vec<i32> = (0..blocks * N).map(|i| q(i * 5 + 1, signed)).collect();
    let mut init = vec![
        TensorProto {
            name: Some("w".into()),
            dims: vec![K as i64, N as i64],
            data_type: Some(dtype),
            raw_data: Some(pack4(&w).into()),
            ..Default::default()
        },
        TensorProto {
            name: Some("scale".into()),
            dims: vec![blocks as i64, N as i64],
            data_type: Some(1),
            float_data: scales,
            ..Default::default()
        },
    ];
    let mut dq_inputs = vec!["w".to_owned(), "scale".to_owned()];
    if zero_points {
        init.push(TensorProto {
            name: Some("zp".into()),
            dims: vec![blocks as i64, N as i64],
            data_type: Some(dtype),
            raw_data: Some(pack4(&zp).into()),
            ..Default::default()
        });
        dq_inputs.push("zp".into());
    }
    ModelProto {
        ir_version: Some(11),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            node: vec![
                NodeProto {
                    name: Some("dq".into()),
                    op_type: Some("DequantizeLinear".into()),
                    input: dq_inputs,
                    output: vec!["wf".into()],
                    attribute: vec![int_attr("axis", 0), int_attr("block_size", BLOCK as i64)],
                    ..Default::default()
                },
                NodeProto {
                    name: Some("mm".into()),
                    op_type: Some("MatMul".into()),
                    input: vec!["a".into(), "wf".into()],
                    output: vec!["y".into()],
                    ..Default::default()
                },
            ],
            initializer: init,
            input: vec![value("a", &[M as i64, K as i64])],
            output: vec![value("y", &[M as i64, N as i64])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn qdq_weights_become_prepacked_objects() {
    for (signed, zero_points) in [(true, false), (true, true), (false, true), (false, false)] {
        let dir = support::tempdir();
        let path = dir.path().join("qdq.onnx");
        std::fs::write(&path, model(signed, zero_points).encode_to_vec()).unwrap();
        let resolved =
            ResolvedModel::resolve(Model::open(&path).unwrap(), &ResolveOptions::default())
                .unwrap();
        assert_eq!(resolved.nodes().len(), 1, "the pair is one node");
        let layouts: Vec<&str> = resolved
            .requirements()
            .iter()
            .map(|r| r.key.layout.as_str())
            .collect();
        assert_eq!(layouts.len(), 1, "{layouts:?}");
        assert!(layouts[0].starts_with("qdq-"), "{layouts:?}");

        let session = RuntimeSession::new(
            PreparedExecutionPlan::build(resolved).unwrap(),
            SessionOptions::default(),
        )
        .unwrap();
        let a: Vec<f32> = (0..M * K)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let mut ctx = RuntimeContext::new(&session);
        ctx.set_input("a", Tensor::from_f32(vec![M, K], a.clone()).unwrap())
            .unwrap();
        let ctx = session.run(ctx).map_err(|e| e.error).unwrap();
        let DataRef::F32(y) = ctx.output("y").unwrap().data() else {
            panic!("f32 output")
        };

        // Reference: dequantize in f64, then a plain matmul.
        let default_zp = 0;
        let mut max_err = 0f64;
        let mut max_ref = 0f64;
        for m in 0..M {
            for n in 0..N {
                let mut acc = 0f64;
                for k in 0..K {
                    let b = (k / BLOCK) * N + n;
                    let scale = 0.01 + (b % 11) as f64 * 0.003;
                    let zp = if zero_points {
                        q(b * 5 + 1, signed)
                    } else {
                        default_zp
                    };
                    let w = f64::from(q(k * N + n, signed) - zp) * f64::from(scale as f32);
                    acc += f64::from(a[m * K + k]) * w;
                }
                max_err = max_err.max((acc - f64::from(y[m * N + n])).abs());
                max_ref = max_ref.max(acc.abs());
            }
        }
        assert!(
            max_err <= 1e-5 * max_ref,
            "signed {signed} zp {zero_points}: max err {max_err} of {max_ref}"
        );
    }
}
