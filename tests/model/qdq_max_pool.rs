//! `DequantizeLinear -> MaxPool -> QuantizeLinear` with the same scale and
//! zero point on both sides runs as one MaxPool on the 8-bit values, with
//! the values of the float chain; with another scale after it, the chain
//! stays as written.

use crate::support;

use onnx_prepared::model::proto::{
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    attribute_proto,
};
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::{DataRef, Tensor, TensorData};

const H: usize = 9;
const W: usize = 10;

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(attribute_proto::AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn scalar(name: &str, data_type: i32, raw: Vec<u8>) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(data_type),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

fn model(out_scale: f32) -> ModelProto {
    let node = |op: &str, input: &[&str], output: &str| NodeProto {
        name: Some(output.into()),
        op_type: Some(op.into()),
        input: input.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    };
    let mut pool = node("MaxPool", &["xf"], "pf");
    pool.attribute = vec![
        ints("kernel_shape", &[3, 3]),
        ints("strides", &[2, 2]),
        ints("pads", &[1, 1, 1, 1]),
    ];
    let value =
        |name: &str, dims: &[i64]| support::tensor_value(name, 2, Some(&support::fixed(dims)));
    let (oh, ow) = (H.div_ceil(2), W / 2);
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            node: vec![
                node("DequantizeLinear", &["x", "s", "z"], "xf"),
                pool,
                node("QuantizeLinear", &["pf", "s2", "z"], "y"),
            ],
            initializer: vec![
                scalar("s", 1, 0.05f32.to_le_bytes().to_vec()),
                scalar("s2", 1, out_scale.to_le_bytes().to_vec()),
                scalar("z", 2, vec![17]),
            ],
            input: vec![value("x", &[1, 2, H as i64, W as i64])],
            output: vec![value("y", &[1, 2, oh as i64, ow as i64])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_max_pool_between_equal_qdq_pairs_runs_on_the_8_bit_values() {
    for out_scale in [0.05f32, 0.1] {
        let dir = support::tempdir();
        let path = dir.path().join("pool.onnx");
        std::fs::write(&path, model(out_scale).encode_to_vec()).unwrap();
        let resolved =
            ResolvedModel::resolve(Model::open(&path).unwrap(), &ResolveOptions::default())
                .unwrap();
        let ops: Vec<&str> = resolved.nodes().iter().map(|n| n.op.name()).collect();
        if out_scale == 0.05 {
            assert_eq!(ops, ["MaxPool"]);
        } else {
            assert_eq!(ops, ["DequantizeLinear", "MaxPool", "QuantizeLinear"]);
        }
        let session = RuntimeSession::new(
            PreparedExecutionPlan::build(resolved).unwrap(),
            SessionOptions::default(),
        )
        .unwrap();
        let x: Vec<u8> = (0..2 * H * W).map(|i| (i * 89 % 256) as u8).collect();
        let mut ctx = RuntimeContext::new(&session);
        ctx.set_input(
            "x",
            Tensor::new(vec![1, 2, H, W], TensorData::U8(x.clone())).unwrap(),
        )
        .unwrap();
        let ctx = session.run(ctx).map_err(|e| e.error).unwrap();
        let DataRef::U8(y) = ctx.output("y").unwrap().data() else {
            panic!("uint8 output")
        };
        // Reference: the float chain, the window's maximum of the
        // dequantized values requantized.
        let (oh, ow) = (H.div_ceil(2), W / 2);
        for c in 0..2 {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut m = f32::NEG_INFINITY;
                    for a in 0..3 {
                        for b in 0..3 {
                            let (iy, ix) = ((oy * 2 + a) as isize - 1, (ox * 2 + b) as isize - 1);
                            if (0..H as isize).contains(&iy) && (0..W as isize).contains(&ix) {
                                let v = x[(c * H + iy as usize) * W + ix as usize] as f32;
                                m = m.max((v - 17.0) * 0.05);
                            }
                        }
                    }
                    let want = ((m / out_scale).round_ties_even() + 17.0).clamp(0.0, 255.0) as u8;
                    assert_eq!(
                        y[(c * oh + oy) * ow + ox],
                        want,
                        "scale {out_scale}, ({c}, {oy}, {ox})"
                    );
                }
            }
        }
    }
}
