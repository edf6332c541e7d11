//! Matrix-product kernels against their scalar references: every kernel
//! family this CPU has (plus portable), packed and unpacked weights,
//! randomized shapes with tails; packing determinism, layout keys, errors.

#[macro_use]
mod linalg_util;

use linalg_util::*;

kernel_suite! {
    matmul_2d_matches_reference => matmul_2d;
    matmul_batched_matches_reference => matmul_batched;
    gemm_matches_reference => gemm_all;
}

// ---------------------------------------------------------------- MatMul

fn matmul_2d(label: &str, cpu: CpuFeatures) {
    let mut rng = Rng(1);
    let op = operator("", "MatMul", &Attrs::default(), 2, cpu).expect("MatMul");
    let shapes = [
        (1, 1, 1),
        (1, 64, 129),
        (1, 5, 33),
        (2, 3, 4),
        (3, 17, 31),
        (7, 300, 45),
        (13, 64, 64),
        (12, 256, 32),
        (25, 513, 70),
        (128, 64, 128),
        (33, 1, 17),
    ];
    for (m, k, n) in shapes {
        let a = f32_tensor(&mut rng, &[m, k]);
        let b = f32_tensor(&mut rng, &[k, n]);
        let want = reference::matmul(&a, &b).expect("reference");
        let inputs = [Some(a), Some(b)];
        for (constant, par) in [
            (
                &[][..],
                &onnx_prepared_kernels::Sequential as &dyn ParallelFor,
            ),
            (&[1][..], &Reversed),
        ] {
            let (got, layout) = run(&*op, &inputs, constant, cpu, par).expect("execute");
            assert_close(
                &got,
                &want,
                TOL,
                &format!("{label} MatMul {m}x{k}x{n} packed={layout:?}"),
            );
            if !constant.is_empty() {
                let nr = if label == "avx512" { 32 } else { 16 };
                assert_eq!(
                    layout.as_deref(),
                    Some(&*format!("matmul-f32-v1-nr{nr}-{label}"))
                );
            }
        }
    }
}

fn matmul_batched(label: &str, cpu: CpuFeatures) {
    let mut rng = Rng(2);
    let op = operator("", "MatMul", &Attrs::default(), 2, cpu).expect("MatMul");
    let cases: &[(&[usize], &[usize])] = &[
        (&[1, 8, 5, 64], &[1, 8, 64, 21]),
        (&[1, 8, 1, 64], &[1, 8, 64, 129]),
        (&[2, 1, 3, 7], &[4, 7, 9]),
        (&[3, 4, 10], &[10, 6]),
        (&[10], &[10, 3]),
        (&[4, 10], &[10]),
        (&[10], &[10]),
        (&[2, 3, 5, 8], &[1, 3, 8, 2]),
        (&[2, 1, 5, 8], &[3, 8, 2]),
        (&[1, 19], &[2, 19, 40]),
    ];
    for &(sa, sb) in cases {
        let a = f32_tensor(&mut rng, sa);
        let b = f32_tensor(&mut rng, sb);
        let want = reference::matmul(&a, &b).expect("reference");
        let inputs = [Some(a), Some(b)];
        let (got, _) = run(&*op, &inputs, &[], cpu, &Reversed).expect("execute");
        assert_close(&got, &want, TOL, &format!("{label} MatMul {sa:?} x {sb:?}"));
        if sb.len() == 2 {
            let (got, layout) = run(&*op, &inputs, &[1], cpu, &Reversed).expect("execute packed");
            assert!(layout.is_some(), "2-D constant B is packed");
            assert_close(
                &got,
                &want,
                TOL,
                &format!("{label} MatMul {sa:?} x packed {sb:?}"),
            );
        }
    }
}

