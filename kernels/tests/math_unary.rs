//! Unary math: Abs, Exp, Log, Cos, Sin, Tanh, Erf, Gelu, Relu, Floor, Ceil,
//! Round, Sign. The f32 kernels of Exp, Tanh, Erf and Gelu are checked
//! against f64 references over their whole useful range.

mod math_util;

use math_util::*;
use onnx_prepared_kernels::{KernelError, Sequential, Tensor};

fn run_f32(op: &str, opset: i64, x: &[f32]) -> Vec<f32> {
    Node::new(op, opset)
        .run1(&[var(f32t(&[x.len()], x))])
        .unwrap()
        .as_f32()
        .unwrap()
        .to_vec()
}

/// A dense grid over [lo, hi).
fn grid(lo: f32, hi: f32, step: f32) -> Vec<f32> {
    let n = ((hi - lo) / step) as usize;
    (0..n).map(|i| lo + i as f32 * step).collect()
}

/// The largest ulp distance between the kernel and `reference` rounded to
/// f32, over `xs`.
fn max_ulps(op: &Node, xs: &[f32], reference: impl Fn(f64) -> f64) -> (u32, f32) {
    let out = op.run1(&[var(f32t(&[xs.len()], xs))]).unwrap();
    let got = out.as_f32().unwrap();
    let mut worst = (0, 0.0);
    for (&x, &g) in xs.iter().zip(got) {
        let want = reference(f64::from(x)) as f32;
        let u = ulps(g, want);
        if u > worst.0 {
            worst = (u, x);
        }
    }
    worst
}

#[test]
fn exp_is_within_two_ulp_of_f64() {
    // The normal range (results below f32::MIN_POSITIVE flush to 0).
    let xs = grid(-87.3, 88.7, 0.000_71);
    let (u, at) = max_ulps(&Node::new("Exp", 13), &xs, f64::exp);
    assert!(u <= 2, "{u} ulp at {at}");
    let out = run_f32(
        "Exp",
        13,
        &[
            0.0,
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            100.0,
            -100.0,
        ],
    );
    assert_eq!(out[..3], [1.0, 0.0, f32::INFINITY]);
    assert!(out[3].is_nan());
    assert_eq!(out[4], f32::INFINITY);
    assert_eq!(out[5], 0.0);
    let under = run_f32("Exp", 13, &[-87.5, -103.0]);
    assert!(under.iter().all(|&v| (0.0..f32::MIN_POSITIVE).contains(&v)));
}

#[test]
fn tanh_is_within_three_ulp_of_f64() {
    let xs = grid(-12.0, 12.0, 0.000_37);
    let (u, at) = max_ulps(&Node::new("Tanh", 13), &xs, f64::tanh);
    assert!(u <= 3, "{u} ulp at {at}");
    let tiny = grid(-1e-3, 1e-3, 1.3e-7);
    let (u, at) = max_ulps(&Node::new("Tanh", 13), &tiny, f64::tanh);
    assert!(u <= 1, "{u} ulp at {at}");
    let out = run_f32(
        "Tanh",
        13,
        &[0.0, -0.0, 100.0, -100.0, f32::INFINITY, f32::NAN],
    );
    assert_eq!(out[..5], [0.0, -0.0, 1.0, -1.0, 1.0]);
    assert!(out[1].is_sign_negative());
    assert!(out[5].is_nan());
}

#[test]
fn erf_is_within_two_ulp_of_f64() {
    let xs = grid(-6.0, 6.0, 0.000_29);
    let (u, at) = max_ulps(&Node::new("Erf", 13), &xs, erf_ref);
    assert!(u <= 2, "{u} ulp at {at}");
    let tiny = grid(-1e-4, 1e-4, 1.1e-8);
    let (u, at) = max_ulps(&Node::new("Erf", 13), &tiny, erf_ref);
    assert!(u <= 1, "{u} ulp at {at}");
    let out = run_f32(
        "Erf",
        13,
        &[
            0.0,
            1.0,
            10.0,
            -10.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ],
    );
    assert_eq!(out[0], 0.0);
    assert!((out[1] - 0.842_700_8).abs() < 1e-7);
    assert_eq!(out[2..6], [1.0, -1.0, 1.0, -1.0]);
    assert!(out[6].is_nan());
}

/// Gelu in f64: `x/2·(1 + erf(x/√2))`, the negative side through erfc.
fn gelu_ref(x: f64) -> f64 {
    let z = x / std::f64::consts::SQRT_2;
    if z < 0.0 {
        0.5 * x * erfc_ref(-z)
    } else {
        0.5 * x * (1.0 + erf_ref(z))
    }
}

fn gelu_tanh_ref(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + u.tanh())
}

