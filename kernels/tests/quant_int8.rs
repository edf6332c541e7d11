//! The int8 quantization operators against loops written here from the
//! ONNX and ONNX Runtime definitions: QuantizeLinear, DynamicQuantizeLinear,
//! MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv (groups,
//! depthwise, strides, padding, per-channel scales, bias), QGemm,
//! MatMulIntegerToFloat, DynamicQuantizeMatMul and the `com.microsoft`
//! QLinear elementwise, pooling and concatenation operators; packed and
//! unpacked weights on every kernel family of this CPU, and refusals of
//! malformed inputs. Values of `B` stay below 64 in magnitude where an
//! exact product is the reference (no pair of products can saturate).

mod math_util;

use math_util::*;
use onnx_prepared_kernels::{
    CpuFeatures, InputInfo, KernelOptions, NodeSpec, Operator, ParallelFor, Sequential, Tensor,
    TensorData, registry,
};

fn families() -> Vec<CpuFeatures> {
    let mut f = vec![CpuFeatures::portable()];
    if CpuFeatures::detect().avx2 {
        f.push(CpuFeatures {
            avx2: true,
            avx512: false,
            avx512vnni: false,
            amx_int8: false,
        });
    }
    if CpuFeatures::detect().avx512vnni {
        f.push(CpuFeatures::detect().without_amx());
    }
    if CpuFeatures::detect().amx_int8 {
        f.push(CpuFeatures::detect());
    }
    f
}

fn build(node: &Node, inputs: usize, cpu: CpuFeatures) -> Box<dyn Operator> {
    let spec = NodeSpec {
        domain: &node.domain,
        op_type: &node.op_type,
        opset: node.opset,
        attributes: &node.attrs,
        inputs,
        outputs: node.outputs,
    };
    let options = KernelOptions {
        cpu: Some(cpu),
        ..KernelOptions::default()
    };
    registry::operator_with(&spec, options).unwrap()
}

/// Runs `node` on `cpu` (inputs `Const` are constants), with its weights
/// packed through its prepack when `packed`; the first output.
fn run_on(
    node: &Node,
    inputs: &[In],
    cpu: CpuFeatures,
    packed: bool,
    par: &dyn ParallelFor,
) -> Tensor {
    let op = build(node, inputs.len(), cpu);
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .map(|i| match i {
            In::Var(t) => Some(InputInfo::dynamic(t.dtype(), t.shape())),
            In::Const(t) => Some(InputInfo::known(t)),
            In::Absent => None,
        })
        .collect();
    let out = op.infer(&infos).unwrap();
    let mut outputs: Vec<Tensor> = out
        .iter()
        .map(|o| Tensor::zeros(o.dtype, o.shape.clone()).unwrap())
        .collect();
    let mut tensors: Vec<Option<&Tensor>> = inputs
        .iter()
        .map(|i| match i {
            In::Var(t) | In::Const(t) => Some(t),
            In::Absent => None,
        })
        .collect();
    let object = if packed {
        let prepack = op.prepack(&infos, cpu).expect("constant weights pack");
        let sources: Vec<&Tensor> = prepack
            .consumes()
            .iter()
            .map(|&i| tensors[i].unwrap())
            .collect();
        let shapes: Vec<&[usize]> = sources.iter().map(|t| t.shape()).collect();
        let object = prepack.prepare(&sources, &Sequential).unwrap();
        prepack.validate(&object, &shapes).unwrap();
        for &i in prepack.consumes() {
            tensors[i] = None;
        }
        Some(object)
    } else {
        None
    };
    op.execute(&tensors, object.as_ref(), &mut outputs, par)
        .unwrap();
    outputs.remove(0)
}

/// Every family, packed or not (when `packable`), on one and "three"
/// threads: all equal to `want`.
fn check_all(node: &Node, inputs: &[In], packable: bool, want: &Tensor) {
    for cpu in families() {
        for packed in [false, true] {
            if packed && !packable {
                continue;
            }
            for par in [&Sequential as &dyn ParallelFor, &Reversed] {
                let got = run_on(node, inputs, cpu, packed, par);
                assert_eq!(got.shape(), want.shape(), "{cpu:?} packed={packed}");
                assert_eq!(got.data(), want.data(), "{cpu:?} packed={packed}");
            }
        }
    }
}

fn bytes(rng: &mut Rng, n: usize, lo: i32, hi: i32) -> Vec<i32> {
    (0..n)
        .map(|_| lo + (rng.next_u64() % (hi - lo + 1) as u64) as i32)
        .collect()
}

fn u8s(shape: &[usize], v: &[i32]) -> Tensor {
    u8t(shape, &v.iter().map(|&x| x as u8).collect::<Vec<_>>())
}

fn i8s(shape: &[usize], v: &[i32]) -> Tensor {
    i8t(shape, &v.iter().map(|&x| x as i8).collect::<Vec<_>>())
}

/// ONNX Runtime's requantization: `c * multiplier`, rounded half to even,
/// plus the zero point, saturated.
fn requant(c: i32, mult: f32, zero: i32, lo: i32, hi: i32) -> i32 {
    (((c as f32 * mult).round_ties_even() as i32) + zero).clamp(lo, hi)
}

