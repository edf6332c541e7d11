//! Shape, Size, Flatten, ConstantOfShape and Range against hand-computed
//! values, including the fold_shapes path and error cases.

mod index_util;

use half::f16;
use index_util::*;
use onnx_prepared_kernels::{ElementType, KernelError, Tensor, TensorData};

fn shape_of(node: Node, dims: &[usize]) -> Vec<i64> {
    let x = Tensor::zeros(ElementType::F32, dims.to_vec()).unwrap();
    let y = node.run1(&[var(x.clone())]).unwrap();
    assert_eq!(y.shape(), &[y.len()]);
    // fold_shapes gives the same value without reading elements.
    let folded = fold(&node, &[var(x)]).expect("Shape folds").unwrap();
    assert_eq!(folded, vec![y.clone()]);
    i64s(&y)
}

#[test]
fn shape_start_end_negative_and_clamped() {
    let dims = [3, 4, 5];
    assert_eq!(shape_of(Node::new("Shape", 13), &dims), vec![3, 4, 5]);
    assert_eq!(shape_of(Node::new("Shape", 15), &dims), vec![3, 4, 5]);
    assert_eq!(
        shape_of(Node::new("Shape", 15).int("start", 1), &dims),
        vec![4, 5]
    );
    assert_eq!(
        shape_of(Node::new("Shape", 19).int("end", 1), &dims),
        vec![3]
    );
    assert_eq!(
        shape_of(Node::new("Shape", 21).int("start", -1), &dims),
        vec![5]
    );
    assert_eq!(
        shape_of(Node::new("Shape", 23).int("end", -1), &dims),
        vec![3, 4]
    );
    assert_eq!(
        shape_of(Node::new("Shape", 15).int("start", 1).int("end", -1), &dims),
        vec![4]
    );
    // Clamped to [0, rank].
    assert_eq!(
        shape_of(Node::new("Shape", 15).int("start", -10), &dims),
        vec![3, 4, 5]
    );
    assert_eq!(
        shape_of(Node::new("Shape", 15).int("end", 10), &dims),
        vec![3, 4, 5]
    );
    // start > end: empty.
    assert_eq!(
        shape_of(Node::new("Shape", 15).int("start", 2).int("end", 1), &dims),
        Vec::<i64>::new()
    );
    // A scalar has an empty shape.
    assert_eq!(shape_of(Node::new("Shape", 13), &[]), Vec::<i64>::new());
}

#[test]
fn shape_rejects_start_before_opset_15_and_unknown_attributes() {
    let e = Node::new("Shape", 13).int("start", 1).build(1).unwrap_err();
    assert_eq!(attribute_error(e), "(unknown)");
    let e = Node::new("Shape", 15).int("begin", 1).build(1).unwrap_err();
    assert_eq!(attribute_error(e), "(unknown)");
    let e = Node::new("Shape", 15).run(&[]).unwrap_err();
    assert!(is_shape(&e), "{e:?}");
}

#[test]
fn size_counts_elements_and_folds() {
    for (dims, n) in [(vec![3usize, 4, 5], 60i64), (vec![], 1), (vec![2, 0], 0)] {
        let x = Tensor::zeros(ElementType::I64, dims.clone()).unwrap();
        let y = Node::new("Size", 13).run1(&[var(x.clone())]).unwrap();
        assert_eq!(y, i64t(&[], &[n]), "{dims:?}");
        let folded = fold(&Node::new("Size", 13), &[var(x)]).unwrap().unwrap();
        assert_eq!(folded, vec![i64t(&[], &[n])]);
    }
}

#[test]
fn non_shape_ops_do_not_fold() {
    let x = var(f32t(&[2, 3], &iota(6)));
    assert!(fold(&Node::new("Flatten", 13), &[x]).is_none());
}

#[test]
fn flatten_axes() {
    let x = f32t(&[2, 3, 4], &iota(24));
    for (axis, want) in [
        (0i64, [1usize, 24]),
        (1, [2, 12]),
        (2, [6, 4]),
        (3, [24, 1]),
        (-1, [6, 4]),
        (-3, [1, 24]),
    ] {
        let y = Node::new("Flatten", 13)
            .int("axis", axis)
            .run1(&[var(x.clone())])
            .unwrap();
        assert_eq!(y.shape(), &want, "axis {axis}");
        assert_eq!(f32s(&y), iota(24));
    }
    // Default axis 1; bool data.
    let b = boolt(&[2, 2], &[true, false, false, true]);
    let y = Node::new("Flatten", 13).run1(&[var(b)]).unwrap();
    assert_eq!(y, boolt(&[2, 2], &[true, false, false, true]));
    for bad in [4i64, -4] {
        let e = Node::new("Flatten", 13)
            .int("axis", bad)
            .run1(&[var(x.clone())])
            .unwrap_err();
        assert!(is_shape(&e), "{e:?}");
    }
}

