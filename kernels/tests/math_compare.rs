//! Comparison and logic operators: Equal, Less, LessOrEqual, Greater,
//! GreaterOrEqual, And, Or, Xor, Not, IsNaN, IsInf.

mod math_util;

use math_util::*;
use onnx_prepared_kernels::{ElementType, KernelError, Sequential, Tensor};

fn bools(t: &Tensor) -> Vec<bool> {
    assert_eq!(t.dtype(), ElementType::Bool);
    t.as_bool().unwrap().to_vec()
}

#[test]
fn comparisons_of_floats_broadcast_and_follow_ieee() {
    let a = f32t(&[2, 3], &[1.0, 2.0, f32::NAN, -0.0, 5.0, -3.0]);
    let b = f32t(&[3], &[2.0, 2.0, 1.0]);
    let cases: [(&str, [bool; 6]); 5] = [
        ("Equal", [false, true, false, false, false, false]),
        ("Less", [true, false, false, true, false, true]),
        ("LessOrEqual", [true, true, false, true, false, true]),
        ("Greater", [false, false, false, false, true, false]),
        ("GreaterOrEqual", [false, true, false, false, true, false]),
    ];
    for (op, want) in cases {
        let out = Node::new(op, 16)
            .run1(&[var(a.clone()), var(b.clone())])
            .unwrap();
        assert_eq!(out.shape(), &[2, 3]);
        assert_eq!(bools(&out), want, "{op}");
    }
    // -0 equals +0.
    let z = Node::new("Equal", 13)
        .run1(&[var(f32t(&[1], &[-0.0])), var(f32t(&[], &[0.0]))])
        .unwrap();
    assert_eq!(bools(&z), [true]);
}

#[test]
fn comparisons_of_integers_f64_and_f16() {
    let a = i64t(&[4], &[i64::MIN, -1, 0, i64::MAX]);
    let b = i64t(&[1], &[0]);
    let out = Node::new("Less", 13).run1(&[var(a), var(b)]).unwrap();
    assert_eq!(bools(&out), [true, true, false, false]);
    let a = i32t(&[3, 1], &[1, 2, 3]);
    let b = i32t(&[1, 3], &[1, 2, 3]);
    let out = Node::new("GreaterOrEqual", 16)
        .run1(&[var(a), var(b)])
        .unwrap();
    assert_eq!(out.shape(), &[3, 3]);
    assert_eq!(
        bools(&out),
        [true, false, false, true, true, false, true, true, true]
    );
    let out = Node::new("Greater", 13)
        .run1(&[var(f64t(&[2], &[0.5, 1.5])), var(f64t(&[2], &[1.0, 1.0]))])
        .unwrap();
    assert_eq!(bools(&out), [false, true]);
    let out = Node::new("LessOrEqual", 16)
        .run1(&[
            var(f16t(&[3], &[0.5, 1.0, 2.0])),
            var(f16t(&[3], &[1.0, 1.0, 1.0])),
        ])
        .unwrap();
    assert_eq!(bools(&out), [true, true, false]);
    let out = Node::new("Equal", 19)
        .run1(&[var(u8t(&[3], &[0, 7, 255])), var(u8t(&[3], &[0, 8, 255]))])
        .unwrap();
    assert_eq!(bools(&out), [true, false, true]);
}

#[test]
fn equal_accepts_bool_and_the_others_do_not() {
    let a = bt(&[4], &[true, true, false, false]);
    let b = bt(&[4], &[true, false, true, false]);
    let out = Node::new("Equal", 19)
        .run1(&[var(a.clone()), var(b.clone())])
        .unwrap();
    assert_eq!(bools(&out), [true, false, false, true]);
    let err = Node::new("Less", 13).run1(&[var(a), var(b)]).unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
}

