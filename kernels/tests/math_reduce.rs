//! ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd (attribute and
//! input axes, keepdims, noop_with_empty_axes) and ArgMax/ArgMin, against a
//! scalar reference that walks every input index.

mod math_util;

use math_util::*;
use onnx_prepared_kernels::{KernelError, Sequential, Tensor};

/// The reference: output index of each input element, combined in f64.
fn reduce_ref(op: &str, shape: &[usize], x: &[f64], axes: &[usize]) -> Vec<f64> {
    let out_shape: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(d, &n)| if axes.contains(&d) { 1 } else { n })
        .collect();
    let n_out = numel(&out_shape);
    let init = match op {
        "ReduceProd" => 1.0,
        "ReduceMax" => f64::NEG_INFINITY,
        "ReduceMin" => f64::INFINITY,
        _ => 0.0,
    };
    let mut out = vec![init; n_out];
    let os = strides(&out_shape);
    for (i, &v) in x.iter().enumerate() {
        let idx = unravel(i, shape);
        let o: usize = idx
            .iter()
            .enumerate()
            .map(|(d, &k)| if axes.contains(&d) { 0 } else { k * os[d] })
            .sum();
        out[o] = match op {
            "ReduceProd" => out[o] * v,
            "ReduceMax" => out[o].max(v),
            "ReduceMin" => out[o].min(v),
            _ => out[o] + v,
        };
    }
    if op == "ReduceMean" {
        let count = numel(shape) / n_out.max(1);
        for v in &mut out {
            *v /= count as f64;
        }
    }
    out
}

const OPS: [&str; 5] = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
];

#[test]
fn every_axis_subset_matches_the_reference() {
    let mut rng = Rng(17);
    let shape = [3usize, 1, 4, 5];
    let xv: Vec<f32> = rng
        .f32s(numel(&shape))
        .iter()
        .map(|v| 1.0 + 0.25 * v)
        .collect();
    let x = f32t(&shape, &xv);
    let xd: Vec<f64> = xv.iter().map(|&v| f64::from(v)).collect();
    for mask in 1u32..16 {
        let axes: Vec<usize> = (0..4).filter(|d| mask & (1 << d) != 0).collect();
        // Mixed positive and negative spellings.
        let spelled: Vec<i64> = axes
            .iter()
            .map(|&a| if a % 2 == 0 { a as i64 - 4 } else { a as i64 })
            .collect();
        for op in OPS {
            let want = reduce_ref(op, &shape, &xd, &axes);
            for keep in [0, 1] {
                let node = Node::new(op, 18).int("keepdims", keep);
                let out = node.run1(&[var(x.clone()), ints(&spelled)]).unwrap();
                let want_shape: Vec<usize> = shape
                    .iter()
                    .enumerate()
                    .filter_map(|(d, &n)| match (axes.contains(&d), keep) {
                        (false, _) => Some(n),
                        (true, 1) => Some(1),
                        (true, _) => None,
                    })
                    .collect();
                assert_eq!(out.shape(), want_shape.as_slice(), "{op} {axes:?}");
                let w: Vec<f32> = want.iter().map(|&v| v as f32).collect();
                assert_close(out.as_f32().unwrap(), &w, 1e-5);
            }
            // The attribute form (opset 13; ReduceSum 11).
            let opset = if op == "ReduceSum" { 11 } else { 13 };
            let out = Node::new(op, opset)
                .ints("axes", &spelled)
                .run1(&[var(x.clone())])
                .unwrap();
            let w: Vec<f32> = want.iter().map(|&v| v as f32).collect();
            assert_close(out.as_f32().unwrap(), &w, 1e-5);
        }
    }
}

