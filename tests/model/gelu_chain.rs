//! Gelu written out as `Div/Mul -> Erf -> Add -> Mul -> Mul` resolves to
//! one Gelu with the exact Gelu's values; a chain with another constant
//! stays as written.

use crate::support;

use onnx_prepared::model::proto::{
    GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
};
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::{DataRef, Tensor};

const N: usize = 300;

fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        name: Some(output.into()),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

fn scalar(name: &str, v: f32) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(1),
        float_data: vec![v],
        ..Default::default()
    }
}

/// `x * (1 + erf(x / c)) * 0.5` (`half_first`: `(x * 0.5) * (1 + erf(x *
/// (1 / c)))`).
fn model(c: f32, half_first: bool) -> ModelProto {
    let nodes = if half_first {
        vec![
            node("Mul", &["x", "half"], "h"),
            node("Mul", &["inv", "x"], "s"),
            node("Erf", &["s"], "e"),
            node("Add", &["one", "e"], "p"),
            node("Mul", &["h", "p"], "y"),
        ]
    } else {
        vec![
            node("Div", &["x", "c"], "s"),
            node("Erf", &["s"], "e"),
            node("Add", &["e", "one"], "p"),
            node("Mul", &["x", "p"], "m"),
            node("Mul", &["m", "half"], "y"),
        ]
    };
    let value = |name: &str| support::tensor_value(name, 1, Some(&support::fixed(&[N as i64])));
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            node: nodes,
            initializer: vec![
                scalar("c", c),
                scalar("inv", 1.0 / c),
                scalar("one", 1.0),
                scalar("half", 0.5),
            ],
            input: vec![value("x")],
            output: vec![value("y")],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn an_erf_chain_resolves_to_one_gelu() {
    for (c, half_first, fused) in [
        (std::f32::consts::SQRT_2, false, true),
        (std::f32::consts::SQRT_2, true, true),
        (2.0, false, false),
    ] {
        let dir = support::tempdir();
        let path = dir.path().join("gelu.onnx");
        std::fs::write(&path, model(c, half_first).encode_to_vec()).unwrap();
        let resolved =
            ResolvedModel::resolve(Model::open(&path).unwrap(), &ResolveOptions::default())
                .unwrap();
        let ops: Vec<&str> = resolved.nodes().iter().map(|n| n.op.name()).collect();
        if fused {
            assert_eq!(ops, ["Gelu"], "half first {half_first}");
        } else {
            assert!(ops.contains(&"Erf") && !ops.contains(&"Gelu"), "{ops:?}");
        }
        let session = RuntimeSession::new(
            PreparedExecutionPlan::build(resolved).unwrap(),
            SessionOptions::default(),
        )
        .unwrap();
        let x: Vec<f32> = (0..N).map(|i| (i as f32 - 150.0) * 0.05).collect();
        let mut ctx = RuntimeContext::new(&session);
        ctx.set_input("x", Tensor::from_f32(vec![N], x.clone()).unwrap())
            .unwrap();
        let ctx = session.run(ctx).map_err(|e| e.error).unwrap();
        let DataRef::F32(y) = ctx.output("y").unwrap().data() else {
            panic!("f32 output")
        };
        for (&x, &y) in x.iter().zip(y) {
            let x = x as f64;
            let want = 0.5 * x * (1.0 + erf(x / c as f64));
            // Fused: the f32 Gelu kernel's own accuracy (its tail is
            // computed from erfc, a few ulp). Unfused: `1 + erf` cancels
            // in f32 on the negative side, an absolute error.
            let tolerance = if fused {
                1e-5 * want.abs() + 1e-9
            } else {
                1e-6
            };
            assert!(
                (y as f64 - want).abs() <= tolerance,
                "c {c}, half first {half_first}: gelu({x}) = {y}, want {want}"
            );
        }
    }
}

/// `erf` in f64 (Abramowitz and Stegun 7.1.26 is too coarse here): the
/// Maclaurin series below 3, `1 - erfc` from its continued fraction above.
fn erf(x: f64) -> f64 {
    let a = x.abs();
    let v = if a < 3.0 {
        let (mut term, mut sum, mut n) = (a, a, 0.0);
        while term.abs() > 1e-17 * sum.abs() {
            n += 1.0;
            term *= -a * a / n;
            sum += term / (2.0 * n + 1.0);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(a) = exp(-a^2) / sqrt(pi) / (a + 1/2 / (a + 1 / (a + 3/2 / (a + ...))))
        let mut f = a;
        for k in (1..60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    };
    v.copysign(x)
}
