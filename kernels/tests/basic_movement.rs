//! Gather, Transpose, Slice, Split and Concat against naive index mapping.

mod basic_util;

use basic_util::*;
use onnx_prepared_kernels::{KernelError, Tensor, TensorData};

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

#[test]
fn gather_axis0_axis1_and_negative_indices() {
    let data = iota(10);
    let y = Node::new("Gather", 13)
        .run1(&[var(f32t(&[10], &data)), var(i64t(&[3], &[0, -9, -10]))])
        .unwrap();
    assert_eq!(y, f32t(&[3], &[0., 1., 0.]));
    // [3,3] data, [1,2] indices on axis 1 -> [3,1,2].
    let y = Node::new("Gather", 13)
        .int("axis", 1)
        .run1(&[var(f32t(&[3, 3], &iota(9))), var(i32t(&[1, 2], &[0, 2]))])
        .unwrap();
    assert_eq!(y, f32t(&[3, 1, 2], &[0., 2., 3., 5., 6., 8.]));
    // Embedding lookup: rows of a [5,4] table, any dtype.
    let table = Tensor::new(vec![5, 4], TensorData::I16((0..20).collect())).unwrap();
    let y = Node::new("Gather", 13)
        .run1(&[var(table), var(i64t(&[2], &[4, -4]))])
        .unwrap();
    assert_eq!(
        &y.data().to_data(),
        &TensorData::I16(vec![16, 17, 18, 19, 4, 5, 6, 7])
    );
    assert_eq!(y.shape(), &[2, 4]);
    // Negative axis and a scalar index drop the axis.
    let y = Node::new("Gather", 13)
        .int("axis", -1)
        .run1(&[var(f32t(&[2, 3], &iota(6))), var(i64t(&[], &[-1]))])
        .unwrap();
    assert_eq!(y, f32t(&[2], &[2., 5.]));
}

