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
    run_all(node, inputs, par).remove(0)
}

fn run_all(node: &Node, inputs: &[&Tensor], par: &dyn ParallelFor) -> Vec<Tensor> {
    let op = node.build(inputs.len()).unwrap();
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .map(|t| Some(InputInfo::dynamic(t.dtype(), t.shape())))
        .collect();
    let mut outputs: Vec<Tensor> = op
        .infer(&infos)
        .unwrap()
        .into_iter()
        .map(|o| Tensor::zeros(o.dtype, o.shape).unwrap())
        .collect();
    let ins: Vec<Option<&Tensor>> = inputs.iter().map(|t| Some(*t)).collect();
    op.execute(&ins, None, &mut outputs, par).unwrap();
    outputs
}

#[test]
fn large_concat_and_split_match_the_sequential_result() {
    let mut rng = Rng(9);
    // tiny-llm's fused projections at T=128: [1, 128, 1536] split in three
    // along the last axis, and a key cache [1, 8, 128, 64] concatenated
    // with 64 new rows along the sequence axis.
    let qkv = f32t(&[1, 128, 1536], &rng.f32s(128 * 1536));
    let split = Node::new("Split", 18)
        .int("axis", -1)
        .int("num_outputs", 3)
        .outputs(3);
    let one = run_all(&split, &[&qkv], &Sequential);
    let par = run_all(&split, &[&qkv], &Reversed);
    assert_eq!(one, par);
    let x = qkv.as_f32().unwrap();
    for (k, part) in par.iter().enumerate() {
        let p = part.as_f32().unwrap();
        for (r, c) in [(0, 0), (5, 17), (127, 511)] {
            assert_eq!(p[r * 512 + c], x[r * 1536 + k * 512 + c]);
        }
    }
    // Transposes: runs of 64 ([1,128,8,64] -> [1,8,128,64]) and a batch of
    // 2-D blocks ([1,128,8,64] -> [1,128,64,8]).
    let heads = f32t(&[1, 128, 8, 64], &rng.f32s(128 * 8 * 64));
    let h = heads.as_f32().unwrap();
    for (perm, at) in [
        ([0i64, 2, 1, 3], (5usize, 3usize, 7usize)),
        ([0, 1, 3, 2], (100, 9, 5)),
    ] {
        let node = Node::new("Transpose", 13).ints("perm", &perm);
        let one = run_with(&node, &[&heads], &Sequential);
        let par = run_with(&node, &[&heads], &Reversed);
        assert_eq!(one, par, "{perm:?}");
        // Output element (0, a, b, c) against the input it comes from.
        let dims = par.shape().to_vec();
        let (a, b, c) = at;
        let got = par.as_f32().unwrap()[(a * dims[2] + b) * dims[3] + c];
        let mut src = [0usize; 4];
        for (j, &p) in perm.iter().enumerate() {
            src[p as usize] = [0, a, b, c][j];
        }
        assert_eq!(got, h[((src[1] * 8) + src[2]) * 64 + src[3]], "{perm:?}");
    }
    // Shape-only operators copy, split across threads when large.
    let reshaped = run_with(&Node::new("Flatten", 13).int("axis", 2), &[&qkv], &Reversed);
    assert_eq!(reshaped.shape(), &[128, 1536]);
    assert_eq!(reshaped.as_f32().unwrap(), x);
    let past = f32t(&[1, 8, 128, 64], &rng.f32s(8 * 128 * 64));
    let new = f32t(&[1, 8, 64, 64], &rng.f32s(8 * 64 * 64));
    let concat = Node::new("Concat", 13).int("axis", 2);
    let one = run_with(&concat, &[&past, &new], &Sequential);
    let par = run_with(&concat, &[&past, &new], &Reversed);
    assert_eq!(one, par);
    let (p, n, c) = (
        past.as_f32().unwrap(),
        new.as_f32().unwrap(),
        par.as_f32().unwrap(),
    );
    // Head 3, rows 127 (past) and 128 + 5 (new), column 9.
    assert_eq!(c[(3 * 192 + 127) * 64 + 9], p[(3 * 128 + 127) * 64 + 9]);
    assert_eq!(c[(3 * 192 + 133) * 64 + 9], n[(3 * 64 + 5) * 64 + 9]);
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
        (Node::new("RMSNormalization", 23), vec![&x, &row]),
        (Node::new("LayerNormalization", 17), vec![&x, &row, &row]),
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