/// Ties, saturation and NaN, nine times over: whole vectors of the
/// widest family and a tail.
#[test]
fn quantize_linear_rounds_half_to_even_and_saturates() {
    let nine = [0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0, 0.26, f32::NAN];
    let x = f32t(&[81], &nine.repeat(9));
    let node = Node::new("QuantizeLinear", 21);
    let y = node
        .run1(&[
            var(x.clone()),
            In::Const(f32t(&[], &[0.5])),
            In::Const(u8t(&[], &[10])),
        ])
        .unwrap();
    // x / 0.5 = 1, 3, 5, -1, -3, 600, -600, 0.52 -> rounded + 10; NaN is
    // the type's minimum.
    assert_eq!(
        y.as_u8().unwrap(),
        [11, 13, 15, 9, 7, 255, 0, 11, 0].repeat(9).as_slice()
    );
    let y = node
        .run1(&[
            var(x),
            In::Const(f32t(&[], &[0.5])),
            In::Const(i8t(&[], &[-1])),
        ])
        .unwrap();
    assert_eq!(
        y.as_i8().unwrap(),
        [0, 2, 4, -2, -4, 127, -128, 0, -128].repeat(9).as_slice()
    );
}

#[test]
fn quantize_linear_per_axis_blocked_and_16_bit() {
    let mut rng = Rng(5);
    let x: Vec<f32> = (0..2 * 3 * 4).map(|_| rng.f32() * 50.0).collect();
    let scales = [0.25f32, 0.5, 0.125];
    let zps = [0i16, -100, 300];
    let node = Node::new("QuantizeLinear", 21).int("axis", 1);
    let y = node
        .run1(&[
            var(f32t(&[2, 3, 4], &x)),
            In::Const(f32t(&[3], &scales)),
            In::Const(Tensor::new(vec![3], TensorData::I16(zps.to_vec())).unwrap()),
        ])
        .unwrap();
    let want: Vec<i16> = (0..24)
        .map(|i| {
            let c = (i / 4) % 3;
            ((x[i] / scales[c]).round_ties_even() as i32 + zps[c] as i32).clamp(-32768, 32767)
                as i16
        })
        .collect();
    assert_eq!(y.as_i16().unwrap(), want.as_slice());
    // Blocked along axis 1 (blocks of 2 over 4), scales [2, 2].
    let xb: Vec<f32> = (0..8).map(|i| i as f32 * 3.3 - 7.0).collect();
    let sb = [0.5f32, 1.0, 2.0, 4.0];
    let node = Node::new("QuantizeLinear", 21)
        .int("axis", 1)
        .int("block_size", 2);
    let y = node
        .run1(&[var(f32t(&[2, 4], &xb)), In::Const(f32t(&[2, 2], &sb))])
        .unwrap();
    let want: Vec<u8> = (0..8)
        .map(|i| {
            let s = sb[(i / 4) * 2 + (i % 4) / 2];
            (xb[i] / s).round_ties_even().clamp(0.0, 255.0) as u8
        })
        .collect();
    assert_eq!(y.as_u8().unwrap(), want.as_slice());
    // float8 outputs are refused with a typed error.
    let err = Node::new("QuantizeLinear", 21)
        .int("output_dtype", 17)
        .build(2)
        .unwrap_err();
    assert!(err.to_string().contains("output_dtype"), "{err}");
}

#[test]
fn dynamic_quantize_linear_follows_the_definition() {
    let x = [-1.0f32, 0.5, 2.0, 3.0, -0.25, 1.75];
    let out = Node::new("DynamicQuantizeLinear", 11)
        .outputs(3)
        .run(&[var(f32t(&[2, 3], &x))])
        .unwrap();
    let (min, max) = (-1.0f32, 3.0f32);
    let scale = (max - min) / 255.0;
    let zp = (0.0 - min / scale).round_ties_even().clamp(0.0, 255.0);
    assert_eq!(out[1].as_f32().unwrap(), &[scale]);
    assert_eq!(out[2].as_u8().unwrap(), &[zp as u8]);
    let want: Vec<u8> = x
        .iter()
        .map(|&v| ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8)
        .collect();
    assert_eq!(out[0].as_u8().unwrap(), want.as_slice());
    // All zeros: scale 1, zero point 0 (ONNX Runtime's choice).
    let out = Node::new("DynamicQuantizeLinear", 11)
        .outputs(3)
        .run(&[var(f32t(&[3], &[0.0; 3]))])
        .unwrap();
    assert_eq!(out[1].as_f32().unwrap(), &[1.0]);
    assert_eq!(out[2].as_u8().unwrap(), &[0]);
}

/// `C = (A - za)(B - zb)` exactly, `A [batch, m, k]`, `B [k, n]`.
#[allow(clippy::too_many_arguments)]
fn matmul_ref(
    a: &[i32],
    b: &[i32],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    za: i32,
    zb: &[i32],
) -> Vec<i32> {
    let mut c = vec![0; batch * m * n];
    for t in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let z = zb[j % zb.len()];
                c[(t * m + i) * n + j] = (0..k)
                    .map(|p| (a[(t * m + i) * k + p] - za) * (b[p * n + j] - z))
                    .sum();
            }
        }
    }
    c
}

#[test]
fn matmul_integer_every_sign_batched_with_zero_points() {
    let mut rng = Rng(9);
    // k = 64: unsigned rows of A are read in place (a multiple of 4).
    let (batch, m, n) = (3, 5, 19);
    for (k, a_signed, b_signed) in [37, 64].into_iter().flat_map(|k| {
        [(false, false), (false, true), (true, true), (true, false)].map(|(a, b)| (k, a, b))
    }) {
        let (alo, ahi) = if a_signed { (-128, 127) } else { (0, 255) };
        let (blo, bhi) = if b_signed { (-63, 63) } else { (0, 63) };
        let a = bytes(&mut rng, batch * m * k, alo, ahi);
        let b = bytes(&mut rng, k * n, blo, bhi);
        let za = bytes(&mut rng, 1, alo, ahi)[0];
        let zb = bytes(&mut rng, n, blo, bhi);
        let mk =
            |s: bool, shape: &[usize], v: &[i32]| if s { i8s(shape, v) } else { u8s(shape, v) };
        let want = i32t(&[batch, m, n], &matmul_ref(&a, &b, batch, m, k, n, za, &zb));
        let inputs = [
            var(mk(a_signed, &[batch, m, k], &a)),
            In::Const(mk(b_signed, &[k, n], &b)),
            In::Const(mk(a_signed, &[], &[za])),
            In::Const(mk(b_signed, &[n], &zb)),
        ];
        check_all(&Node::new("MatMulInteger", 10), &inputs, true, &want);
    }
}

