//! Image geometry operators: values computed by hand or by an independent
//! formula in the test, the attribute forms of each opset, and refusals of
//! bad input.

mod math_util;

#[path = "image_ops/col2im.rs"]
mod col2im;
#[path = "image_ops/grid.rs"]
mod grid;

use math_util::*;
use onnx_prepared_kernels::{KernelError, Sequential, Tensor};

/// An empty f32 tensor (an omitted roi or scales).
fn empty() -> Tensor {
    f32t(&[0], &[])
}

/// Resize-19 with `scales` on `x`.
fn resize_scales(node: Node, x: Tensor, scales: &[f32]) -> Result<Tensor, KernelError> {
    node.run1(&[var(x), In::Absent, In::Const(f32t(&[scales.len()], scales))])
}

/// Resize-19 with `sizes` on `x`.
fn resize_sizes(node: Node, x: Tensor, sizes: &[i64]) -> Result<Tensor, KernelError> {
    node.run1(&[var(x), In::Const(empty()), In::Const(empty()), ints(sizes)])
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.as_f32().unwrap().to_vec()
}

#[test]
fn resize_nearest_half_pixel_repeats_each_element() {
    let x = f32t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let y = resize_scales(
        Node::new("Resize", 19).string("mode", "nearest"),
        x,
        &[1.0, 1.0, 2.0, 2.0],
    )
    .unwrap();
    assert_eq!(y.shape(), &[1, 1, 4, 4]);
    #[rustfmt::skip]
    let want = [
        1.0, 1.0, 2.0, 2.0,
        1.0, 1.0, 2.0, 2.0,
        3.0, 3.0, 4.0, 4.0,
        3.0, 3.0, 4.0, 4.0,
    ];
    assert_eq!(f32s(&y), want);
}

#[test]
fn resize_nearest_modes_round_the_source_coordinate() {
    // asymmetric, scale 4 / 3 on [0, 1, 2]: sources 0, 0.75, 1.5, 2.25.
    let x = f32t(&[3], &[10.0, 11.0, 12.0]);
    let run = |mode: &str| {
        let node = Node::new("Resize", 13)
            .string("coordinate_transformation_mode", "asymmetric")
            .string("nearest_mode", mode);
        f32s(&resize_sizes(node, x.clone(), &[4]).unwrap())
    };
    assert_eq!(run("floor"), [10.0, 10.0, 11.0, 12.0]);
    assert_eq!(run("ceil"), [10.0, 11.0, 12.0, 12.0]);
    assert_eq!(run("round_prefer_floor"), [10.0, 11.0, 11.0, 12.0]);
    assert_eq!(run("round_prefer_ceil"), [10.0, 11.0, 12.0, 12.0]);
}

/// 1-D linear interpolation at source `s` with edge clamping.
fn lerp(x: &[f32], s: f64) -> f32 {
    let s = s.clamp(0.0, (x.len() - 1) as f64);
    let i = (s.floor() as usize).min(x.len() - 1);
    let j = (i + 1).min(x.len() - 1);
    let r = s - i as f64;
    ((1.0 - r) * f64::from(x[i]) + r * f64::from(x[j])) as f32
}

#[test]
fn resize_linear_coordinate_modes() {
    let v = [1.0f32, 2.0, 4.0];
    let x = f32t(&[1, 3], &v);
    type Source = fn(f64) -> f64;
    let modes: [(&str, Source); 3] = [
        ("half_pixel", |y| (y + 0.5) / 2.0 - 0.5),
        ("asymmetric", |y| y / 2.0),
        ("align_corners", |y| y * 2.0 / 5.0),
    ];
    for (mode, source) in modes {
        let node = Node::new("Resize", 19)
            .string("mode", "linear")
            .string("coordinate_transformation_mode", mode);
        let y = resize_scales(node, x.clone(), &[1.0, 2.0]).unwrap();
        let want: Vec<f32> = (0..6).map(|o| lerp(&v, source(o as f64))).collect();
        assert_close(&f32s(&y), &want, 1e-6);
    }
}

