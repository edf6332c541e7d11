//! MatMulNBits (4-bit weights) against its scalar reference on every kernel
//! family this CPU has (plus portable): block sizes, zero points, tails,
//! batches, split packing; packing determinism, layout keys, errors.

#[macro_use]
mod linalg_util;

use linalg_util::*;

kernel_suite! {
    matmul_nbits_matches_reference => nbits_all;
    matmul_nbits_batched_and_large => nbits_large;
}

// ---------------------------------------------------------------- MatMulNBits

#[derive(Debug, Clone, Copy, PartialEq)]
enum Zp {
    None,
    U8,
    F32,
}

struct NBitsCase {
    p: reference::NBitsParams,
    inputs: Vec<Option<Tensor>>,
}

fn nbits_attrs(p: &reference::NBitsParams) -> Attrs {
    Attrs(vec![
        ("K", Attr::Int(p.k as i64)),
        ("N", Attr::Int(p.n as i64)),
        ("bits", Attr::Int(p.bits as i64)),
        ("block_size", Attr::Int(p.block_size as i64)),
        ("accuracy_level", Attr::Int(4)),
    ])
}

fn nbits_case(
    rng: &mut Rng,
    a_shape: &[usize],
    n: usize,
    bs: usize,
    zp: Zp,
    bias: bool,
) -> NBitsCase {
    let k = *a_shape.last().expect("A rank >= 1");
    let p = reference::NBitsParams {
        k,
        n,
        bits: 4,
        block_size: bs,
    };
    let blocks = p.blocks();
    let b = Tensor::new(
        vec![n, blocks, bs / 2],
        TensorData::U8(rng.bytes(n * blocks * bs / 2)),
    )
    .expect("B");
    let scales: Vec<f32> = (0..n * blocks)
        .map(|_| 0.02 + 0.1 * rng.f32().abs())
        .collect();
    let scales = Tensor::from_f32(vec![n * blocks], scales).expect("scales");
    let zp = match zp {
        Zp::None => None,
        Zp::U8 => Some(
            Tensor::new(
                vec![n * blocks.div_ceil(2)],
                TensorData::U8(rng.bytes(n * blocks.div_ceil(2))),
            )
            .expect("zp"),
        ),
        Zp::F32 => Some(
            Tensor::from_f32(
                vec![n * blocks],
                (0..n * blocks).map(|_| 7.5 + 8.0 * rng.f32()).collect(),
            )
            .expect("zp"),
        ),
    };
    let bias = bias.then(|| f32_tensor(rng, &[n]));
    let mut inputs = vec![Some(f32_tensor(rng, a_shape)), Some(b), Some(scales), zp];
    if bias.is_some() {
        inputs.push(None);
        inputs.push(bias);
    }
    NBitsCase { p, inputs }
}

/// The case's operator on `cpu` and its constant inputs (B, scales and
/// the zero points when given).
fn nbits_operator(case: &NBitsCase, cpu: CpuFeatures) -> (Box<dyn Operator>, &'static [usize]) {
    let op = operator(
        "com.microsoft",
        "MatMulNBits",
        &nbits_attrs(&case.p),
        4,
        cpu,
    )
    .expect("op");
    let consts: &[usize] = if case.inputs[3].is_none() {
        &[1, 2]
    } else {
        &[1, 2, 3]
    };
    (op, consts)
}

fn check_nbits(label: &str, cpu: CpuFeatures, case: &NBitsCase, par: &dyn ParallelFor) {
    let i = &case.inputs;
    let want = reference::matmul_nbits(
        &case.p,
        i[0].as_ref().expect("A"),
        i[1].as_ref().expect("B"),
        i[2].as_ref().expect("scales"),
        i[3].as_ref(),
        i.get(5).and_then(|b| b.as_ref()),
    )
    .expect("reference");
    let op = operator(
        "com.microsoft",
        "MatMulNBits",
        &nbits_attrs(&case.p),
        i.len(),
        cpu,
    )
    .expect("MatMulNBits");
    let consts: &[usize] = if i[3].is_some() { &[1, 2, 3] } else { &[1, 2] };
    for constant in [&[][..], consts] {
        let (got, layout) = run(&*op, i, constant, cpu, par).expect("execute");
        let ctx = format!(
            "{label} MatMulNBits A {:?} N {} bs {} zp {:?} bias {} packed {layout:?}",
            i[0].as_ref().expect("A").shape(),
            case.p.n,
            case.p.block_size,
            i[3].as_ref().map(|z| z.dtype()),
            i.len() > 5
        );
        assert_close(&got, &want, TOL, &ctx);
        if let Some(layout) = layout {
            assert!(
                layout.starts_with(&format!("matmul-nbits-q4-v1-b{}-", case.p.block_size)),
                "{ctx}"
            );
            assert!(layout.ends_with(label), "{ctx}");
        }
    }
}