#[test]
fn matmul_integer_with_a_batched_b_and_no_zero_points() {
    let mut rng = Rng(10);
    let (batch, m, k, n) = (2, 3, 9, 4);
    let a = bytes(&mut rng, batch * m * k, 0, 255);
    let b = bytes(&mut rng, batch * k * n, 0, 255);
    let mut want = Vec::new();
    for t in 0..batch {
        want.extend(matmul_ref(
            &a[t * m * k..(t + 1) * m * k],
            &b[t * k * n..(t + 1) * k * n],
            1,
            m,
            k,
            n,
            0,
            &[0],
        ));
    }
    let inputs = [var(u8s(&[batch, m, k], &a)), var(u8s(&[batch, k, n], &b))];
    check_all(
        &Node::new("MatMulInteger", 10),
        &inputs,
        false,
        &i32t(&[batch, m, n], &want),
    );
}

#[test]
fn qlinear_matmul_requantizes_per_column() {
    let mut rng = Rng(12);
    let (m, k, n) = (6, 20, 17);
    let a = bytes(&mut rng, m * k, 0, 255);
    let b = bytes(&mut rng, k * n, -63, 63);
    let (sa, za, sy, zy) = (0.02f32, 131, 0.9f32, 120);
    let sb: Vec<f32> = (0..n).map(|j| 0.01 + j as f32 * 0.003).collect();
    let c = matmul_ref(&a, &b, 1, m, k, n, za, &[0]);
    let want: Vec<i32> = (0..m * n)
        .map(|i| requant(c[i], sa * sb[i % n] / sy, zy, 0, 255))
        .collect();
    let inputs = [
        var(u8s(&[m, k], &a)),
        In::Const(f32t(&[], &[sa])),
        In::Const(u8s(&[], &[za])),
        In::Const(i8s(&[k, n], &b)),
        In::Const(f32t(&[n], &sb)),
        In::Const(i8s(&[n], &vec![0; n])),
        In::Const(f32t(&[], &[sy])),
        In::Const(u8s(&[], &[zy])),
    ];
    check_all(
        &Node::new("QLinearMatMul", 10),
        &inputs,
        true,
        &u8s(&[m, n], &want),
    );
}

#[test]
fn qgemm_transposed_b_with_bias_to_float_and_to_uint8() {
    let mut rng = Rng(13);
    let (m, k, n) = (5, 11, 9);
    let a = bytes(&mut rng, m * k, 0, 255);
    let bt = bytes(&mut rng, n * k, -63, 63);
    let bias = bytes(&mut rng, n, -5000, 5000);
    let (sa, za, sb, alpha) = (0.05f32, 7, 0.02f32, 0.5f32);
    let b: Vec<i32> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect();
    let c = matmul_ref(&a, &b, 1, m, k, n, za, &[0]);
    let base = [
        var(u8s(&[m, k], &a)),
        In::Const(f32t(&[], &[sa])),
        In::Const(u8s(&[], &[za])),
        In::Const(i8s(&[n, k], &bt)),
        In::Const(f32t(&[], &[sb])),
        In::Const(i8s(&[], &[0])),
        In::Const(i32t(&[n], &bias)),
    ];
    let node = Node::new("QGemm", 1)
        .domain("com.microsoft")
        .int("transB", 1)
        .float("alpha", alpha);
    let scale = alpha * sa * sb;
    let want: Vec<f32> = (0..m * n)
        .map(|i| (c[i] + bias[i % n]) as f32 * scale)
        .collect();
    check_all(&node, &base, true, &f32t(&[m, n], &want));
    let (sy, zy) = (0.3f32, 100);
    let mut inputs = base.to_vec();
    inputs.push(In::Const(f32t(&[], &[sy])));
    inputs.push(In::Const(u8s(&[], &[zy])));
    let want: Vec<i32> = (0..m * n)
        .map(|i| requant(c[i] + bias[i % n], scale / sy, zy, 0, 255))
        .collect();
    check_all(&node, &inputs, true, &u8s(&[m, n], &want));
}

#[test]
fn matmul_integer_to_float_and_dynamic_quantize_matmul() {
    let mut rng = Rng(14);
    let (m, k, n) = (4, 13, 10);
    let a = bytes(&mut rng, m * k, 0, 255);
    let b = bytes(&mut rng, k * n, -63, 63);
    let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.25 - 1.0).collect();
    let sb: Vec<f32> = (0..n).map(|j| 0.01 * (j + 1) as f32).collect();
    let (sa, za) = (0.04f32, 128);
    let c = matmul_ref(&a, &b, 1, m, k, n, za, &[0]);
    let want: Vec<f32> = (0..m * n)
        .map(|i| c[i] as f32 * (sa * sb[i % n]) + bias[i % n])
        .collect();
    let inputs = [
        var(u8s(&[m, k], &a)),
        In::Const(i8s(&[k, n], &b)),
        In::Const(f32t(&[], &[sa])),
        In::Const(f32t(&[n], &sb)),
        In::Const(u8s(&[], &[za])),
        In::Absent,
        In::Const(f32t(&[n], &bias)),
    ];
    let node = Node::new("MatMulIntegerToFloat", 1).domain("com.microsoft");
    check_all(&node, &inputs, true, &f32t(&[m, n], &want));

    // DynamicQuantizeMatMul: A quantized as DynamicQuantizeLinear does.
    let af: Vec<f32> = (0..m * k).map(|_| rng.f32() * 3.0).collect();
    let (lo, hi) = af
        .iter()
        .fold((0.0f32, 0.0f32), |(l, h), &v| (l.min(v), h.max(v)));
    let scale = (hi - lo) / 255.0;
    let zp = (-lo / scale).round_ties_even().clamp(0.0, 255.0) as i32;
    let qa: Vec<i32> = af
        .iter()
        .map(|&v| ((v / scale).round_ties_even() as i32 + zp).clamp(0, 255))
        .collect();
    let c = matmul_ref(&qa, &b, 1, m, k, n, zp, &[0]);
    let want: Vec<f32> = (0..m * n)
        .map(|i| c[i] as f32 * (scale * sb[i % n]) + bias[i % n])
        .collect();
    let inputs = [
        var(f32t(&[m, k], &af)),
        In::Const(i8s(&[k, n], &b)),
        In::Const(f32t(&[n], &sb)),
        In::Absent,
        In::Const(f32t(&[n], &bias)),
    ];
    let node = Node::new("DynamicQuantizeMatMul", 1).domain("com.microsoft");
    check_all(&node, &inputs, true, &f32t(&[m, n], &want));
}

