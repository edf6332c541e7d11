//! Expand, Where, Tile and Pad against naive index mapping (and small
//! hand-computed cases), sequential and on a parallel-looking executor.

mod index_util;

use index_util::*;
use onnx_prepared_kernels::{KernelError, Tensor, TensorData};

/// The flat index of `out_idx` in an operand of `shape` broadcast to the
/// output (right-aligned, size-1 dimensions repeat).
fn bcast_index(out_idx: &[usize], shape: &[usize]) -> usize {
    let pad = out_idx.len() - shape.len();
    let st = strides(shape);
    shape
        .iter()
        .enumerate()
        .map(|(d, &n)| if n == 1 { 0 } else { out_idx[pad + d] * st[d] })
        .sum()
}

#[test]
fn expand_small_cases() {
    // [3,1] to [2,1,6].
    let x = f32t(&[3, 1], &[1., 2., 3.]);
    let y = Node::new("Expand", 13)
        .run1(&[var(x.clone()), ints(&[2, 1, 6])])
        .unwrap();
    assert_eq!(y.shape(), &[2, 3, 6]);
    let mut want = vec![];
    for _ in 0..2 {
        for v in [1., 2., 3.] {
            want.extend([v; 6]);
        }
    }
    assert_eq!(f32s(&y), want);
    // A shape smaller than the input keeps the input's dims (bidirectional).
    let y = Node::new("Expand", 13)
        .run1(&[var(x.clone()), ints(&[3, 1])])
        .unwrap();
    assert_eq!(y, x);
    let y = Node::new("Expand", 13)
        .run1(&[var(f32t(&[], &[4.])), ints(&[2, 2])])
        .unwrap();
    assert_eq!(y, f32t(&[2, 2], &[4.; 4]));
}

#[test]
fn expand_matches_naive_for_many_shapes() {
    let mut rng = Rng(7);
    let cases: &[(&[usize], &[i64])] = &[
        (&[1, 4], &[3, 1]),
        (&[2, 1, 3], &[4, 2, 5, 3]),
        (&[1], &[7]),
        (&[5, 1, 1, 2], &[5, 3, 4, 2]),
        (&[1, 1, 64, 1], &[2, 3, 64, 200]),
    ];
    for &(xs, target) in cases {
        let x = f32t(xs, &rng.f32s(numel(xs)));
        let node = Node::new("Expand", 13);
        let y = node.run1(&[var(x.clone()), ints(target)]).unwrap();
        let yp = run_par(&node, &[var(x.clone()), ints(target)]).unwrap();
        assert_eq!(y, yp);
        let out = y.shape().to_vec();
        let xv = f32s(&x);
        let want: Vec<f32> = (0..numel(&out))
            .map(|i| xv[bcast_index(&unravel(i, &out), xs)])
            .collect();
        assert_eq!(f32s(&y), want, "{xs:?} -> {target:?}");
    }
}

#[test]
fn expand_errors() {
    let x = var(f32t(&[3], &[1., 2., 3.]));
    let e = Node::new("Expand", 13)
        .run1(&[x.clone(), ints(&[2, 4])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Expand", 13)
        .run1(&[x.clone(), var(i64t(&[1], &[3]))])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "Expand",
            input: 1
        }
    );
    let e = Node::new("Expand", 13).run1(&[x, ints(&[-1])]).unwrap_err();
    assert!(is_shape(&e), "{e:?}");
}

#[test]
fn where_broadcasts_three_ways_any_type() {
    let c = boolt(&[2, 1], &[true, false]);
    let x = i64t(&[3], &[1, 2, 3]);
    let y = i64t(&[1], &[-1]);
    let out = Node::new("Where", 16)
        .run1(&[var(c), var(x), var(y)])
        .unwrap();
    assert_eq!(out, i64t(&[2, 3], &[1, 2, 3, -1, -1, -1]));
    // Same shapes, bool data.
    let out = Node::new("Where", 16)
        .run1(&[
            var(boolt(&[3], &[true, false, true])),
            var(boolt(&[3], &[false, false, false])),
            var(boolt(&[3], &[true, true, true])),
        ])
        .unwrap();
    assert_eq!(out, boolt(&[3], &[false, true, false]));
}

#[test]
fn where_matches_naive() {
    let mut rng = Rng(3);
    let cases: &[[&[usize]; 3]] = &[
        [&[4, 5], &[4, 5], &[4, 5]],
        [&[1, 5], &[4, 1], &[5]],
        [&[2, 1, 3], &[1], &[2, 4, 1]],
        [&[], &[2, 2], &[1, 2]],
        [&[1, 300, 1], &[8, 300, 30], &[30]],
    ];
    for [cs, xs, ys] in cases {
        let c: Vec<bool> = (0..numel(cs)).map(|_| rng.below(2) == 1).collect();
        let xv = rng.f32s(numel(xs));
        let yv = rng.f32s(numel(ys));
        let ins = [var(boolt(cs, &c)), var(f32t(xs, &xv)), var(f32t(ys, &yv))];
        let node = Node::new("Where", 16);
        let out = node.run1(&ins).unwrap();
        assert_eq!(out, run_par(&node, &ins).unwrap());
        let os = out.shape().to_vec();
        let want: Vec<f32> = (0..numel(&os))
            .map(|i| {
                let idx = unravel(i, &os);
                if c[bcast_index(&idx, cs)] {
                    xv[bcast_index(&idx, xs)]
                } else {
                    yv[bcast_index(&idx, ys)]
                }
            })
            .collect();
        assert_eq!(f32s(&out), want, "{cs:?} {xs:?} {ys:?}");
    }
}