fn nbits_all(label: &str, cpu: CpuFeatures) {
    let mut rng = Rng(6);
    for bs in [16, 32, 64, 128] {
        for (k, n) in [
            (bs * 2, 16),
            (bs * 3 + 8, 17),
            (bs + 3, 40),
            (5, 1),
            (bs * 4, 70),
        ] {
            for m in [1, 2, 3, 13] {
                let zp = [Zp::None, Zp::U8, Zp::F32][rng.below(3)];
                let bias = rng.below(2) == 1;
                let case = nbits_case(&mut rng, &[m, k], n, bs, zp, bias);
                check_nbits(label, cpu, &case, &Reversed);
            }
        }
    }
}

fn nbits_large(label: &str, cpu: CpuFeatures) {
    let mut rng = Rng(7);
    // Batched A, several K blocks of the GEMM path, N spanning many tiles.
    for (a_shape, n, bs, zp) in [
        (&[2, 3, 520][..], 100, 32, Zp::None),
        (&[1, 40, 600][..], 96, 64, Zp::U8),
        (&[1, 520][..], 200, 16, Zp::F32),
        (&[7, 1024][..], 33, 128, Zp::None),
        // M = 1 and 2 with enough work to split across tasks.
        (&[1, 1024][..], 300, 32, Zp::None),
        (&[2, 1000][..], 260, 64, Zp::U8),
        (&[1, 1, 777][..], 520, 16, Zp::F32),
    ] {
        let case = nbits_case(&mut rng, a_shape, n, bs, zp, true);
        check_nbits(label, cpu, &case, &Reversed);
        check_nbits(label, cpu, &case, &onnx_prepared_kernels::Sequential);
    }
}

#[test]
fn nbits_packing_is_deterministic_and_ignores_padding() {
    let mut rng = Rng(8);
    // Blocks of 32: past K = 40 the second block's last 24 nibbles are
    // padding; past K = 37 also the last 3 nibbles of a word.
    for (label, cpu) in cpus() {
        for (k, zp) in [(40, Zp::None), (40, Zp::U8), (40, Zp::F32), (37, Zp::None)] {
            let case = nbits_case(&mut rng, &[1, k], 21, 32, zp, false);
            let (op, consts) = nbits_operator(&case, cpu);
            let (c1, p1) = prepack(&*op, &case.inputs, consts, cpu).expect("packs");
            let (_, p2) = prepack(&*op, &case.inputs, consts, cpu).expect("packs");
            assert_eq!(p1, p2, "{label}: same source, same bytes");
            assert_eq!(c1, consts);
            // Rewrite the padding nibbles: the packed bytes must not change.
            let mut other = case.inputs.clone();
            let b = other[1].as_ref().expect("B");
            let mut bytes = b.as_u8().expect("u8").to_vec();
            for row in bytes.chunks_exact_mut(16 * 2) {
                for past in k..64 {
                    row[past / 2] ^= 0xf << (4 * (past % 2));
                }
            }
            other[1] = Some(Tensor::new(b.shape().to_vec(), TensorData::U8(bytes)).expect("B"));
            let (_, p3) = prepack(&*op, &other, consts, cpu).expect("packs");
            assert_eq!(p1, p3, "{label}: padding nibbles are zeroed");
            let want_zp = match zp {
                Zp::None => "zp0",
                Zp::U8 => "zpu8",
                Zp::F32 => "zpf32",
            };
            assert!(p1.layout.contains(want_zp), "{}", p1.layout);
        }
    }
}

#[test]
fn a_large_4_bit_weight_packs_to_the_same_bytes_split_across_threads() {
    let mut rng = Rng(10);
    for (label, cpu) in cpus() {
        // Over 1 MiB of B (packed by tiles in parallel), N not a multiple of
        // the tile, K with a partial last block and a partial last word.
        // Parts from 64 KiB are packed into blocks (huge pages where the
        // system has them): of their own from 2 MiB (the last), else of a
        // shared slab.
        for (k, n, zp) in [
            (1003, 2101, Zp::U8),
            (1024, 2048, Zp::None),
            (4100, 1030, Zp::F32),
        ] {
            let case = nbits_case(&mut rng, &[2, k], n, 32, zp, false);
            let (op, consts) = nbits_operator(&case, cpu);
            let b = case.inputs[1].as_ref().expect("B");
            assert!(b.byte_len() >= 1 << 20, "large enough to split");
            let seq = &onnx_prepared_kernels::Sequential;
            let (_, one) = prepack_on(&*op, &case.inputs, consts, cpu, seq).expect("packs");
            let (_, split) = prepack(&*op, &case.inputs, consts, cpu).expect("packs");
            assert_eq!(one, split, "{label} K={k} N={n}");
            let in_block = split.parts[1].len() >= onnx_prepared_kernels::tensor::STREAMED_MIN;
            assert_eq!(split.parts[1].is_mapped(), in_block, "{label} K={k} N={n}");
            assert_eq!(split.parts[1].to_data(), one.parts[1].to_data());
            check_nbits(label, cpu, &case, &Reversed);
        }
    }
}