/// One QLinearConv case.
struct ConvCase {
    x: [usize; 4],
    maps: usize,
    kernel: [usize; 2],
    group: usize,
    stride: [usize; 2],
    dilation: [usize; 2],
    pads: [usize; 4],
}

/// The exact convolution `(x - zx)(w - zw[m])` plus bias, NCHW.
fn conv_ref(
    c: &ConvCase,
    x: &[i32],
    zx: i32,
    w: &[i32],
    zw: &[i32],
    bias: &[i32],
) -> (Vec<i32>, [usize; 2]) {
    let [nb, ch, ih, iw] = c.x;
    let [kh, kw] = c.kernel;
    let oh = (ih + c.pads[0] + c.pads[2] - c.dilation[0] * (kh - 1) - 1) / c.stride[0] + 1;
    let ow = (iw + c.pads[1] + c.pads[3] - c.dilation[1] * (kw - 1) - 1) / c.stride[1] + 1;
    let (cg, mg) = (ch / c.group, c.maps / c.group);
    let mut y = vec![0; nb * c.maps * oh * ow];
    for b in 0..nb {
        for m in 0..c.maps {
            let g = m / mg;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = bias.get(m).copied().unwrap_or(0);
                    for ci in 0..cg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * c.stride[0] + ky * c.dilation[0]) as isize
                                    - c.pads[0] as isize;
                                let ix = (ox * c.stride[1] + kx * c.dilation[1]) as isize
                                    - c.pads[1] as isize;
                                let xv = if iy >= 0
                                    && ix >= 0
                                    && (iy as usize) < ih
                                    && (ix as usize) < iw
                                {
                                    x[((b * ch + g * cg + ci) * ih + iy as usize) * iw
                                        + ix as usize]
                                } else {
                                    zx
                                };
                                let wv = w[((m * cg + ci) * kh + ky) * kw + kx];
                                acc += (xv - zx) * (wv - zw[m % zw.len()]);
                            }
                        }
                    }
                    y[((b * c.maps + m) * oh + oy) * ow + ox] = acc;
                }
            }
        }
    }
    (y, [oh, ow])
}

#[test]
fn qlinear_conv_groups_depthwise_strides_padding_per_channel() {
    let cases = [
        ConvCase {
            x: [2, 4, 7, 6],
            maps: 6,
            kernel: [3, 3],
            group: 1,
            stride: [1, 1],
            dilation: [1, 1],
            pads: [1, 1, 1, 1],
        },
        ConvCase {
            x: [1, 6, 9, 8],
            maps: 4,
            kernel: [3, 2],
            group: 2,
            stride: [2, 1],
            dilation: [1, 2],
            pads: [0, 1, 2, 0],
        },
        ConvCase {
            x: [1, 5, 6, 6],
            maps: 5,
            kernel: [3, 3],
            group: 5,
            stride: [2, 2],
            dilation: [1, 1],
            pads: [1, 1, 1, 1],
        },
        // Depthwise, column stride 2 with a row stride 1, dilated rows,
        // uneven padding.
        ConvCase {
            x: [1, 4, 9, 21],
            maps: 4,
            kernel: [2, 3],
            group: 4,
            stride: [1, 2],
            dilation: [2, 1],
            pads: [2, 0, 1, 1],
        },
        // Depthwise, stride 1, dilated columns, no padding on one side.
        ConvCase {
            x: [1, 2, 6, 20],
            maps: 2,
            kernel: [3, 2],
            group: 2,
            stride: [1, 1],
            dilation: [1, 3],
            pads: [0, 2, 1, 0],
        },
        // Depthwise planes whose block is over 64 KiB (row by row, stride
        // 1 and 2; smaller ones go sixteen channels at a time).
        ConvCase {
            x: [1, 3, 9, 600],
            maps: 3,
            kernel: [3, 3],
            group: 3,
            stride: [1, 1],
            dilation: [1, 1],
            pads: [1, 1, 1, 1],
        },
        ConvCase {
            x: [1, 2, 9, 800],
            maps: 2,
            kernel: [3, 3],
            group: 2,
            stride: [2, 2],
            dilation: [1, 1],
            pads: [1, 1, 1, 1],
        },
        // Depthwise rows of 19 outputs: two vectors of eight and a tail.
        ConvCase {
            x: [2, 3, 5, 19],
            maps: 3,
            kernel: [3, 3],
            group: 3,
            stride: [1, 1],
            dilation: [1, 1],
            pads: [1, 1, 1, 1],
        },
        ConvCase {
            x: [1, 16, 5, 5],
            maps: 20,
            kernel: [1, 1],
            group: 1,
            stride: [1, 1],
            dilation: [1, 1],
            pads: [0, 0, 0, 0],
        },
    ];
    let mut rng = Rng(21);
    for c in &cases {
        let [_, ch, _, _] = c.x;
        let xn: usize = c.x.iter().product();
        let wn = c.maps * ch / c.group * c.kernel[0] * c.kernel[1];
        let x = bytes(&mut rng, xn, 0, 255);
        let w = bytes(&mut rng, wn, -63, 63);
        let bias = bytes(&mut rng, c.maps, -3000, 3000);
        let (sx, zx, sy, zy) = (0.03f32, 118, 0.7f32, 9);
        let sw: Vec<f32> = (0..c.maps).map(|m| 0.004 + m as f32 * 0.001).collect();
        let (acc, [oh, ow]) = conv_ref(c, &x, zx, &w, &[0], &bias);
        let per = oh * ow;
        let want: Vec<i32> = acc
            .iter()
            .enumerate()
            .map(|(i, &v)| requant(v, sx * sw[(i / per) % c.maps] / sy, zy, -128, 127))
            .collect();
        let wshape = [c.maps, ch / c.group, c.kernel[0], c.kernel[1]];
        let node = Node::new("QLinearConv", 10)
            .int("group", c.group as i64)
            .ints("strides", &c.stride.map(|v| v as i64))
            .ints("dilations", &c.dilation.map(|v| v as i64))
            .ints("pads", &c.pads.map(|v| v as i64));
        let inputs = [
            var(u8s(&c.x, &x)),
            In::Const(f32t(&[], &[sx])),
            In::Const(u8s(&[], &[zx])),
            In::Const(i8s(&wshape, &w)),
            In::Const(f32t(&[c.maps], &sw)),
            In::Const(i8s(&[c.maps], &vec![0; c.maps])),
            In::Const(f32t(&[], &[sy])),
            In::Const(i8s(&[], &[zy])),
            In::Const(i32t(&[c.maps], &bias)),
        ];
        let depthwise = c.group == ch && c.maps == ch;
        check_all(
            &node,
            &inputs,
            !depthwise,
            &i8s(&[c.x[0], c.maps, oh, ow], &want),
        );
    }
}