#[test]
fn matmul_other_types_use_the_reference() {
    let op = operator("", "MatMul", &Attrs::default(), 2, CpuFeatures::detect()).expect("MatMul");
    let a = Tensor::new(vec![2, 2], TensorData::I32(vec![1, 2, 3, 4])).expect("a");
    let b = Tensor::new(vec![2, 2], TensorData::I32(vec![5, 6, 7, 8])).expect("b");
    let (y, _) = run(
        &*op,
        &[Some(a), Some(b)],
        &[1],
        CpuFeatures::detect(),
        &onnx_prepared_kernels::Sequential,
    )
    .expect("i32");
    assert_eq!(y.as_i32(), Some(&[19, 22, 43, 50][..]));
    let a = Tensor::new(vec![3], TensorData::F64(vec![1.0, 2.0, 3.0])).expect("a");
    let b = Tensor::new(vec![3, 1], TensorData::F64(vec![4.0, 5.0, 6.0])).expect("b");
    let (y, _) = run(
        &*op,
        &[Some(a), Some(b)],
        &[],
        CpuFeatures::detect(),
        &onnx_prepared_kernels::Sequential,
    )
    .expect("f64");
    assert_eq!(y.shape(), &[1]);
    assert_eq!(y.as_f64(), Some(&[32.0][..]));
    let a = Tensor::new(vec![1, 2], TensorData::I64(vec![i64::MAX, 1])).expect("a");
    let b = Tensor::new(vec![2, 1], TensorData::I64(vec![2, 3])).expect("b");
    let (y, _) = run(
        &*op,
        &[Some(a), Some(b)],
        &[],
        CpuFeatures::detect(),
        &onnx_prepared_kernels::Sequential,
    )
    .expect("i64");
    assert_eq!(
        y.as_i64(),
        Some(&[i64::MAX.wrapping_mul(2).wrapping_add(3)][..])
    );
}

// ---------------------------------------------------------------- Gemm

fn gemm_attrs(p: &reference::GemmParams) -> Attrs {
    Attrs(vec![
        ("alpha", Attr::Float(p.alpha)),
        ("beta", Attr::Float(p.beta)),
        ("transA", Attr::Int(p.trans_a as i64)),
        ("transB", Attr::Int(p.trans_b as i64)),
    ])
}

