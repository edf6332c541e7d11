//! Integer results that ONNX leaves to the implementation, pinned to what
//! ONNX Runtime computes: integer Pow (negative exponents, overflow, the
//! multiplying shortcut for an exponent of 2 or 3) and Cast of NaN,
//! infinities and out-of-range floats to the integer types and bool.
//!
//! Every expected value is an ONNX Runtime 1.32.0 result (CPU EP, default
//! options) on x86-64, printed by `tools/ort_integer_semantics.py` (`pow`
//! for the inline cases, `cast` for `data/ort_cast.txt`).

mod basic_util;

use basic_util::*;
use half::{bf16, f16};
use onnx_prepared_kernels::{DataRef, ElementType, Tensor, TensorData};

const I32_MIN: i32 = i32::MIN;
const I64_MIN: i64 = i64::MIN;

fn pow(base: Tensor, exp: Tensor) -> Tensor {
    Node::new("Pow", 15).run1(&[var(base), var(exp)]).unwrap()
}

fn i32s(v: &[i64]) -> Vec<i32> {
    v.iter().map(|&x| i32::try_from(x).unwrap()).collect()
}

/// An exponent tensor of `dtype` (i32, i64, f32 or f64) holding `v`.
fn exponent(dtype: ElementType, shape: &[usize], v: &[f64]) -> Tensor {
    let data = match dtype {
        ElementType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
        ElementType::I64 => TensorData::I64(v.iter().map(|&x| x as i64).collect()),
        ElementType::F32 => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
        _ => TensorData::F64(v.to_vec()),
    };
    Tensor::new(shape.to_vec(), data).unwrap()
}

const EXPONENT_TYPES: [ElementType; 4] = [
    ElementType::I32,
    ElementType::I64,
    ElementType::F32,
    ElementType::F64,
];

#[test]
fn integer_pow_negative_exponents_and_overflow_match_onnx_runtime() {
    let base = [2, -2, 1, -1, 0, 3, -3, 2, 2, -2, 5, 7, 0, 1, -1, 2];
    let exp = [
        -1., -1., -5., -3., -1., 40., 41., 31., 63., 63., -2., 0., 0., -4., -4., 64.,
    ];
    // 2^-1, (-2)^-1, 1^-5, (-1)^-3, 0^-1, 3^40, (-3)^41, 2^31, 2^63,
    // (-2)^63, 5^-2, 7^0, 0^0, 1^-4, (-1)^-4, 2^64.
    let want32 = [
        0, 0, 1, -1, I32_MIN, I32_MIN, I32_MIN, I32_MIN, I32_MIN, I32_MIN, 0, 1, 1, 1, 1, I32_MIN,
    ];
    let want64 = [
        0, 0, 1, -1, I64_MIN, I64_MIN, I64_MIN, 2147483648, I64_MIN, I64_MIN, 0, 1, 1, 1, 1,
        I64_MIN,
    ];
    for dtype in EXPONENT_TYPES {
        let e = exponent(dtype, &[16], &exp);
        let y = pow(i32t(&[16], &i32s(&base)), e.clone());
        assert_eq!(y, i32t(&[16], &want32), "int32 ^ {dtype}");
        let y = pow(i64t(&[16], &base), e);
        assert_eq!(y, i64t(&[16], &want64), "int64 ^ {dtype}");
    }
}

#[test]
fn int64_pow_goes_through_double_precision() {
    // 3^39, (2^53 + 1)^1, (-2^53 - 1)^1, 3037000499^2, 3037000500^2.
    let base = [3, (1 << 53) + 1, -(1 << 53) - 1, 3037000499, 3037000500];
    let exp = [39., 1., 1., 2., 2.];
    let want = [
        4052555153018976256,
        9007199254740992,
        -9007199254740992,
        9223372030926248960,
        I64_MIN,
    ];
    for dtype in EXPONENT_TYPES {
        let y = pow(i64t(&[5], &base), exponent(dtype, &[5], &exp));
        assert_eq!(y, i64t(&[5], &want), "int64 ^ {dtype}");
    }
}

