//! Max, Min (variadic, broadcasting), Mod (fmod 0/1, integer and float)
//! and Clip (attribute and input forms).

mod math_util;

use math_util::*;
use onnx_prepared_kernels::{KernelError, Sequential, Tensor, TensorData};

#[test]
fn max_and_min_broadcast_over_several_inputs() {
    let a = f32t(&[3], &[3.0, 2.0, 1.0]);
    let b = f32t(&[2, 1], &[1.5, 2.5]);
    let c = f32t(&[], &[2.0]);
    let max = Node::new("Max", 13)
        .run1(&[var(a.clone()), var(b.clone()), var(c.clone())])
        .unwrap();
    assert_eq!(max.shape(), &[2, 3]);
    assert_eq!(max.as_f32().unwrap(), [3.0, 2.0, 2.0, 3.0, 2.5, 2.5]);
    let min = Node::new("Min", 13)
        .run1(&[var(a.clone()), var(b), var(c)])
        .unwrap();
    assert_eq!(min.as_f32().unwrap(), [1.5, 1.5, 1.0, 2.0, 2.0, 1.0]);
    // One input: a copy.
    let one = Node::new("Max", 13).run1(&[var(a.clone())]).unwrap();
    assert_eq!(one, a);
    // The first input smaller than the output: broadcast first.
    let small = f32t(&[1], &[2.5]);
    let out = Node::new("Min", 13)
        .run1(&[var(small), var(a.clone())])
        .unwrap();
    assert_eq!(out.as_f32().unwrap(), [2.5, 2.0, 1.0]);
    // NaN propagates.
    let n = f32t(&[3], &[f32::NAN, 0.0, 5.0]);
    let out = Node::new("Max", 13).run1(&[var(a), var(n)]).unwrap();
    let v = out.as_f32().unwrap();
    assert!(v[0].is_nan());
    assert_eq!(v[1..], [2.0, 5.0]);
}

#[test]
fn max_and_min_of_integers_and_f16() {
    let a = i64t(&[3], &[i64::MIN, 5, -2]);
    let b = i64t(&[3], &[0, 4, -3]);
    let out = Node::new("Max", 13)
        .run1(&[var(a.clone()), var(b.clone())])
        .unwrap();
    assert_eq!(out.as_i64().unwrap(), [0, 5, -2]);
    let out = Node::new("Min", 13).run1(&[var(a), var(b)]).unwrap();
    assert_eq!(out.as_i64().unwrap(), [i64::MIN, 4, -3]);
    let out = Node::new("Max", 13)
        .run1(&[var(u8t(&[2], &[1, 200])), var(u8t(&[2], &[100, 3]))])
        .unwrap();
    assert_eq!(out.as_u8().unwrap(), [100, 200]);
    let out = Node::new("Min", 13)
        .run1(&[var(f16t(&[2], &[1.0, -2.0])), var(f16t(&[2], &[0.5, 3.0]))])
        .unwrap();
    assert_eq!(out, f16t(&[2], &[0.5, -2.0]));
    // More inputs than the fixed array holds.
    let inputs: Vec<In> = (0..11).map(|i| var(i32t(&[2], &[i, -i]))).collect();
    let out = Node::new("Max", 13).run1(&inputs).unwrap();
    assert_eq!(out.as_i32().unwrap(), [10, 0]);
}

