//! Helpers for the index-family tests: the basic tests' node builder and
//! tensors, plus a run through a multi-threaded-looking executor and the
//! `fold_shapes` path.

#![allow(dead_code)]

#[path = "../basic_util/mod.rs"]
mod basic;

pub use basic::*;

use onnx_prepared_kernels::{InputInfo, KernelError, ParallelFor, Tensor, TensorData};

/// Runs tasks in reverse order on the calling thread while claiming three
/// threads, so kernels take their parallel paths.
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

fn infos(inputs: &[In]) -> Vec<Option<InputInfo<'_>>> {
    inputs
        .iter()
        .map(|i| match i {
            In::Var(t) => Some(InputInfo::dynamic(t.dtype(), t.shape())),
            In::Const(t) => Some(InputInfo::known(t)),
            In::Absent => None,
        })
        .collect()
}

fn tensor(i: &In) -> Option<&Tensor> {
    match i {
        In::Var(t) | In::Const(t) => Some(t),
        In::Absent => None,
    }
}

/// Infers, allocates and executes on [`Reversed`].
pub fn run_par(node: &Node, inputs: &[In]) -> Result<Tensor, KernelError> {
    let op = node.build(inputs.len())?;
    let outs = op.infer(&infos(inputs))?;
    let mut outputs = outs
        .iter()
        .map(|o| Tensor::zeros(o.dtype, o.shape.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let ts: Vec<Option<&Tensor>> = inputs.iter().map(tensor).collect();
    op.execute(&ts, None, &mut outputs, &Reversed)?;
    Ok(outputs.remove(0))
}

/// The operator's `fold_shapes` result (`None` when it does not fold).
pub fn fold(node: &Node, inputs: &[In]) -> Option<Result<Vec<Tensor>, KernelError>> {
    let op = node.build(inputs.len()).expect("operator");
    op.fold_shapes(&infos(inputs))
}

pub fn boolt(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::Bool(v.to_vec())).unwrap()
}

pub fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32).collect()
}

pub fn i64s(t: &Tensor) -> Vec<i64> {
    t.as_i64().expect("i64 tensor").to_vec()
}

pub fn f32s(t: &Tensor) -> Vec<f32> {
    t.as_f32().expect("f32 tensor").to_vec()
}

pub fn is_invalid(e: &KernelError) -> bool {
    matches!(e, KernelError::Invalid { .. })
}

pub fn is_shape(e: &KernelError) -> bool {
    matches!(e, KernelError::Shape(_))
}