#[test]
fn resize_bilinear_is_the_product_of_two_axes() {
    // On x[i][j] = 10 i + j, bilinear interpolation is exact inside.
    let x = f32t(&[2, 3], &[0.0, 1.0, 2.0, 10.0, 11.0, 12.0]);
    let node = Node::new("Resize", 19)
        .string("mode", "linear")
        .string("coordinate_transformation_mode", "align_corners");
    let y = resize_sizes(node, x, &[3, 5]).unwrap();
    let want: Vec<f32> = (0..15)
        .map(|k| {
            let (i, j) = ((k / 5) as f32, (k % 5) as f32);
            10.0 * i * 0.5 + j * 0.5
        })
        .collect();
    assert_close(&f32s(&y), &want, 1e-6);
}

#[test]
fn resize_cubic_matches_the_keys_kernel() {
    // asymmetric scale 2: even outputs hit inputs, odd ones lie halfway,
    // where the Keys weights (a = -0.75) are c(0.5) = 0.59375 and
    // c(1.5) = -0.09375.
    let v: Vec<f32> = (0..8).map(|i| (i * i) as f32).collect();
    let node = Node::new("Resize", 19)
        .string("mode", "cubic")
        .string("coordinate_transformation_mode", "asymmetric");
    let y = f32s(&resize_scales(node, f32t(&[8], &v), &[2.0]).unwrap());
    for k in 1..6 {
        assert_eq!(y[2 * k], v[k]);
        let want = 0.59375 * (v[k] + v[k + 1]) - 0.09375 * (v[k - 1] + v[k + 2]);
        assert!((y[2 * k + 1] - want).abs() < 1e-4, "{k}: {}", y[2 * k + 1]);
    }
}

#[test]
fn resize_cubic_exclude_outside_renormalizes_at_the_border() {
    // At source 0.5 on [a, b, c]: taps -1 (outside), 0, 1, 2.
    let v = [1.0f32, 5.0, 2.0];
    let node = Node::new("Resize", 19)
        .string("mode", "cubic")
        .string("coordinate_transformation_mode", "asymmetric")
        .float("cubic_coeff_a", -0.5)
        .int("exclude_outside", 1);
    let y = f32s(&resize_scales(node, f32t(&[3], &v), &[2.0]).unwrap());
    // a = -0.5: c(0.5) = 0.5625, c(1.5) = -0.0625.
    let (w0, w1) = (0.5625f32, -0.0625f32);
    let want = (w0 * v[0] + w0 * v[1] + w1 * v[2]) / (2.0 * w0 + w1);
    assert!((y[1] - want).abs() < 1e-5, "{} vs {want}", y[1]);
}

#[test]
fn resize_tf_crop_and_resize_extrapolates_outside_the_box() {
    // roi [0.5, 1.5] of a length-3 axis: sources 1, 2, 3 (3 is outside).
    let x = f32t(&[3], &[0.0, 10.0, 20.0]);
    let node = Node::new("Resize", 19)
        .string("mode", "linear")
        .string("coordinate_transformation_mode", "tf_crop_and_resize")
        .float("extrapolation_value", -1.0);
    let y = node
        .run1(&[
            var(x),
            In::Const(f32t(&[2], &[0.5, 1.5])),
            In::Const(empty()),
            ints(&[3]),
        ])
        .unwrap();
    assert_eq!(f32s(&y), [10.0, 20.0, -1.0]);
}