/// Shapes of the channel-major convolution (AVX-512 VNNI, int8 weights):
/// strips of 32 pixels across output rows with a tail, blocks of 8 output
/// channels with a partial one, an int8 image, per-channel weight zero
/// points, stride 2 runs, input channels not a multiple of 4, groups,
/// dilation, and products and copies large enough to split across
/// threads.
#[test]
fn qlinear_conv_channel_major_strips_blocks_and_signs() {
    // (case, int8 image, weight zero points)
    let cases = [
        (
            ConvCase {
                x: [1, 12, 34, 37],
                maps: 20,
                kernel: [3, 3],
                group: 1,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [1, 1, 1, 1],
            },
            false,
            true,
        ),
        (
            ConvCase {
                x: [2, 7, 20, 41],
                maps: 9,
                kernel: [3, 3],
                group: 1,
                stride: [2, 2],
                dilation: [1, 1],
                pads: [1, 0, 1, 2],
            },
            true,
            false,
        ),
        (
            ConvCase {
                x: [1, 3, 9, 50],
                maps: 17,
                kernel: [1, 1],
                group: 1,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [0, 0, 0, 0],
            },
            false,
            false,
        ),
        (
            ConvCase {
                x: [1, 12, 15, 18],
                maps: 10,
                kernel: [3, 3],
                group: 2,
                stride: [1, 1],
                dilation: [2, 2],
                pads: [2, 2, 2, 2],
            },
            true,
            true,
        ),
        (
            ConvCase {
                x: [1, 3, 40, 38],
                maps: 8,
                kernel: [7, 7],
                group: 1,
                stride: [2, 2],
                dilation: [1, 1],
                pads: [3, 3, 3, 3],
            },
            false,
            false,
        ),
        // Images of over 32 KiB in quads, copied by several threads (a
        // partial last quad in each): unpadded 1x1, padded 3x3.
        (
            ConvCase {
                x: [1, 30, 32, 36],
                maps: 12,
                kernel: [1, 1],
                group: 1,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [0, 0, 0, 0],
            },
            true,
            false,
        ),
        (
            ConvCase {
                x: [1, 22, 40, 45],
                maps: 10,
                kernel: [3, 3],
                group: 1,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [1, 1, 1, 1],
            },
            false,
            true,
        ),
        // Fewer strips than tasks on 4 threads, each strip's row blocks
        // split across them: packed strips (3x3, weight zero points), a
        // 1x1 whose last strip is partial (packed), and a 1x1 whose
        // strips are all whole (read in place).
        (
            ConvCase {
                x: [1, 40, 9, 11],
                maps: 24,
                kernel: [3, 3],
                group: 1,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [1, 1, 1, 1],
            },
            false,
            true,
        ),
        (
            ConvCase {
                x: [1, 64, 7, 10],
                maps: 72,
                kernel: [1, 1],
                group: 1,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [0, 0, 0, 0],
            },
            true,
            false,
        ),
        (
            ConvCase {
                x: [1, 64, 8, 8],
                maps: 128,
                kernel: [1, 1],
                group: 1,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [0, 0, 0, 0],
            },
            false,
            true,
        ),
    ];
    let mut rng = Rng(23);
    for (c, x_signed, w_zero) in &cases {
        check_qlinear_conv(c, *x_signed, *w_zero, &mut rng);
    }
}

