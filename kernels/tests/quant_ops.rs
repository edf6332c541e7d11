//! DequantizeLinear and `com.microsoft` GatherBlockQuantized against
//! hand-computed values and scalar references written here.

mod basic_util;
mod quant_util;

use basic_util::*;
use onnx_prepared_kernels::{ElementType, KernelError, Tensor, TensorData};
use quant_util::*;

// ---------------------------------------------------------------- Dequantize

fn dq(opset: i64) -> Node {
    Node::new("DequantizeLinear", opset)
}

/// `(x - zp) * scale` with the scale index of each element computed from its
/// multi-index: `mode` None = per tensor, Some((axis, None)) = per axis,
/// Some((axis, Some(bs))) = blocked.
fn reference(
    x: &[i64],
    shape: &[usize],
    scale: &[f32],
    zp: Option<&[i64]>,
    mode: Option<(usize, Option<usize>)>,
) -> Vec<f32> {
    (0..x.len())
        .map(|i| {
            let idx = unravel(i, shape);
            let s = match mode {
                None => 0,
                Some((axis, None)) => idx[axis],
                Some((axis, Some(bs))) => {
                    let mut sshape = shape.to_vec();
                    sshape[axis] = shape[axis].div_ceil(bs);
                    let mut sidx = idx.clone();
                    sidx[axis] /= bs;
                    sidx.iter().zip(strides(&sshape)).map(|(a, b)| a * b).sum()
                }
            };
            let z = zp.map_or(0, |z| z[s]);
            (x[i] - z) as f32 * scale[s]
        })
        .collect()
}

#[test]
fn dequantize_per_tensor_uint8_by_hand() {
    let y = dq(13)
        .run1(&[
            var(u8t(&[4], &[0, 3, 128, 255])),
            var(f32t(&[], &[2.0])),
            var(u8t(&[], &[128])),
        ])
        .unwrap();
    assert_eq!(y.shape(), &[4]);
    assert_eq!(y.as_f32().unwrap(), &[-256.0, -250.0, 0.0, 254.0]);
    // Without a zero point, and int32 input.
    let y = dq(13)
        .run1(&[var(i32t(&[3], &[-7, 0, 1 << 30])), var(f32t(&[1], &[0.5]))])
        .unwrap();
    assert_eq!(y.as_f32().unwrap(), &[-3.5, 0.0, (1 << 29) as f32]);
}

#[test]
fn dequantize_per_axis_matches_reference_on_every_axis() {
    let shape = [2, 3, 4];
    let mut rng = Rng(11);
    let x: Vec<i8> = (0..24).map(|_| rng.below(256) as u8 as i8).collect();
    let xi: Vec<i64> = x.iter().map(|&v| v as i64).collect();
    for axis in [0i64, 1, 2, -1] {
        let a = axis.rem_euclid(3) as usize;
        let d = shape[a];
        let scale: Vec<f32> = (0..d).map(|i| 0.25 + i as f32).collect();
        let zp: Vec<i8> = (0..d).map(|i| i as i8 * 3 - 2).collect();
        let zpi: Vec<i64> = zp.iter().map(|&v| v as i64).collect();
        let y = dq(13)
            .int("axis", axis)
            .run1(&[
                var(i8t(&shape, &x)),
                var(f32t(&[d], &scale)),
                var(i8t(&[d], &zp)),
            ])
            .unwrap();
        let want = reference(&xi, &shape, &scale, Some(&zpi), Some((a, None)));
        assert_eq!(y.as_f32().unwrap(), want.as_slice(), "axis {axis}");
    }
}