fn gemm_all(label: &str, cpu: CpuFeatures) {
    let mut rng = Rng(3);
    for (m, k, n) in [
        (1, 16, 16),
        (5, 37, 19),
        (16, 256, 40),
        (1, 70, 33),
        (14, 9, 1),
    ] {
        for trans_a in [false, true] {
            for trans_b in [false, true] {
                for (alpha, beta) in [(1.0, 1.0), (0.5, -2.0), (1.5, 0.0)] {
                    let p = reference::GemmParams {
                        alpha,
                        beta,
                        trans_a,
                        trans_b,
                    };
                    let c_shapes: [Option<Vec<usize>>; 7] = [
                        None,
                        Some(vec![]),
                        Some(vec![1]),
                        Some(vec![n]),
                        Some(vec![1, n]),
                        Some(vec![m, 1]),
                        Some(vec![m, n]),
                    ];
                    let c_pick = rng.below(c_shapes.len());
                    for c_shape in [&c_shapes[c_pick], &c_shapes[(c_pick + 3) % c_shapes.len()]] {
                        let a = f32_tensor(&mut rng, &if trans_a { [k, m] } else { [m, k] });
                        let b = f32_tensor(&mut rng, &if trans_b { [n, k] } else { [k, n] });
                        let c = c_shape.as_ref().map(|s| f32_tensor(&mut rng, s));
                        let want = reference::gemm(&a, &b, c.as_ref(), &p).expect("reference");
                        let attrs = gemm_attrs(&p);
                        let op = operator("", "Gemm", &attrs, 2 + c.is_some() as usize, cpu)
                            .expect("Gemm");
                        let mut inputs = vec![Some(a), Some(b)];
                        if c.is_some() {
                            inputs.push(c);
                        }
                        for constant in [&[][..], &[1, 2][..]] {
                            let (got, layout) =
                                run(&*op, &inputs, constant, cpu, &Reversed).expect("execute");
                            let ctx = format!(
                                "{label} Gemm {m}x{k}x{n} {p:?} C {c_shape:?} packed {layout:?}"
                            );
                            assert_close(&got, &want, TOL, &ctx);
                            if let Some(layout) = layout {
                                assert!(
                                    layout.contains(&format!("transB{}", trans_b as u8)),
                                    "{ctx}"
                                );
                                assert!(layout.ends_with(label), "{ctx}");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn gemm_layout_keys_and_packed_objects_differ_by_trans_b() {
    let mut rng = Rng(4);
    let w = f32_tensor(&mut rng, &[24, 24]);
    let a = f32_tensor(&mut rng, &[3, 24]);
    let mut keys = Vec::new();
    for (label, cpu) in cpus() {
        let mut packs = Vec::new();
        for trans_b in [false, true] {
            let p = reference::GemmParams {
                trans_b,
                ..Default::default()
            };
            let attrs = gemm_attrs(&p);
            let op = operator("", "Gemm", &attrs, 2, cpu).expect("Gemm");
            let inputs = [Some(a.clone()), Some(w.clone())];
            let (_, packed) = prepack(&*op, &inputs, &[1], cpu).expect("packs");
            keys.push(packed.layout.clone());
            packs.push(packed);
            let (got, _) = run(&*op, &inputs, &[1], cpu, &Reversed).expect("run");
            let want = reference::gemm(&a, &w, None, &p).expect("reference");
            assert_close(
                &got,
                &want,
                TOL,
                &format!("{label} shared weight transB {trans_b}"),
            );
        }
        assert_ne!(
            packs[0], packs[1],
            "{label}: transB 0 and 1 pack differently"
        );
    }
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        keys.len(),
        "keys are distinct per transB and ISA: {keys:?}"
    );
}

#[test]
fn gemm_rejects_a_packed_weight_of_the_other_trans_b() {
    let cpu = CpuFeatures::detect();
    let mut rng = Rng(5);
    let w = f32_tensor(&mut rng, &[8, 8]);
    let a = f32_tensor(&mut rng, &[2, 8]);
    let p1 = reference::GemmParams {
        trans_b: true,
        ..Default::default()
    };
    let op0 = operator("", "Gemm", &gemm_attrs(&Default::default()), 2, cpu).expect("Gemm");
    let op1 = operator("", "Gemm", &gemm_attrs(&p1), 2, cpu).expect("Gemm");
    let inputs = [Some(a.clone()), Some(w)];
    let (_, packed1) = prepack(&*op1, &inputs, &[1], cpu).expect("packs");
    let mut out = vec![Tensor::zeros(ElementType::F32, vec![2, 8]).expect("out")];
    let err = op0.execute(
        &[Some(&a), None],
        Some(&packed1),
        &mut out,
        &onnx_prepared_kernels::Sequential,
    );
    assert!(matches!(err, Err(KernelError::Invalid { .. })), "{err:?}");
}

#[test]
fn gemm_f64_uses_the_reference() {
    let cpu = CpuFeatures::detect();
    let p = reference::GemmParams {
        alpha: 2.0,
        beta: 1.0,
        trans_a: false,
        trans_b: true,
    };
    let op = operator("", "Gemm", &gemm_attrs(&p), 3, cpu).expect("Gemm");
    let a = Tensor::new(vec![1, 2], TensorData::F64(vec![1.0, 2.0])).expect("a");
    let b = Tensor::new(vec![2, 2], TensorData::F64(vec![1.0, 0.0, 0.0, 1.0])).expect("b");
    let c = Tensor::new(vec![2], TensorData::F64(vec![10.0, 20.0])).expect("c");
    let (y, layout) = run(
        &*op,
        &[Some(a), Some(b), Some(c)],
        &[1],
        cpu,
        &onnx_prepared_kernels::Sequential,
    )
    .expect("run");
    assert!(layout.is_none(), "f64 B is not packed");
    assert_eq!(y.as_f64(), Some(&[12.0, 24.0][..]));
}

#[test]
fn f32_packing_is_deterministic() {
    let mut rng = Rng(9);
    // The second B's panels are over 2 MiB: a block of their own (huge
    // pages where the system has them) instead of a vector.
    for (k, n) in [(37usize, 45usize), (780, 700)] {
        let b = f32_tensor(&mut rng, &[k, n]);
        let a = f32_tensor(&mut rng, &[2, k]);
        let want = reference::matmul(&a, &b).expect("reference");
        let b_values = b.as_f32().expect("f32").to_vec();
        let mut keys = Vec::new();
        for (label, cpu) in cpus() {
            let op = operator("", "MatMul", &Attrs::default(), 2, cpu).expect("op");
            let inputs = [Some(a.clone()), Some(b.clone())];
            let (_, p1) = prepack(&*op, &inputs, &[1], cpu).expect("packs");
            let (_, p2) = prepack(&*op, &inputs, &[1], cpu).expect("packs");
            assert_eq!(p1, p2);
            // Panels [ceil(N / NR)][K][NR]: B's columns, zero past N.
            let nr: usize = p1
                .layout
                .split("-nr")
                .nth(1)
                .and_then(|r| r.split('-').next())
                .expect("nr")
                .parse()
                .expect("nr");
            let Some(panels) = p1.parts[1].as_f32() else {
                panic!("f32 panels")
            };
            assert_eq!(panels.len(), n.div_ceil(nr) * k * nr);
            let large = panels.len() * 4 >= onnx_prepared_kernels::tensor::STREAMED_MIN;
            assert_eq!(p1.parts[1].is_mapped(), large, "{label} {k}x{n}");
            for (i, &v) in panels.iter().enumerate() {
                let (panel, q, j) = (i / (k * nr), i / nr % k, i % nr);
                let col = panel * nr + j;
                let expected = if col < n { b_values[q * n + col] } else { 0.0 };
                assert_eq!(v.to_bits(), expected.to_bits(), "{label} {k}x{n} at {i}");
            }
            let (got, layout) = run(&*op, &inputs, &[1], cpu, &Reversed).expect("execute");
            assert!(layout.is_some(), "packed");
            assert_close(&got, &want, TOL, &format!("{label} packed {k}x{n}"));
            keys.push(p1.layout);
        }
        let mut unique = keys.clone();
        unique.dedup();
        assert_eq!(unique, keys, "one key per ISA");
    }
}

#[test]
fn matmul_and_gemm_shape_errors() {
    let cpu = CpuFeatures::detect();
    let op = operator("", "MatMul", &Attrs::default(), 2, cpu).expect("op");
    let a = Tensor::zeros(ElementType::F32, vec![2, 3]).expect("a");
    let b = Tensor::zeros(ElementType::F32, vec![4, 5]).expect("b");
    let err = op
        .infer(&infos(&[Some(a.clone()), Some(b.clone())], &[]))
        .expect_err("K mismatch");
    assert!(matches!(err, KernelError::Shape(_)));
    let op = operator("", "Gemm", &Attrs::default(), 2, cpu).expect("op");
    let err = op
        .infer(&infos(&[Some(a), Some(b)], &[]))
        .expect_err("K mismatch");
    assert!(matches!(err, KernelError::Shape(_)));
    let err =
        operator("", "Gemm", &Attrs(vec![("transA", Attr::Int(2))]), 2, cpu).expect_err("transA 2");
    assert!(matches!(err, KernelError::Attribute { .. }));
    let err = operator("", "Gemm", &Attrs(vec![("bogus", Attr::Int(2))]), 2, cpu)
        .expect_err("unknown attribute");
    assert!(matches!(err, KernelError::Attribute { .. }));
}

#[test]
fn products_with_empty_dimensions() {
    let cpu = CpuFeatures::detect();
    let op = operator("", "MatMul", &Attrs::default(), 2, cpu).expect("op");
    let a = Tensor::zeros(ElementType::F32, vec![3, 0]).expect("a");
    let b = Tensor::zeros(ElementType::F32, vec![0, 4]).expect("b");
    for constant in [&[][..], &[1]] {
        let mut inputs = [Some(a.clone()), Some(b.clone())];
        let (y, _) = run(&*op, &inputs, constant, cpu, &Reversed).expect("K = 0");
        assert_eq!(y.shape(), &[3, 4]);
        assert!(y.as_f32().expect("f32").iter().all(|&v| v == 0.0));
        inputs[0] = Some(Tensor::zeros(ElementType::F32, vec![0, 0]).expect("a"));
        let (y, _) = run(&*op, &inputs, constant, cpu, &Reversed).expect("M = 0");
        assert_eq!(y.shape(), &[0, 4]);
    }
}
