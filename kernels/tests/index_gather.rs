//! GatherND, GatherElements, ScatterND, ScatterElements, Trilu and CumSum
//! against hand-computed cases (the ONNX spec examples) and naive loops.

mod index_util;

use index_util::*;
use onnx_prepared_kernels::{KernelError, Tensor, TensorData};

#[test]
fn gather_nd_spec_examples() {
    let g = |b: i64, data: Tensor, idx: Tensor| {
        Node::new("GatherND", 13)
            .int("batch_dims", b)
            .run1(&[var(data), var(idx)])
            .unwrap()
    };
    let d2 = i64t(&[2, 2], &[0, 1, 2, 3]);
    assert_eq!(
        g(0, d2.clone(), i64t(&[2, 2], &[0, 0, 1, 1])),
        i64t(&[2], &[0, 3])
    );
    assert_eq!(
        g(0, d2.clone(), i64t(&[2, 1], &[1, 0])),
        i64t(&[2, 2], &[2, 3, 0, 1])
    );
    let d3 = i64t(&[2, 2, 2], &[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(
        g(0, d3.clone(), i64t(&[2, 2], &[0, 1, 1, 0])),
        i64t(&[2, 2], &[2, 3, 4, 5])
    );
    assert_eq!(
        g(0, d3.clone(), i64t(&[2, 1, 2], &[0, 1, 1, 0])),
        i64t(&[2, 1, 2], &[2, 3, 4, 5])
    );
    // batch_dims = 1.
    assert_eq!(
        g(1, d3.clone(), i64t(&[2, 1], &[1, 0])),
        i64t(&[2, 2], &[2, 3, 4, 5])
    );
    // Negative indices count from the end.
    assert_eq!(g(0, d2.clone(), i64t(&[1, 2], &[-1, -2])), i64t(&[1], &[2]));
    // i32 indices.
    assert_eq!(g(0, d2, i32t(&[1, 2], &[1, 1])), i64t(&[1], &[3]));
}

#[test]
fn gather_nd_errors() {
    let d = var(f32t(&[2, 2], &[0.; 4]));
    let run = |b: i64, idx: Tensor| {
        Node::new("GatherND", 13)
            .int("batch_dims", b)
            .run1(&[d.clone(), var(idx)])
            .unwrap_err()
    };
    assert!(is_invalid(&run(0, i64t(&[1, 2], &[0, 2]))));
    assert!(is_invalid(&run(0, i64t(&[1, 2], &[-3, 0]))));
    assert!(is_shape(&run(0, i64t(&[1, 3], &[0, 0, 0]))));
    assert!(is_shape(&run(2, i64t(&[2, 1], &[0, 0]))));
    assert!(is_shape(&run(1, i64t(&[3, 1], &[0, 0, 0]))));
    let e = Node::new("GatherND", 13)
        .run1(&[d, var(f32t(&[1, 1], &[0.]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
}

#[test]
fn gather_elements_matches_naive() {
    // Spec example: axis 1.
    let y = Node::new("GatherElements", 13)
        .int("axis", 1)
        .run1(&[
            var(i64t(&[2, 2], &[1, 2, 3, 4])),
            var(i64t(&[2, 2], &[0, 0, 1, 0])),
        ])
        .unwrap();
    assert_eq!(y, i64t(&[2, 2], &[1, 1, 4, 3]));
    // Spec example: axis 0 with a negative index.
    let y = Node::new("GatherElements", 13)
        .run1(&[
            var(f32t(&[3, 3], &iota(9))),
            var(i32t(&[2, 3], &[1, 2, 0, 2, 0, -3])),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[2, 3], &[3., 7., 2., 6., 1., 2.]));
    // Random 3-D cases with smaller index shapes, every axis.
    let mut rng = Rng(9);
    let ds = [3usize, 4, 5];
    let dv = rng.f32s(60);
    for axis in 0..3 {
        let is = [2usize, 3, 4];
        let iv: Vec<i64> = (0..numel(&is))
            .map(|_| {
                rng.below(ds[axis] as u64) as i64
                    - if rng.below(2) == 1 {
                        ds[axis] as i64
                    } else {
                        0
                    }
            })
            .collect();
        let y = Node::new("GatherElements", 13)
            .int("axis", axis as i64 - 3)
            .run1(&[var(f32t(&ds, &dv)), var(i64t(&is, &iv))])
            .unwrap();
        let st = strides(&ds);
        let want: Vec<f32> = (0..numel(&is))
            .map(|p| {
                let mut idx = unravel(p, &is);
                idx[axis] = iv[p].rem_euclid(ds[axis] as i64) as usize;
                dv[idx.iter().zip(&st).map(|(a, b)| a * b).sum::<usize>()]
            })
            .collect();
        assert_eq!(f32s(&y), want, "axis {axis}");
    }
}

#[test]
fn gather_elements_errors() {
    let d = var(f32t(&[2, 2], &[0.; 4]));
    let e = Node::new("GatherElements", 13)
        .run1(&[d.clone(), var(i64t(&[1, 2], &[0, 2]))])
        .unwrap_err();
    assert!(is_invalid(&e), "{e:?}");
    let e = Node::new("GatherElements", 13)
        .run1(&[d.clone(), var(i64t(&[2], &[0, 1]))])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("GatherElements", 13)
        .int("axis", 2)
        .run1(&[d.clone(), var(i64t(&[1, 1], &[0]))])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("GatherElements", 13)
        .run1(&[d, var(i64t(&[1, 3], &[0, 0, 0]))])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
}

#[test]
fn scatter_nd_reductions() {
    // Spec example: rows of a [4,4,4] tensor.
    let data: Vec<f32> = [
        1., 2., 3., 4., 5., 6., 7., 8., 8., 7., 6., 5., 4., 3., 2., 1.,
    ]
    .repeat(4);
    let upd: Vec<f32> = [5f32, 6., 7., 8.]
        .iter()
        .flat_map(|&v| [v; 4])
        .chain([1f32, 2., 3., 4.].iter().flat_map(|&v| [v; 4]))
        .collect();
    let y = Node::new("ScatterND", 13)
        .run1(&[
            var(f32t(&[4, 4, 4], &data)),
            var(i64t(&[2, 1], &[0, 2])),
            var(f32t(&[2, 4, 4], &upd)),
        ])
        .unwrap();
    let mut want = data.clone();
    want[..16].copy_from_slice(&upd[..16]);
    want[32..48].copy_from_slice(&upd[16..]);
    assert_eq!(f32s(&y), want);

    // Element indices, duplicates and each reduction.
    let data = [1i64, 2, 3, 4, 5, 6, 7, 8];
    let idx = i64t(&[3, 1], &[4, 3, -4]);
    let upd = [9i64, 10, 11];
    for (red, at4, at3) in [
        ("add", 5 + 9 + 11, 4 + 10),
        ("mul", 5 * 9 * 11, 4 * 10),
        ("max", 11, 10),
        ("min", 5, 4),
        ("none", 11, 10),
    ] {
        let y = Node::new("ScatterND", 18)
            .string("reduction", red)
            .run1(&[
                var(i64t(&[8], &data)),
                var(idx.clone()),
                var(i64t(&[3], &upd)),
            ])
            .unwrap();
        let mut want = data.to_vec();
        want[4] = at4;
        want[3] = at3;
        assert_eq!(i64s(&y), want, "{red}");
    }
}

#[test]
fn scatter_nd_errors() {
    let d = var(f32t(&[4], &[0.; 4]));
    let e = Node::new("ScatterND", 13)
        .run1(&[d.clone(), var(i64t(&[1, 1], &[4])), var(f32t(&[1], &[1.]))])
        .unwrap_err();
    assert!(is_invalid(&e), "{e:?}");
    let e = Node::new("ScatterND", 13)
        .run1(&[
            d.clone(),
            var(i64t(&[1, 1], &[0])),
            var(f32t(&[2], &[1., 2.])),
        ])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("ScatterND", 16)
        .string("reduction", "max")
        .build(3)
        .unwrap_err();
    assert_eq!(attribute_error(e), "reduction");
    let e = Node::new("ScatterND", 13)
        .string("reduction", "add")
        .build(3)
        .unwrap_err();
    assert_eq!(attribute_error(e), "(unknown)");
    // A reduction on bool data is not supported.
    let e = Node::new("ScatterND", 18)
        .string("reduction", "add")
        .run1(&[
            var(boolt(&[2], &[true, false])),
            var(i64t(&[1, 1], &[0])),
            var(boolt(&[1], &[true])),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
}

#[test]
fn scatter_elements_axes_and_reductions() {
    // Spec example: axis 1.
    let y = Node::new("ScatterElements", 13)
        .int("axis", 1)
        .run1(&[
            var(f32t(&[1, 5], &[1., 2., 3., 4., 5.])),
            var(i64t(&[1, 2], &[1, 3])),
            var(f32t(&[1, 2], &[1.1, 2.1])),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[1, 5], &[1., 1.1, 3., 2.1, 5.]));
    // Spec example: axis 0 over a [3,3] zero tensor.
    let y = Node::new("ScatterElements", 13)
        .run1(&[
            var(f32t(&[3, 3], &[0.; 9])),
            var(i64t(&[2, 3], &[1, 0, 2, 0, 2, 1])),
            var(f32t(&[2, 3], &[1., 1.1, 1.2, 2., 2.1, 2.2])),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[3, 3], &[2., 1.1, 0., 1., 0., 2.2, 0., 2.1, 1.2]));
    // Duplicates with reductions, negative indices.
    for (red, v1) in [
        ("add", 2. + 1.1 + 2.1),
        ("mul", 2. * 1.1 * 2.1),
        ("max", 2.1),
        ("min", 1.1),
    ] {
        let y = Node::new("ScatterElements", 18)
            .int("axis", 1)
            .string("reduction", red)
            .run1(&[
                var(f32t(&[1, 5], &[1., 2., 3., 4., 5.])),
                var(i64t(&[1, 2], &[1, -4])),
                var(f32t(&[1, 2], &[1.1, 2.1])),
            ])
            .unwrap();
        assert_close(&f32s(&y), &[1., v1, 3., 4., 5.], 1e-6);
    }
}

#[test]
fn scatter_elements_errors() {
    let d = var(f32t(&[2, 2], &[0.; 4]));
    let e = Node::new("ScatterElements", 13)
        .run1(&[
            d.clone(),
            var(i64t(&[1, 1], &[2])),
            var(f32t(&[1, 1], &[1.])),
        ])
        .unwrap_err();
    assert!(is_invalid(&e), "{e:?}");
    let e = Node::new("ScatterElements", 13)
        .run1(&[
            d.clone(),
            var(i64t(&[1, 1], &[0])),
            var(f32t(&[1, 2], &[1., 1.])),
        ])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("ScatterElements", 13)
        .run1(&[d, var(i64t(&[1, 1], &[0])), var(i64t(&[1, 1], &[1]))])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
}

fn naive_trilu(x: &[f32], shape: &[usize], upper: bool, k: i64) -> Vec<f32> {
    let (n, m) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    x.iter()
        .enumerate()
        .map(|(p, &v)| {
            let (i, j) = (((p / m) % n) as i64, (p % m) as i64);
            let keep = if upper { j - i >= k } else { j - i <= k };
            if keep { v } else { 0.0 }
        })
        .collect()
}

#[test]
fn trilu_matches_naive() {
    let mut rng = Rng(1);
    for shape in [
        [4usize, 5].as_slice(),
        &[3, 3],
        &[2, 3, 4],
        &[1, 5],
        &[5, 1],
    ] {
        let x = rng.f32s(numel(shape));
        for upper in [0i64, 1] {
            for k in [-7i64, -1, 0, 1, 2, 9] {
                let y = Node::new("Trilu", 14)
                    .int("upper", upper)
                    .run1(&[var(f32t(shape, &x)), In::Const(i64t(&[], &[k]))])
                    .unwrap();
                assert_eq!(
                    f32s(&y),
                    naive_trilu(&x, shape, upper == 1, k),
                    "{shape:?} {upper} {k}"
                );
            }
        }
    }
    // Default: upper, k = 0; k as a run-time input; integer data.
    let y = Node::new("Trilu", 14)
        .run1(&[var(i64t(&[2, 2], &[1, 2, 3, 4]))])
        .unwrap();
    assert_eq!(y, i64t(&[2, 2], &[1, 2, 0, 4]));
    let y = Node::new("Trilu", 14)
        .int("upper", 0)
        .run1(&[var(i64t(&[2, 2], &[1, 2, 3, 4])), var(i64t(&[], &[-1]))])
        .unwrap();
    assert_eq!(y, i64t(&[2, 2], &[0, 0, 3, 0]));
}

#[test]
fn trilu_errors() {
    let e = Node::new("Trilu", 14)
        .run1(&[var(f32t(&[3], &[0.; 3]))])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Trilu", 14)
        .run1(&[var(f32t(&[2, 2], &[0.; 4])), var(i64t(&[2], &[0, 0]))])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Trilu", 14).int("upper", 2).build(1).unwrap_err();
    assert_eq!(attribute_error(e), "upper");
}

fn naive_cumsum(
    x: &[f64],
    shape: &[usize],
    axis: usize,
    exclusive: bool,
    reverse: bool,
) -> Vec<f64> {
    let st = strides(shape);
    (0..x.len())
        .map(|p| {
            let idx = unravel(p, shape);
            let mut s = 0.0;
            for t in 0..shape[axis] {
                let take = match (reverse, exclusive) {
                    (false, false) => t <= idx[axis],
                    (false, true) => t < idx[axis],
                    (true, false) => t >= idx[axis],
                    (true, true) => t > idx[axis],
                };
                if take {
                    s += x[p - idx[axis] * st[axis] + t * st[axis]];
                }
            }
            s
        })
        .collect()
}

#[test]
fn cumsum_matches_naive() {
    let y = Node::new("CumSum", 14)
        .run1(&[
            var(f32t(&[5], &[1., 2., 3., 4., 5.])),
            In::Const(i32t(&[], &[0])),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[5], &[1., 3., 6., 10., 15.]));
    let y = Node::new("CumSum", 14)
        .int("exclusive", 1)
        .int("reverse", 1)
        .run1(&[
            var(f32t(&[5], &[1., 2., 3., 4., 5.])),
            var(i64t(&[1], &[0])),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[5], &[14., 12., 9., 5., 0.]));
    let shape = [2usize, 3, 4];
    let x: Vec<f64> = (0..24).map(|i| (i * 7 % 11) as f64).collect();
    for axis in 0..3 {
        for (e, r) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let y = Node::new("CumSum", 14)
                .int("exclusive", e)
                .int("reverse", r)
                .run1(&[
                    var(f64t(&shape, &x)),
                    In::Const(i64t(&[], &[axis as i64 - 3])),
                ])
                .unwrap();
            assert_eq!(
                y.data(),
                TensorData::F64(naive_cumsum(&x, &shape, axis, e == 1, r == 1)).view(),
                "axis {axis} exclusive {e} reverse {r}"
            );
        }
    }
    // Integers.
    let y = Node::new("CumSum", 14)
        .run1(&[
            var(i64t(&[2, 2], &[1, 2, 3, 4])),
            In::Const(i64t(&[], &[1])),
        ])
        .unwrap();
    assert_eq!(y, i64t(&[2, 2], &[1, 3, 3, 7]));
}

#[test]
fn cumsum_errors() {
    let x = var(f32t(&[2, 2], &[0.; 4]));
    let e = Node::new("CumSum", 14)
        .run1(&[x.clone(), In::Const(i64t(&[], &[2]))])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("CumSum", 14)
        .run1(&[x.clone(), var(i64t(&[], &[-3]))])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("CumSum", 14)
        .run1(&[x.clone(), In::Const(f32t(&[], &[0.]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
    let e = Node::new("CumSum", 14)
        .run1(&[var(boolt(&[1], &[true])), In::Const(i64t(&[], &[0]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
}
