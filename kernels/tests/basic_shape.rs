//! Reshape, Squeeze, Unsqueeze, Identity, Cast and Constant.

mod basic_util;

use basic_util::*;
use half::{bf16, f16};
use onnx_prepared_kernels::{ElementType, KernelError, Tensor, TensorData};

fn reshape(data: &Tensor, shape: &[i64], allowzero: Option<i64>) -> Result<Tensor, KernelError> {
    let mut node = Node::new("Reshape", 21);
    if let Some(a) = allowzero {
        node = node.int("allowzero", a);
    }
    node.run1(&[var(data.clone()), ints(shape)])
}

#[test]
fn reshape_zero_minus_one_and_allowzero() {
    let x = f32t(&[2, 3, 4], &(0..24).map(|v| v as f32).collect::<Vec<_>>());
    let cases: &[(&[i64], &[usize])] = &[
        (&[4, 2, 3], &[4, 2, 3]),
        (&[2, 12], &[2, 12]),
        (&[24], &[24]),
        (&[2, -1, 2], &[2, 6, 2]),
        (&[-1, 2, 3, 4], &[1, 2, 3, 4]),
        (&[2, 0, 4, 1], &[2, 3, 4, 1]),
        (&[2, 0, 1, -1], &[2, 3, 1, 4]),
        (&[0, 0, -1], &[2, 3, 4]),
    ];
    for &(target, want) in cases {
        let y = reshape(&x, target, None).unwrap();
        assert_eq!(y.shape(), want, "{target:?}");
        assert_eq!(y.as_f32().unwrap(), x.as_f32().unwrap());
    }
    // allowzero=1 keeps the 0 literally.
    let empty = f32t(&[0, 3, 4], &[]);
    let y = reshape(&empty, &[3, 4, 0], Some(1)).unwrap();
    assert_eq!(y.shape(), &[3, 4, 0]);
    // ... and with allowzero=0 the 0 copies the input dimension.
    let e = reshape(&empty, &[3, 4, 0], Some(0)).unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    for bad in [&[5, -1][..], &[-1, -1], &[2, -2, 6], &[7], &[0, 0, 0, 0]] {
        let e = reshape(&x, bad, None).unwrap_err();
        assert!(matches!(e, KernelError::Shape(_)), "{bad:?}: {e:?}");
    }
    let e = reshape(&x, &[0, -1], Some(1)).unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = Node::new("Reshape", 21)
        .int("allowzero", 2)
        .build(2)
        .unwrap_err();
    assert_eq!(attribute_error(e), "allowzero");
}

#[test]
fn reshape_needs_a_constant_shape() {
    let x = f32t(&[2, 2], &[1., 2., 3., 4.]);
    let e = Node::new("Reshape", 14)
        .run1(&[var(x.clone()), var(i64t(&[1], &[4]))])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "Reshape",
            input: 1
        }
    );
    // Opset < 5: the shape attribute.
    let y = Node::new("Reshape", 1)
        .ints("shape", &[4])
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(y, f32t(&[4], &[1., 2., 3., 4.]));
    // allowzero does not exist before opset 14.
    assert!(
        Node::new("Reshape", 13)
            .int("allowzero", 0)
            .build(2)
            .is_err()
    );
}

#[test]
fn squeeze_and_unsqueeze() {
    let x = f32t(&[1, 3, 1, 2], &[1., 2., 3., 4., 5., 6.]);
    let y = Node::new("Squeeze", 13)
        .run1(&[var(x.clone()), ints(&[0])])
        .unwrap();
    assert_eq!(y.shape(), &[3, 1, 2]);
    let y = Node::new("Squeeze", 13)
        .run1(&[var(x.clone()), ints(&[-2])])
        .unwrap();
    assert_eq!(y.shape(), &[1, 3, 2]);
    let y = Node::new("Squeeze", 13).run1(&[var(x.clone())]).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(y.as_f32().unwrap(), x.as_f32().unwrap());
    let y = Node::new("Squeeze", 13)
        .run1(&[var(x.clone()), ints(&[])])
        .unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    let y = Node::new("Squeeze", 11)
        .ints("axes", &[0, 2])
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(y.shape(), &[3, 2]);
    let e = Node::new("Squeeze", 13)
        .run1(&[var(x.clone()), ints(&[1])])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = Node::new("Squeeze", 13)
        .run1(&[var(x.clone()), var(i64t(&[1], &[0]))])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "Squeeze",
            input: 1
        }
    );

    let x = f32t(&[3, 4, 5], &[0.0; 60]);
    for (axes, want) in [
        (&[0i64][..], &[1usize, 3, 4, 5][..]),
        (&[3], &[3, 4, 5, 1]),
        (&[1, 4], &[3, 1, 4, 5, 1]),
        (&[2, 4, 5], &[3, 4, 1, 5, 1, 1]),
        (&[5, 4, 2], &[3, 4, 1, 5, 1, 1]),
        (&[-1], &[3, 4, 5, 1]),
    ] {
        let y = Node::new("Unsqueeze", 13)
            .run1(&[var(x.clone()), ints(axes)])
            .unwrap();
        assert_eq!(y.shape(), want, "{axes:?}");
    }
    let y = Node::new("Unsqueeze", 11)
        .ints("axes", &[0])
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(y.shape(), &[1, 3, 4, 5]);
    for bad in [&[1, 1][..], &[5]] {
        let e = Node::new("Unsqueeze", 13)
            .run1(&[var(x.clone()), ints(bad)])
            .unwrap_err();
        assert!(matches!(e, KernelError::Shape(_)), "{bad:?}: {e:?}");
    }
    let e = Node::new("Unsqueeze", 11).build(1).unwrap_err();
    assert_eq!(attribute_error(e), "axes");
    assert!(
        Node::new("Unsqueeze", 13)
            .ints("axes", &[0])
            .build(2)
            .is_err()
    );
}

