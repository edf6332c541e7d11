//! Add/Sub/Mul/Div/Pow broadcasting and integer semantics; Sigmoid, Neg,
//! Sqrt, Reciprocal; attribute and type errors.

mod basic_util;

use basic_util::*;
use onnx_prepared_kernels::{KernelError, Tensor, TensorData};

/// Naive NumPy broadcast: out shape and, per output element, the flat
/// indices into a and b.
fn naive_broadcast(a: &[usize], b: &[usize]) -> (Vec<usize>, Vec<(usize, usize)>) {
    let r = a.len().max(b.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; r - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(a), pad(b));
    let out: Vec<usize> = pa
        .iter()
        .zip(&pb)
        .map(|(&x, &y)| if x == 1 { y } else { x })
        .collect();
    let (sa, sb) = (strides(&pa), strides(&pb));
    let pairs = (0..numel(&out))
        .map(|i| {
            let idx = unravel(i, &out);
            let ia: usize = (0..r)
                .map(|d| if pa[d] == 1 { 0 } else { idx[d] * sa[d] })
                .sum();
            let ib: usize = (0..r)
                .map(|d| if pb[d] == 1 { 0 } else { idx[d] * sb[d] })
                .sum();
            (ia, ib)
        })
        .collect();
    (out, pairs)
}

fn check_f32_broadcast(op: &str, a_shape: &[usize], b_shape: &[usize], f: fn(f32, f32) -> f32) {
    let mut rng = Rng(a_shape.len() as u64 * 31 + b_shape.iter().sum::<usize>() as u64);
    let a = rng.f32s(numel(a_shape));
    let b: Vec<f32> = rng.f32s(numel(b_shape)).iter().map(|v| v + 2.5).collect();
    let y = Node::new(op, 14)
        .run1(&[var(f32t(a_shape, &a)), var(f32t(b_shape, &b))])
        .unwrap();
    let (out_shape, pairs) = naive_broadcast(a_shape, b_shape);
    assert_eq!(
        y.shape(),
        out_shape.as_slice(),
        "{op} {a_shape:?} {b_shape:?}"
    );
    let want: Vec<f32> = pairs.iter().map(|&(i, j)| f(a[i], b[j])).collect();
    assert_eq!(
        y.as_f32().unwrap(),
        want.as_slice(),
        "{op} {a_shape:?} {b_shape:?}"
    );
}

#[test]
fn add_broadcasts_like_numpy() {
    assert_eq!(
        Node::new("Add", 14)
            .run1(&[
                var(f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.])),
                var(f32t(&[3], &[10., 20., 30.]))
            ])
            .unwrap(),
        f32t(&[2, 3], &[11., 22., 33., 14., 25., 36.])
    );
    let shapes: &[(&[usize], &[usize])] = &[
        (&[2, 3], &[3]),
        (&[2, 1, 3], &[4, 1]),
        (&[4, 1], &[2, 1, 3]),
        (&[3, 4, 5], &[]),
        (&[], &[3, 4, 5]),
        (&[1, 7, 16], &[16]),
        (&[1, 7, 16], &[1, 7, 1]),
        (&[5, 1, 4, 1], &[3, 1, 2]),
        (&[2, 3, 4], &[2, 3, 4]),
        (&[3, 1], &[1, 4]),
        (&[1], &[1]),
        (&[2, 1, 2, 1, 2], &[1, 2, 1, 2, 1]),
        (&[0, 3], &[3]),
    ];
    for &(a, b) in shapes {
        check_f32_broadcast("Add", a, b, |x, y| x + y);
        check_f32_broadcast("Sub", a, b, |x, y| x - y);
        check_f32_broadcast("Mul", a, b, |x, y| x * y);
        check_f32_broadcast("Div", a, b, |x, y| x / y);
    }
}

#[test]
fn scalar_times_matrix() {
    let y = Node::new("Mul", 14)
        .run1(&[
            var(f32t(&[], &[2.0])),
            var(f32t(&[2, 2], &[1., 2., 3., 4.])),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[2, 2], &[2., 4., 6., 8.]));
}