#[test]
fn gelu_matches_f64_including_the_negative_tail() {
    let xs = grid(-12.0, 8.0, 0.000_93);
    let op = Node::new("Gelu", 20);
    let out = op.run1(&[var(f32t(&[xs.len()], &xs))]).unwrap();
    for (&x, &g) in xs.iter().zip(out.as_f32().unwrap()) {
        let want = gelu_ref(f64::from(x));
        // Relative accuracy on both sides; x/√2 rounds once in f32, which
        // moves erfc(a) by up to 2a²·2⁻²⁴ relative in the tail.
        let a = f64::from(x).abs() / std::f64::consts::SQRT_2;
        let tol = 4.0 * f64::from(f32::EPSILON) * (1.0 + 2.0 * a * a) * want.abs() + 1e-37;
        assert!((f64::from(g) - want).abs() <= tol, "x={x}: {g} vs {want}");
    }
    let tanh = Node::new("Gelu", 20).string("approximate", "tanh");
    let out = tanh.run1(&[var(f32t(&[xs.len()], &xs))]).unwrap();
    for (&x, &g) in xs.iter().zip(out.as_f32().unwrap()) {
        let want = gelu_tanh_ref(f64::from(x));
        // u = √(2/π)(x + 0.044715x³) rounds in f32, and e^{-2u} turns that
        // into a relative error of |2u| times as much; the f64 reference
        // itself cancels for negative x.
        let xd = f64::from(x);
        let u = (2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd * xd * xd);
        let eps = f64::from(f32::EPSILON);
        let tol = 4.0 * eps * (1.0 + 2.0 * u.abs()) * want.abs() + 1e-15 * xd.abs();
        assert!((f64::from(g) - want).abs() <= tol, "x={x}: {g} vs {want}");
    }
}

#[test]
fn gelu_f64_and_f16() {
    let xs = [-3.0, -1.0, -0.25, 0.0, 0.5, 2.0];
    let out = Node::new("Gelu", 20).run1(&[var(f64t(&[6], &xs))]).unwrap();
    for (&x, &g) in xs.iter().zip(out.as_f64().unwrap()) {
        assert!(
            (g - gelu_ref(x)).abs() <= 1e-14 * (1.0 + gelu_ref(x).abs()),
            "{x}: {g}"
        );
    }
    let out = Node::new("Gelu", 20)
        .string("approximate", "tanh")
        .run1(&[var(f64t(&[6], &xs))])
        .unwrap();
    for (&x, &g) in xs.iter().zip(out.as_f64().unwrap()) {
        assert!((g - gelu_tanh_ref(x)).abs() <= 1e-14, "{x}: {g}");
    }
    let xs32 = [-1.0f32, 0.5, 2.0];
    let out = Node::new("Gelu", 20)
        .run1(&[var(f16t(&[3], &xs32))])
        .unwrap();
    for (&x, g) in xs32.iter().zip(out.as_f16().unwrap()) {
        let want = gelu_ref(f64::from(x)) as f32;
        assert!(
            (g.to_f32() - want).abs() <= 1e-3 * (1.0 + want.abs()),
            "{x}: {g}"
        );
    }
    let err = Node::new("Gelu", 20)
        .string("approximate", "fast")
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(err), "approximate");
}

/// `erf` at a few points, from CPython's `math.erf` (correctly rounded or
/// within an ulp).
const ERF_TABLE: [(f64, f64); 19] = [
    (-6.5, -1.0),
    (-4.2, -0.9999999971445058),
    (-2.996, -0.9999773457558763),
    (-2.5, -0.999593047982555),
    (-1.7, -0.9837904585907745),
    (-0.9, -0.7969082124228322),
    (-0.3, -0.3286267594591274),
    (-1e-05, -1.1283791670579e-05),
    (0.0, 0.0),
    (0.05, 0.05637197779701663),
    (0.6, 0.6038560908479259),
    (1.0, 0.8427007929497149),
    (1.3, 0.9340079449406524),
    (2.0, 0.9953222650189527),
    (2.49, 0.9995707121322661),
    (2.51, 0.9996142945182758),
    (3.3, 0.9999969422902035),
    (4.7, 0.9999999999700474),
    (5.9, 0.9999999999999999),
];

#[test]
fn erf_f64_matches_the_table() {
    let xs: Vec<f64> = ERF_TABLE.iter().map(|p| p.0).collect();
    let out = Node::new("Erf", 13)
        .run1(&[var(f64t(&[xs.len()], &xs))])
        .unwrap();
    for (&(x, want), &g) in ERF_TABLE.iter().zip(out.as_f64().unwrap()) {
        assert!((g - want).abs() <= 1e-15 * want.abs(), "{x}: {g} vs {want}");
    }
}