#[test]
fn identity_copies_any_type() {
    let x = Tensor::new(vec![2], TensorData::Bool(vec![true, false])).unwrap();
    assert_eq!(
        Node::new("Identity", 21).run1(&[var(x.clone())]).unwrap(),
        x
    );
}

fn tensor_of(dtype: ElementType, v: &[f64]) -> Tensor {
    let n = vec![v.len()];
    let data = match dtype {
        ElementType::F32 => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
        ElementType::F64 => TensorData::F64(v.to_vec()),
        ElementType::F16 => TensorData::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        ElementType::BF16 => TensorData::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
        ElementType::I8 => TensorData::I8(v.iter().map(|&x| x as i8).collect()),
        ElementType::I16 => TensorData::I16(v.iter().map(|&x| x as i16).collect()),
        ElementType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
        ElementType::I64 => TensorData::I64(v.iter().map(|&x| x as i64).collect()),
        ElementType::U8 => TensorData::U8(v.iter().map(|&x| x as u8).collect()),
        ElementType::U16 => TensorData::U16(v.iter().map(|&x| x as u16).collect()),
        ElementType::U32 => TensorData::U32(v.iter().map(|&x| x as u32).collect()),
        ElementType::U64 => TensorData::U64(v.iter().map(|&x| x as u64).collect()),
        ElementType::Bool => TensorData::Bool(v.iter().map(|&x| x != 0.0).collect()),
        _ => unreachable!(),
    };
    Tensor::new(n, data).unwrap()
}

const TYPES: [(ElementType, i64); 13] = [
    (ElementType::F32, 1),
    (ElementType::U8, 2),
    (ElementType::I8, 3),
    (ElementType::U16, 4),
    (ElementType::I16, 5),
    (ElementType::I32, 6),
    (ElementType::I64, 7),
    (ElementType::Bool, 9),
    (ElementType::F16, 10),
    (ElementType::F64, 11),
    (ElementType::U32, 12),
    (ElementType::U64, 13),
    (ElementType::BF16, 16),
];

fn cast(x: &Tensor, to: i64) -> Tensor {
    Node::new("Cast", 21)
        .int("to", to)
        .run1(&[var(x.clone())])
        .unwrap()
}

#[test]
fn cast_round_trips_small_integers_between_all_types() {
    // 0..=100 is exact in every type (bool only for 0/1).
    let vals: Vec<f64> = (0..=100).map(|v| v as f64).collect();
    for &(from, _) in &TYPES {
        if from == ElementType::Bool {
            continue;
        }
        let x = tensor_of(from, &vals);
        for &(to, code) in &TYPES {
            let y = cast(&x, code);
            assert_eq!(y.dtype(), to);
            if to == ElementType::Bool {
                let want: Vec<bool> = vals.iter().map(|&v| v != 0.0).collect();
                assert_eq!(y.as_bool().unwrap(), want.as_slice());
                continue;
            }
            assert_eq!(y, tensor_of(to, &vals), "{from} -> {to}");
            let back = TYPES.iter().find(|t| t.0 == from).unwrap().1;
            assert_eq!(cast(&y, back), x, "{from} -> {to} -> {from}");
        }
    }
}