#[test]
fn reduce_sum_takes_axes_as_input_from_opset_13() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = Node::new("ReduceSum", 13)
        .int("keepdims", 0)
        .run1(&[var(x.clone()), ints(&[1])])
        .unwrap();
    assert_eq!(out.as_f32().unwrap(), [6.0, 15.0]);
    // The attribute is refused there, and the input form before 18 for the
    // others.
    let err = Node::new("ReduceSum", 13)
        .ints("axes", &[1])
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(err), "(unknown)");
    let err = Node::new("ReduceMean", 18)
        .ints("axes", &[1])
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(err), "(unknown)");
    let err = Node::new("ReduceMean", 13)
        .run1(&[var(x.clone()), ints(&[1])])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    // Axes must be a constant.
    let err = Node::new("ReduceSum", 13)
        .run1(&[var(x), var(i64t(&[1], &[1]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::NeedsConstant { input: 1, .. }),
        "{err:?}"
    );
}

#[test]
fn empty_axes_reduce_everything_or_nothing() {
    let x = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let all = Node::new("ReduceSum", 13).run1(&[var(x.clone())]).unwrap();
    assert_eq!(all.shape(), &[1, 1]);
    assert_eq!(all.as_f32().unwrap(), [10.0]);
    let all = Node::new("ReduceMax", 18)
        .int("keepdims", 0)
        .run1(&[var(x.clone()), ints(&[])])
        .unwrap();
    assert_eq!(all.shape(), &[] as &[usize]);
    assert_eq!(all.as_f32().unwrap(), [4.0]);
    let noop = Node::new("ReduceSum", 13)
        .int("noop_with_empty_axes", 1)
        .run1(&[var(x.clone()), ints(&[])])
        .unwrap();
    assert_eq!(noop, x);
    let noop = Node::new("ReduceProd", 18)
        .int("noop_with_empty_axes", 1)
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(noop, x);
    let attr_all = Node::new("ReduceMin", 13)
        .int("keepdims", 0)
        .run1(&[var(x)])
        .unwrap();
    assert_eq!(attr_all.as_f32().unwrap(), [1.0]);
}

#[test]
fn empty_sets_give_the_identity() {
    let x = f32t(&[2, 0, 4], &[]);
    for (op, want) in [
        ("ReduceSum", 0.0),
        ("ReduceProd", 1.0),
        ("ReduceMax", f32::NEG_INFINITY),
        ("ReduceMin", f32::INFINITY),
    ] {
        let out = Node::new(op, 18)
            .run1(&[var(x.clone()), ints(&[1])])
            .unwrap();
        assert_eq!(out.shape(), &[2, 1, 4]);
        assert_eq!(out.as_f32().unwrap(), [want; 8], "{op}");
    }
    let out = Node::new("ReduceMean", 18)
        .run1(&[var(x.clone()), ints(&[1])])
        .unwrap();
    assert!(out.as_f32().unwrap().iter().all(|v| v.is_nan()));
    // Reducing a non-empty axis of an empty tensor: an empty output.
    let out = Node::new("ReduceSum", 13)
        .run1(&[var(x), ints(&[2])])
        .unwrap();
    assert_eq!(out.shape(), &[2, 0, 1]);
    let b = bt(&[0, 3], &[]);
    let out = Node::new("ReduceMax", 20)
        .run1(&[var(b.clone()), ints(&[0])])
        .unwrap();
    assert_eq!(out.as_bool().unwrap(), [false; 3]);
    let out = Node::new("ReduceMin", 20)
        .run1(&[var(b), ints(&[0])])
        .unwrap();
    assert_eq!(out.as_bool().unwrap(), [true; 3]);
}

#[test]
fn integer_f64_and_bool_reductions() {
    let x = i64t(&[2, 3], &[1, -2, 3, 4, 5, 7]);
    let sum = Node::new("ReduceSum", 13)
        .run1(&[var(x.clone()), ints(&[0])])
        .unwrap();
    assert_eq!(sum.as_i64().unwrap(), [5, 3, 10]);
    let mean = Node::new("ReduceMean", 18)
        .int("keepdims", 0)
        .run1(&[var(x.clone()), ints(&[1])])
        .unwrap();
    // Integer mean truncates: 2/3 = 0, 16/3 = 5.
    assert_eq!(mean.as_i64().unwrap(), [0, 5]);
    let prod = Node::new("ReduceProd", 18)
        .run1(&[var(x.clone()), ints(&[1])])
        .unwrap();
    assert_eq!(prod.as_i64().unwrap(), [-6, 140]);
    let i = i32t(&[3], &[7, -1, 4]);
    let max = Node::new("ReduceMax", 13).run1(&[var(i.clone())]).unwrap();
    assert_eq!(max.as_i32().unwrap(), [7]);
    let min = Node::new("ReduceMin", 13).run1(&[var(i)]).unwrap();
    assert_eq!(min.as_i32().unwrap(), [-1]);
    let d = f64t(&[2, 2], &[0.5, 1.5, f64::NAN, 1.0]);
    let max = Node::new("ReduceMax", 18)
        .run1(&[var(d.clone()), ints(&[1])])
        .unwrap();
    let v = max.as_f64().unwrap();
    assert_eq!(v[0], 1.5);
    assert!(v[1].is_nan(), "NaN propagates");
    let mean = Node::new("ReduceMean", 18)
        .run1(&[var(d), ints(&[0])])
        .unwrap();
    assert!(mean.as_f64().unwrap()[0].is_nan());
    assert_eq!(mean.as_f64().unwrap()[1], 1.25);
    let b = bt(&[2, 2], &[true, false, false, false]);
    let any = Node::new("ReduceMax", 20)
        .run1(&[var(b.clone()), ints(&[1])])
        .unwrap();
    assert_eq!(any.as_bool().unwrap(), [true, false]);
    let all = Node::new("ReduceMin", 20)
        .run1(&[var(b.clone()), ints(&[1])])
        .unwrap();
    assert_eq!(all.as_bool().unwrap(), [false, false]);
    let err = Node::new("ReduceSum", 13).run1(&[var(b)]).unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
}

#[test]
fn reduction_errors() {
    let x = f32t(&[2, 3], &[0.0; 6]);
    let err = Node::new("ReduceSum", 13)
        .run1(&[var(x.clone()), ints(&[2])])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("ReduceMax", 18)
        .run1(&[var(x.clone()), ints(&[1, -1])])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("ReduceMean", 13)
        .ints("axes", &[-3])
        .run1(&[var(x.clone())])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("ReduceMean", 13)
        .int("keepdims", 2)
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(err), "keepdims");
    let err = Node::new("ReduceProd", 18)
        .run1(&[var(x), var(f32t(&[1], &[0.0]))])
        .unwrap_err();
    assert!(
        matches!(
            err,
            KernelError::NeedsConstant { .. } | KernelError::UnsupportedType { .. }
        ),
        "{err:?}"
    );
}