#[test]
fn integer_pow_with_fractional_exponents_matches_onnx_runtime() {
    let base = [2, 4, -8, -2, 0, 9, 100000, 3, 2];
    let exp = [0.5, -0.5, 1. / 3., 0.5, -1.5, 1.5, 3.0, 100.0, f64::NAN];
    let want32 = [
        1, 0, I32_MIN, I32_MIN, I32_MIN, 27, I32_MIN, I32_MIN, I32_MIN,
    ];
    let want64 = [
        1,
        0,
        I64_MIN,
        I64_MIN,
        I64_MIN,
        27,
        1000000000000000,
        I64_MIN,
        I64_MIN,
    ];
    for dtype in [ElementType::F32, ElementType::F64] {
        let e = exponent(dtype, &[9], &exp);
        let y = pow(i32t(&[9], &i32s(&base)), e.clone());
        assert_eq!(y, i32t(&[9], &want32), "int32 ^ {dtype}");
        let y = pow(i64t(&[9], &base), e);
        assert_eq!(y, i64t(&[9], &want64), "int64 ^ {dtype}");
    }
}

#[test]
fn a_scalar_exponent_of_two_or_three_multiplies_with_wrapping() {
    // ONNX Runtime multiplies (x*x, x*x*x) when the exponent is one value
    // per inner run and 2 or 3; otherwise std::pow, converted back.
    for (big, min) in [(65536i64, i64::from(I32_MIN)), (1 << 32, I64_MIN)] {
        let base = [big, 3, -big, 2_000_000];
        let (sq, cube) = if min == I64_MIN {
            ([0, 9, 0, 4000000000000], [0, 27, 0, 8000000000000000000])
        } else {
            ([0, 9, 0, 1385447424], [0, 27, 0, 991952896])
        };
        let full_sq = [
            min,
            9,
            min,
            if min == I64_MIN { 4000000000000 } else { min },
        ];
        let full_cube = [
            min,
            27,
            min,
            if min == I64_MIN {
                8000000000000000000
            } else {
                min
            },
        ];
        let x = |shape: &[usize], v: &[i64]| {
            if min == I64_MIN {
                i64t(shape, v)
            } else {
                i32t(shape, &i32s(v))
            }
        };
        for dtype in [ElementType::I64, ElementType::F32] {
            for shape in [&[1][..], &[]] {
                let y = pow(x(&[4], &base), exponent(dtype, shape, &[2.]));
                assert_eq!(y, x(&[4], &sq), "{big}: ^2 {dtype} {shape:?}");
                let y = pow(x(&[4], &base), exponent(dtype, shape, &[3.]));
                assert_eq!(y, x(&[4], &cube), "{big}: ^3 {dtype} {shape:?}");
                let y = pow(x(&[4], &base), exponent(dtype, shape, &[4.]));
                assert_eq!(y, x(&[4], &[min, 81, min, min]), "{big}: ^4 {dtype}");
            }
            let y = pow(x(&[4], &base), exponent(dtype, &[4], &[2.; 4]));
            assert_eq!(y, x(&[4], &full_sq), "{big}: ^2 {dtype} elementwise");
            let y = pow(x(&[4], &base), exponent(dtype, &[4], &[3.; 4]));
            assert_eq!(y, x(&[4], &full_cube), "{big}: ^3 {dtype} elementwise");
        }
        // One exponent per row: multiplied; one per column: std::pow.
        let b2 = x(&[2, 2], &[big, 3, big, 3]);
        let y = pow(b2.clone(), i64t(&[2, 1], &[2, 3]));
        assert_eq!(y, x(&[2, 2], &[0, 9, 0, 27]), "{big}: rows");
        let y = pow(b2, i64t(&[1, 2], &[2, 2]));
        assert_eq!(y, x(&[2, 2], &[min, 9, min, 9]), "{big}: columns");
        // A scalar base takes std::pow even with a scalar exponent.
        let y = pow(x(&[1], &[big]), i64t(&[1], &[2]));
        assert_eq!(y, x(&[1], &[min]), "{big}: scalar base");
        let y = pow(x(&[1], &[big]), i64t(&[2], &[2, 2]));
        assert_eq!(y, x(&[2], &[min, min]), "{big}: scalar base, two exponents");
    }
}