/// Depthwise convolutions on planes narrower than a vector (sixteen
/// channels per vector on AVX-512): a partial last block of channels,
/// two images, stride 2 and dilation, an int8 image, weight zero points.
#[test]
fn qlinear_depthwise_blocks_of_channels() {
    let cases = [
        (
            ConvCase {
                x: [2, 20, 7, 9],
                maps: 20,
                kernel: [3, 3],
                group: 20,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [1, 1, 1, 1],
            },
            false,
            true,
        ),
        (
            ConvCase {
                x: [1, 35, 13, 14],
                maps: 35,
                kernel: [3, 3],
                group: 35,
                stride: [2, 2],
                dilation: [2, 1],
                pads: [2, 1, 1, 0],
            },
            true,
            false,
        ),
        // Column stride 2 on planes whose block is over 64 KiB (the row
        // path): rows of several 32-byte chunks split into even and odd
        // columns, an odd left pad (the first input column alone) and an
        // even one.
        (
            ConvCase {
                x: [1, 3, 5, 1001],
                maps: 3,
                kernel: [3, 3],
                group: 3,
                stride: [1, 2],
                dilation: [1, 1],
                pads: [1, 1, 1, 1],
            },
            true,
            false,
        ),
        (
            ConvCase {
                x: [1, 2, 4, 1100],
                maps: 2,
                kernel: [3, 3],
                group: 2,
                stride: [2, 2],
                dilation: [1, 1],
                pads: [0, 2, 1, 0],
            },
            false,
            true,
        ),
        // Blocks of 28x28 and 56x56-like planes: rows copied 64 pixels at
        // a time with a tail of 6, stride 1 and 2, an int8 image.
        (
            ConvCase {
                x: [1, 17, 6, 70],
                maps: 17,
                kernel: [3, 3],
                group: 17,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [1, 1, 1, 1],
            },
            true,
            true,
        ),
        (
            ConvCase {
                x: [1, 18, 40, 52],
                maps: 18,
                kernel: [3, 3],
                group: 18,
                stride: [2, 2],
                dilation: [1, 1],
                pads: [1, 1, 1, 1],
            },
            true,
            false,
        ),
        (
            ConvCase {
                x: [1, 20, 30, 30],
                maps: 20,
                kernel: [3, 3],
                group: 20,
                stride: [1, 1],
                dilation: [1, 1],
                pads: [1, 1, 1, 1],
            },
            false,
            true,
        ),
        // Input rows wider than a vector (read sixteen pixels at a time),
        // an output row narrower.
        (
            ConvCase {
                x: [1, 17, 30, 33],
                maps: 17,
                kernel: [3, 3],
                group: 17,
                stride: [2, 3],
                dilation: [1, 1],
                pads: [1, 0, 0, 2],
            },
            false,
            true,
        ),
    ];
    let mut rng = Rng(25);
    for (c, x_signed, w_zero) in &cases {
        check_qlinear_conv(c, *x_signed, *w_zero, &mut rng);
    }
}