#[test]
fn large_reductions_split_across_threads() {
    let mut rng = Rng(23);
    for (shape, axes) in [
        (vec![64usize, 2048], vec![1i64]),
        (vec![2048usize, 64], vec![0i64]),
        (vec![16usize, 64, 48], vec![1i64]),
        (vec![16usize, 64, 48], vec![0i64, 2]),
    ] {
        let xv = rng.f32s(numel(&shape));
        let x = f32t(&shape, &xv);
        let xd: Vec<f64> = xv.iter().map(|&v| f64::from(v)).collect();
        let axes_t = i64t(&[axes.len()], &axes);
        let axes_u: Vec<usize> = axes.iter().map(|&a| a as usize).collect();
        for op in ["ReduceSum", "ReduceMean", "ReduceMax"] {
            let node = Node::new(op, 18);
            let one = run_par(&node, &[&x, &axes_t], &Sequential);
            let split = run_par(&node, &[&x, &axes_t], &Reversed);
            let want: Vec<f32> = reduce_ref(op, &shape, &xd, &axes_u)
                .iter()
                .map(|&v| v as f32)
                .collect();
            assert_close(one.as_f32().unwrap(), &want, 1e-4);
            assert_close(split.as_f32().unwrap(), &want, 1e-4);
        }
    }
}