#[test]
fn gather_out_of_range_is_invalid() {
    for bad in [10i64, -11] {
        let e = Node::new("Gather", 13)
            .run1(&[var(f32t(&[10], &iota(10))), var(i64t(&[2], &[0, bad]))])
            .unwrap_err();
        assert!(
            matches!(e, KernelError::Invalid { op: "Gather", .. }),
            "{e:?}"
        );
    }
    // Known at infer when the indices are constant.
    let e = Node::new("Gather", 13)
        .run1(&[var(f32t(&[2], &[0.; 2])), In::Const(i64t(&[1], &[2]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
    let e = Node::new("Gather", 13)
        .int("axis", 2)
        .run1(&[var(f32t(&[2, 2], &[0.; 4])), var(i64t(&[1], &[0]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
}

fn naive_transpose(x: &[f32], shape: &[usize], perm: &[usize]) -> (Vec<usize>, Vec<f32>) {
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let st = strides(shape);
    let y = (0..x.len())
        .map(|i| {
            let oi = unravel(i, &out_shape);
            let src: usize = perm.iter().enumerate().map(|(j, &p)| oi[j] * st[p]).sum();
            x[src]
        })
        .collect();
    (out_shape, y)
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = vec![];
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

#[test]
fn transpose_matches_naive_on_random_data() {
    let mut rng = Rng(99);
    let shapes: &[&[usize]] = &[
        &[2, 3, 4],
        &[1, 5, 3, 4],
        &[2, 1, 3, 1, 2],
        &[3, 17, 20],
        &[2, 33, 18],
        &[1, 6, 2, 1],
        &[7],
        &[],
    ];
    for &shape in shapes {
        let x = rng.f32s(numel(shape));
        for perm in permutations(shape.len()) {
            let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
            let y = Node::new("Transpose", 21)
                .ints("perm", &p)
                .run1(&[var(f32t(shape, &x))])
                .unwrap();
            let (s, want) = naive_transpose(&x, shape, &perm);
            assert_eq!(y.shape(), s.as_slice(), "{shape:?} {perm:?}");
            assert_eq!(y.as_f32().unwrap(), want.as_slice(), "{shape:?} {perm:?}");
        }
    }
}

#[test]
fn transpose_attention_layouts_and_default() {
    let mut rng = Rng(5);
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 19, 8, 64], &[0, 2, 1, 3]),
        (&[1, 8, 19, 64], &[0, 2, 1, 3]),
        (&[1, 8, 19, 64], &[0, 1, 3, 2]),
        (&[2, 8, 37, 16], &[0, 1, 3, 2]),
    ];
    for &(shape, perm) in cases {
        let x = rng.f32s(numel(shape));
        let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
        let y = Node::new("Transpose", 13)
            .ints("perm", &p)
            .run1(&[var(f32t(shape, &x))])
            .unwrap();
        let (s, want) = naive_transpose(&x, shape, perm);
        assert_eq!(y.shape(), s.as_slice());
        assert_eq!(y.as_f32().unwrap(), want.as_slice(), "{shape:?} {perm:?}");
    }
    // Default: reversed axes; any element type.
    let x = Tensor::new(vec![2, 3], TensorData::U8((0..6).collect())).unwrap();
    let y = Node::new("Transpose", 13).run1(&[var(x)]).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(&y.data().to_data(), &TensorData::U8(vec![0, 3, 1, 4, 2, 5]));
}

#[test]
fn transpose_errors() {
    let e = Node::new("Transpose", 13)
        .ints("perm", &[0, 0])
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(e), "perm");
    let e = Node::new("Transpose", 13)
        .ints("perm", &[1, 0])
        .run1(&[var(f32t(&[2, 2, 1], &[0.; 4]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // Rank above the limit of 8.
    let shape = [1usize; 9];
    let e = Node::new("Transpose", 13)
        .run1(&[var(f32t(&shape, &[1.0]))])
        .unwrap_err();
    assert!(
        matches!(e, KernelError::Shape(ref m) if m.contains("rank 9")),
        "{e:?}"
    );
}

/// starts, ends, axes, steps.
type SliceCase = (Vec<i64>, Vec<i64>, Option<Vec<i64>>, Option<Vec<i64>>);

/// Naive numpy-style slice of one axis.
fn py_range(d: i64, start: i64, end: i64, step: i64) -> Vec<usize> {
    let norm = |v: i64| if v < 0 { v + d } else { v };
    let (mut s, mut e) = (norm(start), norm(end));
    let mut out = vec![];
    if step > 0 {
        s = s.clamp(0, d);
        e = e.clamp(0, d);
        let mut i = s;
        while i < e {
            out.push(i as usize);
            i += step;
        }
    } else {
        s = s.clamp(-1, d - 1);
        e = e.clamp(-1, d - 1);
        let mut i = s;
        while i > e {
            out.push(i as usize);
            i += step;
        }
    }
    out
}

fn naive_slice(x: &[f32], shape: &[usize], ranges: &[Vec<usize>]) -> (Vec<usize>, Vec<f32>) {
    let out_shape: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
    let st = strides(shape);
    let y = (0..numel(&out_shape))
        .map(|i| {
            let oi = unravel(i, &out_shape);
            x[(0..shape.len())
                .map(|d| ranges[d][oi[d]] * st[d])
                .sum::<usize>()]
        })
        .collect();
    (out_shape, y)
}

#[test]
fn slice_steps_negative_and_clamping() {
    let shape = [20usize, 10, 5];
    let x = Rng(1).f32s(1000);
    // (starts, ends, axes, steps)
    let cases: Vec<SliceCase> = vec![
        (vec![0, 0], vec![3, 10], Some(vec![0, 1]), Some(vec![1, 1])),
        (vec![0], vec![-1], Some(vec![1]), Some(vec![1])),
        (vec![1000], vec![1000], Some(vec![1]), Some(vec![1])),
        (vec![1], vec![1000], Some(vec![1]), Some(vec![1])),
        (vec![0, 0, 3], vec![20, 10, 4], None, None),
        (vec![0, 0, 3], vec![20, 10, 4], Some(vec![0, -2, -1]), None),
        (
            vec![20, 10, 4],
            vec![0, 0, 1],
            Some(vec![0, 1, 2]),
            Some(vec![-1, -3, -2]),
        ),
        (vec![-1], vec![i64::MIN], Some(vec![0]), Some(vec![-1])),
        (vec![i64::MIN], vec![i64::MAX], Some(vec![2]), Some(vec![2])),
        (vec![3], vec![17], Some(vec![0]), Some(vec![5])),
        (vec![5], vec![2], Some(vec![0]), Some(vec![1])),
        (vec![2, 1], vec![4, 9], Some(vec![2, 1]), Some(vec![1, 3])),
    ];
    for (starts, ends, axes, steps) in cases {
        let mut ranges: Vec<Vec<usize>> = shape.iter().map(|&d| (0..d).collect()).collect();
        for i in 0..starts.len() {
            let a = axes.as_ref().map_or(i as i64, |a| a[i]);
            let a = if a < 0 { a + 3 } else { a } as usize;
            let st = steps.as_ref().map_or(1, |s| s[i]);
            ranges[a] = py_range(shape[a] as i64, starts[i], ends[i], st);
        }
        let (s, want) = naive_slice(&x, &shape, &ranges);
        let mut inputs = vec![var(f32t(&shape, &x)), ints(&starts), ints(&ends)];
        match (&axes, &steps) {
            (Some(a), Some(st)) => inputs.extend([ints(a), ints(st)]),
            (Some(a), None) => inputs.push(ints(a)),
            (None, Some(st)) => inputs.extend([In::Absent, ints(st)]),
            (None, None) => {}
        }
        let y = Node::new("Slice", 13).run1(&inputs).unwrap();
        assert_eq!(
            y.shape(),
            s.as_slice(),
            "{starts:?} {ends:?} {axes:?} {steps:?}"
        );
        assert_eq!(
            y.as_f32().unwrap(),
            want.as_slice(),
            "{starts:?} {ends:?} {axes:?} {steps:?}"
        );
    }
}

#[test]
fn slice_attribute_form_and_errors() {
    let x = iota(12);
    let y = Node::new("Slice", 1)
        .ints("starts", &[1, 0])
        .ints("ends", &[3, -1])
        .run1(&[var(f32t(&[3, 4], &x))])
        .unwrap();
    assert_eq!(y, f32t(&[2, 3], &[4., 5., 6., 8., 9., 10.]));
    let y = Node::new("Slice", 9)
        .ints("starts", &[2])
        .ints("ends", &[4])
        .ints("axes", &[1])
        .run1(&[var(f32t(&[3, 4], &x))])
        .unwrap();
    assert_eq!(y, f32t(&[3, 2], &[2., 3., 6., 7., 10., 11.]));
    // Opset 10+ no longer takes the attributes.
    assert!(
        Node::new("Slice", 13)
            .ints("starts", &[0])
            .build(3)
            .is_err()
    );
    // Non-constant starts.
    let e = Node::new("Slice", 13)
        .run1(&[var(f32t(&[4], &iota(4))), var(i64t(&[1], &[0])), ints(&[2])])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "Slice",
            input: 1
        }
    );
    let e = Node::new("Slice", 13)
        .run1(&[
            var(f32t(&[4], &iota(4))),
            ints(&[0]),
            ints(&[2]),
            ints(&[0]),
            ints(&[0]),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // i32 parameters.
    let c = |v: &[i32]| In::Const(i32t(&[v.len()], v));
    let y = Node::new("Slice", 13)
        .run1(&[
            var(f32t(&[4], &iota(4))),
            c(&[3]),
            c(&[0]),
            c(&[0]),
            c(&[-2]),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[2], &[3., 1.]));
}

#[test]
fn split_all_three_forms() {
    let x = f32t(&[6], &[1., 2., 3., 4., 5., 6.]);
    let parts = |out: Vec<Tensor>| {
        out.iter()
            .map(|t| t.as_f32().unwrap().to_vec())
            .collect::<Vec<_>>()
    };
    // Opset 18 num_outputs.
    let out = Node::new("Split", 18)
        .int("num_outputs", 3)
        .outputs(3)
        .run(&[var(x.clone())])
        .unwrap();
    assert_eq!(parts(out), vec![vec![1., 2.], vec![3., 4.], vec![5., 6.]]);
    // Opset 13-18 split input.
    for opset in [13, 18] {
        let out = Node::new("Split", opset)
            .outputs(2)
            .run(&[var(x.clone()), ints(&[2, 4])])
            .unwrap();
        assert_eq!(parts(out), vec![vec![1., 2.], vec![3., 4., 5., 6.]]);
        // No sizes: equal parts.
        let out = Node::new("Split", opset)
            .outputs(3)
            .run(&[var(x.clone())])
            .unwrap();
        assert_eq!(parts(out), vec![vec![1., 2.], vec![3., 4.], vec![5., 6.]]);
    }
    // Opset < 13 split attribute.
    let out = Node::new("Split", 11)
        .ints("split", &[1, 5])
        .outputs(2)
        .run(&[var(x.clone())])
        .unwrap();
    assert_eq!(parts(out), vec![vec![1.], vec![2., 3., 4., 5., 6.]]);
    // 2-D along axis 1.
    let x2 = f32t(&[2, 6], &iota(12));
    let out = Node::new("Split", 13)
        .int("axis", 1)
        .outputs(2)
        .run(&[var(x2.clone()), ints(&[2, 4])])
        .unwrap();
    assert_eq!(out[0], f32t(&[2, 2], &[0., 1., 6., 7.]));
    assert_eq!(out[1], f32t(&[2, 4], &[2., 3., 4., 5., 8., 9., 10., 11.]));
    // Zero-size splits.
    let out = Node::new("Split", 18)
        .outputs(3)
        .run(&[var(f32t(&[0], &[])), ints(&[0, 0, 0])])
        .unwrap();
    assert!(out.iter().all(|t| t.shape() == [0]));
}

#[test]
fn split_uneven_num_outputs() {
    let out = Node::new("Split", 18)
        .int("num_outputs", 4)
        .outputs(4)
        .run(&[var(f32t(&[7], &iota(7)))])
        .unwrap();
    let sizes: Vec<usize> = out.iter().map(|t| t.len()).collect();
    assert_eq!(sizes, vec![2, 2, 2, 1]);
    assert_eq!(out[3], f32t(&[1], &[6.]));
    let out = Node::new("Split", 18)
        .int("axis", 1)
        .int("num_outputs", 3)
        .outputs(3)
        .run(&[var(f32t(&[2, 8], &iota(16)))])
        .unwrap();
    assert_eq!(out[0], f32t(&[2, 3], &[0., 1., 2., 8., 9., 10.]));
    assert_eq!(out[2], f32t(&[2, 2], &[6., 7., 14., 15.]));
}

#[test]
fn split_errors() {
    let x = f32t(&[6], &iota(6));
    // num_outputs must match the node's outputs.
    let e = Node::new("Split", 18)
        .int("num_outputs", 2)
        .outputs(3)
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(e), "num_outputs");
    // num_outputs only exists from opset 18; `split` attribute only before 13.
    assert!(
        Node::new("Split", 13)
            .int("num_outputs", 2)
            .outputs(2)
            .build(1)
            .is_err()
    );
    assert!(
        Node::new("Split", 13)
            .ints("split", &[3, 3])
            .outputs(2)
            .build(1)
            .is_err()
    );
    let e = Node::new("Split", 13)
        .outputs(2)
        .run(&[var(x.clone()), ints(&[2, 3])])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = Node::new("Split", 13)
        .outputs(4)
        .run(&[var(x.clone())])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = Node::new("Split", 13)
        .outputs(2)
        .run(&[var(x), var(i64t(&[2], &[3, 3]))])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "Split",
            input: 1
        }
    );
}

#[test]
fn concat_axes_and_errors() {
    let a = f32t(&[2, 2], &[1., 2., 3., 4.]);
    let b = f32t(&[2, 2], &[5., 6., 7., 8.]);
    let y = Node::new("Concat", 13)
        .int("axis", 0)
        .run1(&[var(a.clone()), var(b.clone())])
        .unwrap();
    assert_eq!(y, f32t(&[4, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]));
    let y = Node::new("Concat", 13)
        .int("axis", -1)
        .run1(&[var(a.clone()), var(b.clone())])
        .unwrap();
    assert_eq!(y, f32t(&[2, 4], &[1., 2., 5., 6., 3., 4., 7., 8.]));
    // Three inputs of different sizes along the axis, one empty, i64 data.
    let y = Node::new("Concat", 13)
        .int("axis", 1)
        .run1(&[
            var(i64t(&[2, 1], &[1, 2])),
            var(i64t(&[2, 0], &[])),
            var(i64t(&[2, 2], &[3, 4, 5, 6])),
        ])
        .unwrap();
    assert_eq!(y, i64t(&[2, 3], &[1, 3, 4, 2, 5, 6]));
    // KV-cache style: [1,8,T,64] ++ [1,8,1,64] along axis 2.
    let mut rng = Rng(4);
    let (past, new) = (rng.f32s(8 * 5 * 64), rng.f32s(8 * 64));
    let y = Node::new("Concat", 13)
        .int("axis", 2)
        .run1(&[
            var(f32t(&[1, 8, 5, 64], &past)),
            var(f32t(&[1, 8, 1, 64], &new)),
        ])
        .unwrap();
    let y = y.as_f32().unwrap();
    for h in 0..8 {
        for t in 0..6 {
            let want = if t < 5 {
                &past[(h * 5 + t) * 64..][..64]
            } else {
                &new[h * 64..][..64]
            };
            assert_eq!(&y[(h * 6 + t) * 64..][..64], want);
        }
    }
    let e = Node::new("Concat", 13).build(2).unwrap_err();
    assert_eq!(attribute_error(e), "axis");
    let e = Node::new("Concat", 13)
        .int("axis", 0)
        .run1(&[var(a.clone()), var(f32t(&[2, 3], &[0.; 6]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = Node::new("Concat", 13)
        .int("axis", 2)
        .run1(&[var(a.clone()), var(b)])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = Node::new("Concat", 13)
        .int("axis", 0)
        .run1(&[var(a), var(i64t(&[2, 2], &[0; 4]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
}