#[test]
fn a_scalar_float_exponent_of_three_is_a_product() {
    let x = [0x3f8ccccd_u32, 0x3fa66666, 0x3fd9999a, 0x3ff33333].map(f32::from_bits);
    let bits = |t: Tensor| {
        t.as_f32()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    // Scalar exponent: (x * x) * x in f32; elementwise: powf.
    let y = pow(f32t(&[4], &x), f32t(&[1], &[3.0]));
    assert_eq!(bits(y), [0x3faa5e36, 0x400c9ba5, 0x409d374c, 0x40db7ced]);
    let y = pow(f32t(&[4], &x), f32t(&[4], &[3.0; 4]));
    assert_eq!(bits(y), [0x3faa5e36, 0x400c9ba5, 0x409d374d, 0x40db7ced]);
}

/// The Cast table of ONNX Runtime's results.
const CAST_TABLE: &str = include_str!("data/ort_cast.txt");

fn element_type(name: &str) -> ElementType {
    match name {
        "f32" => ElementType::F32,
        "f64" => ElementType::F64,
        "f16" => ElementType::F16,
        "bf16" => ElementType::BF16,
        "i8" => ElementType::I8,
        "i16" => ElementType::I16,
        "i32" => ElementType::I32,
        "i64" => ElementType::I64,
        "u8" => ElementType::U8,
        "u16" => ElementType::U16,
        "u32" => ElementType::U32,
        "u64" => ElementType::U64,
        "bool" => ElementType::Bool,
        other => panic!("unknown type {other}"),
    }
}

/// A float tensor of `source` holding `values` (each exact in that type).
fn source_tensor(source: ElementType, values: &[f64]) -> Tensor {
    let data = match source {
        ElementType::F32 => TensorData::F32(values.iter().map(|&v| v as f32).collect()),
        ElementType::F64 => TensorData::F64(values.to_vec()),
        ElementType::F16 => TensorData::F16(values.iter().map(|&v| f16::from_f64(v)).collect()),
        _ => TensorData::BF16(values.iter().map(|&v| bf16::from_f64(v)).collect()),
    };
    Tensor::new(vec![values.len()], data).unwrap()
}

/// The elements of an integer or bool tensor as decimal words.
fn words(t: &Tensor) -> Vec<String> {
    fn strs<T: ToString>(v: &[T]) -> Vec<String> {
        v.iter().map(T::to_string).collect()
    }
    match t.data() {
        DataRef::I8(v) => strs(v),
        DataRef::I16(v) => strs(v),
        DataRef::I32(v) => strs(v),
        DataRef::I64(v) => strs(v),
        DataRef::U8(v) => strs(v),
        DataRef::U16(v) => strs(v),
        DataRef::U32(v) => strs(v),
        DataRef::U64(v) => strs(v),
        DataRef::Bool(v) => v.iter().map(|&b| u8::from(b).to_string()).collect(),
        other => panic!("not an integer tensor: {other:?}"),
    }
}

fn cast(x: &Tensor, to: ElementType) -> Tensor {
    let code = match to {
        ElementType::I8 => 3,
        ElementType::I16 => 5,
        ElementType::I32 => 6,
        ElementType::I64 => 7,
        ElementType::U8 => 2,
        ElementType::U16 => 4,
        ElementType::U32 => 12,
        ElementType::U64 => 13,
        _ => 9,
    };
    Node::new("Cast", 19)
        .int("to", code)
        .run1(&[var(x.clone())])
        .unwrap()
}

fn parse_values(words: &[&str]) -> Vec<f64> {
    words.iter().map(|w| w.parse::<f64>().unwrap()).collect()
}

#[test]
fn cast_of_nan_infinities_and_out_of_range_floats_matches_onnx_runtime() {
    let mut sources = std::collections::HashMap::new();
    let (mut checked, mut failures) = (0, Vec::new());
    for line in CAST_TABLE.lines().filter(|l| !l.starts_with('#')) {
        let w: Vec<&str> = line.split(' ').collect();
        match w.as_slice() {
            ["values", source, values @ ..] => {
                let source = element_type(source);
                sources.insert(source, source_tensor(source, &parse_values(values)));
            }
            ["tail", source, target, value, results @ ..] => {
                let (source, to) = (element_type(source), element_type(target));
                let v = value.parse::<f64>().unwrap();
                let (r7, r11) = results.split_at(7);
                for (n, want) in [(7, r7), (11, r11)] {
                    let got = words(&cast(&source_tensor(source, &vec![v; n]), to));
                    if got != want {
                        failures.push(format!("{source} {v} x{n} to {to}: {got:?} != {want:?}"));
                    }
                    checked += 1;
                }
            }
            [source, target, want @ ..] => {
                let (source, to) = (element_type(source), element_type(target));
                let got = words(&cast(&sources[&source], to));
                if got != want {
                    failures.push(format!("{source} to {to}: {got:?} != {want:?}"));
                }
                checked += 1;
            }
            _ => panic!("bad line {line:?}"),
        }
    }
    // 4 sources x 9 targets, and 4 x 6 values x 2 lengths of u32 tails.
    assert_eq!(checked, 36 + 48);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
