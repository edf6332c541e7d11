//! Softmax, RMSNormalization, SimplifiedLayerNormalization and
//! LayerNormalization against naive formulas.

mod basic_util;

use basic_util::*;
use onnx_prepared_kernels::{ElementType, KernelError};

/// Naive softmax along `axis` (opset 13 semantics), in f64.
fn naive_softmax(x: &[f32], shape: &[usize], axis: usize) -> Vec<f32> {
    let st = strides(shape);
    (0..x.len())
        .map(|i| {
            let idx = unravel(i, shape);
            let base = i - idx[axis] * st[axis];
            let row: Vec<f64> = (0..shape[axis])
                .map(|k| x[base + k * st[axis]] as f64)
                .collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            ((x[i] as f64 - m).exp() / s) as f32
        })
        .collect()
}

#[test]
fn softmax_matches_naive_formula_on_every_axis() {
    let shape = [3, 4, 5];
    let x = Rng(7).f32s(60).iter().map(|v| v * 4.0).collect::<Vec<_>>();
    for axis in [0i64, 1, 2, -1, -2] {
        let y = Node::new("Softmax", 13)
            .int("axis", axis)
            .run1(&[var(f32t(&shape, &x))])
            .unwrap();
        let a = if axis < 0 {
            (axis + 3) as usize
        } else {
            axis as usize
        };
        assert_close(y.as_f32().unwrap(), &naive_softmax(&x, &shape, a), 1e-6);
    }
    // Default axis -1.
    let y = Node::new("Softmax", 13)
        .run1(&[var(f32t(&shape, &x))])
        .unwrap();
    assert_close(y.as_f32().unwrap(), &naive_softmax(&x, &shape, 2), 1e-6);
}

#[test]
fn softmax_rows_sum_to_one_and_are_stable() {
    let x = [0.0, 1.0, 2.0, 3.0, 10000.0, 10001.0, 10002.0, 10003.0];
    let y = Node::new("Softmax", 13)
        .run1(&[var(f32t(&[2, 4], &x))])
        .unwrap();
    let y = y.as_f32().unwrap();
    let want = [0.032058604, 0.08714432, 0.23688284, 0.6439143];
    assert_close(&y[..4], &want, 1e-6);
    assert_close(&y[4..], &want, 1e-6);
    for row in y.chunks(4) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
    // Example from the spec.
    let y = Node::new("Softmax", 13)
        .run1(&[var(f32t(&[1, 3], &[-1., 0., 1.]))])
        .unwrap();
    assert_close(
        y.as_f32().unwrap(),
        &[0.09003058, 0.24472848, 0.66524094],
        1e-6,
    );
}

#[test]
fn softmax_before_opset_13_flattens_at_axis() {
    let shape = [2, 3, 4];
    let x = Rng(3).f32s(24);
    // Default axis 1: each of the 2 rows of 12 is normalized.
    for (node, rows) in [
        (Node::new("Softmax", 11), 2usize),
        (Node::new("Softmax", 11).int("axis", 2), 6),
        (Node::new("Softmax", 1).int("axis", 0), 1),
    ] {
        let y = node.run1(&[var(f32t(&shape, &x))]).unwrap();
        let n = 24 / rows;
        let want: Vec<f32> = x
            .chunks(n)
            .flat_map(|r| naive_softmax(r, &[n], 0))
            .collect();
        assert_close(y.as_f32().unwrap(), &want, 1e-6);
    }
}

