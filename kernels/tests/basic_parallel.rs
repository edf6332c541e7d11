//! Elementwise operators split large outputs across a `ParallelFor`: every
//! element is computed exactly as on one thread, whatever the task order.

mod basic_util;

use basic_util::{Node, Rng, f32t};
use onnx_prepared_kernels::{InputInfo, ParallelFor, Sequential, Tensor};

/// Three "threads" that run tasks in reverse order on the caller.
struct Reversed;

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

fn run_with(node: &Node, inputs: &[&Tensor], par: &dyn ParallelFor) -> Tensor {
    let op = node.build(inputs.len()).unwrap();
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .map(|t| Some(InputInfo::dynamic(t.dtype(), t.shape())))
        .collect();
    let out = op.infer(&infos).unwrap().remove(0);
    let mut outputs = vec![Tensor::zeros(out.dtype, out.shape).unwrap()];
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    op.execute(&ins, None, &mut outputs, par).unwrap();
    outputs.remove(0)
}

#[test]
fn large_elementwise_outputs_match_the_sequential_result() {
    let mut rng = Rng(7);
    // Large enough to split: [1, 128, 2048] (the tiny-llm gate at T=128).
    let x = f32t(&[1, 128, 2048], &rng.f32s(128 * 2048));
    let y = f32t(&[1, 128, 2048], &rng.f32s(128 * 2048));
    let row = f32t(&[2048], &rng.f32s(2048));
    let column = f32t(&[1, 128, 1], &rng.f32s(128));
    for (node, inputs) in [
        (Node::new("Sigmoid", 13), vec![&x]),
        (Node::new("Mul", 14), vec![&x, &y]),
        (Node::new("Add", 14), vec![&x, &row]),
        (Node::new("Sub", 14), vec![&column, &x]),
        (Node::new("Softmax", 13), vec![&x]),
    ] {
        let one = run_with(&node, &inputs, &Sequential);
        let split = run_with(&node, &inputs, &Reversed);
        assert_eq!(one, split, "{}", node.op_type);
    }
    // Fewer rows than tasks: rows are split into pieces (same shapes
    // collapse to one row; a broadcast row or column over a few rows).
    let scalar = f32t(&[1], &[0.5]);
    let wide = f32t(&[3, 40000], &rng.f32s(3 * 40000));
    let wide_row = f32t(&[40000], &rng.f32s(40000));
    let wide_column = f32t(&[3, 1], &rng.f32s(3));
    for (node, inputs) in [
        (Node::new("Mul", 14), vec![&x, &scalar]),
        (Node::new("Sub", 14), vec![&scalar, &x]),
        (Node::new("Add", 14), vec![&wide, &wide_row]),
        (Node::new("Div", 14), vec![&wide, &wide_column]),
    ] {
        let one = run_with(&node, &inputs, &Sequential);
        let split = run_with(&node, &inputs, &Reversed);
        assert_eq!(one, split, "{} {:?}", node.op_type, inputs[1].shape());
    }
    let sum = run_with(&Node::new("Add", 14), &[&wide, &wide_row], &Reversed);
    let (w, r, got) = (
        wide.as_f32().unwrap(),
        wide_row.as_f32().unwrap(),
        sum.as_f32().unwrap(),
    );
    for i in [0, 39999, 40000, 80001, 3 * 40000 - 1] {
        assert_eq!(got[i], w[i] + r[i % 40000]);
    }
    // And against an independent formula for one case.
    let mul = run_with(&Node::new("Sub", 14), &[&column, &x], &Reversed);
    let (c, xv, out) = (
        column.as_f32().unwrap(),
        x.as_f32().unwrap(),
        mul.as_f32().unwrap(),
    );
    for i in [0, 2047, 2048, 128 * 2048 - 1] {
        assert_eq!(out[i], c[i / 2048] - xv[i]);
    }
}
