//! `com.microsoft` SkipLayerNormalization and SkipSimplifiedLayerNormalization
//! against values ONNX Runtime printed for one input and a naive f64
//! formula for random ones.

mod basic_util;
mod quant_util;

use basic_util::*;
use onnx_prepared_kernels::{ElementType, KernelError, Sequential, Tensor};
use quant_util::*;

fn skip_ln() -> Node {
    Node::new("SkipLayerNormalization", 1).domain("com.microsoft")
}

fn skip_sln() -> Node {
    Node::new("SkipSimplifiedLayerNormalization", 1).domain("com.microsoft")
}

/// The naive outputs `(y, mean, inv_std, sum)` in f64 arithmetic.
#[allow(clippy::too_many_arguments)]
fn naive(
    x: &[f32],
    skip: &[f32],
    gamma: &[f32],
    beta: Option<&[f32]>,
    bias: Option<&[f32]>,
    h: usize,
    eps: f32,
    simplified: bool,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let (mut y, mut mean, mut inv, mut sum) = (vec![], vec![], vec![], vec![]);
    for (r, row) in x.chunks(h).enumerate() {
        let s: Vec<f64> = (0..h)
            .map(|i| {
                row[i] as f64
                    + skip[(r * h + i) % skip.len()] as f64
                    + bias.map_or(0.0, |b| b[i] as f64)
            })
            .collect();
        let m = if simplified {
            0.0
        } else {
            s.iter().sum::<f64>() / h as f64
        };
        let var = s.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / h as f64;
        let is = 1.0 / (var + eps as f64).sqrt();
        for i in 0..h {
            y.push(((s[i] - m) * is * gamma[i] as f64 + beta.map_or(0.0, |b| b[i] as f64)) as f32);
            sum.push(s[i] as f32);
        }
        mean.push(m as f32);
        inv.push(is as f32);
    }
    (y, mean, inv, sum)
}

#[test]
fn matches_onnx_runtime_on_a_small_case() {
    // input = arange(12) * 0.5 as [2, 2, 3], skip = 0.25, epsilon 1e-5;
    // expected values printed by ONNX Runtime 1.32 (CPU).
    let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
    let skip = vec![0.25f32; 12];
    let gamma = [1.0f32, 2.0, 3.0];
    let beta = [0.1f32, 0.2, 0.3];
    let bias = [1.0f32, 0.0, -1.0];
    let out = skip_ln()
        .float("epsilon", 1e-5)
        .outputs(4)
        .run(&[
            var(f32t(&[2, 2, 3], &x)),
            var(f32t(&[2, 2, 3], &skip)),
            var(f32t(&[3], &gamma)),
            var(f32t(&[3], &beta)),
            var(f32t(&[3], &bias)),
        ])
        .unwrap();
    assert_eq!(out[1].shape(), &[2, 2, 1]);
    assert_eq!(out[1].dtype(), ElementType::F32);
    assert_close(
        &out[0].as_f32().unwrap()[..3],
        &[1.3247081, 0.2, -3.3741243],
        1e-5,
    );
    assert_close(out[1].as_f32().unwrap(), &[0.75, 2.25, 3.75, 5.25], 1e-6);
    assert_close(out[2].as_f32().unwrap(), &[2.4494162; 4], 1e-5);
    assert_close(
        &out[3].as_f32().unwrap()[..6],
        &[1.25, 0.75, 0.25, 2.75, 2.25, 1.75],
        0.0,
    );

    let out = skip_sln()
        .float("epsilon", 1e-5)
        .outputs(4)
        .run(&[
            var(f32t(&[2, 2, 3], &x)),
            var(f32t(&[2, 2, 3], &skip)),
            var(f32t(&[3], &gamma)),
            var(f32t(&[3], &bias)),
        ])
        .unwrap();
    assert_close(
        &out[0].as_f32().unwrap()[..6],
        &[1.46384, 1.756608, 0.878304, 1.2025857, 1.9678675, 2.2958455],
        1e-5,
    );
    assert_eq!(out[1].as_f32().unwrap(), &[0.0; 4]);
    assert_close(
        out[2].as_f32().unwrap(),
        &[1.171072, 0.43730387, 0.26510024, 0.18990286],
        1e-5,
    );
}

#[test]
fn matches_naive_formula_with_broadcast_skip() {
    let mut rng = Rng(17);
    let (b, s, h) = (3usize, 5usize, 37usize);
    let x = rng.f32s(b * s * h);
    let gamma = rng.f32s(h);
    let beta = rng.f32s(h);
    let bias = rng.f32s(h);
    for skip_shape in [vec![b, s, h], vec![1, s, h], vec![s, h]] {
        let skip = rng.f32s(numel(&skip_shape));
        for simplified in [false, true] {
            for with_bias in [false, true] {
                let node = if simplified { skip_sln() } else { skip_ln() };
                let mut ins = vec![
                    var(f32t(&[b, s, h], &x)),
                    var(f32t(&skip_shape, &skip)),
                    var(f32t(&[h], &gamma)),
                ];
                if !simplified {
                    ins.push(var(f32t(&[h], &beta)));
                }
                if with_bias {
                    ins.push(var(f32t(&[h], &bias)));
                }
                let out = node.float("epsilon", 1e-6).outputs(4).run(&ins).unwrap();
                let (y, mean, inv, sum) = naive(
                    &x,
                    &skip,
                    &gamma,
                    (!simplified).then_some(&beta[..]),
                    with_bias.then_some(&bias[..]),
                    h,
                    1e-6,
                    simplified,
                );
                let label = format!("{skip_shape:?} simplified {simplified} bias {with_bias}");
                assert!(max_rel_err(out[0].as_f32().unwrap(), &y) < 1e-5, "{label}");
                assert!(
                    max_rel_err(out[1].as_f32().unwrap(), &mean) < 1e-5,
                    "{label}"
                );
                assert!(
                    max_rel_err(out[2].as_f32().unwrap(), &inv) < 1e-5,
                    "{label}"
                );
                assert!(
                    max_rel_err(out[3].as_f32().unwrap(), &sum) < 1e-6,
                    "{label}"
                );
            }
        }
    }
}

