//! Shared helpers for the math-operator tests: the basic tests' node
//! builder and PRNG, plus typed tensor constructors, a task-reordering
//! executor, ulp distance and an f64 `erf` reference.

#![allow(dead_code)]

#[path = "../basic_util/mod.rs"]
mod basic;

pub use basic::*;
use onnx_prepared_kernels::{InputInfo, ParallelFor, Tensor, TensorData};

pub fn bt(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::Bool(v.to_vec())).unwrap()
}

pub fn f16t(shape: &[usize], v: &[f32]) -> Tensor {
    let v = v.iter().map(|&x| half::f16::from_f32(x)).collect();
    Tensor::new(shape.to_vec(), TensorData::F16(v)).unwrap()
}

pub fn u8t(shape: &[usize], v: &[u8]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::U8(v.to_vec())).unwrap()
}

pub fn i8t(shape: &[usize], v: &[i8]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::I8(v.to_vec())).unwrap()
}

/// Three "threads" that run tasks in reverse order on the caller.
pub struct Reversed;

// SAFETY: every index of `0..tasks` exactly once, on the calling thread,
// all before `run` returns.
unsafe impl ParallelFor for Reversed {
    fn threads(&self) -> usize {
        3
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).rev().for_each(task);
    }
}

/// Builds `node`, infers with constant inputs `consts` (by position) and
/// runtime ones otherwise, and executes on `par`.
pub fn run_par(node: &Node, inputs: &[&Tensor], par: &dyn ParallelFor) -> Tensor {
    let op = node.build(inputs.len()).unwrap();
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Some(if i == 0 {
                InputInfo::dynamic(t.dtype(), t.shape())
            } else {
                InputInfo::known(t)
            })
        })
        .collect();
    let out = op.infer(&infos).unwrap().remove(0);
    let mut outputs = vec![Tensor::zeros(out.dtype, out.shape).unwrap()];
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    op.execute(&ins, None, &mut outputs, par).unwrap();
    outputs.remove(0)
}

/// Distance in representable f32 values (0 when both are NaN).
pub fn ulps(a: f32, b: f32) -> u32 {
    if a.is_nan() && b.is_nan() {
        return 0;
    }
    if a.is_nan() || b.is_nan() {
        return u32::MAX;
    }
    let key = |v: f32| {
        let i = v.to_bits() as i32;
        if i < 0 {
            i64::from(i32::MIN) - i64::from(i)
        } else {
            i64::from(i)
        }
    };
    (key(a) - key(b)).unsigned_abs().min(u32::MAX as u64) as u32
}

/// `erf(x)` in f64: `2/√π·e^{−x²}·Σ 2ⁿx^{2n+1}/(2n+1)!!` (positive terms, so
/// no cancellation) below 3, `1 − erfc` above.
pub fn erf_ref(x: f64) -> f64 {
    let a = x.abs();
    if a >= 3.0 {
        return (1.0 - erfc_ref(a)).copysign(x);
    }
    let (mut term, mut sum, mut n) = (a, a, 0.0);
    while term > sum * 1e-18 {
        term *= 2.0 * a * a / (2.0 * n + 3.0);
        sum += term;
        n += 1.0;
    }
    (2.0 / std::f64::consts::PI.sqrt() * (-a * a).exp() * sum).copysign(x)
}

/// `erfc(a)` for a >= 0 in f64, accurate relative to its own size: the
/// series' complement below 3, the continued fraction (300 terms) above.
pub fn erfc_ref(a: f64) -> f64 {
    if a < 3.0 {
        return 1.0 - erf_ref(a);
    }
    let mut k = a;
    for n in (1..=300).rev() {
        k = a + f64::from(n) * 0.5 / k;
    }
    (-a * a).exp() / (std::f64::consts::PI.sqrt() * k)
}
