//! Scalar functions without libm calls, so loops over them vectorize (hot
//! path): f32 `tanh`, `erf`, and both Gelu forms, built on the Cephes-style
//! `exp` of [`exp_f32`]; f64 `erf`/`erfc` for the double kernels.
//!
//! The f32 `erf` uses a minimax-style polynomial `x·P(x²)` below 1 and
//! `1 − e^{−x²}·Q(1/x)` above (Q fitted to `e^{x²}·erfc(x)` on [1, 6]),
//! within about 2 ulp of the correctly rounded result; `e^{−x²}` takes the
//! rounding error of `x²` into account so the tail `erfc` stays accurate
//! for Gelu's negative side.

use crate::ops::basic::real::exp_f32;

/// `x·P(x²)` coefficients for `erf` on [0, 1].
const ERF_SMALL: [f32; 7] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    -0.376_126_23,
    0.112_835_616,
    -0.026_852_965,
    0.005_186_87,
    -0.000_799_828_6,
    7.816_69e-5,
];

/// `Q(s)`, `s = 2.4/x − 1.4` (maps x in [1, 6] to [-1, 1]), approximating
/// `e^{x²}·erfc(x)`.
const ERFC_TAIL: [f32; 11] = [
    0.289_722_1,
    0.165_362_72,
    -0.030_831_095,
    0.002_820_729_3,
    0.001_034_798_4,
    -0.000_736_012_4,
    0.000_264_493_05,
    -6.104_646e-5,
    -2.435_668e-6,
    1.712_276_2e-5,
    -7.807_029e-6,
];

#[inline(always)]
fn horner<const N: usize>(c: &[f32; N], v: f32) -> f32 {
    let mut r = c[N - 1];
    for &k in c[..N - 1].iter().rev() {
        r = r * v + k;
    }
    r
}

/// `erf(x)` for `|x| < 1`.
#[inline(always)]
fn erf_small(x: f32) -> f32 {
    x * horner(&ERF_SMALL, x * x)
}

/// `erfc(a)` for `a >= 1` (and NaN for NaN): `e^{−a²}·Q`, with Q from the
/// fitted polynomial up to 6 and from the asymptotic series
/// `1/(a√π)·(1 − r/2 + 3r²/4 − 15r³/8 + 105r⁴/16)`, `r = 1/a²`, above
/// (relative error below 5e-7 there).
#[inline(always)]
fn erfc_tail(a: f32) -> f32 {
    let s = 2.4 / a.min(6.0) - 1.4;
    let fitted = horner(&ERFC_TAIL, s);
    let r = 1.0 / (a * a);
    let series = ((((6.5625 * r - 1.875) * r + 0.75) * r - 0.5) * r + 1.0)
        * (std::f32::consts::FRAC_2_SQRT_PI * 0.5)
        / a;
    let q = if a > 6.0 { series } else { fitted };
    // a² exactly as hi + lo (an f32 square is exact in f64), so that
    // e^{-a²} = e^{-hi}·(1 − lo) does not inherit the rounding of a².
    // Beyond 10, e^{-a²} is 0 in f32 (the comparison keeps NaN).
    let ac = if a > 10.0 { 10.0 } else { a };
    let sq = ac as f64 * ac as f64;
    let hi = sq as f32;
    let lo = (sq - hi as f64) as f32;
    exp_f32(-hi) * (1.0 - lo) * q
}

/// `erf(x)` in f32.
#[inline(always)]
pub(crate) fn erf_f32(x: f32) -> f32 {
    let a = x.abs();
    let small = erf_small(x);
    let big = (1.0 - erfc_tail(a)).copysign(x);
    if a < 1.0 { small } else { big }
}

/// `tanh(x)` in f32: Cephes' odd polynomial below 0.625, else
/// `1 − 2/(e^{2|x|} + 1)` with the sign of x.
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let p = ((((-5.704_988_7e-3 * z + 2.063_909e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1)
        * z
        - 3.333_328e-1)
        * z
        * x
        + x;
    let e = exp_f32(2.0 * a);
    let big = 1.0 - 2.0 / (e + 1.0);
    // tanh is odd: the sign of x (which also keeps -0).
    (if a < 0.625 { p } else { big }).copysign(x)
}

/// Gelu (`approximate = "none"`): `x/2·(1 + erf(x/√2))`, with the negative
/// tail from `erfc` so small results keep their relative accuracy.
#[inline(always)]
pub(crate) fn gelu_f32(x: f32) -> f32 {
    let z = x * std::f32::consts::FRAC_1_SQRT_2;
    let a = z.abs();
    let tail = erfc_tail(a);
    let big = if z > 0.0 { 2.0 - tail } else { tail };
    let factor = if a < 1.0 { 1.0 + erf_small(z) } else { big };
    0.5 * x * factor
}

/// `√(2/π)`.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;

/// Gelu (`approximate = "tanh"`): `x/2·(1 + tanh(√(2/π)(x + 0.044715x³)))`,
/// computed as `x·sigmoid(2u)` (the same value, without cancellation for
/// negative x).
#[inline(always)]
pub(crate) fn gelu_tanh_f32(x: f32) -> f32 {
    let u = (SQRT_2_OVER_PI as f32) * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp_f32(-2.0 * u))
}

/// f64 Gelu, tanh form.
pub(crate) fn gelu_tanh_f64(x: f64) -> f64 {
    let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    x / (1.0 + (-2.0 * u).exp())
}

/// `erfc(a)` for `a >= 0` in f64: `1 − erf` from the series below 2.5, the
/// continued fraction above.
pub(crate) fn erfc_f64_pos(a: f64) -> f64 {
    if a.is_nan() {
        return a;
    }
    if a < 2.5 {
        return 1.0 - erf_series(a);
    }
    if a > 27.0 {
        return 0.0;
    }
    // erfc(a) = e^{-a²}/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))).
    let mut k = a;
    for n in (1..=120).rev() {
        k = a + (n as f64 * 0.5) / k;
    }
    (-a * a).exp() / (std::f64::consts::PI.sqrt() * k)
}

/// `erf(a)` for `0 <= a < 2.5`: `2/√π·e^{−a²}·Σ 2ⁿa^{2n+1}/(2n+1)!!` (all
/// terms positive).
fn erf_series(a: f64) -> f64 {
    let two_a2 = 2.0 * a * a;
    let mut term = a;
    let mut sum = a;
    let mut n = 0.0;
    while term > sum * 1e-17 {
        term *= two_a2 / (2.0 * n + 3.0);
        sum += term;
        n += 1.0;
    }
    std::f64::consts::FRAC_2_SQRT_PI * (-a * a).exp() * sum
}

/// `erf(x)` in f64.
pub(crate) fn erf_f64(x: f64) -> f64 {
    let a = x.abs();
    let v = if a < 2.5 {
        erf_series(a)
    } else {
        1.0 - erfc_f64_pos(a)
    };
    v.copysign(x)
}

/// f64 Gelu, erf form.
pub(crate) fn gelu_f64(x: f64) -> f64 {
    let z = x * std::f64::consts::FRAC_1_SQRT_2;
    let factor = if z < 0.0 {
        erfc_f64_pos(-z)
    } else {
        1.0 + erf_f64(z)
    };
    0.5 * x * factor
}