#[test]
fn dequantize_blocked_matches_reference_with_partial_blocks() {
    // INT4 values (unpacked as i8), K = 7 not a multiple of the block.
    let mut rng = Rng(5);
    for (shape, axis, bs) in [
        (vec![7usize, 3], 0usize, 2usize),
        (vec![2, 5], 1, 2),
        (vec![3, 7, 2], 1, 4),
        (vec![4, 6], 1, 16),
    ] {
        let n = numel(&shape);
        let x: Vec<i8> = (0..n).map(|_| rng.below(16) as i8 - 8).collect();
        let mut sshape = shape.clone();
        sshape[axis] = shape[axis].div_ceil(bs);
        let sn = numel(&sshape);
        let scale: Vec<f32> = (0..sn).map(|_| rng.f32() + 1.5).collect();
        let zp: Vec<i8> = (0..sn).map(|_| rng.below(16) as i8 - 8).collect();
        let xi: Vec<i64> = x.iter().map(|&v| v as i64).collect();
        let zpi: Vec<i64> = zp.iter().map(|&v| v as i64).collect();
        let node = dq(21).int("axis", axis as i64).int("block_size", bs as i64);
        let y = node
            .run1(&[
                var(i8t(&shape, &x)),
                var(f32t(&sshape, &scale)),
                var(i8t(&sshape, &zp)),
            ])
            .unwrap();
        let want = reference(&xi, &shape, &scale, Some(&zpi), Some((axis, Some(bs))));
        assert_eq!(
            y.as_f32().unwrap(),
            want.as_slice(),
            "{shape:?} {axis} {bs}"
        );
        // Without zero points.
        let y = node
            .run1(&[var(i8t(&shape, &x)), var(f32t(&sshape, &scale))])
            .unwrap();
        let want = reference(&xi, &shape, &scale, None, Some((axis, Some(bs))));
        assert_eq!(y.as_f32().unwrap(), want.as_slice());
    }
}

#[test]
fn dequantize_uint16_int16_and_f16_scale() {
    let y = dq(21)
        .run1(&[
            var(Tensor::new(vec![3], TensorData::U16(vec![0, 40000, 65535])).unwrap()),
            var(f32t(&[], &[0.5])),
            var(Tensor::new(vec![], TensorData::U16(vec![30000])).unwrap()),
        ])
        .unwrap();
    assert_eq!(y.as_f32().unwrap(), &[-15000.0, 5000.0, 17767.5]);
    let y = dq(21)
        .run1(&[
            var(Tensor::new(vec![2], TensorData::I16(vec![-300, 300])).unwrap()),
            var(f32t(&[], &[2.0])),
        ])
        .unwrap();
    assert_eq!(y.as_f32().unwrap(), &[-600.0, 600.0]);
    // f16 scale: f16 output; output_dtype may repeat it (opset 23).
    for node in [dq(19), dq(23).int("output_dtype", 10)] {
        let y = node
            .run1(&[var(u8t(&[2], &[10, 20])), var(f16t(&[], &[0.25]))])
            .unwrap();
        assert_eq!(y.dtype(), ElementType::F16);
        let v: Vec<f32> = y.as_f16().unwrap().iter().map(|v| v.to_f32()).collect();
        assert_eq!(v, [2.5, 5.0]);
    }
}

#[test]
fn dequantize_parallel_chunks_match_sequential() {
    let mut rng = Rng(3);
    let shape = [64, 1100];
    let n = numel(&shape);
    let x: Vec<u8> = (0..n).map(|_| rng.below(256) as u8).collect();
    let op_tensor = dq(13).build(3).unwrap();
    let op_axis = dq(13).int("axis", 0).build(3).unwrap();
    let op_block = dq(21)
        .int("axis", 1)
        .int("block_size", 32)
        .build(3)
        .unwrap();
    let xt = u8t(&shape, &x);
    let cases: Vec<(_, Tensor, Tensor)> = vec![
        (op_tensor, f32t(&[], &[0.1]), u8t(&[], &[7])),
        (
            op_axis,
            f32t(&[64], &rng.f32s(64)),
            u8t(&[64], &(0..64).map(|i| i as u8).collect::<Vec<_>>()),
        ),
        (
            op_block,
            f32t(&[64, 35], &rng.f32s(64 * 35)),
            u8t(&[64, 35], &vec![100; 64 * 35]),
        ),
    ];
    for (op, s, z) in cases {
        let ins = [Some(&xt), Some(&s), Some(&z)];
        let seq = run_with(op.as_ref(), &ins, &onnx_prepared_kernels::Sequential).unwrap();
        let par = run_with(op.as_ref(), &ins, &Reversed).unwrap();
        assert_eq!(seq, par);
        assert!(seq[0].as_f32().unwrap().iter().any(|&v| v != 0.0));
    }
}