#[test]
fn libm_functions_and_rounding() {
    let xs = [0.5f32, 1.0, 2.5, 10.0];
    let close = |op: &str, f: fn(f64) -> f64, xs: &[f32]| {
        let got = run_f32(op, 13, xs);
        for (&x, &g) in xs.iter().zip(&got) {
            assert!(ulps(g, f(f64::from(x)) as f32) <= 1, "{op}({x}) = {g}");
        }
    };
    close("Log", f64::ln, &xs);
    close("Cos", f64::cos, &[-3.0, 0.0, 0.7, 100.0]);
    close("Sin", f64::sin, &[-3.0, 0.0, 0.7, 100.0]);
    let out = run_f32("Log", 13, &[0.0, -1.0]);
    assert_eq!(out[0], f32::NEG_INFINITY);
    assert!(out[1].is_nan());
    let x = [-2.5f32, -1.5, -0.5, 0.5, 1.5, 2.5, 2.6, -2.4, f32::NAN];
    let r = run_f32("Round", 11, &x);
    assert_eq!(r[..8], [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 3.0, -2.0]);
    assert!(r[8].is_nan());
    assert_eq!(run_f32("Floor", 13, &[-1.5, 1.5, -0.0]), [-2.0, 1.0, -0.0]);
    assert_eq!(run_f32("Ceil", 13, &[-1.5, 1.5, 2.0]), [-1.0, 2.0, 2.0]);
    let d = Node::new("Round", 11)
        .run1(&[var(f64t(&[3], &[0.5, 1.5, -2.5]))])
        .unwrap();
    assert_eq!(d.as_f64().unwrap(), [0.0, 2.0, -2.0]);
}

#[test]
fn abs_relu_sign_on_floats_and_integers() {
    assert_eq!(run_f32("Abs", 13, &[-1.5, 0.0, 2.0]), [1.5, 0.0, 2.0]);
    assert_eq!(run_f32("Relu", 14, &[-1.5, 0.0, 2.0]), [0.0, 0.0, 2.0]);
    let s = run_f32("Sign", 13, &[-1.5, 0.0, 2.0, f32::NAN]);
    assert_eq!(s[..3], [-1.0, 0.0, 1.0]);
    assert!(s[3].is_nan());
    let x = i64t(&[4], &[i64::MIN, -3, 0, 7]);
    let abs = Node::new("Abs", 13).run1(&[var(x.clone())]).unwrap();
    assert_eq!(abs.as_i64().unwrap(), [i64::MIN, 3, 0, 7]);
    let relu = Node::new("Relu", 14).run1(&[var(x.clone())]).unwrap();
    assert_eq!(relu.as_i64().unwrap(), [0, 0, 0, 7]);
    let sign = Node::new("Sign", 13).run1(&[var(x)]).unwrap();
    assert_eq!(sign.as_i64().unwrap(), [-1, -1, 0, 1]);
    let u = Node::new("Sign", 13)
        .run1(&[var(u8t(&[3], &[0, 1, 200]))])
        .unwrap();
    assert_eq!(u.as_u8().unwrap(), [0, 1, 1]);
    let i = Node::new("Abs", 13)
        .run1(&[var(i32t(&[2], &[-5, 5]))])
        .unwrap();
    assert_eq!(i.as_i32().unwrap(), [5, 5]);
    let h = Node::new("Abs", 13)
        .run1(&[var(f16t(&[2], &[-0.5, 3.0]))])
        .unwrap();
    assert_eq!(
        h.as_f16().unwrap(),
        [half::f16::from_f32(0.5), half::f16::from_f32(3.0)]
    );
}

#[test]
fn unary_errors() {
    let err = Node::new("Exp", 13)
        .run1(&[var(i64t(&[1], &[1]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
    let err = Node::new("Abs", 13)
        .run1(&[var(bt(&[1], &[true]))])
        .unwrap_err();
    assert!(
        matches!(err, KernelError::UnsupportedType { .. }),
        "{err:?}"
    );
    let err = Node::new("Tanh", 13).int("alpha", 1).build(1).unwrap_err();
    assert_eq!(attribute_error(err), "(unknown)");
    let err = Node::new("Sin", 7)
        .run1(&[var(f32t(&[1], &[1.0])), var(f32t(&[1], &[1.0]))])
        .unwrap_err();
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    // consumed_inputs is accepted before opset 6 only.
    assert!(
        Node::new("Relu", 1)
            .ints("consumed_inputs", &[0])
            .build(1)
            .is_ok()
    );
    assert!(
        Node::new("Relu", 6)
            .ints("consumed_inputs", &[0])
            .build(1)
            .is_err()
    );
}

#[test]
fn large_unary_outputs_match_in_parallel() {
    let mut rng = Rng(5);
    let n = 100_003;
    let x: Vec<f32> = rng.f32s(n).iter().map(|v| v * 6.0).collect();
    let t = f32t(&[n], &x);
    for node in [
        Node::new("Erf", 13),
        Node::new("Tanh", 13),
        Node::new("Gelu", 20),
        Node::new("Exp", 13),
    ] {
        let one = run_par(&node, &[&t], &Sequential);
        let split = run_par(&node, &[&t], &Reversed);
        assert_eq!(one, split, "{}", node.op_type);
        let r: Tensor = one;
        let got = r.as_f32().unwrap();
        // Spot-check against the scalar references.
        for i in (0..n).step_by(997) {
            let x = f64::from(x[i]);
            let want = match node.op_type.as_str() {
                "Erf" => erf_ref(x),
                "Tanh" => x.tanh(),
                "Gelu" => gelu_ref(x),
                _ => x.exp(),
            };
            assert!(
                (f64::from(got[i]) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "{i}"
            );
        }
    }
}
