//! Parameterized activations and global pools: values at points where each formula is
//! exact by hand, the ONNX defaults of every attribute, and refusals.

mod math_util;

use math_util::*;
use onnx_prepared_kernels::KernelError;

fn run(node: Node, x: &[f32]) -> Vec<f32> {
    node.run1(&[var(f32t(&[x.len()], x))])
        .unwrap()
        .as_f32()
        .unwrap()
        .to_vec()
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{got:?} != {want:?}"
        );
    }
}

#[test]
fn piecewise_linear_activations_and_their_defaults() {
    let x = [-3.0, -1.0, 0.0, 0.25, 2.0, 4.0];
    close(
        &run(Node::new("LeakyRelu", 16), &x),
        &[-0.03, -0.01, 0.0, 0.25, 2.0, 4.0],
    );
    close(
        &run(Node::new("LeakyRelu", 16).float("alpha", 0.5), &x),
        &[-1.5, -0.5, 0.0, 0.25, 2.0, 4.0],
    );
    // HardSigmoid: clamp(0.2 x + 0.5); HardSwish: x * clamp(x / 6 + 0.5).
    close(
        &run(Node::new("HardSigmoid", 6), &x),
        &[0.0, 0.3, 0.5, 0.55, 0.9, 1.0],
    );
    close(
        &run(Node::new("HardSwish", 14), &x),
        &[
            0.0,
            -1.0 / 3.0,
            0.0,
            0.25 * (0.25 / 6.0 + 0.5),
            2.0 * (2.0 / 6.0 + 0.5),
            4.0,
        ],
    );
    close(
        &run(Node::new("ThresholdedRelu", 10), &x),
        &[0.0, 0.0, 0.0, 0.0, 2.0, 4.0],
    );
    close(
        &run(
            Node::new("Shrink", 9)
                .float("bias", 1.0)
                .float("lambd", 1.5),
            &x,
        ),
        &[-2.0, 0.0, 0.0, 0.0, 1.0, 3.0],
    );
    close(
        &run(Node::new("Softsign", 1), &x),
        &[-0.75, -0.5, 0.0, 0.2, 2.0 / 3.0, 0.8],
    );
}

#[test]
fn exponential_activations_match_their_formulas() {
    let x = [-2.0f32, -0.5, 0.0, 1.5];
    let want = |f: &dyn Fn(f64) -> f64| -> Vec<f32> {
        x.iter().map(|&v| f(f64::from(v)) as f32).collect()
    };
    close(
        &run(Node::new("Elu", 6), &x),
        &want(&|v| if v < 0.0 { v.exp() - 1.0 } else { v }),
    );
    let (a, g) = (1.673_263_192_176_818_8, 1.050_701_022_148_132_3);
    close(
        &run(Node::new("Selu", 6), &x),
        &want(&|v| {
            if v <= 0.0 {
                g * (a * v.exp() - a)
            } else {
                g * v
            }
        }),
    );
    close(
        &run(Node::new("Celu", 12).float("alpha", 2.0), &x),
        &want(&|v| v.max(0.0) + (2.0 * ((v / 2.0).exp() - 1.0)).min(0.0)),
    );
    close(
        &run(Node::new("Softplus", 1), &x),
        &want(&|v| (1.0 + v.exp()).ln()),
    );
    close(
        &run(Node::new("Mish", 18), &x),
        &want(&|v| v * (1.0 + v.exp()).ln().tanh()),
    );
    // Softplus of a large input neither overflows nor loses it.
    assert_eq!(run(Node::new("Softplus", 1), &[100.0]), [100.0]);
}

#[test]
fn integer_inputs_and_a_zero_celu_alpha_are_refused() {
    let err = Node::new("HardSwish", 14)
        .run1(&[var(i64t(&[2], &[1, 2]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::UnsupportedType { .. }), "{err}");
    let err = Node::new("Celu", 12)
        .float("alpha", 0.0)
        .build(1)
        .unwrap_err();
    assert!(err.to_string().contains("alpha"), "{err}");
}

#[test]
fn global_pools_reduce_each_channel_to_one_value() {
    // [N=1, C=2, 2, 3]: channel 0 is 0..6, channel 1 is -6..0.
    let x: Vec<f32> = (0..6)
        .map(|v| v as f32)
        .chain((-6..0).map(|v| v as f32))
        .collect();
    for (op, want) in [
        ("GlobalAveragePool", [2.5, -3.5]),
        ("GlobalMaxPool", [5.0, -1.0]),
    ] {
        let y = Node::new(op, 1)
            .run1(&[var(f32t(&[1, 2, 2, 3], &x))])
            .unwrap();
        assert_eq!(y.shape(), [1, 2, 1, 1], "{op}");
        assert_eq!(y.as_f32().unwrap(), want, "{op}");
    }
    let err = Node::new("GlobalMaxPool", 1)
        .run1(&[var(f32t(&[2, 3], &[0.0; 6]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err}");
}