/// Depthwise filters taken four taps of a row at a time (int8 weights and
/// no zero point: one VNNI dot product per four taps on AVX-512): rows of
/// exactly four taps, of five and seven (a second, partial four), a
/// single tap, a dilated column, stride 2, int8 images.
#[test]
fn depthwise_filters_in_fours_of_taps() {
    let case = |x: [usize; 4], kernel, stride, dilation, pads| ConvCase {
        x,
        maps: x[1],
        kernel,
        group: x[1],
        stride,
        dilation,
        pads,
    };
    let cases = [
        (
            case([1, 19, 9, 11], [3, 4], [1, 1], [1, 1], [1, 2, 1, 1]),
            false,
        ),
        (
            case([1, 16, 12, 12], [5, 5], [1, 1], [1, 1], [2, 2, 2, 2]),
            true,
        ),
        (
            case([2, 33, 8, 20], [2, 7], [1, 1], [2, 1], [0, 3, 1, 3]),
            false,
        ),
        (
            case([1, 17, 6, 6], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
            true,
        ),
        (
            case([1, 20, 15, 15], [5, 5], [2, 2], [1, 1], [2, 2, 2, 2]),
            false,
        ),
    ];
    let mut rng = Rng(27);
    for (c, x_signed) in &cases {
        check_qlinear_conv(c, *x_signed, false, &mut rng);
    }
}

/// One QLinearConv (uint8 output, per-channel int8 weights) against the
/// exact reference on every family, packed where it packs.
fn check_qlinear_conv(c: &ConvCase, x_signed: bool, w_zero: bool, rng: &mut Rng) {
    check_qlinear_conv_to(c, x_signed, w_zero, false, rng);
}

/// [`check_qlinear_conv`] with an int8 output when `y_signed`.
fn check_qlinear_conv_to(
    c: &ConvCase,
    x_signed: bool,
    w_zero: bool,
    y_signed: bool,
    rng: &mut Rng,
) {
    let [_, ch, _, _] = c.x;
    let xn: usize = c.x.iter().product();
    let wn = c.maps * ch / c.group * c.kernel[0] * c.kernel[1];
    let (x, zx) = if x_signed {
        (bytes(rng, xn, -128, 127), -7)
    } else {
        (bytes(rng, xn, 0, 255), 131)
    };
    let w = bytes(rng, wn, -63, 63);
    let zw = if w_zero {
        bytes(rng, c.maps, -5, 5)
    } else {
        vec![0; c.maps]
    };
    let bias = bytes(rng, c.maps, -3000, 3000);
    let (sx, sy) = (0.03f32, 0.9f32);
    let (zy, lo, hi) = if y_signed {
        (-9, -128, 127)
    } else {
        (121, 0, 255)
    };
    let sw: Vec<f32> = (0..c.maps).map(|m| 0.002 + m as f32 * 0.0007).collect();
    let (acc, [oh, ow]) = conv_ref(c, &x, zx, &w, &zw, &bias);
    let per = oh * ow;
    let want: Vec<i32> = acc
        .iter()
        .enumerate()
        .map(|(i, &v)| requant(v, sx * sw[(i / per) % c.maps] / sy, zy, lo, hi))
        .collect();
    let wshape = [c.maps, ch / c.group, c.kernel[0], c.kernel[1]];
    let node = Node::new("QLinearConv", 10)
        .int("group", c.group as i64)
        .ints("strides", &c.stride.map(|v| v as i64))
        .ints("dilations", &c.dilation.map(|v| v as i64))
        .ints("pads", &c.pads.map(|v| v as i64));
    let image = if x_signed {
        (i8s(&c.x, &x), i8s(&[], &[zx]))
    } else {
        (u8s(&c.x, &x), u8s(&[], &[zx]))
    };
    let inputs = [
        var(image.0),
        In::Const(f32t(&[], &[sx])),
        In::Const(image.1),
        In::Const(i8s(&wshape, &w)),
        In::Const(f32t(&[c.maps], &sw)),
        In::Const(i8s(&[c.maps], &zw)),
        In::Const(f32t(&[], &[sy])),
        In::Const(if y_signed {
            i8s(&[], &[zy])
        } else {
            u8s(&[], &[zy])
        }),
        In::Const(i32t(&[c.maps], &bias)),
    ];
    let depthwise = c.group == ch && c.maps == ch;
    let yshape = [c.x[0], c.maps, oh, ow];
    let want = if y_signed {
        i8s(&yshape, &want)
    } else {
        u8s(&yshape, &want)
    };
    check_all(&node, &inputs, !depthwise, &want);
}

/// Depthwise convolutions into int8 outputs (the signed narrowing of the
/// output stage in lanes), narrow planes taken several rows per step and
/// wide ones row by row, and ConvInteger's int32 depthwise output (the
/// sums turned back into rows).
#[test]
fn depthwise_int8_and_int32_outputs() {
    let case = |x: [usize; 4], stride: [usize; 2]| ConvCase {
        x,
        maps: x[1],
        kernel: [3, 3],
        group: x[1],
        stride,
        dilation: [1, 1],
        pads: [1, 1, 1, 1],
    };
    let mut rng = Rng(26);
    for (c, x_signed) in [
        (case([1, 33, 7, 7], [1, 1]), false),
        (case([2, 18, 14, 3], [2, 1]), true),
        (case([1, 17, 11, 45], [1, 2]), true),
    ] {
        check_qlinear_conv_to(&c, x_signed, true, true, &mut rng);
    }
    // int8 weights, then uint8 ones with a zero point.
    let c = case([1, 21, 9, 7], [1, 1]);
    let x = bytes(&mut rng, 21 * 9 * 7, 0, 255);
    let node = Node::new("ConvInteger", 10)
        .int("group", 21)
        .ints("pads", &[1, 1, 1, 1]);
    for w_signed in [true, false] {
        let (w, zw) = if w_signed {
            (bytes(&mut rng, 21 * 9, -100, 100), -3)
        } else {
            (bytes(&mut rng, 21 * 9, 0, 255), 200)
        };
        let (acc, [oh, ow]) = conv_ref(&c, &x, 77, &w, &[zw], &[]);
        let (w, zw) = if w_signed {
            (i8s(&[21, 1, 3, 3], &w), i8s(&[], &[zw]))
        } else {
            (u8s(&[21, 1, 3, 3], &w), u8s(&[], &[zw]))
        };
        let inputs = [
            var(u8s(&c.x, &x)),
            In::Const(w),
            In::Const(u8s(&[], &[77])),
            In::Const(zw),
        ];
        check_all(&node, &inputs, false, &i32t(&[1, 21, oh, ow], &acc));
    }
}

/// ConvInteger with int8 weights (the channel-major convolution's int32
/// output on AVX-512 VNNI).
#[test]
fn conv_integer_with_int8_weights() {
    let c = ConvCase {
        x: [1, 9, 11, 35],
        maps: 11,
        kernel: [3, 3],
        group: 1,
        stride: [1, 1],
        dilation: [1, 1],
        pads: [1, 1, 1, 1],
    };
    let mut rng = Rng(24);
    let x = bytes(&mut rng, 9 * 11 * 35, 0, 255);
    let w = bytes(&mut rng, 11 * 9 * 9, -100, 100);
    let (acc, [oh, ow]) = conv_ref(&c, &x, 77, &w, &[-3], &[]);
    let node = Node::new("ConvInteger", 10).ints("pads", &[1, 1, 1, 1]);
    let inputs = [
        var(u8s(&c.x, &x)),
        In::Const(i8s(&[11, 9, 3, 3], &w)),
        In::Const(u8s(&[], &[77])),
        In::Const(i8s(&[], &[-3])),
    ];
    check_all(&node, &inputs, true, &i32t(&[1, 11, oh, ow], &acc));
}

#[test]
fn conv_integer_with_zero_points() {
    let c = ConvCase {
        x: [1, 3, 6, 5],
        maps: 4,
        kernel: [2, 3],
        group: 1,
        stride: [1, 2],
        dilation: [1, 1],
        pads: [1, 0, 0, 1],
    };
    let mut rng = Rng(22);
    let x = bytes(&mut rng, 90, 0, 255);
    let w = bytes(&mut rng, 4 * 3 * 6, 0, 255);
    let (acc, [oh, ow]) = conv_ref(&c, &x, 3, &w, &[200], &[]);
    let node = Node::new("ConvInteger", 10)
        .ints("strides", &[1, 2])
        .ints("pads", &[1, 0, 0, 1]);
    let inputs = [
        var(u8s(&c.x, &x)),
        In::Const(u8s(&[4, 3, 2, 3], &w)),
        In::Const(u8s(&[], &[3])),
        In::Const(u8s(&[], &[200])),
    ];
    check_all(&node, &inputs, true, &i32t(&[1, 4, oh, ow], &acc));
}

fn within_one(got: &[u8], want: &[i32]) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as i32 - w).abs() <= 1, "element {i}: {g} vs {w}");
    }
}