#[test]
fn where_errors() {
    let e = Node::new("Where", 16)
        .run1(&[
            var(f32t(&[1], &[1.])),
            var(f32t(&[1], &[1.])),
            var(f32t(&[1], &[1.])),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
    let e = Node::new("Where", 16)
        .run1(&[
            var(boolt(&[1], &[true])),
            var(f32t(&[1], &[1.])),
            var(i64t(&[1], &[1])),
        ])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Where", 16)
        .run1(&[
            var(boolt(&[2], &[true, true])),
            var(f32t(&[3], &[1.; 3])),
            var(f32t(&[1], &[1.])),
        ])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
}

#[test]
fn tile_matches_naive() {
    let y = Node::new("Tile", 13)
        .run1(&[var(f32t(&[2, 2], &[1., 2., 3., 4.])), ints(&[1, 2])])
        .unwrap();
    assert_eq!(y, f32t(&[2, 4], &[1., 2., 1., 2., 3., 4., 3., 4.]));
    let mut rng = Rng(11);
    let cases: &[(&[usize], &[i64])] = &[
        (&[3], &[4]),
        (&[2, 3, 4], &[2, 1, 3]),
        (&[2, 3], &[0, 2]),
        (&[100, 20], &[3, 7]),
    ];
    for &(xs, reps) in cases {
        let xv = rng.f32s(numel(xs));
        let node = Node::new("Tile", 13);
        let ins = [var(f32t(xs, &xv)), ints(reps)];
        let y = node.run1(&ins).unwrap();
        assert_eq!(y, run_par(&node, &ins).unwrap());
        let os: Vec<usize> = xs.iter().zip(reps).map(|(&d, &r)| d * r as usize).collect();
        assert_eq!(y.shape(), os.as_slice());
        let st = strides(xs);
        let want: Vec<f32> = (0..numel(&os))
            .map(|i| {
                let idx = unravel(i, &os);
                xv[idx
                    .iter()
                    .enumerate()
                    .map(|(d, &v)| (v % xs[d]) * st[d])
                    .sum::<usize>()]
            })
            .collect();
        assert_eq!(f32s(&y), want, "{xs:?} x {reps:?}");
    }
}

#[test]
fn tile_errors() {
    let x = var(f32t(&[2, 2], &[0.; 4]));
    let e = Node::new("Tile", 13)
        .run1(&[x.clone(), ints(&[2])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Tile", 13)
        .run1(&[x.clone(), ints(&[1, -1])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Tile", 13)
        .run1(&[x, var(i64t(&[2], &[1, 1]))])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "Tile",
            input: 1
        }
    );
}

/// NumPy-style pad of one axis coordinate: the input coordinate for
/// output `o`, or None for the constant (no negative pads).
fn naive_map(mode: &str, o: i64, begin: i64, n: i64) -> Option<usize> {
    let mut i = o - begin;
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    match mode {
        "constant" => None,
        "edge" => Some(i.clamp(0, n - 1) as usize),
        "wrap" => Some(i.rem_euclid(n) as usize),
        _ => {
            // Reflect step by step, as np.pad(mode="reflect") does.
            if n == 1 {
                return Some(0);
            }
            while !(0..n).contains(&i) {
                i = if i < 0 { -i } else { 2 * (n - 1) - i };
            }
            Some(i as usize)
        }
    }
}

fn naive_pad(
    x: &[f32],
    xs: &[usize],
    pads: &[i64],
    mode: &str,
    value: f32,
) -> (Vec<usize>, Vec<f32>) {
    let r = xs.len();
    let os: Vec<usize> = (0..r)
        .map(|d| (xs[d] as i64 + pads[d] + pads[r + d]) as usize)
        .collect();
    let st = strides(xs);
    let y = (0..numel(&os))
        .map(|i| {
            let idx = unravel(i, &os);
            let mut off = 0;
            for d in 0..r {
                match naive_map(mode, idx[d] as i64, pads[d], xs[d] as i64) {
                    Some(j) => off += j * st[d],
                    None => return value,
                }
            }
            x[off]
        })
        .collect();
    (os, y)
}

#[test]
fn pad_modes_match_naive() {
    let mut rng = Rng(5);
    let cases: &[(&[usize], &[i64])] = &[
        (&[3, 2], &[0, 2, 0, 0]),
        (&[3, 4], &[1, 2, 2, 3]),
        (&[2, 3, 4], &[1, 0, 2, 1, 2, 3]),
        (&[5], &[4, 4]),
        (&[1, 3], &[0, 2, 0, 2]),
        (&[40, 1000], &[1, 3, 2, 2]),
    ];
    for &(xs, pads) in cases {
        let xv = rng.f32s(numel(xs));
        for mode in ["constant", "reflect", "edge", "wrap"] {
            if mode == "reflect"
                && xs
                    .iter()
                    .enumerate()
                    .any(|(d, &n)| pads[d] >= n as i64 || pads[xs.len() + d] >= n as i64)
            {
                // ONNX Runtime requires reflect pads below the dimension.
                continue;
            }
            let node = Node::new("Pad", 19).string("mode", mode);
            let ins = [var(f32t(xs, &xv)), ints(pads), In::Const(f32t(&[], &[2.5]))];
            let y = node.run1(&ins).unwrap();
            assert_eq!(y, run_par(&node, &ins).unwrap());
            let (os, want) = naive_pad(&xv, xs, pads, mode, 2.5);
            assert_eq!(y.shape(), os.as_slice(), "{mode} {xs:?} {pads:?}");
            assert_eq!(f32s(&y), want, "{mode} {xs:?} {pads:?}");
        }
    }
}

#[test]
fn pad_hand_cases_axes_negative_and_legacy() {
    // Reflect as in the ONNX example.
    let x = f32t(&[3, 2], &[1.0, 1.2, 2.3, 3.4, 4.5, 5.7]);
    let y = Node::new("Pad", 13)
        .string("mode", "reflect")
        .run1(&[var(x.clone()), ints(&[0, 2, 0, 0])])
        .unwrap();
    assert_eq!(
        f32s(&y),
        vec![1.0, 1.2, 1.0, 1.2, 2.3, 3.4, 2.3, 3.4, 4.5, 5.7, 4.5, 5.7]
    );
    // Opset 18 axes input (negative axis), constant 0 default.
    let y = Node::new("Pad", 18)
        .run1(&[var(x.clone()), ints(&[1, 1]), In::Absent, ints(&[-1])])
        .unwrap();
    assert_eq!(
        y,
        f32t(
            &[3, 4],
            &[0., 1.0, 1.2, 0., 0., 2.3, 3.4, 0., 0., 4.5, 5.7, 0.]
        )
    );
    // Negative pads crop.
    let y = Node::new("Pad", 13)
        .run1(&[var(x.clone()), ints(&[-1, 0, 0, 1])])
        .unwrap();
    assert_eq!(y, f32t(&[2, 3], &[2.3, 3.4, 0., 4.5, 5.7, 0.]));
    // Opset 2-10 attributes.
    let y = Node::new("Pad", 2)
        .ints("pads", &[0, 1, 0, 0])
        .float("value", 9.0)
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(
        y,
        f32t(&[3, 3], &[9., 1.0, 1.2, 9., 2.3, 3.4, 9., 4.5, 5.7])
    );
    // Integer data with an integer constant.
    let y = Node::new("Pad", 13)
        .run1(&[
            var(i64t(&[2], &[1, 2])),
            ints(&[1, 2]),
            In::Const(i64t(&[], &[-7])),
        ])
        .unwrap();
    assert_eq!(y, i64t(&[5], &[-7, 1, 2, -7, -7]));
    assert_eq!(
        &y.data().to_data(),
        &TensorData::I64(vec![-7, 1, 2, -7, -7])
    );
}

#[test]
fn pad_errors() {
    let x = var(f32t(&[2, 2], &[0.; 4]));
    let e = Node::new("Pad", 13)
        .run1(&[x.clone(), var(i64t(&[4], &[0; 4]))])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "Pad",
            input: 1
        }
    );
    let e = Node::new("Pad", 13)
        .run1(&[x.clone(), ints(&[1, 1])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Pad", 13)
        .run1(&[x.clone(), ints(&[0, -3, 0, 0])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Pad", 13)
        .string("mode", "wrap")
        .build(2)
        .unwrap_err();
    assert_eq!(attribute_error(e), "mode");
    let e = Node::new("Pad", 18)
        .run1(&[x.clone(), ints(&[1, 1, 1, 1]), In::Absent, ints(&[0, 0])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Pad", 18)
        .run1(&[x, ints(&[1, 1]), In::Absent, ints(&[2])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Pad", 13)
        .string("mode", "edge")
        .run1(&[
            var(Tensor::zeros(onnx_prepared_kernels::ElementType::F32, vec![0]).unwrap()),
            ints(&[1, 1]),
        ])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
}

#[test]
fn pad_extreme_values_error_or_work_without_panicking() {
    let x = var(f32t(&[1], &[1.]));
    // 1 + MIN + MAX = 0: a valid empty output.
    let y = Node::new("Pad", 13)
        .string("mode", "edge")
        .run1(&[x.clone(), ints(&[i64::MIN, i64::MAX])])
        .unwrap();
    assert_eq!(y, f32t(&[0], &[]));
    let e = Node::new("Pad", 13)
        .run1(&[x.clone(), ints(&[i64::MAX, i64::MAX])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Pad", 13)
        .run1(&[x, ints(&[i64::MIN, 0])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
}