#[test]
fn dequantize_rejects_bad_inputs() {
    let x = u8t(&[2, 3], &[1; 6]);
    // Zero point shape differs from the scale's.
    let e = dq(13)
        .run1(&[
            var(x.clone()),
            var(f32t(&[3], &[1.0; 3])),
            var(u8t(&[2], &[0; 2])),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // Per-axis scale of the wrong length.
    let e = dq(13)
        .run1(&[var(x.clone()), var(f32t(&[2], &[1.0; 2]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // Axis out of range.
    let e = dq(13)
        .int("axis", 2)
        .run1(&[var(x.clone()), var(f32t(&[3], &[1.0; 3]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // Blocked scale with the wrong block count.
    let e = dq(21)
        .int("block_size", 2)
        .run1(&[var(x.clone()), var(f32t(&[2, 1], &[1.0; 2]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // block_size before opset 21, output_dtype before 23, negative block_size.
    assert_eq!(
        attribute_error(dq(19).int("block_size", 2).build(2).unwrap_err()),
        "(unknown)"
    );
    assert_eq!(
        attribute_error(dq(21).int("output_dtype", 1).build(2).unwrap_err()),
        "(unknown)"
    );
    assert_eq!(
        attribute_error(dq(21).int("block_size", -1).build(2).unwrap_err()),
        "block_size"
    );
    // output_dtype other than the scale type.
    let e = dq(23)
        .int("output_dtype", 10)
        .run1(&[var(x.clone()), var(f32t(&[], &[1.0]))])
        .unwrap_err();
    assert_eq!(attribute_error(e), "output_dtype");
    // Unsupported x and scale types; zero point type mismatch.
    let e = dq(13)
        .run1(&[var(f32t(&[1], &[1.0])), var(f32t(&[], &[1.0]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
    let e = dq(13)
        .run1(&[var(x.clone()), var(i64t(&[], &[1]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
    let e = dq(13)
        .run1(&[var(x.clone()), var(f32t(&[], &[1.0])), var(i8t(&[], &[0]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // Arity.
    assert!(dq(13).build(1).is_err());
}

// ------------------------------------------------------ GatherBlockQuantized

fn gbq() -> Node {
    Node::new("GatherBlockQuantized", 1).domain("com.microsoft")
}

/// Packs logical values `bits` wide along the last axis, low bits first.
fn pack_bits(values: &[u8], row: usize, bits: usize) -> Vec<u8> {
    let per = 8 / bits;
    let mut out = Vec::new();
    for r in values.chunks(row) {
        for c in r.chunks(per) {
            let mut b = 0u8;
            for (j, &v) in c.iter().enumerate() {
                b |= v << (j * bits);
            }
            out.push(b);
        }
    }
    out
}

/// Embedding-style reference: rows `[V, H]` of logical values, scales
/// `[V, blocks]`, zero points `[V, blocks]` (logical), gathered by index.
fn gather_rows_ref(
    q: &[u8],
    h: usize,
    bs: usize,
    scales: &[f32],
    zp: &[u8],
    indices: &[i64],
    v: usize,
) -> Vec<f32> {
    let blocks = h.div_ceil(bs);
    let mut out = Vec::new();
    for &i in indices {
        if i < -(v as i64) || i >= v as i64 {
            out.extend(std::iter::repeat_n(0.0, h));
            continue;
        }
        let r = i.rem_euclid(v as i64) as usize;
        for c in 0..h {
            let s = r * blocks + c / bs;
            out.push((q[r * h + c] as f32 - zp[s] as f32) * scales[s]);
        }
    }
    out
}

#[test]
fn gather_block_quantized_uint8_packed_bits_4_2_8() {
    let mut rng = Rng(21);
    let (v, h, bs) = (5usize, 48usize, 16usize);
    let blocks = h.div_ceil(bs);
    let indices = [0i64, 4, -1, 2, 7, -6];
    for bits in [4usize, 2, 8] {
        let max = 1u64 << bits;
        let q: Vec<u8> = (0..v * h).map(|_| rng.below(max) as u8).collect();
        let scales = rng.f32s(v * blocks);
        let zps: Vec<u8> = (0..v * blocks).map(|_| rng.below(max) as u8).collect();
        let data = pack_bits(&q, h, bits);
        let data_t = u8t(&[v, h * bits / 8], &data);
        let idx_t = i64t(&[2, 3], &indices);
        let node = gbq().int("bits", bits as i64).int("block_size", bs as i64);
        // Default zero point 2^(bits - 1).
        let y = node
            .run1(&[
                In::Const(data_t.clone()),
                var(idx_t.clone()),
                In::Const(f32t(&[v, blocks], &scales)),
            ])
            .unwrap();
        assert_eq!(y.shape(), &[2, 3, h]);
        let default = vec![1u8 << (bits - 1); v * blocks];
        let want = gather_rows_ref(&q, h, bs, &scales, &default, &indices, v);
        assert_eq!(y.as_f32().unwrap(), want.as_slice(), "bits {bits}");
        // Packed zero points.
        let zp_packed = pack_bits(&zps, blocks, bits);
        let y = node
            .run1(&[
                In::Const(data_t),
                var(i32t(&[6], &indices.map(|i| i as i32))),
                In::Const(f32t(&[v, blocks], &scales)),
                In::Const(u8t(&[v, blocks.div_ceil(8 / bits)], &zp_packed)),
            ])
            .unwrap();
        let want = gather_rows_ref(&q, h, bs, &scales, &zps, &indices, v);
        assert_eq!(y.as_f32().unwrap(), want.as_slice(), "bits {bits} zp");
    }
}

#[test]
fn gather_block_quantized_uint4_by_hand_with_f16_scales() {
    // Two rows of 16 values, one block each: row 0 holds 0..16, row 1 15..=0.
    let mut q: Vec<u8> = (0..16).collect();
    q.extend((0..16).rev());
    let data = pack_bits(&q, 16, 4);
    assert_eq!(data[0], 0x10);
    let y = gbq()
        .int("block_size", 16)
        .run1(&[
            In::Const(u8t(&[2, 8], &data)),
            var(i64t(&[1], &[1])),
            In::Const(f16t(&[2, 1], &[1.0, 0.5])),
        ])
        .unwrap();
    assert_eq!(y.dtype(), ElementType::F16);
    let got: Vec<f32> = y.as_f16().unwrap().iter().map(|v| v.to_f32()).collect();
    let want: Vec<f32> = (0..16).rev().map(|v| (v as f32 - 8.0) * 0.5).collect();
    assert_eq!(got, want);
}

#[test]
fn gather_block_quantized_int4_on_other_axes() {
    // INT4 data [4, 3, 20] (unpacked i8), quantize_axis 2 (block 16) or 0,
    // gather on axis 1; reference from multi-indices.
    let mut rng = Rng(8);
    let shape = [4usize, 3, 20];
    let n = numel(&shape);
    let q: Vec<i8> = (0..n).map(|_| rng.below(16) as i8 - 8).collect();
    let indices = [2i64, -3, 5, 1];
    for qa in [2usize, 0] {
        let bs = 16;
        let mut sshape = shape.to_vec();
        sshape[qa] = shape[qa].div_ceil(bs);
        let sn = numel(&sshape);
        let scales = rng.f32s(sn);
        let zps: Vec<i8> = (0..sn).map(|_| rng.below(16) as i8 - 8).collect();
        let y = gbq()
            .int("gather_axis", 1)
            .int("quantize_axis", qa as i64)
            .int("block_size", bs as i64)
            .run1(&[
                In::Const(i8t(&shape, &q)),
                var(i64t(&[4], &indices)),
                In::Const(f32t(&sshape, &scales)),
                In::Const(i8t(&sshape, &zps)),
            ])
            .unwrap();
        assert_eq!(y.shape(), &[4, 4, 20]);
        let oshape = [4usize, 4, 20];
        let want: Vec<f32> = (0..numel(&oshape))
            .map(|i| {
                let o = unravel(i, &oshape);
                let k = indices[o[1]];
                if !(-3..3).contains(&k) {
                    return 0.0;
                }
                let di = [o[0], k.rem_euclid(3) as usize, o[2]];
                let mut si = di;
                si[qa] /= bs;
                let d: usize = di.iter().zip(strides(&shape)).map(|(a, b)| a * b).sum();
                let s: usize = si.iter().zip(strides(&sshape)).map(|(a, b)| a * b).sum();
                (q[d] as f32 - zps[s] as f32) * scales[s]
            })
            .collect();
        assert_eq!(y.as_f32().unwrap(), want.as_slice(), "quantize_axis {qa}");
    }
}

#[test]
fn gather_block_quantized_parallel_matches_sequential() {
    let mut rng = Rng(4);
    let (v, h, bs) = (40usize, 2048usize, 32usize);
    let blocks = h / bs;
    let data = u8t(
        &[v, h / 2],
        &(0..v * h / 2)
            .map(|_| rng.below(256) as u8)
            .collect::<Vec<_>>(),
    );
    let scales = f32t(&[v, blocks], &rng.f32s(v * blocks));
    let idx = i64t(
        &[30],
        &(0..30).map(|i| (i * 7 % 45) as i64 - 2).collect::<Vec<_>>(),
    );
    let op = gbq().int("block_size", bs as i64).build(3).unwrap();
    let ins = [Some(&data), Some(&idx), Some(&scales)];
    let seq = run_with(op.as_ref(), &ins, &onnx_prepared_kernels::Sequential).unwrap();
    let par = run_with(op.as_ref(), &ins, &Reversed).unwrap();
    assert_eq!(seq, par);
    assert_eq!(seq[0].shape(), &[30, h]);
}

#[test]
fn gather_block_quantized_rejects_bad_inputs() {
    let data = u8t(&[4, 8], &[0x88; 32]);
    let idx = i64t(&[1], &[0]);
    let sc = f32t(&[4, 1], &[1.0; 4]);
    // Attributes.
    for (name, value) in [("block_size", 8i64), ("block_size", 48), ("bits", 3)] {
        let e = gbq().int(name, value).build(3).unwrap_err();
        assert_eq!(attribute_error(e), name);
    }
    assert_eq!(
        attribute_error(gbq().int("axis", 0).build(3).unwrap_err()),
        "(unknown)"
    );
    // uint8 data quantized on a non-last axis.
    let e = gbq()
        .int("block_size", 16)
        .int("quantize_axis", 0)
        .int("gather_axis", 1)
        .run1(&[var(data.clone()), var(idx.clone()), var(sc.clone())])
        .unwrap_err();
    assert_eq!(attribute_error(e), "quantize_axis");
    // Scales of the wrong shape (the default block size 128 gives 1 block,
    // so [4, 2] is wrong).
    let e = gbq()
        .run1(&[
            var(data.clone()),
            var(idx.clone()),
            var(f32t(&[4, 2], &[1.0; 8])),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // Zero points of the wrong shape or type.
    let e = gbq()
        .int("block_size", 16)
        .run1(&[
            var(data.clone()),
            var(idx.clone()),
            var(sc.clone()),
            var(u8t(&[4, 2], &[0; 8])),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    let e = gbq()
        .int("block_size", 16)
        .run1(&[
            var(data.clone()),
            var(idx.clone()),
            var(sc.clone()),
            var(i8t(&[4, 1], &[0; 4])),
        ])
        .unwrap_err();
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
    // INT4 data with bits 8; float indices; f64 scales.
    let e = gbq()
        .int("bits", 8)
        .int("block_size", 16)
        .run1(&[
            var(i8t(&[4, 16], &[0; 64])),
            var(idx.clone()),
            var(sc.clone()),
        ])
        .unwrap_err();
    assert_eq!(attribute_error(e), "bits");
    let e = gbq()
        .int("block_size", 16)
        .run1(&[var(data.clone()), var(f32t(&[1], &[0.0])), var(sc.clone())])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
    let e = gbq()
        .int("block_size", 16)
        .run1(&[var(data), var(idx), var(f64t(&[4, 1], &[1.0; 4]))])
        .unwrap_err();
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
}