#[test]
fn mismatched_shapes_are_shape_errors() {
    let e = Node::new("Add", 14)
        .run1(&[var(f32t(&[2, 3], &[0.; 6])), var(f32t(&[2], &[0.; 2]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = Node::new("Add", 14)
        .run1(&[var(f32t(&[2], &[0.; 2])), var(i64t(&[2], &[0; 2]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
}

#[test]
fn integer_division_truncates_toward_zero() {
    let y = Node::new("Div", 14)
        .run1(&[
            var(i32t(&[4], &[-3, 3, -3, 3])),
            var(i32t(&[4], &[2, 2, -2, -2])),
        ])
        .unwrap();
    assert_eq!(y, i32t(&[4], &[-1, 1, 1, -1]));
    let y = Node::new("Div", 14)
        .run1(&[var(i64t(&[3], &[7, -7, i64::MIN])), var(i64t(&[], &[-2]))])
        .unwrap();
    assert_eq!(y, i64t(&[3], &[-3, 3, i64::MIN / -2]));
    // i32::MIN / -1 wraps instead of trapping.
    let y = Node::new("Div", 14)
        .run1(&[var(i32t(&[1], &[i32::MIN])), var(i32t(&[1], &[-1]))])
        .unwrap();
    assert_eq!(y, i32t(&[1], &[i32::MIN]));
}

#[test]
fn integer_division_by_zero_is_invalid() {
    let e = Node::new("Div", 14)
        .run1(&[var(i64t(&[2], &[1, 2])), var(i64t(&[2], &[1, 0]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Invalid { op: "Div", .. }), "{e:?}");
    // Floats follow IEEE.
    let y = Node::new("Div", 14)
        .run1(&[var(f32t(&[2], &[1., -1.])), var(f32t(&[2], &[0., 0.]))])
        .unwrap();
    assert_eq!(y.as_f32().unwrap(), &[f32::INFINITY, f32::NEG_INFINITY]);
}

#[test]
fn every_integer_type_is_supported() {
    let cases: Vec<(TensorData, TensorData, TensorData)> = vec![
        (
            TensorData::I8(vec![100, -5]),
            TensorData::I8(vec![28, 3]),
            TensorData::I8(vec![-128, -2]),
        ),
        (
            TensorData::U8(vec![250, 5]),
            TensorData::U8(vec![10, 3]),
            TensorData::U8(vec![4, 8]),
        ),
        (
            TensorData::I16(vec![7, -5]),
            TensorData::I16(vec![3, 3]),
            TensorData::I16(vec![10, -2]),
        ),
        (
            TensorData::U16(vec![7, 5]),
            TensorData::U16(vec![3, 3]),
            TensorData::U16(vec![10, 8]),
        ),
        (
            TensorData::U32(vec![7, 5]),
            TensorData::U32(vec![3, 3]),
            TensorData::U32(vec![10, 8]),
        ),
        (
            TensorData::U64(vec![7, 5]),
            TensorData::U64(vec![3, 3]),
            TensorData::U64(vec![10, 8]),
        ),
    ];
    for (a, b, sum) in cases {
        let y = Node::new("Add", 14)
            .run1(&[
                var(Tensor::new(vec![2], a).unwrap()),
                var(Tensor::new(vec![2], b).unwrap()),
            ])
            .unwrap();
        assert_eq!(&y.data().to_data(), &sum);
    }
    let y = Node::new("Sub", 14)
        .run1(&[
            var(Tensor::new(vec![2], TensorData::U8(vec![1, 5])).unwrap()),
            var(Tensor::new(vec![2], TensorData::U8(vec![2, 3])).unwrap()),
        ])
        .unwrap();
    assert_eq!(&y.data().to_data(), &TensorData::U8(vec![255, 2]));
    let y = Node::new("Div", 14)
        .run1(&[
            var(Tensor::new(vec![2], TensorData::U16(vec![23, 5])).unwrap()),
            var(Tensor::new(vec![2], TensorData::U16(vec![4, 6])).unwrap()),
        ])
        .unwrap();
    assert_eq!(&y.data().to_data(), &TensorData::U16(vec![5, 0]));
}

#[test]
fn f64_and_half_arithmetic() {
    let y = Node::new("Mul", 14)
        .run1(&[var(f64t(&[2], &[1.5, -2.0])), var(f64t(&[1], &[4.0]))])
        .unwrap();
    assert_eq!(y, f64t(&[2], &[6.0, -8.0]));
    let h = |v: &[f32]| {
        Tensor::new(
            vec![v.len()],
            TensorData::F16(v.iter().map(|&x| half::f16::from_f32(x)).collect()),
        )
        .unwrap()
    };
    let y = Node::new("Add", 14)
        .run1(&[var(h(&[1.0, 2.5])), var(h(&[0.5, 0.25]))])
        .unwrap();
    assert_eq!(y, h(&[1.5, 2.75]));
}

#[test]
fn pow_types_and_broadcast() {
    let y = Node::new("Pow", 15)
        .run1(&[
            var(f32t(&[2, 3], &[1., 2., 3., 4., 5., 6.])),
            var(f32t(&[3], &[1., 2., 3.])),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[2, 3], &[1., 4., 27., 4., 25., 216.]));
    let y = Node::new("Pow", 15)
        .run1(&[var(f32t(&[3], &[1., 2., 3.])), var(i64t(&[3], &[4, 5, 6]))])
        .unwrap();
    assert_eq!(y, f32t(&[3], &[1., 32., 729.]));
    let y = Node::new("Pow", 15)
        .run1(&[var(i64t(&[3], &[1, 2, 3])), var(f32t(&[3], &[4., 5., 6.]))])
        .unwrap();
    assert_eq!(y, i64t(&[3], &[1, 32, 729]));
    let y = Node::new("Pow", 15)
        .run1(&[
            var(i32t(&[4], &[1, 2, -3, 2])),
            var(i32t(&[4], &[4, 5, 3, -1])),
        ])
        .unwrap();
    assert_eq!(y, i32t(&[4], &[1, 32, -27, 0]));
    let y = Node::new("Pow", 15)
        .run1(&[
            var(f32t(&[3], &[1., 2., 3.])),
            var(Tensor::new(vec![3], TensorData::U32(vec![4, 5, 6])).unwrap()),
        ])
        .unwrap();
    assert_eq!(y, f32t(&[3], &[1., 32., 729.]));
    // The squaring fast path matches x * x.
    let x = [-1.5f32, 0.0, 3.25, 1e20];
    let y = Node::new("Pow", 15)
        .run1(&[var(f32t(&[4], &x)), var(f32t(&[], &[2.0]))])
        .unwrap();
    let want: Vec<f32> = x.iter().map(|v| v * v).collect();
    assert_eq!(y.as_f32().unwrap(), want.as_slice());
    let y = Node::new("Pow", 15)
        .run1(&[var(f32t(&[2], &[4.0, 9.0])), var(f32t(&[], &[0.5]))])
        .unwrap();
    assert_close(y.as_f32().unwrap(), &[2.0, 3.0], 1e-6);
}

#[test]
fn unary_ops_match_formulas() {
    let x = [-3.0f32, -0.5, 0.0, 0.5, 3.0];
    let y = Node::new("Sigmoid", 13)
        .run1(&[var(f32t(&[5], &x))])
        .unwrap();
    let want: Vec<f32> = x.iter().map(|v| 1.0 / (1.0 + (-v).exp())).collect();
    assert_close(y.as_f32().unwrap(), &want, 1e-6);
    let y = Node::new("Neg", 13).run1(&[var(f32t(&[5], &x))]).unwrap();
    assert_eq!(y.as_f32().unwrap(), &[3.0, 0.5, -0.0, -0.5, -3.0]);
    let y = Node::new("Neg", 13)
        .run1(&[var(i64t(&[2], &[4, i64::MIN]))])
        .unwrap();
    assert_eq!(y, i64t(&[2], &[-4, i64::MIN]));
    let y = Node::new("Sqrt", 13)
        .run1(&[var(f32t(&[3], &[1., 4., 9.]))])
        .unwrap();
    assert_eq!(y, f32t(&[3], &[1., 2., 3.]));
    let y = Node::new("Reciprocal", 13)
        .run1(&[var(f64t(&[2], &[-4., 2.]))])
        .unwrap();
    assert_eq!(y, f64t(&[2], &[-0.25, 0.5]));
    let e = Node::new("Sqrt", 13)
        .run1(&[var(i64t(&[1], &[4]))])
        .unwrap_err();
    assert!(
        matches!(e, KernelError::UnsupportedType { op: "Sqrt", .. }),
        "{e:?}"
    );
}

#[test]
fn unknown_and_legacy_attributes_are_rejected() {
    let e = Node::new("Add", 14).int("foo", 1).build(2).unwrap_err();
    let KernelError::Attribute {
        op: "Add", detail, ..
    } = e
    else {
        panic!("{e:?}")
    };
    assert!(detail.contains("foo"), "{detail}");
    let e = Node::new("Mul", 6)
        .int("broadcast", 1)
        .int("axis", 0)
        .build(2)
        .unwrap_err();
    assert_eq!(attribute_error(e), "broadcast");
    // broadcast=0 (same shapes) is fine.
    Node::new("Mul", 6).int("broadcast", 0).build(2).unwrap();
    // consumed_inputs is only known before opset 6.
    Node::new("Neg", 1)
        .ints("consumed_inputs", &[0])
        .build(1)
        .unwrap();
    Node::new("Neg", 13)
        .ints("consumed_inputs", &[0])
        .build(1)
        .unwrap_err();
}

#[test]
fn unread_legacy_attributes_are_type_checked() {
    // ONNX Runtime refuses a model whose attribute is declared with another
    // type than its schema's, read or not; these legacy attributes change
    // nothing here, but a wrong declared type is an error all the same.
    let e = Node::new("Neg", 5).int("consumed_inputs", 0).build(1);
    assert_eq!(attribute_error(e.unwrap_err()), "consumed_inputs");
    let e = Node::new("Mul", 6).int("broadcast", 0).ints("axis", &[0]);
    assert_eq!(attribute_error(e.build(2).unwrap_err()), "axis");
    let e = Node::new("Equal", 6).ints("axis", &[0]).build(2);
    assert_eq!(attribute_error(e.unwrap_err()), "axis");
    let e = Node::new("Gemm", 6).float("broadcast", 0.0).build(2);
    assert_eq!(attribute_error(e.unwrap_err()), "broadcast");
    // Declared as their schema declares them, they are accepted.
    Node::new("Neg", 5)
        .ints("consumed_inputs", &[0])
        .build(1)
        .unwrap();
    Node::new("Mul", 6)
        .int("broadcast", 0)
        .int("axis", 0)
        .build(2)
        .unwrap();
    Node::new("Gemm", 6).int("broadcast", 0).build(2).unwrap();
}

#[test]
fn broadcast_beyond_rank_limit_is_an_error() {
    // Alternating broadcast patterns cannot be merged: 9 strided dimensions.
    let a: Vec<usize> = (0..9).map(|i| if i % 2 == 0 { 2 } else { 1 }).collect();
    let b: Vec<usize> = (0..9).map(|i| if i % 2 == 0 { 1 } else { 2 }).collect();
    let e = Node::new("Add", 14)
        .run1(&[
            var(f32t(&a, &vec![0.0; numel(&a)])),
            var(f32t(&b, &vec![0.0; numel(&b)])),
        ])
        .unwrap_err();
    assert!(
        matches!(e, KernelError::Shape(ref m) if m.contains("8")),
        "{e:?}"
    );
    // High rank is fine when it collapses (equal shapes).
    let s = vec![1, 2, 1, 2, 1, 2, 1, 2, 1, 2];
    let y = Node::new("Add", 14)
        .run1(&[var(f32t(&s, &[1.0; 32])), var(f32t(&s, &[2.0; 32]))])
        .unwrap();
    assert_eq!(y.as_f32().unwrap(), &[3.0; 32]);
}

#[test]
fn execute_rejects_inconsistent_inputs_without_panicking() {
    let op = Node::new("Add", 14).build(2).unwrap();
    let a = f32t(&[2, 3], &[0.0; 6]);
    let b = f32t(&[3], &[0.0; 3]);
    // Output allocated with a wrong size.
    let mut out = vec![Tensor::zeros(onnx_prepared_kernels::ElementType::F32, vec![5]).unwrap()];
    let e = op
        .execute(
            &[Some(&a), Some(&b)],
            None,
            &mut out,
            &onnx_prepared_kernels::Sequential,
        )
        .unwrap_err();
    assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
    // Wrong output type.
    let mut out = vec![Tensor::zeros(onnx_prepared_kernels::ElementType::I64, vec![2, 3]).unwrap()];
    assert!(
        op.execute(
            &[Some(&a), Some(&b)],
            None,
            &mut out,
            &onnx_prepared_kernels::Sequential
        )
        .is_err()
    );
    // Missing input.
    assert!(
        op.execute(
            &[Some(&a), None],
            None,
            &mut out,
            &onnx_prepared_kernels::Sequential
        )
        .is_err()
    );
}