#[test]
fn one_output_f64_and_f16() {
    let mut rng = Rng(2);
    let h = 8;
    let x = rng.f32s(2 * h);
    let skip = rng.f32s(2 * h);
    let gamma = rng.f32s(h);
    let (y, ..) = naive(&x, &skip, &gamma, None, None, h, 1e-12, false);
    // Default epsilon 1e-12; a single output.
    let out = skip_ln()
        .run(&[
            var(f32t(&[2, h], &x)),
            var(f32t(&[2, h], &skip)),
            var(f32t(&[h], &gamma)),
        ])
        .unwrap();
    assert_eq!(out.len(), 1);
    assert!(max_rel_err(out[0].as_f32().unwrap(), &y) < 1e-5);
    let d = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let out = skip_ln()
        .run1(&[
            var(f64t(&[2, h], &d(&x))),
            var(f64t(&[2, h], &d(&skip))),
            var(f64t(&[h], &d(&gamma))),
        ])
        .unwrap();
    let got: Vec<f32> = out.as_f64().unwrap().iter().map(|&v| v as f32).collect();
    assert!(max_rel_err(&got, &y) < 1e-6);
    // f16: inputs rounded to f16 first, result within f16 precision.
    let r = |v: &[f32]| {
        v.iter()
            .map(|&x| half::f16::from_f32(x).to_f32())
            .collect::<Vec<_>>()
    };
    let (y16, _, _, sum16) = naive(&r(&x), &r(&skip), &r(&gamma), None, None, h, 1e-5, true);
    let out = skip_sln()
        .float("epsilon", 1e-5)
        .outputs(4)
        .run(&[
            var(f16t(&[2, h], &x)),
            var(f16t(&[2, h], &skip)),
            var(f16t(&[h], &gamma)),
        ])
        .unwrap();
    assert_eq!(out[0].dtype(), ElementType::F16);
    assert_eq!(out[2].dtype(), ElementType::F32);
    let f = |t: &Tensor| {
        t.as_f16()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect::<Vec<_>>()
    };
    assert!(max_rel_err(&f(&out[0]), &y16) < 2e-3);
    assert!(max_rel_err(&f(&out[3]), &sum16) < 1e-3);
}

#[test]
fn parallel_passes_match_sequential() {
    let mut rng = Rng(6);
    let (rows, h) = (64usize, 1024usize);
    let x = f32t(&[rows, h], &rng.f32s(rows * h));
    let skip = f32t(&[rows, h], &rng.f32s(rows * h));
    let gamma = f32t(&[h], &rng.f32s(h));
    let beta = f32t(&[h], &rng.f32s(h));
    let bias = f32t(&[h], &rng.f32s(h));
    let op = skip_ln().outputs(4).build(5).unwrap();
    let ins = [
        Some(&x),
        Some(&skip),
        Some(&gamma),
        Some(&beta),
        Some(&bias),
    ];
    let seq = run_with(op.as_ref(), &ins, &Sequential).unwrap();
    let par = run_with(op.as_ref(), &ins, &Reversed).unwrap();
    assert_eq!(seq, par);
    assert!(seq[2].as_f32().unwrap().iter().all(|&v| v > 0.0));
}

#[test]
fn rejects_bad_inputs() {
    let x = f32t(&[2, 4], &[1.0; 8]);
    let g = f32t(&[4], &[1.0; 4]);
    // Skip that is not a suffix of the input's shape.
    let e = skip_ln()
        .run1(&[
            var(x.clone()),
            var(f32t(&[4, 2], &[1.0; 8])),
            var(g.clone()),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = skip_ln()
        .run1(&[
            var(x.clone()),
            var(f32t(&[3, 4], &[1.0; 12])),
            var(g.clone()),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // Gamma of the wrong size or type.
    let e = skip_ln()
        .run1(&[var(x.clone()), var(x.clone()), var(f32t(&[3], &[1.0; 3]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = skip_ln()
        .run1(&[var(x.clone()), var(x.clone()), var(f64t(&[4], &[1.0; 4]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // Integer input.
    let e = skip_ln()
        .run1(&[
            var(i64t(&[4], &[1; 4])),
            var(i64t(&[4], &[1; 4])),
            var(i64t(&[4], &[1; 4])),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
    // Attributes and arity.
    assert_eq!(
        attribute_error(skip_ln().float("epsilon", -1.0).build(3).unwrap_err()),
        "epsilon"
    );
    assert_eq!(
        attribute_error(skip_ln().int("axis", -1).build(3).unwrap_err()),
        "(unknown)"
    );
    assert!(skip_sln().build(5).is_err());
    assert!(skip_ln().outputs(5).build(3).is_err());
    assert!(skip_ln().build(2).is_err());
}