#[test]
fn nbits_keys_differ_per_isa_and_block_size() {
    let mut rng = Rng(10);
    let mut keys = Vec::new();
    for (_, cpu) in cpus() {
        for bs in [16, 32] {
            let case = nbits_case(&mut rng, &[1, 64], 8, bs, Zp::None, false);
            let op = operator(
                "com.microsoft",
                "MatMulNBits",
                &nbits_attrs(&case.p),
                3,
                cpu,
            )
            .expect("op");
            let (_, p) = prepack(&*op, &case.inputs[..3], &[1, 2], cpu).expect("packs");
            keys.push(p.layout);
        }
    }
    let mut unique = keys.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), keys.len(), "{keys:?}");
}

#[test]
fn nbits_errors() {
    let cpu = CpuFeatures::detect();
    let p = reference::NBitsParams {
        k: 64,
        n: 8,
        bits: 8,
        block_size: 32,
    };
    let err =
        operator("com.microsoft", "MatMulNBits", &nbits_attrs(&p), 3, cpu).expect_err("bits 8");
    assert!(
        matches!(err, KernelError::Attribute { name: "bits", .. }),
        "{err:?}"
    );
    let p = reference::NBitsParams {
        bits: 4,
        block_size: 48,
        ..p
    };
    let err =
        operator("com.microsoft", "MatMulNBits", &nbits_attrs(&p), 3, cpu).expect_err("block 48");
    assert!(
        matches!(
            err,
            KernelError::Attribute {
                name: "block_size",
                ..
            }
        ),
        "{err:?}"
    );
    // Through the registry as well.
    let attrs = nbits_attrs(&reference::NBitsParams {
        k: 64,
        n: 8,
        bits: 8,
        block_size: 32,
    });
    let spec = NodeSpec {
        domain: "com.microsoft",
        op_type: "MatMulNBits",
        opset: 1,
        attributes: &attrs,
        inputs: 3,
        outputs: 1,
    };
    assert!(matches!(
        onnx_prepared_kernels::registry::operator(&spec),
        Err(KernelError::Attribute { .. })
    ));

    let mut rng = Rng(11);
    let case = nbits_case(&mut rng, &[2, 64], 8, 32, Zp::None, false);
    // A whose last dimension is not K.
    let op = operator(
        "com.microsoft",
        "MatMulNBits",
        &nbits_attrs(&reference::NBitsParams { k: 96, ..case.p }),
        3,
        cpu,
    )
    .expect("op");
    let err = op
        .infer(&infos(&case.inputs[..3], &[1, 2]))
        .expect_err("K mismatch");
    assert!(matches!(err, KernelError::Shape(_)), "{err:?}");
    // g_idx is not supported.
    let op = operator(
        "com.microsoft",
        "MatMulNBits",
        &nbits_attrs(&case.p),
        5,
        cpu,
    )
    .expect("op");
    let mut with_g = case.inputs[..3].to_vec();
    with_g.push(None);
    with_g.push(Some(
        Tensor::new(vec![64], TensorData::I32(vec![0; 64])).expect("g_idx"),
    ));
    let err = op.infer(&infos(&with_g, &[])).expect_err("g_idx");
    assert!(
        matches!(err, KernelError::Attribute { name: "g_idx", .. }),
        "{err:?}"
    );
    // Non-constant weights still run (packed per call).
    let (got, layout) = run(
        &*op,
        &case.inputs[..3],
        &[],
        cpu,
        &onnx_prepared_kernels::Sequential,
    )
    .expect("run");
    assert!(layout.is_none());
    let i = &case.inputs;
    let want = reference::matmul_nbits(
        &case.p,
        i[0].as_ref().unwrap(),
        i[1].as_ref().unwrap(),
        i[2].as_ref().unwrap(),
        None,
        None,
    )
    .expect("reference");
    assert_close(&got, &want, TOL, "unpacked weights");
}