#[test]
fn resize_axes_and_aspect_policies() {
    let x = f32t(&[1, 2, 4], &[0.0; 8]);
    let shape = |policy: &str, sizes: &[i64]| {
        let node = Node::new("Resize", 19)
            .ints("axes", &[2, 1])
            .string("keep_aspect_ratio_policy", policy);
        resize_sizes(node, x.clone(), sizes)
            .unwrap()
            .shape()
            .to_vec()
    };
    // sizes [w, h] = [8, 8]: scales 2 (w) and 4 (h).
    assert_eq!(shape("stretch", &[8, 8]), [1, 8, 8]);
    assert_eq!(shape("not_larger", &[8, 8]), [1, 4, 8]);
    assert_eq!(shape("not_smaller", &[8, 8]), [1, 8, 16]);
}

#[test]
fn resize_antialias_averages_when_shrinking() {
    // Linear antialias at scale 1/2, half_pixel: output o samples 2o + 0.5
    // with a triangle of half-width 2: weights 1/4, 3/4, 3/4, 1/4 (/ 2).
    let v = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let node = Node::new("Resize", 19)
        .string("mode", "linear")
        .int("antialias", 1);
    let y = f32s(&resize_scales(node, f32t(&[8], &v), &[0.5]).unwrap());
    let at = |i: i64| v[i.clamp(0, 7) as usize];
    let want: Vec<f32> = (0..4i64)
        .map(|o| {
            let c = 2 * o;
            (0.25 * at(c - 1) + 0.75 * at(c) + 0.75 * at(c + 1) + 0.25 * at(c + 2)) / 2.0
        })
        .collect();
    assert_close(&y, &want, 1e-6);
}

#[test]
fn resize_integers_round_half_to_even() {
    let x = u8t(&[2], &[10, 20]);
    let node = Node::new("Resize", 19).string("mode", "linear");
    let y = resize_scales(node, x, &[2.0]).unwrap();
    // half_pixel: 10, 12.5, 17.5, 20.
    assert_eq!(y.as_u8().unwrap(), [10, 12, 18, 20]);
}

#[test]
fn upsample_forms_repeat_by_integer_scales() {
    let x = f32t(&[1, 2], &[1.0, 2.0]);
    let y7 = Node::new("Upsample", 7)
        .floats("scales", &[2.0, 2.0])
        .run1(&[var(x.clone())])
        .unwrap();
    let y9 = Node::new("Upsample", 9)
        .run1(&[var(x.clone()), In::Const(f32t(&[2], &[2.0, 2.0]))])
        .unwrap();
    let want = [1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0];
    assert_eq!(f32s(&y7), want);
    assert_eq!(f32s(&y9), want);
    let lin = Node::new("Resize", 10)
        .string("mode", "linear")
        .run1(&[var(x), In::Const(f32t(&[2], &[1.0, 2.0]))])
        .unwrap();
    // asymmetric: sources 0, 0.5, 1, 1.5.
    assert_eq!(f32s(&lin), [1.0, 1.5, 2.0, 2.0]);
}

#[test]
fn resize_in_parallel_matches_sequential() {
    let mut rng = Rng(7);
    let x = f32t(&[2, 3, 64, 96], &rng.f32s(2 * 3 * 64 * 96));
    let scales = f32t(&[4], &[1.0, 1.0, 1.5, 0.75]);
    for mode in ["nearest", "linear", "cubic"] {
        let node = Node::new("Resize", 19).string("mode", mode);
        let a = run_par(&node, &[&x, &empty(), &scales], &Sequential);
        let b = run_par(&node, &[&x, &empty(), &scales], &Reversed);
        assert_eq!(a.shape(), &[2, 3, 96, 72]);
        assert_eq!(f32s(&a), f32s(&b), "{mode}");
    }
}

