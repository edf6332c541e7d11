//! Sizes computed from a model's numbers (attributes, declared dims,
//! constant shape operands) never wrap or panic: each overflow is a typed
//! `KernelError::Overflow`. Inputs are described by type and shape only, so
//! no test allocates the sizes it names.

mod basic_util;

use basic_util::{Node, i64t};
use onnx_prepared_kernels::{ElementType, InputInfo, KernelError, Tensor};

const HUGE: usize = 1 << 40;

/// Builds `node` and infers with `inputs`; the error it reports.
fn infer_error(node: &Node, inputs: &[Option<InputInfo<'_>>]) -> KernelError {
    let op = match node.build(inputs.len()) {
        Ok(op) => op,
        Err(e) => return e,
    };
    match op.infer(inputs) {
        Ok(outs) => panic!("{}: inferred {outs:?}, expected an overflow", node.op_type),
        Err(e) => e,
    }
}

fn assert_overflow(node: &Node, inputs: &[Option<InputInfo<'_>>]) {
    let e = infer_error(node, inputs);
    assert!(
        matches!(e, KernelError::Overflow { .. }),
        "{}: expected Overflow, got {e:?}",
        node.op_type
    );
    assert!(e.to_string().contains("overflows"), "{e}");
}

fn dynamic(shape: &[usize]) -> Option<InputInfo<'_>> {
    Some(InputInfo::dynamic(ElementType::F32, shape))
}

#[test]
fn matmul_nbits_with_huge_k_and_n_is_refused_when_built() {
    for (k, n) in [
        (1i64 << 40, 1i64 << 40),
        (1 << 62, 16),
        (16, 1 << 62),
        (i64::MAX, i64::MAX),
    ] {
        let node = Node::new("MatMulNBits", 1)
            .domain("com.microsoft")
            .int("K", k)
            .int("N", n)
            .int("bits", 4)
            .int("block_size", 32);
        let e = node.build(3).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::Overflow {
                    op: "MatMulNBits",
                    ..
                }
            ),
            "K = {k}, N = {n}: {e:?}"
        );
    }
    // Sizes that fit still build.
    Node::new("MatMulNBits", 1)
        .domain("com.microsoft")
        .int("K", 4096)
        .int("N", 4096)
        .int("bits", 4)
        .int("block_size", 32)
        .build(3)
        .unwrap();
}

#[test]
fn matmul_nbits_shapes_near_the_limit_infer_without_wrapping() {
    // K × N fits, but the declared B and scales do not match: a shape error.
    let (k, n) = (1usize << 20, 1usize << 20);
    let node = Node::new("MatMulNBits", 1)
        .domain("com.microsoft")
        .int("K", k as i64)
        .int("N", n as i64)
        .int("bits", 4)
        .int("block_size", 32);
    let a = [1, k];
    let b = [HUGE, HUGE, 16];
    let b_info = Some(InputInfo::dynamic(ElementType::U8, &b));
    let scales = [n * k / 32];
    let e = infer_error(&node, &[dynamic(&a), b_info, dynamic(&scales)]);
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
}

#[test]
fn split_sizes_whose_sum_overflows_are_refused() {
    let x = [4usize, 2];
    // Split-13: sizes as a constant input.
    let sizes = i64t(&[3], &[i64::MAX, i64::MAX, 2]);
    assert_overflow(
        &Node::new("Split", 13).outputs(3),
        &[dynamic(&x), Some(InputInfo::known(&sizes))],
    );
    // Split-11: sizes as an attribute.
    assert_overflow(
        &Node::new("Split", 11)
            .ints("split", &[i64::MAX, 1])
            .outputs(2),
        &[dynamic(&x)],
    );
    // Negative sizes that cancel out are still refused.
    let cancel = i64t(&[2], &[6, -2]);
    let e = infer_error(
        &Node::new("Split", 13).outputs(2),
        &[dynamic(&x), Some(InputInfo::known(&cancel))],
    );
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
}

#[test]
fn reshape_of_an_input_whose_size_overflows_is_refused() {
    let x = [HUGE, HUGE];
    let shape = i64t(&[1], &[-1]);
    assert_overflow(
        &Node::new("Reshape", 14),
        &[dynamic(&x), Some(InputInfo::known(&shape))],
    );
    let small = [4usize];
    let shape = i64t(&[2], &[1 << 40, 1 << 40]);
    assert_overflow(
        &Node::new("Reshape", 14),
        &[dynamic(&small), Some(InputInfo::known(&shape))],
    );
}

#[test]
fn expand_to_a_shape_whose_size_overflows_is_refused() {
    let x = [1usize, 1];
    let shape = i64t(&[2], &[1 << 40, 1 << 40]);
    assert_overflow(
        &Node::new("Expand", 13),
        &[dynamic(&x), Some(InputInfo::known(&shape))],
    );
}

#[test]
fn tile_whose_repeats_overflow_is_refused() {
    let x = [HUGE];
    let reps = i64t(&[1], &[1 << 40]);
    assert_overflow(
        &Node::new("Tile", 13),
        &[dynamic(&x), Some(InputInfo::known(&reps))],
    );
    let x = [HUGE, HUGE];
    let reps = i64t(&[2], &[1, 1]);
    assert_overflow(
        &Node::new("Tile", 13),
        &[dynamic(&x), Some(InputInfo::known(&reps))],
    );
}

#[test]
fn constant_of_shape_whose_size_overflows_is_refused() {
    let shape = i64t(&[3], &[1 << 30, 1 << 30, 1 << 30]);
    assert_overflow(
        &Node::new("ConstantOfShape", 21),
        &[Some(InputInfo::known(&shape))],
    );
}

#[test]
fn range_with_too_many_elements_is_refused() {
    let scalar = |v: i64| Tensor::from_i64(vec![], vec![v]).unwrap();
    let (start, limit, delta) = (scalar(i64::MIN), scalar(i64::MAX), scalar(1));
    assert_overflow(
        &Node::new("Range", 11),
        &[
            Some(InputInfo::known(&start)),
            Some(InputInfo::known(&limit)),
            Some(InputInfo::known(&delta)),
        ],
    );
    let f = |v: f32| Tensor::from_f32(vec![], vec![v]).unwrap();
    let (start, limit, delta) = (f(0.0), f(1e30), f(1e-30));
    assert_overflow(
        &Node::new("Range", 11),
        &[
            Some(InputInfo::known(&start)),
            Some(InputInfo::known(&limit)),
            Some(InputInfo::known(&delta)),
        ],
    );
}

#[test]
fn matmul_and_gemm_whose_output_overflows_are_refused() {
    let (a, b) = ([HUGE, 1usize], [1usize, HUGE]);
    assert_overflow(&Node::new("MatMul", 13), &[dynamic(&a), dynamic(&b)]);
    assert_overflow(&Node::new("Gemm", 13), &[dynamic(&a), dynamic(&b)]);
}

#[test]
fn concat_whose_axis_sum_overflows_is_refused() {
    let a = [usize::MAX - 1, 1];
    assert_overflow(
        &Node::new("Concat", 13).int("axis", 0),
        &[dynamic(&a), dynamic(&a)],
    );
}