#[test]
fn softmax_f64_and_errors() {
    let y = Node::new("Softmax", 13)
        .run1(&[var(f64t(&[2], &[0.0, 0.0]))])
        .unwrap();
    assert_eq!(y, f64t(&[2], &[0.5, 0.5]));
    let e = Node::new("Softmax", 13)
        .int("axis", 2)
        .run1(&[var(f32t(&[2, 2], &[0.; 4]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = Node::new("Softmax", 13)
        .run1(&[var(i64t(&[2], &[0; 2]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
}

/// Naive layer/RMS norm over axes [axis..), with scale/bias broadcast from
/// the right onto X. Returns (y, mean, inv_std).
fn naive_norm(
    x: &[f32],
    shape: &[usize],
    axis: usize,
    scale: (&[f32], &[usize]),
    bias: Option<(&[f32], &[usize])>,
    eps: f32,
    rms: bool,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let n: usize = shape[axis..].iter().product();
    let rows = x.len() / n;
    let at = |p: (&[f32], &[usize]), i: usize| {
        let idx = unravel(i, shape);
        let pad = shape.len() - p.1.len();
        let st = strides(p.1);
        let j: usize = (0..p.1.len())
            .map(|d| if p.1[d] == 1 { 0 } else { idx[pad + d] * st[d] })
            .sum();
        p.0[j] as f64
    };
    let mut y = vec![0.0; x.len()];
    let (mut means, mut invs) = (vec![], vec![]);
    for r in 0..rows {
        let row: Vec<f64> = x[r * n..(r + 1) * n].iter().map(|&v| v as f64).collect();
        let mean = if rms {
            0.0
        } else {
            row.iter().sum::<f64>() / n as f64
        };
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        means.push(mean as f32);
        invs.push(inv as f32);
        for (k, &xv) in row.iter().enumerate() {
            let i = r * n + k;
            let mut v = (xv - mean) * inv * at(scale, i);
            if let Some(b) = bias {
                v += at(b, i);
            }
            y[i] = v as f32;
        }
    }
    (y, means, invs)
}

#[test]
fn layer_norm_matches_naive_formula() {
    let shape = [2, 3, 4, 5];
    let mut rng = Rng(11);
    let x = rng.f32s(120);
    for axis in -4i64..4 {
        let a = if axis < 0 {
            (axis + 4) as usize
        } else {
            axis as usize
        };
        let ns = &shape[a..];
        let w = rng.f32s(numel(ns));
        let b = rng.f32s(numel(ns));
        let out = Node::new("LayerNormalization", 17)
            .int("axis", axis)
            .outputs(3)
            .run(&[var(f32t(&shape, &x)), var(f32t(ns, &w)), var(f32t(ns, &b))])
            .unwrap();
        let (y, mean, inv) = naive_norm(&x, &shape, a, (&w, ns), Some((&b, ns)), 1e-5, false);
        assert_close(out[0].as_f32().unwrap(), &y, 1e-4);
        assert_close(out[1].as_f32().unwrap(), &mean, 1e-5);
        assert_close(out[2].as_f32().unwrap(), &inv, 1e-4);
        let stat_shape: Vec<usize> = (0..4).map(|d| if d < a { shape[d] } else { 1 }).collect();
        assert_eq!(out[1].shape(), stat_shape.as_slice());
        assert_eq!(out[2].dtype(), ElementType::F32);
    }
}

#[test]
fn layer_norm_epsilon_no_bias_and_broadcast_scale() {
    let shape = [2, 3, 5];
    let mut rng = Rng(5);
    let x = rng.f32s(30);
    // epsilon 0.1, no bias, one output.
    let w = rng.f32s(5);
    let y = Node::new("LayerNormalization", 17)
        .float("epsilon", 0.1)
        .run1(&[var(f32t(&shape, &x)), var(f32t(&[5], &w))])
        .unwrap();
    let (want, _, _) = naive_norm(&x, &shape, 2, (&w, &[5]), None, 0.1, false);
    assert_close(y.as_f32().unwrap(), &want, 1e-4);
    // Scale [1, 5] over normalized shape [3, 5] (repeated along axis 1),
    // scalar bias: the deferred broadcast path and the scalar path.
    let w = rng.f32s(5);
    let y = Node::new("LayerNormalization", 17)
        .int("axis", 1)
        .run1(&[
            var(f32t(&shape, &x)),
            var(f32t(&[1, 5], &w)),
            var(f32t(&[], &[0.5])),
        ])
        .unwrap();
    let (want, _, _) = naive_norm(
        &x,
        &shape,
        1,
        (&w, &[1, 5]),
        Some((&[0.5], &[])),
        1e-5,
        false,
    );
    assert_close(y.as_f32().unwrap(), &want, 1e-4);
    // A scale that does not broadcast.
    let e = Node::new("LayerNormalization", 17)
        .run1(&[var(f32t(&shape, &x)), var(f32t(&[4], &[1.0; 4]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
}

#[test]
fn rms_norm_matches_naive_formula() {
    let shape = [2, 3, 4, 5];
    let mut rng = Rng(13);
    let x = rng.f32s(120);
    for axis in -4i64..4 {
        let a = if axis < 0 {
            (axis + 4) as usize
        } else {
            axis as usize
        };
        let ns = &shape[a..];
        let w = rng.f32s(numel(ns));
        let y = Node::new("RMSNormalization", 23)
            .int("axis", axis)
            .run1(&[var(f32t(&shape, &x)), var(f32t(ns, &w))])
            .unwrap();
        let (want, _, _) = naive_norm(&x, &shape, a, (&w, ns), None, 1e-5, true);
        assert_close(y.as_f32().unwrap(), &want, 1e-4);
    }
    // Hidden size of a small LLM with epsilon.
    let x = rng.f32s(3 * 512);
    let w = rng.f32s(512);
    let y = Node::new("RMSNormalization", 23)
        .float("epsilon", 1e-6)
        .run1(&[var(f32t(&[1, 3, 512], &x)), var(f32t(&[512], &w))])
        .unwrap();
    let (want, _, _) = naive_norm(&x, &[1, 3, 512], 2, (&w, &[512]), None, 1e-6, true);
    assert_close(y.as_f32().unwrap(), &want, 1e-4);
}

#[test]
fn simplified_layer_norm_both_domains_with_inv_std_var() {
    let shape = [2, 2, 3];
    let x = Rng(17).f32s(12);
    let w = [0.5, 1.0, -2.0];
    for domain in ["", "com.microsoft"] {
        let out = Node::new("SimplifiedLayerNormalization", 1)
            .domain(domain)
            .float("epsilon", 1e-6)
            .outputs(2)
            .run(&[var(f32t(&shape, &x)), var(f32t(&[3], &w))])
            .unwrap();
        let (want, _, inv) = naive_norm(&x, &shape, 2, (&w, &[3]), None, 1e-6, true);
        assert_close(out[0].as_f32().unwrap(), &want, 1e-5);
        assert_eq!(out[1].shape(), &[2, 2, 1]);
        assert_close(out[1].as_f32().unwrap(), &inv, 1e-5);
    }
    let y = Node::new("SimplifiedLayerNormalization", 1)
        .domain("com.microsoft")
        .run(&[var(f32t(&shape, &x)), var(f32t(&[3], &w))])
        .unwrap();
    assert_eq!(y.len(), 1);
}

#[test]
fn norm_attributes_are_checked() {
    let e = Node::new("LayerNormalization", 17)
        .int("stash_type", 11)
        .build(3)
        .unwrap_err();
    assert_eq!(attribute_error(e), "stash_type");
    Node::new("RMSNormalization", 23)
        .int("stash_type", 1)
        .build(2)
        .unwrap();
    let e = Node::new("RMSNormalization", 23)
        .int("momentum", 1)
        .build(2)
        .unwrap_err();
    assert!(matches!(e, KernelError::Attribute { .. }), "{e:?}");
    let e = Node::new("RMSNormalization", 23)
        .float("epsilon", f32::NAN)
        .build(2)
        .unwrap_err();
    assert_eq!(attribute_error(e), "epsilon");
    // epsilon given as the wrong attribute type is an error, not a default.
    let e = Node::new("LayerNormalization", 17)
        .int("epsilon", 1)
        .build(2)
        .unwrap_err();
    assert_eq!(attribute_error(e), "epsilon");
    // Too many outputs for RMSNormalization.
    assert!(
        Node::new("RMSNormalization", 23)
            .outputs(2)
            .build(2)
            .is_err()
    );
}

#[test]
fn f64_layer_norm() {
    let x = [1.0, 2.0, 3.0, 4.0];
    let out = Node::new("LayerNormalization", 17)
        .outputs(2)
        .run(&[
            var(f64t(&[1, 4], &x)),
            var(f64t(&[4], &[1.0; 4])),
            var(f64t(&[4], &[0.0; 4])),
        ])
        .unwrap();
    let inv = 1.0 / (1.25f64 + 1e-5).sqrt();
    let want: Vec<f64> = x.iter().map(|v| (v - 2.5) * inv).collect();
    for (g, w) in out[0].as_f64().unwrap().iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{g} {w}");
    }
    assert_eq!(out[1].as_f32().unwrap(), &[2.5]);
}