#[test]
fn resize_refuses_bad_operands() {
    let x = || f32t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let node = Node::new("Resize", 19);
    // Run-time scales.
    let e = node
        .run1(&[var(x()), In::Absent, var(f32t(&[4], &[1.0, 1.0, 2.0, 2.0]))])
        .unwrap_err();
    assert!(
        matches!(e, KernelError::NeedsConstant { input: 2, .. }),
        "{e:?}"
    );
    let shape_err = |r: Result<Tensor, KernelError>| {
        assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    };
    shape_err(resize_scales(node.clone(), x(), &[2.0, 2.0]));
    shape_err(resize_scales(node.clone(), x(), &[1.0, 1.0, f32::NAN, 2.0]));
    shape_err(resize_scales(node.clone(), x(), &[1.0, 1.0, -1.0, 2.0]));
    shape_err(resize_scales(node.clone(), x(), &[1.0, 1.0, 0.1, 1.0]));
    shape_err(resize_sizes(node.clone(), x(), &[1, 1, 0, 2]));
    shape_err(resize_sizes(node.clone(), x(), &[1, 1, 2]));
    shape_err(node.run1(&[var(x())]));
    shape_err(node.run1(&[
        var(x()),
        In::Absent,
        In::Const(f32t(&[4], &[1.0; 4])),
        ints(&[1, 1, 2, 2]),
    ]));
    // tf_crop_and_resize without a roi, and with one of the wrong length.
    let tf = node
        .clone()
        .string("coordinate_transformation_mode", "tf_crop_and_resize");
    shape_err(resize_sizes(tf.clone(), x(), &[1, 1, 2, 2]));
    shape_err(tf.run1(&[
        var(x()),
        In::Const(f32t(&[2], &[0.0, 1.0])),
        In::Const(empty()),
        ints(&[1, 1, 2, 2]),
    ]));
    // Attributes.
    let attr = |n: Node| attribute_error(n.build(3).unwrap_err());
    assert_eq!(
        attr(Node::new("Resize", 10).string("mode", "cubic")),
        "mode"
    );
    assert_eq!(
        attr(Node::new("Resize", 19).int("antialias", 1)),
        "antialias"
    );
    assert_eq!(
        attr(
            Node::new("Resize", 13)
                .string("coordinate_transformation_mode", "half_pixel_symmetric")
        ),
        "coordinate_transformation_mode"
    );
    assert_eq!(
        attr(Node::new("Resize", 19).string("nearest_mode", "up")),
        "nearest_mode"
    );
}

/// `[N, C, H, W]` values `0, 1, ..` as f32.
fn iota(shape: &[usize]) -> Tensor {
    let n = numel(shape);
    f32t(shape, &(0..n).map(|v| v as f32).collect::<Vec<_>>())
}

