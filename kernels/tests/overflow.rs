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

/// A valid empty tensor (`[0, 2^40, 2^40]` and the like): its element count
/// is 0, but runs of its other dims overflow when multiplied.
fn empty(shape: &[usize]) -> Tensor {
    Tensor::zeros(ElementType::F32, shape.to_vec()).expect("an empty tensor")
}

/// Infers and executes `node` on empty inputs with huge dims: whatever the
/// operator answers, it must not panic (overflow checks are on in tests).
fn runs_on_empty(node: &Node, inputs: Vec<basic_util::In>) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.run(&inputs)));
    match r {
        Ok(Ok(outs)) => assert!(
            outs.iter().all(Tensor::is_empty),
            "{}: non-empty outputs from empty inputs",
            node.op_type
        ),
        Ok(Err(_)) => {}
        Err(_) => panic!(
            "{}: panicked on an empty input with huge dims",
            node.op_type
        ),
    }
}

#[test]
fn empty_tensors_with_huge_dims_run_without_wrapping() {
    use basic_util::{In, var};
    let z = || var(empty(&[0, HUGE, HUGE]));
    runs_on_empty(&Node::new("Softmax", 13).int("axis", 1), vec![z()]);
    runs_on_empty(&Node::new("Softmax", 11).int("axis", 1), vec![z()]);
    runs_on_empty(&Node::new("Concat", 13).int("axis", 1), vec![z(), z()]);
    runs_on_empty(
        &Node::new("Split", 18)
            .int("axis", 1)
            .int("num_outputs", 2)
            .outputs(2),
        vec![z()],
    );
    runs_on_empty(
        &Node::new("Transpose", 13).ints("perm", &[1, 2, 0]),
        vec![z()],
    );
    runs_on_empty(
        &Node::new("MatMul", 13),
        vec![
            var(empty(&[0, HUGE, HUGE, 3])),
            var(Tensor::zeros(ElementType::F32, vec![3, 2]).unwrap()),
        ],
    );
    runs_on_empty(
        &Node::new("CumSum", 14),
        vec![z(), In::Const(i64t(&[], &[1]))],
    );
    runs_on_empty(
        &Node::new("Gather", 13).int("axis", 1),
        vec![z(), In::Const(i64t(&[1], &[0]))],
    );
    runs_on_empty(
        &Node::new("LayerNormalization", 17).int("axis", 1),
        vec![var(empty(&[HUGE, 0, HUGE])), var(empty(&[0, HUGE]))],
    );
    let scalar = |v: f32| var(Tensor::from_f32(vec![], vec![v]).unwrap());
    runs_on_empty(
        &Node::new("DequantizeLinear", 21).int("axis", 0),
        vec![
            var(Tensor::zeros(ElementType::I8, vec![0, HUGE, HUGE]).unwrap()),
            var(empty(&[0])),
        ],
    );
    runs_on_empty(
        &Node::new("DequantizeLinear", 21),
        vec![
            var(Tensor::zeros(ElementType::I8, vec![0, HUGE, HUGE]).unwrap()),
            scalar(0.5),
        ],
    );
}

#[test]
fn attention_heads_that_overflow_with_an_empty_hidden_size_are_refused() {
    // Q's hidden size is 0, so q_num_heads divides it: nothing bounds the
    // head count but the output's hidden size, q_num_heads x v head size.
    let node = Node::new("Attention", 23)
        .int("q_num_heads", (1 << 62) + 1)
        .int("kv_num_heads", 1);
    let (q, k, v) = ([1, 1, 0], [1, 1, 0], [1, 1, 4]);
    let op = node.build(3).unwrap();
    let r = op.infer(&[dynamic(&q), dynamic(&k), dynamic(&v)]);
    assert!(r.is_err(), "inferred {r:?}");
    let r = op.infer_checked(&[dynamic(&q), dynamic(&k), dynamic(&v)]);
    assert!(r.is_err(), "inferred {r:?}");
}

#[test]
fn rotary_caches_with_huge_empty_dims_are_refused_or_empty() {
    use basic_util::var;
    // com.microsoft, 3-D input, no num_heads: the head size comes from the
    // caches' last dim, here 2^63 (an empty cache tensor).
    let node = Node::new("RotaryEmbedding", 1).domain("com.microsoft");
    for half in [1usize << 63, usize::MAX / 2 + 1, HUGE] {
        let cache = || var(empty(&[0, half]));
        runs_on_empty(
            &node,
            vec![
                var(empty(&[1, 0, 4])),
                var(i64t(&[1], &[0])),
                cache(),
                cache(),
            ],
        );
    }
    // ONNX, 3-D input with a huge num_heads and an empty hidden size.
    let node = Node::new("RotaryEmbedding", 23).int("num_heads", 1 << 62);
    runs_on_empty(
        &node,
        vec![
            var(empty(&[4, 4, 0])),
            var(empty(&[4, 0])),
            var(empty(&[4, 0])),
            var(i64t(&[4, 4], &[0; 16])),
        ],
    );
}

#[test]
fn an_inferred_output_whose_size_overflows_is_refused_by_infer_checked() {
    // Expand's inference refuses it itself; infer_checked is the runtime's
    // guard for every operator (any output of any operator must be a
    // tensor that can exist).
    let node = Node::new("Expand", 13);
    let op = node.build(2).unwrap();
    let shape = i64t(&[3], &[1 << 40, 1 << 40, 1 << 40]);
    let infos = [
        dynamic(&[1]),
        Some(InputInfo {
            dtype: ElementType::I64,
            shape: shape.shape(),
            value: Some(&shape),
            constant: true,
        }),
    ];
    let e = op.infer_checked(&infos).unwrap_err();
    assert!(matches!(e, KernelError::Overflow { .. }), "{e:?}");
}

#[test]
fn kernels_declare_the_temporaries_they_allocate() {
    // Gemm with transA copies A transposed: M x K floats.
    let gemm = Node::new("Gemm", 13).int("transA", 1).build(2).unwrap();
    let (a, b) = ([300, 200], [300, 100]);
    assert_eq!(
        gemm.scratch_bytes(&[dynamic(&a), dynamic(&b)]),
        200 * 300 * 4
    );
    let plain = Node::new("Gemm", 13).build(2).unwrap();
    assert_eq!(plain.scratch_bytes(&[dynamic(&[200, 300]), dynamic(&b)]), 0);
    // MatMul on f64 runs the reference loops, which compute the product
    // aside: the output's bytes.
    let mm = Node::new("MatMul", 13).build(2).unwrap();
    let f64in = |s: &'static [usize]| Some(InputInfo::dynamic(ElementType::F64, s));
    assert_eq!(
        mm.scratch_bytes(&[f64in(&[5, 7, 3]), f64in(&[3, 11])]),
        5 * 7 * 11 * 8
    );
    assert_eq!(
        mm.scratch_bytes(&[dynamic(&[5, 7, 3]), dynamic(&[3, 11])]),
        0
    );
    // MatMulNBits packs a run-time B at every run.
    let nbits = Node::new("MatMulNBits", 1)
        .domain("com.microsoft")
        .int("K", 64)
        .int("N", 32)
        .int("bits", 4)
        .int("block_size", 32)
        .build(3)
        .unwrap();
    let (bq, sc) = ([32, 2, 16], [64]);
    let runtime_b = [
        dynamic(&[1, 64]),
        Some(InputInfo::dynamic(ElementType::U8, &bq)),
        dynamic(&sc),
    ];
    let packed = nbits.scratch_bytes(&runtime_b);
    assert!(packed >= 32 * 64 / 2 + 32 * 2 * 4, "{packed}");
}