#[test]
fn max_min_errors() {
    let err = Node::new("Max", 13)
        .run1(&[var(f32t(&[1], &[1.0])), var(i64t(&[1], &[1]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("Min", 13)
        .run1(&[var(f32t(&[2], &[1.0; 2])), var(f32t(&[3], &[1.0; 3]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("Max", 13).run1(&[]).unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("Max", 13)
        .run1(&[var(bt(&[1], &[true]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
}

/// Python's `%` on integers (the sign of the divisor).
fn py_mod(a: i64, b: i64) -> i64 {
    let r = a % b;
    if r != 0 && (r < 0) != (b < 0) {
        r + b
    } else {
        r
    }
}

#[test]
fn integer_mod_follows_the_divisor_or_the_dividend() {
    let a: Vec<i64> = vec![-4, 7, 5, 4, -7, 8, i64::MIN, 3];
    let b: Vec<i64> = vec![3, -3, 2, -3, 3, 4, -1, 0];
    let out = Node::new("Mod", 13)
        .run1(&[var(i64t(&[8], &a)), var(i64t(&[8], &b))])
        .unwrap();
    let want: Vec<i64> = a
        .iter()
        .zip(&b)
        // By zero: 0; by -1: 0 (also for MIN, where `%` would overflow).
        .map(|(&x, &y)| if y == 0 || y == -1 { 0 } else { py_mod(x, y) })
        .collect();
    assert_eq!(out.as_i64().unwrap(), want.as_slice());
    assert_eq!(want[..6], [2, -2, 1, -2, 2, 0]);
    let out = Node::new("Mod", 13)
        .int("fmod", 1)
        .run1(&[var(i64t(&[8], &a)), var(i64t(&[8], &b))])
        .unwrap();
    assert_eq!(out.as_i64().unwrap(), [-1, 1, 1, 1, -1, 0, 0, 0]);
    let out = Node::new("Mod", 13)
        .run1(&[var(i8t(&[3], &[-5, 5, -128])), var(i8t(&[1], &[3]))])
        .unwrap();
    assert_eq!(out.as_i8().unwrap(), [1, 2, 1]);
    let out = Node::new("Mod", 13)
        .run1(&[var(u8t(&[2], &[250, 7])), var(u8t(&[2], &[7, 0]))])
        .unwrap();
    assert_eq!(out.as_u8().unwrap(), [5, 0]);
}

#[test]
fn float_mod_fmod_and_numpy_mod() {
    let a = [-4.3f32, 7.2, 5.0, -5.0, 4.0, -0.0];
    let b = [2.1f32, -3.4, 2.0, 2.0, -2.0, 3.0];
    let out = Node::new("Mod", 13)
        .int("fmod", 1)
        .run1(&[var(f32t(&[6], &a)), var(f32t(&[6], &b))])
        .unwrap();
    for ((&x, &y), &g) in a.iter().zip(&b).zip(out.as_f32().unwrap()) {
        // C fmod: x − trunc(x/y)·y, computed exactly in f64 for these.
        let want = (f64::from(x) % f64::from(y)) as f32;
        assert_eq!(g.to_bits(), want.to_bits(), "fmod({x}, {y})");
    }
    let out = Node::new("Mod", 28)
        .run1(&[var(f32t(&[6], &a)), var(f32t(&[6], &b))])
        .unwrap();
    let v = out.as_f32().unwrap();
    assert!((v[0] - 2.0).abs() < 1e-6, "{}", v[0]); // -4.3 mod 2.1 = 2.0
    assert!((v[1] + 3.0).abs() < 1e-6, "{}", v[1]); // 7.2 mod -3.4 = -3.0
    assert_eq!(v[2..], [1.0, 1.0, -0.0, 0.0]);
    // A zero remainder takes the sign of the divisor.
    assert!(v[4].is_sign_negative() && v[5].is_sign_positive());
    let e = Node::new("Mod", 28)
        .run1(&[
            var(f64t(&[4], &[f64::INFINITY, 5.0, -5.0, 1.0])),
            var(f64t(&[4], &[2.0, f64::INFINITY, f64::INFINITY, 0.0])),
        ])
        .unwrap();
    let v = e.as_f64().unwrap();
    assert!(v[0].is_nan());
    assert_eq!(v[1], 5.0);
    assert_eq!(v[2], f64::INFINITY);
    assert!(v[3].is_nan());
    let err = Node::new("Mod", 13).int("fmod", 2).build(2).unwrap_err();
    assert_eq!(attribute_error(err), "fmod");
    let err = Node::new("Mod", 13)
        .run1(&[var(bt(&[1], &[true])), var(bt(&[1], &[true]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
}

#[test]
fn clip_with_input_bounds() {
    let x = f32t(&[5], &[-3.0, -1.0, 0.5, 2.0, f32::NAN]);
    let lo = f32t(&[], &[-1.5]);
    let hi = f32t(&[], &[1.0]);
    let out = Node::new("Clip", 13)
        .run1(&[var(x.clone()), var(lo.clone()), var(hi.clone())])
        .unwrap();
    let v = out.as_f32().unwrap();
    assert_eq!(v[..4], [-1.5, -1.0, 0.5, 1.0]);
    assert!(v[4].is_nan());
    // Only a maximum (the minimum omitted).
    let out = Node::new("Clip", 13)
        .run1(&[var(x.clone()), In::Absent, var(hi.clone())])
        .unwrap();
    assert_eq!(out.as_f32().unwrap()[..4], [-3.0, -1.0, 0.5, 1.0]);
    // Only a minimum.
    let out = Node::new("Clip", 13)
        .run1(&[var(x.clone()), var(lo)])
        .unwrap();
    assert_eq!(out.as_f32().unwrap()[..4], [-1.5, -1.0, 0.5, 2.0]);
    // min > max: every value becomes max.
    let out = Node::new("Clip", 13)
        .run1(&[
            var(x.clone()),
            var(f32t(&[], &[2.0])),
            var(f32t(&[], &[1.0])),
        ])
        .unwrap();
    assert_eq!(out.as_f32().unwrap()[..4], [1.0; 4]);
    // No bounds: a copy.
    let out = Node::new("Clip", 13).run1(&[var(x.clone())]).unwrap();
    assert_eq!(out.as_f32().unwrap()[..4], x.as_f32().unwrap()[..4]);
    // Integers.
    let out = Node::new("Clip", 13)
        .run1(&[
            var(i64t(&[4], &[-9, 0, 5, 100])),
            var(i64t(&[], &[-2])),
            var(i64t(&[1], &[6])),
        ])
        .unwrap();
    assert_eq!(out.as_i64().unwrap(), [-2, 0, 5, 6]);
    let out = Node::new("Clip", 13)
        .run1(&[
            var(i8t(&[3], &[-128, 0, 127])),
            In::Absent,
            var(i8t(&[], &[0])),
        ])
        .unwrap();
    assert_eq!(out.as_i8().unwrap(), [-128, 0, 0]);
}

#[test]
fn clip_with_attribute_bounds_before_opset_11() {
    let x = f32t(&[4], &[-3.0, -0.5, 0.5, 3.0]);
    let out = Node::new("Clip", 6)
        .float("min", -1.0)
        .float("max", 1.0)
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(out.as_f32().unwrap(), [-1.0, -0.5, 0.5, 1.0]);
    let out = Node::new("Clip", 6)
        .float("max", 0.0)
        .run1(&[var(x)])
        .unwrap();
    assert_eq!(out.as_f32().unwrap(), [-3.0, -0.5, 0.0, 0.0]);
    let err = Node::new("Clip", 13)
        .float("min", 0.0)
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(err), "(unknown)");
}

#[test]
fn clip_errors() {
    let x = f32t(&[2], &[1.0, 2.0]);
    let err = Node::new("Clip", 13)
        .run1(&[var(x.clone()), var(f32t(&[2], &[0.0, 1.0]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("Clip", 13)
        .run1(&[var(x.clone()), var(i64t(&[], &[0]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let err = Node::new("Clip", 6)
        .run1(&[var(x.clone()), var(x)])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    let b = Tensor::new(vec![1], TensorData::Bool(vec![true])).unwrap();
    let err = Node::new("Clip", 13).run1(&[var(b)]).unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
}

#[test]
fn large_binary_outputs_match_in_parallel() {
    let mut rng = Rng(3);
    let a = f32t(&[128, 512], &rng.f32s(128 * 512));
    let b = f32t(&[512], &rng.f32s(512));
    for node in [
        Node::new("Max", 13),
        Node::new("Min", 13),
        Node::new("Mod", 13).int("fmod", 1),
    ] {
        let one = run_par(&node, &[&a, &b], &Sequential);
        let split = run_par(&node, &[&a, &b], &Reversed);
        assert_eq!(one, split, "{}", node.op_type);
    }
    let lo = f32t(&[], &[-0.25]);
    let hi = f32t(&[], &[0.5]);
    let node = Node::new("Clip", 13);
    let one = run_par(&node, &[&a, &lo, &hi], &Sequential);
    let split = run_par(&node, &[&a, &lo, &hi], &Reversed);
    assert_eq!(one, split);
    for (&x, &y) in a.as_f32().unwrap().iter().zip(split.as_f32().unwrap()) {
        assert_eq!(y, x.clamp(-0.25, 0.5));
    }
}