#[test]
fn constant_of_shape_values_and_defaults() {
    // Default: f32 zeros.
    let y = Node::new("ConstantOfShape", 13)
        .run1(&[ints(&[2, 3])])
        .unwrap();
    assert_eq!(y, f32t(&[2, 3], &[0.0; 6]));
    // An i64 value; an empty shape gives a scalar.
    let y = Node::new("ConstantOfShape", 13)
        .tensor("value", i64t(&[1], &[7]))
        .run1(&[In::Const(i64t(&[0], &[]))])
        .unwrap();
    assert_eq!(y, i64t(&[], &[7]));
    // f16, bool and a zero dimension.
    let y = Node::new("ConstantOfShape", 20)
        .tensor(
            "value",
            Tensor::new(vec![1], TensorData::F16(vec![f16::from_f32(1.5)])).unwrap(),
        )
        .run1(&[ints(&[3])])
        .unwrap();
    assert_eq!(
        &y.data().to_data(),
        &TensorData::F16(vec![f16::from_f32(1.5); 3])
    );
    let y = Node::new("ConstantOfShape", 13)
        .tensor("value", boolt(&[1], &[true]))
        .run1(&[ints(&[2, 0])])
        .unwrap();
    assert_eq!(y, boolt(&[2, 0], &[]));
}

#[test]
fn constant_of_shape_errors() {
    // The shape must be known.
    let e = Node::new("ConstantOfShape", 13)
        .run1(&[var(i64t(&[2], &[2, 3]))])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "ConstantOfShape",
            input: 0
        }
    );
    let e = Node::new("ConstantOfShape", 13)
        .run1(&[ints(&[2, -1])])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("ConstantOfShape", 13)
        .tensor("value", f32t(&[2], &[1.0, 2.0]))
        .build(1)
        .unwrap_err();
    assert_eq!(attribute_error(e), "value");
}

fn scalar_i32(v: i32) -> In {
    In::Const(i32t(&[], &[v]))
}

fn scalar_f32(v: f32) -> In {
    In::Const(f32t(&[], &[v]))
}

#[test]
fn range_int_and_float() {
    let y = Node::new("Range", 11)
        .run1(&[scalar_i32(10), scalar_i32(4), scalar_i32(-3)])
        .unwrap();
    assert_eq!(y, i32t(&[2], &[10, 7]));
    let y = Node::new("Range", 11)
        .run1(&[
            In::Const(i64t(&[], &[0])),
            In::Const(i64t(&[], &[5])),
            In::Const(i64t(&[], &[2])),
        ])
        .unwrap();
    assert_eq!(y, i64t(&[3], &[0, 2, 4]));
    let y = Node::new("Range", 11)
        .run1(&[scalar_f32(1.0), scalar_f32(2.0), scalar_f32(0.3)])
        .unwrap();
    // ceil(1 / 0.3) = 4 elements.
    assert_close(&f32s(&y), &[1.0, 1.3, 1.6, 1.9], 1e-6);
    // Empty when the delta points away from the limit.
    let y = Node::new("Range", 11)
        .run1(&[scalar_f32(3.0), scalar_f32(1.0), scalar_f32(1.0)])
        .unwrap();
    assert_eq!(y, f32t(&[0], &[]));
    let y = Node::new("Range", 11)
        .run1(&[scalar_i32(0), scalar_i32(0), scalar_i32(1)])
        .unwrap();
    assert_eq!(y, i32t(&[0], &[]));
}

#[test]
fn range_errors() {
    let e = Node::new("Range", 11)
        .run1(&[scalar_i32(0), scalar_i32(4), scalar_i32(0)])
        .unwrap_err();
    assert!(is_invalid(&e), "{e:?}");
    let e = Node::new("Range", 11)
        .run1(&[scalar_i32(0), var(i32t(&[], &[4])), scalar_i32(1)])
        .unwrap_err();
    assert_eq!(
        e,
        KernelError::NeedsConstant {
            op: "Range",
            input: 1
        }
    );
    let e = Node::new("Range", 11)
        .run1(&[scalar_i32(0), scalar_f32(4.0), scalar_i32(1)])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
    let e = Node::new("Range", 11)
        .run1(&[In::Const(i32t(&[2], &[0, 1])), scalar_i32(4), scalar_i32(1)])
        .unwrap_err();
    assert!(is_shape(&e), "{e:?}");
}