#[test]
fn depth_to_space_modes_follow_their_channel_order() {
    // C = 8, b = 2: C' = 2; H = W = 1.
    let x = iota(&[1, 8, 1, 1]);
    let dcr = Node::new("DepthToSpace", 13)
        .int("blocksize", 2)
        .run1(&[var(x.clone())])
        .unwrap();
    assert_eq!(dcr.shape(), &[1, 2, 2, 2]);
    // DCR: y[c, i, j] = x[(i * 2 + j) * 2 + c].
    assert_eq!(f32s(&dcr), [0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0]);
    let crd = Node::new("DepthToSpace", 13)
        .int("blocksize", 2)
        .string("mode", "CRD")
        .run1(&[var(x)])
        .unwrap();
    // CRD: y[c, i, j] = x[c * 4 + i * 2 + j]: the identity order here.
    assert_eq!(f32s(&crd), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
}

#[test]
fn space_to_depth_inverts_depth_to_space() {
    let mut rng = Rng(3);
    let x = f32t(&[2, 3, 4, 6], &rng.f32s(2 * 3 * 4 * 6));
    for mode in ["DCR", "CRD"] {
        let s2d = Node::new("SpaceToDepth", 28)
            .int("blocksize", 2)
            .string("mode", mode)
            .run1(&[var(x.clone())])
            .unwrap();
        assert_eq!(s2d.shape(), &[2, 12, 2, 3]);
        let back = Node::new("DepthToSpace", 13)
            .int("blocksize", 2)
            .string("mode", mode)
            .run1(&[var(s2d)])
            .unwrap();
        assert_eq!(f32s(&back), f32s(&x), "{mode}");
    }
    // One element by hand (DCR): y[0, (i*2+j)*3 + c, h, w] = x[0, c, 2h+i, 2w+j].
    let s2d = Node::new("SpaceToDepth", 13)
        .int("blocksize", 2)
        .run1(&[var(x.clone())])
        .unwrap();
    let (c, i, j, h, w) = (2, 1, 0, 1, 2);
    let yv = f32s(&s2d)[(((i * 2 + j) * 3 + c) * 2 + h) * 3 + w];
    assert_eq!(yv, f32s(&x)[((c * 4) + 2 * h + i) * 6 + 2 * w + j]);
}

#[test]
fn space_ops_refuse_bad_shapes_and_attributes() {
    let d2s = Node::new("DepthToSpace", 13).int("blocksize", 2);
    let shape_err = |r: Result<Tensor, KernelError>| {
        assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    };
    shape_err(d2s.run1(&[var(iota(&[1, 6, 2, 2]))]));
    shape_err(d2s.run1(&[var(iota(&[8, 2, 2]))]));
    let s2d = Node::new("SpaceToDepth", 13).int("blocksize", 2);
    shape_err(s2d.run1(&[var(iota(&[1, 1, 3, 2]))]));
    let attr = |n: Node| attribute_error(n.build(1).unwrap_err());
    assert_eq!(attr(Node::new("DepthToSpace", 13)), "blocksize");
    assert_eq!(
        attr(Node::new("DepthToSpace", 13).int("blocksize", 0)),
        "blocksize"
    );
    assert_eq!(
        attr(
            Node::new("DepthToSpace", 13)
                .int("blocksize", 2)
                .string("mode", "XYZ")
        ),
        "mode"
    );
    // SpaceToDepth has `mode` only from opset 28.
    assert!(
        Node::new("SpaceToDepth", 13)
            .int("blocksize", 2)
            .string("mode", "CRD")
            .build(1)
            .is_err()
    );
}

#[test]
fn center_crop_pad_centres_the_kept_span() {
    // Axis 0: 5 -> 3 keeps rows 1..4; axis 1: 2 -> 5 pads 1 before, 2 after.
    let x = iota(&[5, 2]);
    let y = Node::new("CenterCropPad", 18)
        .run1(&[var(x), ints(&[3, 5])])
        .unwrap();
    assert_eq!(y.shape(), &[3, 5]);
    #[rustfmt::skip]
    let want = [
        0.0, 2.0, 3.0, 0.0, 0.0,
        0.0, 4.0, 5.0, 0.0, 0.0,
        0.0, 6.0, 7.0, 0.0, 0.0,
    ];
    assert_eq!(f32s(&y), want);
    // With axes (negative counted from the end): only axis 0 changes.
    let y = Node::new("CenterCropPad", 18)
        .ints("axes", &[-2])
        .run1(&[var(iota(&[4, 2])), ints(&[2])])
        .unwrap();
    assert_eq!(f32s(&y), [2.0, 3.0, 4.0, 5.0]);
}

#[test]
fn center_crop_pad_refuses_bad_shapes() {
    let node = Node::new("CenterCropPad", 18);
    let e = node
        .run1(&[var(iota(&[2, 2])), var(i64t(&[2], &[1, 1]))])
        .unwrap_err();
    assert!(
        matches!(e, KernelError::NeedsConstant { input: 1, .. }),
        "{e:?}"
    );
    assert!(matches!(
        node.run1(&[var(iota(&[2, 2])), ints(&[1])]),
        Err(KernelError::Shape(_))
    ));
    assert!(matches!(
        node.run1(&[var(iota(&[2, 2])), ints(&[1, -1])]),
        Err(KernelError::Shape(_))
    ));
    assert!(matches!(
        node.clone()
            .ints("axes", &[0, 0])
            .run1(&[var(iota(&[2, 2])), ints(&[1, 1])]),
        Err(KernelError::Shape(_))
    ));
}