#[test]
fn cast_truncates_like_onnx_runtime() {
    // Expected values: ONNX Runtime 1.32.0 (CPU EP) on x86-64: truncation,
    // NaN and out-of-range values the integer indefinite (MIN), u8 the low
    // bits of the i32 conversion (basic_ort_integers covers every type).
    let x = f32t(
        &[8],
        &[2.7, -2.7, 0.5, -0.5, f32::NAN, f32::INFINITY, -1e20, 300.0],
    );
    let min64 = i64::MIN;
    assert_eq!(
        cast(&x, 7),
        i64t(&[8], &[2, -2, 0, 0, min64, min64, min64, 300])
    );
    let min32 = i32::MIN;
    assert_eq!(
        cast(&x, 6),
        i32t(&[8], &[2, -2, 0, 0, min32, min32, min32, 300])
    );
    let y = cast(&x, 2);
    assert_eq!(y.as_u8().unwrap(), &[2, 254, 0, 0, 0, 0, 0, 44]);
    let y = cast(&x, 9);
    assert_eq!(
        y.as_bool().unwrap(),
        &[true, true, true, true, true, true, true, true]
    );
    // Integer narrowing wraps like static_cast.
    let y = cast(&i64t(&[3], &[300, -1, 65537]), 3);
    assert_eq!(y.as_i8().unwrap(), &[44, -1, 1]);
    // bool -> float.
    let b = Tensor::new(vec![2], TensorData::Bool(vec![true, false])).unwrap();
    assert_eq!(cast(&b, 1), f32t(&[2], &[1.0, 0.0]));
    // Float widening/narrowing: f32 -> f16 rounds to nearest, NaN stays NaN.
    let y = cast(&f32t(&[3], &[0.1, 65520.0, f32::NAN]), 10);
    let h = y.as_f16().unwrap();
    assert_eq!(h[0], f16::from_f32(0.1));
    assert!(h[1].is_infinite());
    assert!(h[2].is_nan());
    let y = cast(&f32t(&[1], &[0.47892547]), 16);
    assert_eq!(y.as_bf16().unwrap(), &[bf16::from_f32(0.47892547)]);
    let y = cast(&f64t(&[1], &[1.0 / 3.0]), 1);
    assert_eq!(y, f32t(&[1], &[1.0f32 / 3.0]));
}

#[test]
fn cast_attributes() {
    // Unsupported targets name `to`.
    for code in [8, 14, 17, 19, 21, 22, 23, 24, 99] {
        let e = Node::new("Cast", 21).int("to", code).build(1).unwrap_err();
        assert_eq!(attribute_error(e), "to", "code {code}");
    }
    assert_eq!(
        attribute_error(Node::new("Cast", 21).build(1).unwrap_err()),
        "to"
    );
    Node::new("Cast", 21)
        .int("to", 1)
        .int("saturate", 0)
        .build(1)
        .unwrap();
    assert!(
        Node::new("Cast", 13)
            .int("to", 1)
            .int("saturate", 1)
            .build(1)
            .is_err()
    );
    assert_eq!(
        attribute_error(
            Node::new("Cast", 21)
                .int("to", 1)
                .int("saturate", 3)
                .build(1)
                .unwrap_err()
        ),
        "saturate"
    );
    // Cast-1 names the type.
    let y = Node::new("Cast", 1)
        .string("to", "INT64")
        .run1(&[var(f32t(&[1], &[3.9]))])
        .unwrap();
    assert_eq!(y, i64t(&[1], &[3]));
}

#[test]
fn constant_variants() {
    let t = f32t(&[2, 2], &[1., 2., 3., 4.]);
    let run = |n: Node| {
        let op = n.build(0).unwrap();
        let info = op.infer(&[]).unwrap();
        assert_eq!(info.len(), 1);
        let out = run_op(op.as_ref(), &[]).unwrap().remove(0);
        assert_eq!(out.shape(), info[0].shape.as_slice());
        out
    };
    assert_eq!(run(Node::new("Constant", 13).tensor("value", t.clone())), t);
    assert_eq!(
        run(Node::new("Constant", 13).float("value_float", 1.5)),
        f32t(&[], &[1.5])
    );
    assert_eq!(
        run(Node::new("Constant", 13).floats("value_floats", &[1., 2.])),
        f32t(&[2], &[1., 2.])
    );
    assert_eq!(
        run(Node::new("Constant", 13).int("value_int", -3)),
        i64t(&[], &[-3])
    );
    assert_eq!(
        run(Node::new("Constant", 13).ints("value_ints", &[4, 5, 6])),
        i64t(&[3], &[4, 5, 6])
    );
    for name in ["value_string", "sparse_value"] {
        let e = Node::new("Constant", 13)
            .string(name, "x")
            .build(0)
            .unwrap_err();
        assert!(matches!(e, KernelError::Attribute { .. }), "{e:?}");
    }
    let e = Node::new("Constant", 13)
        .ints("value_strings", &[])
        .build(0)
        .unwrap_err();
    assert!(matches!(e, KernelError::Attribute { .. }), "{e:?}");
    // None, two, or one not known at this opset.
    assert!(Node::new("Constant", 13).build(0).is_err());
    assert!(
        Node::new("Constant", 13)
            .int("value_int", 1)
            .float("value_float", 1.0)
            .build(0)
            .is_err()
    );
    assert!(
        Node::new("Constant", 11)
            .int("value_int", 1)
            .build(0)
            .is_err()
    );
}