/// Reference arg-extreme along `axis` of a rank-3 `[a, n, b]` view.
fn arg_ref(x: &[f32], (a, n, b): (usize, usize, usize), max: bool, last: bool) -> Vec<i64> {
    let mut out = vec![0i64; a * b];
    for i in 0..a {
        for j in 0..b {
            let mut best = 0;
            for k in 1..n {
                let (v, w) = (x[(i * n + k) * b + j], x[(i * n + best) * b + j]);
                let better = if max {
                    v > w || (last && v == w)
                } else {
                    v < w || (last && v == w)
                };
                if better {
                    best = k;
                }
            }
            out[i * b + j] = best as i64;
        }
    }
    out
}

#[test]
fn argmax_argmin_every_axis_and_tie_rule() {
    let mut rng = Rng(31);
    let shape = [3usize, 4, 5];
    // Few distinct values, so ties are common.
    let xv: Vec<f32> = (0..60).map(|_| rng.below(4) as f32).collect();
    let x = f32t(&shape, &xv);
    for axis in -3i64..3 {
        let ax = axis.rem_euclid(3) as usize;
        let view = (
            shape[..ax].iter().product(),
            shape[ax],
            shape[ax + 1..].iter().product(),
        );
        for (op, max) in [("ArgMax", true), ("ArgMin", false)] {
            for last in [0, 1] {
                for keep in [0, 1] {
                    let out = Node::new(op, 13)
                        .int("axis", axis)
                        .int("keepdims", keep)
                        .int("select_last_index", last)
                        .run1(&[var(x.clone())])
                        .unwrap();
                    let mut want_shape = shape.to_vec();
                    if keep == 1 {
                        want_shape[ax] = 1;
                    } else {
                        want_shape.remove(ax);
                    }
                    assert_eq!(out.shape(), want_shape.as_slice());
                    assert_eq!(
                        out.as_i64().unwrap(),
                        arg_ref(&xv, view, max, last == 1).as_slice(),
                        "{op} axis {axis} last {last}"
                    );
                }
            }
        }
    }
}

#[test]
fn argmax_types_nan_and_errors() {
    let x = i32t(&[2, 2], &[1, 5, 7, 2]);
    let out = Node::new("ArgMax", 13)
        .int("axis", 1)
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(out.shape(), &[2, 1]);
    assert_eq!(out.as_i64().unwrap(), [1, 0]);
    let out = Node::new("ArgMin", 11).run1(&[var(x.clone())]).unwrap();
    assert_eq!(out.as_i64().unwrap(), [0, 1]);
    let n = f32t(&[4], &[1.0, f32::NAN, 3.0, f32::NAN]);
    let out = Node::new("ArgMax", 13).run1(&[var(n.clone())]).unwrap();
    assert_eq!(out.as_i64().unwrap(), [1]);
    let out = Node::new("ArgMin", 13)
        .int("select_last_index", 1)
        .run1(&[var(n)])
        .unwrap();
    assert_eq!(out.as_i64().unwrap(), [3]);
    let err = Node::new("ArgMax", 13)
        .int("axis", 2)
        .run1(&[var(x.clone())])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("ArgMax", 11)
        .int("select_last_index", 1)
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(err), "(unknown)");
    let err = Node::new("ArgMin", 13)
        .run1(&[var(f32t(&[0, 2], &[]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("ArgMin", 13)
        .run1(&[var(bt(&[1], &[true]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
}

#[test]
fn large_argmax_splits_across_threads() {
    let mut rng = Rng(41);
    let xv = rng.f32s(256 * 300);
    let x = f32t(&[256, 300], &xv);
    for axis in [0i64, 1] {
        let node = Node::new("ArgMax", 13).int("axis", axis);
        let one = run_par(&node, &[&x], &Sequential);
        let split: Tensor = run_par(&node, &[&x], &Reversed);
        assert_eq!(one, split);
        let view = if axis == 1 {
            (256, 300, 1)
        } else {
            (1, 256, 300)
        };
        assert_eq!(
            split.as_i64().unwrap(),
            arg_ref(&xv, view, true, false).as_slice()
        );
    }
}
