//! Shared helpers of the quantization tests: a parallel executor that runs
//! tasks in reverse order (as other threads would interleave them) and a
//! runner that infers, allocates and executes with it.

#![allow(dead_code)]

use onnx_prepared_kernels::{InputInfo, KernelError, Operator, ParallelFor, Tensor, TensorData};

/// Claims 4 threads and runs tasks in reverse order on the caller.
#[derive(Debug, Clone, Copy)]
pub struct Reversed;

// SAFETY: every index of `0..tasks` exactly once, on the calling thread,
// all before `run` returns.
unsafe impl ParallelFor for Reversed {
    fn threads(&self) -> usize {
        4
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).rev().for_each(task);
    }
}

/// Infers with every input a run-time value, allocates zeroed outputs and
/// executes on `par`.
pub fn run_with(
    op: &dyn Operator,
    inputs: &[Option<&Tensor>],
    par: &dyn ParallelFor,
) -> Result<Vec<Tensor>, KernelError> {
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .map(|t| t.map(|t| InputInfo::dynamic(t.dtype(), t.shape())))
        .collect();
    let out_infos = op.infer(&infos)?;
    let mut outputs = out_infos
        .iter()
        .map(|o| Tensor::zeros(o.dtype, o.shape.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    op.execute(inputs, None, &mut outputs, par)?;
    Ok(outputs)
}

pub fn i8t(shape: &[usize], v: &[i8]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::I8(v.to_vec())).unwrap()
}

pub fn u8t(shape: &[usize], v: &[u8]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::U8(v.to_vec())).unwrap()
}

pub fn f16t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::new(
        shape.to_vec(),
        TensorData::F16(v.iter().map(|&x| half::f16::from_f32(x)).collect()),
    )
    .unwrap()
}

/// Max of `|got - want| / (1 + |want|)`.
pub fn max_rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "lengths differ");
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / (1.0 + w.abs()))
        .fold(0.0, f32::max)
}