#[test]
fn qlinear_elementwise_pools_and_concat_within_one_step() {
    let mut rng = Rng(30);
    let a = bytes(&mut rng, 2 * 3 * 4, 0, 255);
    let b = bytes(&mut rng, 4, 0, 255);
    let (sa, za, sb, zb, sc, zc) = (0.05f32, 120, 0.02f32, 30, 0.08f32, 128);
    let q = |v: f32, s: f32, z: i32| ((v / s).round_ties_even() as i32 + z).clamp(0, 255);
    for (op, f) in [
        (
            "QLinearAdd",
            (|x: f32, y: f32| x + y) as fn(f32, f32) -> f32,
        ),
        ("QLinearMul", |x, y| x * y),
    ] {
        let y = Node::new(op, 1)
            .domain("com.microsoft")
            .run1(&[
                var(u8s(&[2, 3, 4], &a)),
                In::Const(f32t(&[], &[sa])),
                In::Const(u8s(&[], &[za])),
                var(u8s(&[4], &b)),
                In::Const(f32t(&[], &[sb])),
                In::Const(u8s(&[], &[zb])),
                In::Const(f32t(&[], &[sc])),
                In::Const(u8s(&[], &[zc])),
            ])
            .unwrap();
        let want: Vec<i32> = (0..24)
            .map(|i| {
                q(
                    f((a[i] - za) as f32 * sa, (b[i % 4] - zb) as f32 * sb),
                    sc,
                    zc,
                )
            })
            .collect();
        within_one(y.as_u8().unwrap(), &want);
    }
    let sig = Node::new("QLinearSigmoid", 1)
        .domain("com.microsoft")
        .run1(&[
            var(u8s(&[24], &a)),
            In::Const(f32t(&[], &[sa])),
            In::Const(u8s(&[], &[za])),
            In::Const(f32t(&[], &[1.0 / 256.0])),
            In::Const(u8s(&[], &[0])),
        ])
        .unwrap();
    let want: Vec<i32> = a
        .iter()
        .map(|&v| {
            q(
                1.0 / (1.0 + (-((v - za) as f32 * sa)).exp()),
                1.0 / 256.0,
                0,
            )
        })
        .collect();
    within_one(sig.as_u8().unwrap(), &want);
    // Global average over 3 x 4 per channel.
    let gap = Node::new("QLinearGlobalAveragePool", 1)
        .domain("com.microsoft")
        .run1(&[
            var(u8s(&[1, 2, 3, 4], &a)),
            In::Const(f32t(&[], &[sa])),
            In::Const(u8s(&[], &[za])),
            In::Const(f32t(&[], &[sc])),
            In::Const(u8s(&[], &[zc])),
        ])
        .unwrap();
    let want: Vec<i32> = (0..2)
        .map(|c| {
            let mean = a[c * 12..(c + 1) * 12]
                .iter()
                .map(|&v| (v - za) as f32 * sa)
                .sum::<f32>()
                / 12.0;
            q(mean, sc, zc)
        })
        .collect();
    within_one(gap.as_u8().unwrap(), &want);
    // Concat on axis 1 of [1, 2, 4] and [1, 1, 4].
    let cat = Node::new("QLinearConcat", 1)
        .domain("com.microsoft")
        .int("axis", 1)
        .run1(&[
            In::Const(f32t(&[], &[sc])),
            In::Const(u8s(&[], &[zc])),
            var(u8s(&[1, 2, 4], &a[..8])),
            In::Const(f32t(&[], &[sa])),
            In::Const(u8s(&[], &[za])),
            var(u8s(&[1, 1, 4], &b)),
            In::Const(f32t(&[], &[sb])),
            In::Const(u8s(&[], &[zb])),
        ])
        .unwrap();
    assert_eq!(cat.shape(), &[1, 3, 4]);
    let want: Vec<i32> = a[..8]
        .iter()
        .map(|&v| q((v - za) as f32 * sa, sc, zc))
        .chain(b.iter().map(|&v| q((v - zb) as f32 * sb, sc, zc)))
        .collect();
    within_one(cat.as_u8().unwrap(), &want);
}

#[test]
fn malformed_quantized_inputs_are_typed_errors() {
    // K of A and B disagree.
    let err = Node::new("MatMulInteger", 10)
        .run(&[var(u8t(&[2, 3], &[0; 6])), var(u8t(&[4, 2], &[0; 8]))])
        .unwrap_err();
    assert!(err.to_string().contains("MatMul"), "{err}");
    // A per-column b_scale of the wrong length.
    let err = Node::new("QLinearMatMul", 10)
        .run(&[
            var(u8t(&[2, 3], &[0; 6])),
            In::Const(f32t(&[], &[1.0])),
            In::Const(u8t(&[], &[0])),
            In::Const(i8t(&[3, 4], &[0; 12])),
            In::Const(f32t(&[3], &[1.0; 3])),
            In::Const(i8t(&[], &[0])),
            In::Const(f32t(&[], &[1.0])),
            In::Const(u8t(&[], &[0])),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("b_scale"), "{err}");
    // A float X for QLinearConv.
    let err = Node::new("QLinearConv", 10)
        .run(&[
            var(f32t(&[1, 1, 2, 2], &[0.0; 4])),
            In::Const(f32t(&[], &[1.0])),
            In::Const(u8t(&[], &[0])),
            In::Const(i8t(&[1, 1, 1, 1], &[1])),
            In::Const(f32t(&[], &[1.0])),
            In::Const(i8t(&[], &[0])),
            In::Const(f32t(&[], &[1.0])),
            In::Const(u8t(&[], &[0])),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("QLinearConv"), "{err}");
}