#[test]
fn comparison_errors() {
    // Mixed types.
    let err = Node::new("Equal", 13)
        .run1(&[var(f32t(&[1], &[1.0])), var(i64t(&[1], &[1]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    // Shapes that do not broadcast.
    let err = Node::new("Greater", 13)
        .run1(&[var(f32t(&[2], &[1.0, 2.0])), var(f32t(&[3], &[1.0; 3]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    // Wrong arity.
    let err = Node::new("Less", 13)
        .run1(&[var(f32t(&[1], &[1.0]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    // Unknown attribute.
    let err = Node::new("Less", 13).int("axis", 0).build(2).unwrap_err();
    assert_eq!(attribute_error(err), "(unknown)");
    // Legacy broadcasting.
    let err = Node::new("Equal", 1)
        .int("broadcast", 1)
        .build(2)
        .unwrap_err();
    assert_eq!(attribute_error(err), "broadcast");
}

#[test]
fn logic_operators_broadcast() {
    let a = bt(&[2, 2], &[true, true, false, false]);
    let b = bt(&[2], &[true, false]);
    for (op, want) in [
        ("And", [true, false, false, false]),
        ("Or", [true, true, true, false]),
        ("Xor", [false, true, true, false]),
    ] {
        let out = Node::new(op, 7)
            .run1(&[var(a.clone()), var(b.clone())])
            .unwrap();
        assert_eq!(out.shape(), &[2, 2]);
        assert_eq!(bools(&out), want, "{op}");
    }
    let out = Node::new("Not", 1).run1(&[var(a.clone())]).unwrap();
    assert_eq!(bools(&out), [false, false, true, true]);
    let err = Node::new("And", 7)
        .run1(&[var(f32t(&[1], &[1.0])), var(f32t(&[1], &[1.0]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
    let err = Node::new("Not", 1)
        .run1(&[var(i64t(&[1], &[1]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
}

#[test]
fn isnan_and_isinf() {
    let x = f32t(
        &[5],
        &[1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0],
    );
    let out = Node::new("IsNaN", 20).run1(&[var(x.clone())]).unwrap();
    assert_eq!(bools(&out), [false, true, false, false, false]);
    let out = Node::new("IsInf", 20).run1(&[var(x.clone())]).unwrap();
    assert_eq!(bools(&out), [false, false, true, true, false]);
    let out = Node::new("IsInf", 20)
        .int("detect_negative", 0)
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(bools(&out), [false, false, true, false, false]);
    let out = Node::new("IsInf", 20)
        .int("detect_positive", 0)
        .run1(&[var(x)])
        .unwrap();
    assert_eq!(bools(&out), [false, false, false, true, false]);
    let h = f16t(&[3], &[f32::NAN, f32::INFINITY, 70000.0]);
    let out = Node::new("IsInf", 20).run1(&[var(h.clone())]).unwrap();
    // 70000 overflows f16 to infinity.
    assert_eq!(bools(&out), [false, true, true]);
    let out = Node::new("IsNaN", 20).run1(&[var(h)]).unwrap();
    assert_eq!(bools(&out), [true, false, false]);
    let d = f64t(&[2], &[f64::NAN, 1.0]);
    assert_eq!(
        bools(&Node::new("IsNaN", 13).run1(&[var(d)]).unwrap()),
        [true, false]
    );
    let err = Node::new("IsInf", 20)
        .int("detect_positive", 2)
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(err), "detect_positive");
    let err = Node::new("IsNaN", 20)
        .run1(&[var(i32t(&[1], &[1]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
}

#[test]
fn large_comparisons_match_a_scalar_reference_in_parallel() {
    let mut rng = Rng(11);
    let n = 64 * 1024;
    let a = f32t(&[64, 1024], &rng.f32s(n));
    let b = f32t(&[1024], &rng.f32s(1024));
    let node = Node::new("Less", 13);
    let one = run_par(&node, &[&a, &b], &Sequential);
    let split = run_par(&node, &[&a, &b], &Reversed);
    assert_eq!(one, split);
    let (av, bv, out) = (
        a.as_f32().unwrap(),
        b.as_f32().unwrap(),
        split.as_bool().unwrap(),
    );
    for i in 0..n {
        assert_eq!(out[i], av[i] < bv[i % 1024], "{i}");
    }
}