/// Rows `rows` (cut at `n`) of a source of `n` rows, viewed in place.
fn rows_of(data: DataRef<'_>, n: usize, rows: std::ops::Range<usize>) -> DataRef<'_> {
    let per_row = data.len() / n;
    let at = rows.start * per_row..rows.end.min(n) * per_row;
    match data {
        DataRef::U8(v) => DataRef::U8(&v[at]),
        DataRef::F32(v) => DataRef::F32(&v[at]),
        DataRef::F16(v) => DataRef::F16(&v[at]),
        other => panic!("no rows of {}", other.dtype()),
    }
}

#[test]
fn a_4_bit_weight_packed_in_pieces_of_rows_is_the_whole_packing() {
    let mut rng = Rng(12);
    for (label, cpu) in cpus() {
        for (k, n, zp, f16_scales) in [
            (40, 21, Zp::None, false),
            (64, 50, Zp::U8, true),
            (100, 37, Zp::F32, false),
            (1003, 301, Zp::U8, false),
        ] {
            let mut case = nbits_case(&mut rng, &[1, k], n, 32, zp, false);
            if f16_scales {
                let s = case.inputs[2].take().expect("scales");
                let halves = s
                    .as_f32()
                    .expect("f32")
                    .iter()
                    .map(|&x| half::f16::from_f32(x))
                    .collect();
                case.inputs[2] =
                    Some(Tensor::new(s.shape().to_vec(), TensorData::F16(halves)).expect("f16"));
            }
            let (op, consts) = nbits_operator(&case, cpu);
            let (_, whole) = prepack(&*op, &case.inputs, consts, cpu).expect("packs");
            let pre = op
                .prepack(&infos(&case.inputs, consts), cpu)
                .expect("prepack");
            let sources: Vec<&Tensor> = consts
                .iter()
                .map(|&i| case.inputs[i].as_ref().expect("source"))
                .collect();
            let shapes: Vec<(&[usize], ElementType)> =
                sources.iter().map(|t| (t.shape(), t.dtype())).collect();
            // Pieces of one tile, three tiles, then the rest (a partial
            // tile at the end), or all rows in one piece.
            for firsts in [vec![1, 3], vec![], vec![2]] {
                let mut rows = pre.in_rows(&shapes).expect("packs in rows").expect("rows");
                assert_eq!(rows.rows(), n, "{label}");
                let t = rows.align();
                let mut at = 0;
                let mut pieces: Vec<usize> = firsts.iter().map(|f| f * t).collect();
                pieces.push(n.saturating_sub(pieces.iter().sum()));
                for len in pieces {
                    let end = (at + len).min(n);
                    let views: Vec<DataRef<'_>> = sources
                        .iter()
                        .map(|s| rows_of(s.data(), n, at..end))
                        .collect();
                    rows.pack(&views, &Reversed).expect("piece packs");
                    at = end;
                }
                let packed = rows.finish().expect("finished");
                assert_eq!(packed, whole, "{label} K={k} N={n} pieces {firsts:?}");
            }
            // A piece that is not whole tiles, rows past N, unequal
            // pieces, and an unfinished packing are errors.
            let mut rows = pre.in_rows(&shapes).expect("rows").expect("rows");
            let t = rows.align();
            let cut = |r: std::ops::Range<usize>| -> Vec<DataRef<'_>> {
                sources
                    .iter()
                    .map(|s| rows_of(s.data(), n, r.clone()))
                    .collect()
            };
            assert!(rows.pack(&cut(0..t + 1), &Reversed).is_err(), "{label}");
            let mut uneven = cut(0..t);
            uneven[1] = rows_of(sources[1].data(), n, 0..2 * t);
            assert!(rows.pack(&uneven, &Reversed).is_err(), "{label}");
            rows.pack(&cut(0..t), &Reversed).expect("a tile");
            assert!(rows.pack(&cut(0..n), &Reversed).is_err(), "{label}: past N");
            let err = rows.finish().expect_err("unfinished");
            assert!(err.to_string().contains("columns"), "{err}");
        }
    }
}

#[test]
fn a_4_bit_weight_with_k_0_packs_and_multiplies_to_zero() {
    let mut rng = Rng(13);
    for (label, cpu) in cpus() {
        let case = nbits_case(&mut rng, &[2, 0], 21, 32, Zp::None, false);
        let (op, consts) = nbits_operator(&case, cpu);
        let (y, _) = run(&*op, &case.inputs, consts, cpu, &Reversed).expect("K = 0");
        assert_eq!(y.shape(), &[2, 21], "{label}");
        assert!(y.as_f32().unwrap().iter().all(|&v| v == 0.0), "{label}");
    }
}
