//! Conv, ConvTranspose and the windowed pools against loops written from
//! the ONNX definitions here (f64), over every path the kernels choose
//! (pointwise GEMM, im2col tiles, depthwise), ranks 1 to 3, groups,
//! strides, dilations, padding and `auto_pad`; values of the pools checked
//! by hand; refusals of inconsistent shapes and attributes. Fused chains
//! (Conv, BatchNormalization, residual Add, activation) on every kernel
//! family of this CPU, packed and not, against the same loops.

mod math_util;

use math_util::*;
use onnx_prepared_kernels::ops::conv::{ConvActivation, ConvFusion, fused};
use onnx_prepared_kernels::{
    CpuFeatures, InputInfo, KernelError, NodeSpec, ParallelFor, Sequential, Tensor,
};

/// One convolution case: shapes and window attributes.
#[derive(Debug, Clone)]
struct Case {
    x: Vec<usize>,
    maps: usize,
    kernel: Vec<usize>,
    group: usize,
    stride: Vec<usize>,
    dilation: Vec<usize>,
    pads: Vec<usize>,
    bias: bool,
}

impl Case {
    fn new(x: &[usize], maps: usize, kernel: &[usize]) -> Self {
        let r = kernel.len();
        Self {
            x: x.to_vec(),
            maps,
            kernel: kernel.to_vec(),
            group: 1,
            stride: vec![1; r],
            dilation: vec![1; r],
            pads: vec![0; 2 * r],
            bias: true,
        }
    }
    fn group(mut self, g: usize) -> Self {
        self.group = g;
        self
    }
    fn stride(mut self, s: &[usize]) -> Self {
        self.stride = s.to_vec();
        self
    }
    fn dilation(mut self, d: &[usize]) -> Self {
        self.dilation = d.to_vec();
        self
    }
    fn pads(mut self, p: &[usize]) -> Self {
        self.pads = p.to_vec();
        self
    }
    fn w_shape(&self) -> Vec<usize> {
        let mut w = vec![self.maps, self.x[1] / self.group];
        w.extend(&self.kernel);
        w
    }
    fn node(&self) -> Node {
        let i = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        Node::new("Conv", 11)
            .int("group", self.group as i64)
            .ints("strides", &i(&self.stride))
            .ints("dilations", &i(&self.dilation))
            .ints("pads", &i(&self.pads))
    }
}

/// `Y` straight from the definition, every spatial rank flattened to
/// per-axis coordinates.
fn conv_reference(c: &Case, x: &[f32], w: &[f32], b: Option<&[f32]>) -> (Vec<usize>, Vec<f32>) {
    let r = c.kernel.len();
    let sp = &c.x[2..];
    let out: Vec<usize> = (0..r)
        .map(|a| {
            let span = (c.kernel[a] - 1) * c.dilation[a] + 1;
            (sp[a] + c.pads[a] + c.pads[a + r] - span) / c.stride[a] + 1
        })
        .collect();
    let (cg, mg) = (c.x[1] / c.group, c.maps / c.group);
    let mut shape = vec![c.x[0], c.maps];
    shape.extend(&out);
    let mut y = vec![0f32; numel(&shape)];
    let kn = numel(&c.kernel);
    for (i, v) in y.iter_mut().enumerate() {
        let idx = unravel(i, &shape);
        let (n, m, o) = (idx[0], idx[1], &idx[2..]);
        let g = m / mg;
        let mut acc = b.map_or(0.0, |b| b[m] as f64);
        for ci in 0..cg {
            for t in 0..kn {
                let k = unravel(t, &c.kernel);
                let pos: Option<Vec<usize>> = (0..r)
                    .map(|a| {
                        let p = (o[a] * c.stride[a] + k[a] * c.dilation[a]) as isize
                            - c.pads[a] as isize;
                        (p >= 0 && (p as usize) < sp[a]).then_some(p as usize)
                    })
                    .collect();
                let Some(pos) = pos else { continue };
                let mut xi = vec![n, g * cg + ci];
                xi.extend(&pos);
                let xs = strides(&c.x);
                let xo: usize = xi.iter().zip(&xs).map(|(a, s)| a * s).sum();
                let wo = (m * cg + ci) * kn + t;
                acc += x[xo] as f64 * w[wo] as f64;
            }
        }
        *v = acc as f32;
    }
    (shape, y)
}

fn check_conv(c: &Case, seed: u64) {
    let mut rng = Rng(seed);
    let x = rng.f32s(numel(&c.x));
    let ws = c.w_shape();
    let w = rng.f32s(numel(&ws));
    let b = rng.f32s(c.maps);
    let bias = c.bias.then_some(b.as_slice());
    let (shape, want) = conv_reference(c, &x, &w, bias);
    let xt = f32t(&c.x, &x);
    let wt = f32t(&ws, &w);
    let bt_ = f32t(&[c.maps], &b);
    let mut ins = vec![&xt, &wt];
    if c.bias {
        ins.push(&bt_);
    }
    for par in [
        &Sequential as &dyn onnx_prepared_kernels::ParallelFor,
        &Reversed,
    ] {
        let got = run_par(&c.node(), &ins, par);
        assert_eq!(got.shape(), shape.as_slice(), "{c:?}");
        let tol = 1e-5 * (c.x[1] / c.group * numel(&c.kernel)) as f32;
        assert_close(got.as_f32().unwrap(), &want, tol.max(1e-5));
    }
}

#[test]
fn every_convolution_path_matches_the_definition() {
    let cases = [
        // Pointwise (the GEMM on the input in place), grouped and not.
        Case::new(&[2, 8, 5, 7], 12, &[1, 1]),
        Case::new(&[1, 8, 6, 6], 4, &[1, 1]).group(4),
        // im2col tiles: padding, strides, dilations, rectangular kernels,
        // more columns than one tile.
        Case::new(&[1, 3, 9, 11], 5, &[3, 3]).pads(&[1, 1, 1, 1]),
        Case::new(&[2, 4, 10, 9], 6, &[3, 2])
            .stride(&[2, 3])
            .pads(&[1, 0, 2, 1]),
        Case::new(&[1, 2, 12, 12], 3, &[3, 3])
            .dilation(&[2, 3])
            .pads(&[2, 1, 0, 3]),
        Case::new(&[1, 16, 40, 40], 8, &[3, 3]).pads(&[1, 1, 1, 1]),
        // Few output columns for many rows: tiles split by rows between
        // tasks (im2col and pointwise).
        Case::new(&[1, 32, 7, 7], 64, &[3, 3]).pads(&[1, 1, 1, 1]),
        Case::new(&[1, 64, 7, 7], 96, &[1, 1]),
        // A tap whose padding offset is larger than a short run of
        // output columns (a 9-wide row split at a panel boundary).
        Case::new(&[1, 8, 9, 9], 8, &[3, 3])
            .dilation(&[2, 2])
            .pads(&[2, 2, 2, 2]),
        Case::new(&[1, 6, 8, 8], 4, &[3, 3])
            .group(2)
            .stride(&[2, 2]),
        // Depthwise, plain and strided with padding and dilation.
        Case::new(&[2, 5, 9, 8], 5, &[3, 3])
            .group(5)
            .pads(&[1, 1, 1, 1]),
        Case::new(&[1, 4, 11, 10], 4, &[5, 3])
            .group(4)
            .stride(&[2, 2])
            .dilation(&[1, 2])
            .pads(&[2, 3, 1, 0]),
        // Depthwise with a channel multiplier runs the general path.
        Case::new(&[1, 3, 7, 7], 6, &[3, 3]).group(3),
        // 1-D and 3-D.
        Case::new(&[3, 4, 17], 5, &[4]).stride(&[2]).pads(&[2, 1]),
        Case::new(&[1, 3, 5, 6, 7], 4, &[2, 3, 2]).pads(&[1, 0, 1, 0, 1, 1]),
        Case::new(&[1, 3, 5, 6, 7], 3, &[3, 3, 3])
            .group(3)
            .pads(&[1, 1, 1, 1, 1, 1]),
    ];
    for (i, c) in cases.iter().enumerate() {
        check_conv(c, 7 + i as u64);
        let mut nb = c.clone();
        nb.bias = false;
        check_conv(&nb, 100 + i as u64);
    }
}

#[test]
fn f64_and_f16_convolutions_run_the_reference_loops() {
    let c = Case::new(&[1, 2, 5, 5], 3, &[3, 3]).pads(&[1, 1, 1, 1]);
    let mut rng = Rng(3);
    let (x, w) = (rng.f32s(50), rng.f32s(54));
    let (shape, want) = conv_reference(&c, &x, &w, None);
    let to64 = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<_>>();
    let got = c
        .node()
        .run1(&[
            var(f64t(&c.x, &to64(&x))),
            var(f64t(&c.w_shape(), &to64(&w))),
        ])
        .unwrap();
    assert_eq!(got.shape(), shape.as_slice());
    let got: Vec<f32> = got.as_f64().unwrap().iter().map(|&v| v as f32).collect();
    assert_close(&got, &want, 1e-5);
    let got = c
        .node()
        .run1(&[var(f16t(&c.x, &x)), var(f16t(&c.w_shape(), &w))])
        .unwrap();
    let got: Vec<f32> = got.as_f16().unwrap().iter().map(|v| v.to_f32()).collect();
    // Inputs rounded to f16 (relative 2^-11 each) over 18 products.
    assert_close(&got, &want, 2e-2);
}

#[test]
fn auto_pad_same_puts_the_odd_padding_where_it_says() {
    // 1-D, input 4, kernel 2, stride 1: one padding element in all.
    let x = f32t(&[1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
    let w = f32t(&[1, 1, 2], &[1.0, 10.0]);
    let upper = Node::new("Conv", 11).string("auto_pad", "SAME_UPPER");
    let lower = Node::new("Conv", 11).string("auto_pad", "SAME_LOWER");
    let run = |n: Node| {
        n.run1(&[var(x.clone()), var(w.clone())])
            .unwrap()
            .as_f32()
            .unwrap()
            .to_vec()
    };
    // Upper: pad at the end: [1+20, 2+30, 3+40, 4+0].
    assert_eq!(run(upper), vec![21.0, 32.0, 43.0, 4.0]);
    // Lower: pad at the start: [0+10, 1+20, 2+30, 3+40].
    assert_eq!(run(lower), vec![10.0, 21.0, 32.0, 43.0]);
    // VALID: no padding, 3 outputs.
    let valid = Node::new("Conv", 11).string("auto_pad", "VALID");
    assert_eq!(run(valid), vec![21.0, 32.0, 43.0]);
}

/// ConvTranspose from its definition: every input element scattered.
#[test]
fn transposed_convolution_scatters_as_defined() {
    let (n, c, m, g) = (2usize, 4usize, 6usize, 2usize);
    let (h, wd, kh, kw) = (3usize, 4usize, 3usize, 2usize);
    let (s, d, p) = ([2usize, 1], [1usize, 2], [1usize, 0, 0, 1]);
    let mut rng = Rng(11);
    let x = rng.f32s(n * c * h * wd);
    let w = rng.f32s(c * (m / g) * kh * kw);
    let b = rng.f32s(m);
    let oh = s[0] * (h - 1) + (kh - 1) * d[0] + 1 - p[0] - p[2];
    let ow = s[1] * (wd - 1) + (kw - 1) * d[1] + 1 - p[1] - p[3];
    let mut want = vec![0f64; n * m * oh * ow];
    for (i, v) in want.iter_mut().enumerate() {
        *v = b[i / (oh * ow) % m] as f64;
    }
    let (cg, mg) = (c / g, m / g);
    for bn in 0..n {
        for ci in 0..c {
            let grp = ci / cg;
            for (iy, ix) in (0..h).flat_map(|a| (0..wd).map(move |b| (a, b))) {
                for mo in 0..mg {
                    for (ky, kx) in (0..kh).flat_map(|a| (0..kw).map(move |b| (a, b))) {
                        let y = (iy * s[0] + ky * d[0]) as isize - p[0] as isize;
                        let xx = (ix * s[1] + kx * d[1]) as isize - p[1] as isize;
                        if y < 0 || xx < 0 || y as usize >= oh || xx as usize >= ow {
                            continue;
                        }
                        let mm = grp * mg + mo;
                        let yo = ((bn * m + mm) * oh + y as usize) * ow + xx as usize;
                        let xv = x[((bn * c + ci) * h + iy) * wd + ix] as f64;
                        let wv = w[((ci * mg + mo) * kh + ky) * kw + kx] as f64;
                        want[yo] += xv * wv;
                    }
                }
            }
        }
    }
    let node = Node::new("ConvTranspose", 11)
        .int("group", g as i64)
        .ints("strides", &[2, 1])
        .ints("dilations", &[1, 2])
        .ints("pads", &[1, 0, 0, 1]);
    let got = node
        .run1(&[
            var(f32t(&[n, c, h, wd], &x)),
            var(f32t(&[c, mg, kh, kw], &w)),
            var(f32t(&[m], &b)),
        ])
        .unwrap();
    assert_eq!(got.shape(), &[n, m, oh, ow]);
    let want: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    assert_close(got.as_f32().unwrap(), &want, 1e-5);
}

#[test]
fn transposed_output_shape_decides_the_padding() {
    // 1-D, input 3, kernel 3, stride 2: full extent 7; asking for 6 is a
    // total padding of 1, which the specification puts at the start
    // (start gets total - total / 2 unless auto_pad is SAME_UPPER).
    let x = f32t(&[1, 1, 3], &[1.0, 2.0, 3.0]);
    let w = f32t(&[1, 1, 3], &[1.0, 1.0, 1.0]);
    let full: Vec<f32> = Node::new("ConvTranspose", 11)
        .ints("strides", &[2])
        .run1(&[var(x.clone()), var(w.clone())])
        .unwrap()
        .as_f32()
        .unwrap()
        .to_vec();
    // Scatter by hand: positions 0..2 get x0, 2..4 get x1, 4..6 get x2.
    assert_eq!(full, vec![1.0, 1.0, 3.0, 2.0, 5.0, 3.0, 3.0]);
    let cut = Node::new("ConvTranspose", 11)
        .ints("strides", &[2])
        .ints("output_shape", &[6])
        .run1(&[var(x.clone()), var(w.clone())])
        .unwrap();
    // total padding 1: the start gets 1 - 1/2 = 1.
    assert_eq!(cut.as_f32().unwrap(), &full[1..]);
    let adj = Node::new("ConvTranspose", 11)
        .ints("strides", &[2])
        .ints("output_padding", &[1])
        .run1(&[var(x), var(w)])
        .unwrap();
    let mut want = full.clone();
    want.push(0.0);
    assert_eq!(adj.as_f32().unwrap(), want.as_slice());
}

#[test]
fn pools_by_hand() {
    // 1 x 1 x 3 x 4.
    let v: Vec<f32> = (1..=12).map(|i| i as f32).collect();
    let x = f32t(&[1, 1, 3, 4], &v);
    let run = |n: Node| n.run(&[var(x.clone())]).unwrap();
    let max = run(Node::new("MaxPool", 12)
        .ints("kernel_shape", &[2, 2])
        .outputs(2));
    assert_eq!(max[0].as_f32().unwrap(), &[6.0, 7.0, 8.0, 10.0, 11.0, 12.0]);
    assert_eq!(max[1].as_i64().unwrap(), &[5, 6, 7, 9, 10, 11]);
    // Column-major indices: (h, w) -> h + 3 * w.
    let cm = run(Node::new("MaxPool", 12)
        .ints("kernel_shape", &[2, 2])
        .int("storage_order", 1)
        .outputs(2));
    assert_eq!(cm[1].as_i64().unwrap(), &[4, 7, 10, 5, 8, 11]);
    // ceil_mode with stride 2: windows at columns 0 and 2, rows 0 and 2
    // (the last row window holds row 2 only).
    let ceil = run(Node::new("MaxPool", 12)
        .ints("kernel_shape", &[2, 2])
        .ints("strides", &[2, 2])
        .int("ceil_mode", 1));
    assert_eq!(ceil[0].shape(), &[1, 1, 2, 2]);
    assert_eq!(ceil[0].as_f32().unwrap(), &[6.0, 8.0, 10.0, 12.0]);
    // Average with one padding element on each side: corner window holds
    // 1, 2, 5, 6 of which only 1 lies inside with a 2x2 kernel at (-1,-1).
    let avg = |include: i64| {
        run(Node::new("AveragePool", 11)
            .ints("kernel_shape", &[2, 2])
            .ints("pads", &[1, 1, 1, 1])
            .ints("strides", &[2, 2])
            .int("count_include_pad", include))[0]
            .as_f32()
            .unwrap()
            .to_vec()
    };
    // Windows: rows {-1,0},{1,2}; columns {-1,0},{1,2},{3,4}.
    assert_eq!(
        avg(0),
        vec![1.0, 2.5, 4.0, 7.0, 8.5, 10.0],
        "padding excluded"
    );
    assert_eq!(
        avg(1),
        vec![0.25, 1.25, 1.0, 3.5, 8.5, 5.0],
        "padding counted"
    );
    // LpPool p = 2 over 1-D windows of 2.
    let lp = Node::new("LpPool", 18)
        .ints("kernel_shape", &[2])
        .run1(&[var(f32t(&[1, 1, 3], &[3.0, 4.0, 0.0]))])
        .unwrap();
    assert_close(lp.as_f32().unwrap(), &[5.0, 4.0], 1e-6);
    // Integer MaxPool.
    let u = Node::new("MaxPool", 12)
        .ints("kernel_shape", &[2])
        .run1(&[var(u8t(&[1, 1, 3], &[7, 200, 3]))])
        .unwrap();
    assert_eq!(u.as_u8().unwrap(), &[200, 200]);
}

fn refusal(node: Node, inputs: &[In]) -> String {
    match node.run(inputs) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn inconsistent_shapes_and_attributes_are_refused() {
    let x = |s: &[usize]| {
        var(Tensor::zeros(onnx_prepared_kernels::ElementType::F32, s.to_vec()).unwrap())
    };
    // W's channels do not match X's for the group.
    let e = refusal(
        Node::new("Conv", 11).int("group", 2),
        &[x(&[1, 4, 5, 5]), x(&[3, 4, 3, 3])],
    );
    assert!(e.contains("do not agree"), "{e}");
    // A window larger than the padded input.
    let e = refusal(Node::new("Conv", 11), &[x(&[1, 1, 2, 2]), x(&[1, 1, 3, 3])]);
    assert!(e.contains("larger than the padded input"), "{e}");
    // Four spatial axes.
    let e = refusal(
        Node::new("Conv", 11),
        &[x(&[1, 1, 2, 2, 2, 2]), x(&[1, 1, 1, 1, 1, 1])],
    );
    assert!(e.contains("1 to 3 are supported"), "{e}");
    // Bias of the wrong length.
    let e = refusal(
        Node::new("Conv", 11),
        &[x(&[1, 1, 3, 3]), x(&[2, 1, 1, 1]), x(&[3])],
    );
    assert!(e.contains("must be [2]"), "{e}");
    // Bad attribute values.
    for (name, node) in [
        ("auto_pad", Node::new("Conv", 11).string("auto_pad", "SAME")),
        ("strides", Node::new("Conv", 11).ints("strides", &[0, 1])),
        ("pads", Node::new("Conv", 11).ints("pads", &[-1, 0, 0, 0])),
        ("group", Node::new("Conv", 11).int("group", 0)),
    ] {
        let err = node.build(2).unwrap_err();
        assert!(
            matches!(&err, KernelError::Attribute { name: n, .. } if *n == name),
            "{name}: {err}"
        );
    }
    // A pool without kernel_shape, and strides of the wrong length.
    assert!(Node::new("MaxPool", 12).build(1).is_err());
    let e = refusal(
        Node::new("AveragePool", 11)
            .ints("kernel_shape", &[2, 2])
            .ints("strides", &[1]),
        &[x(&[1, 1, 4, 4])],
    );
    assert!(e.contains("`strides` has 1 values"), "{e}");
    // ConvTranspose asked for an output larger than it can produce.
    let e = refusal(
        Node::new("ConvTranspose", 11).ints("output_shape", &[9]),
        &[x(&[1, 1, 3]), x(&[1, 1, 3])],
    );
    assert!(
        e.contains("larger than the transposed convolution gives"),
        "{e}"
    );
}

/// The activation from its definition, in f64.
fn activation_reference(act: ConvActivation, v: f64) -> f64 {
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let hard = |a: f32, b: f32, v: f64| (f64::from(a) * v + f64::from(b)).clamp(0.0, 1.0);
    match act {
        ConvActivation::Identity => v,
        ConvActivation::Relu => v.max(0.0),
        ConvActivation::LeakyRelu { alpha } if v < 0.0 => f64::from(alpha) * v,
        ConvActivation::LeakyRelu { .. } => v,
        ConvActivation::Clip { min, max } => v.max(f64::from(min)).min(f64::from(max)),
        ConvActivation::HardSigmoid { alpha, beta } => hard(alpha, beta, v),
        ConvActivation::HardSwish => v * (v / 6.0 + 0.5).clamp(0.0, 1.0),
        ConvActivation::Sigmoid => sig(v),
        ConvActivation::MulHardSigmoid { alpha, beta } => v * hard(alpha, beta, v),
        ConvActivation::Silu => v * sig(v),
    }
}

/// Every kernel family this CPU has.
fn cpus() -> Vec<CpuFeatures> {
    let have = CpuFeatures::detect();
    let mut out = vec![CpuFeatures::portable()];
    if have.avx2 {
        out.push(CpuFeatures {
            avx2: true,
            avx512: false,
            avx512vnni: false,
            amx_int8: false,
        });
    }
    if have.avx512 {
        out.push(have.without_amx());
    }
    if have.amx_int8 {
        out.push(have);
    }
    out
}

/// Runs the fused operator of `c` and `fusion` on `inputs` (constants
/// after X) on `cpu`, packed through its prepack when `packed`.
fn run_fused(
    c: &Case,
    fusion: ConvFusion,
    cpu: CpuFeatures,
    inputs: &[Option<&Tensor>],
    packed: bool,
    par: &dyn ParallelFor,
) -> Tensor {
    let node = c.node();
    let spec = NodeSpec {
        domain: "",
        op_type: "Conv",
        opset: 11,
        attributes: &node.attrs,
        inputs: 3,
        outputs: 1,
    };
    let op = fused(&spec, fusion, cpu).unwrap();
    let residual = fusion.residual.then(|| inputs.len() - 1);
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.map(|t| {
                if i == 0 || Some(i) == residual {
                    InputInfo::dynamic(t.dtype(), t.shape())
                } else {
                    InputInfo::known(t)
                }
            })
        })
        .collect();
    let out = op.infer(&infos).unwrap().remove(0);
    let mut outputs = vec![Tensor::zeros(out.dtype, out.shape).unwrap()];
    if !packed {
        op.execute(inputs, None, &mut outputs, par).unwrap();
        return outputs.remove(0);
    }
    let prepack = op.prepack(&infos, cpu).expect("constant f32 weights pack");
    let sources: Vec<&Tensor> = prepack
        .consumes()
        .iter()
        .map(|&i| inputs[i].unwrap())
        .collect();
    let object = prepack.prepare(&sources, &Sequential).unwrap();
    let shapes: Vec<&[usize]> = sources.iter().map(|t| t.shape()).collect();
    prepack.validate(&object, &shapes).unwrap();
    assert_eq!(prepack.packed_bytes(&shapes), Some(object.byte_len()));
    let mut rest: Vec<Option<&Tensor>> = inputs.to_vec();
    for &i in prepack.consumes() {
        rest[i] = None;
    }
    op.execute(&rest, Some(&object), &mut outputs, par).unwrap();
    outputs.remove(0)
}

#[test]
fn fused_chains_match_the_definitions_on_every_kernel_family() {
    let cases = [
        Case::new(&[1, 8, 6, 7], 12, &[1, 1]),
        Case::new(&[2, 4, 10, 9], 6, &[3, 2])
            .stride(&[2, 3])
            .pads(&[1, 0, 2, 1]),
        Case::new(&[1, 6, 8, 8], 4, &[3, 3]).group(2),
        Case::new(&[1, 5, 9, 8], 5, &[3, 3])
            .group(5)
            .pads(&[1, 1, 1, 1]),
        Case::new(&[1, 16, 30, 30], 16, &[3, 3])
            .group(16)
            .stride(&[2, 2])
            .pads(&[1, 1, 1, 1]),
        Case::new(&[3, 4, 17], 5, &[4]).stride(&[2]).pads(&[2, 1]),
        Case::new(&[1, 32, 7, 7], 40, &[3, 3]).pads(&[1, 1, 1, 1]),
    ];
    let activations = [
        ConvActivation::Identity,
        ConvActivation::Relu,
        ConvActivation::LeakyRelu { alpha: 0.1 },
        ConvActivation::Clip {
            min: -0.5,
            max: 0.75,
        },
        ConvActivation::HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        },
        ConvActivation::HardSwish,
        ConvActivation::Sigmoid,
        ConvActivation::MulHardSigmoid {
            alpha: 0.25,
            beta: 0.4,
        },
        ConvActivation::Silu,
    ];
    let mut rng = Rng(42);
    for (ci, c) in cases.iter().enumerate() {
        let ws = c.w_shape();
        let (x, w, b) = (
            rng.f32s(numel(&c.x)),
            rng.f32s(numel(&ws)),
            rng.f32s(c.maps),
        );
        let (shape, conv) = conv_reference(c, &x, &w, Some(&b));
        let m = c.maps;
        let scale: Vec<f32> = (0..m).map(|_| 0.5 + rng.f32().abs()).collect();
        let shift = rng.f32s(m);
        let mean = rng.f32s(m);
        let var: Vec<f32> = (0..m).map(|_| 0.25 + rng.f32().abs()).collect();
        let r = rng.f32s(numel(&shape));
        let eps = 1e-3f32;
        let ts = |s: &[usize], v: &[f32]| f32t(s, v);
        let (xt, wt, bt_) = (ts(&c.x, &x), ts(&ws, &w), ts(&[m], &b));
        let bn_t = [&scale, &shift, &mean, &var].map(|v| ts(&[m], v));
        let rt = ts(&shape, &r);
        let plane = numel(&shape[2..]);
        for (ai, &act) in activations.iter().enumerate() {
            for (bn, residual) in [(false, false), (true, false), (false, true), (true, true)] {
                let fusion = ConvFusion {
                    batch_norm: bn.then_some(eps),
                    residual,
                    activation: act,
                };
                let want: Vec<f32> = conv
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let ch = i / plane % m;
                        let mut v = f64::from(v);
                        if bn {
                            v = (v - f64::from(mean[ch]))
                                / (f64::from(var[ch]) + f64::from(eps)).sqrt()
                                * f64::from(scale[ch])
                                + f64::from(shift[ch]);
                        }
                        if residual {
                            v += f64::from(r[i]);
                        }
                        activation_reference(act, v) as f32
                    })
                    .collect();
                let mut inputs: Vec<Option<&Tensor>> = vec![Some(&xt), Some(&wt), Some(&bt_)];
                if bn {
                    inputs.extend(bn_t.iter().map(Some));
                }
                if residual {
                    inputs.push(Some(&rt));
                }
                // Every family on the densest combinations, one family
                // otherwise (the families' kernels are the GEMM's and the
                // vector loops, tested on their own as well).
                let families = if ai % 3 == 0 || ci == 0 {
                    cpus()
                } else {
                    vec![CpuFeatures::detect()]
                };
                for cpu in families {
                    for (packed, par) in
                        [(false, &Sequential as &dyn ParallelFor), (true, &Reversed)]
                    {
                        let got = run_fused(c, fusion, cpu, &inputs, packed, par);
                        assert_eq!(got.shape(), shape.as_slice());
                        let tol = 2e-5 * (c.x[1] / c.group * numel(&c.kernel)) as f32;
                        let label = format!("{c:?} {fusion:?} {cpu:?} packed {packed}");
                        for (i, (g, w)) in got.as_f32().unwrap().iter().zip(&want).enumerate() {
                            assert!(
                                (g - w).abs() <= tol * (1.0 + w.abs()),
                                "{label}: element {i}: got {g}, want {w}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn fused_operands_of_the_wrong_shape_or_a_foreign_packing_are_refused() {
    let c = Case::new(&[1, 4, 6, 6], 4, &[3, 3]);
    let node = c.node();
    let spec = NodeSpec {
        domain: "",
        op_type: "Conv",
        opset: 11,
        attributes: &node.attrs,
        inputs: 3,
        outputs: 1,
    };
    let fusion = ConvFusion {
        batch_norm: Some(1e-5),
        residual: true,
        activation: ConvActivation::Relu,
    };
    let op = fused(&spec, fusion, CpuFeatures::detect()).unwrap();
    assert_eq!(op.describe(), "Conv+BatchNormalization+Add+Relu");
    let z =
        |s: &[usize]| Tensor::zeros(onnx_prepared_kernels::ElementType::F32, s.to_vec()).unwrap();
    let (x, w, b, p, r) = (
        z(&[1, 4, 6, 6]),
        z(&[4, 4, 3, 3]),
        z(&[4]),
        z(&[4]),
        z(&[1, 4, 4, 4]),
    );
    fn info(t: &Tensor) -> Option<InputInfo<'_>> {
        Some(InputInfo::known(t))
    }
    let good = [
        info(&x),
        info(&w),
        info(&b),
        info(&p),
        info(&p),
        info(&p),
        info(&p),
        info(&r),
    ];
    assert_eq!(op.infer(&good).unwrap()[0].shape, vec![1, 4, 4, 4]);
    // A residual that would broadcast is not the output's shape.
    let r1 = z(&[1, 4, 1, 1]);
    let mut bad = good;
    bad[7] = info(&r1);
    let e = op.infer(&bad).unwrap_err().to_string();
    assert!(e.contains("must have the output's shape"), "{e}");
    // A normalization parameter of the wrong length.
    let p3 = z(&[3]);
    let mut bad = good;
    bad[5] = info(&p3);
    let e = op.infer(&bad).unwrap_err().to_string();
    assert!(e.contains("must be [4]"), "{e}");
    // Too few inputs for the fusion.
    assert!(op.infer(&good[..7]).is_err());
    // A packed object made for other weights fails validation.
    let prepack = op.prepack(&good, CpuFeatures::detect()).unwrap();
    let w2 = z(&[4, 4, 1, 1]);
    let plain = fused(&spec, ConvFusion::default(), CpuFeatures::detect()).unwrap();
    let other = plain
        .prepack(&[info(&x), info(&w2)], CpuFeatures::detect())
        .unwrap()
        .prepare(&[&w2], &Sequential)
        .unwrap();
    let shapes: Vec<&[usize]> = vec![&[4, 4, 3, 3], &[4], &[4], &[4], &[4], &[4]];
    assert!(prepack.validate(&other, &shapes).is_err());
    // Not a Conv node.
    let relu = NodeSpec {
        op_type: "Relu",
        ..spec
    };
    assert!(fused(&relu, fusion, CpuFeatures::detect()).is_err());
}

/// 8-bit MaxPool (the whole-plane vector path) equals the f32 MaxPool of
/// the same values, over strides, padding, dilation and ceil mode, with
/// inputs at the type's least value next to the padding.
#[test]
fn eight_bit_max_pool_equals_the_float_one() {
    let shape = [2usize, 3, 11, 13];
    let n: usize = shape.iter().product();
    /// (kernel, strides, pads, dilations, ceil_mode)
    type PoolCase = ([i64; 2], [i64; 2], [i64; 4], [i64; 2], i64);
    let cases: [PoolCase; 5] = [
        ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 0),
        ([2, 2], [2, 2], [0, 0, 0, 0], [1, 1], 0),
        ([3, 3], [1, 1], [1, 0, 1, 2], [1, 1], 0),
        ([3, 2], [2, 3], [0, 1, 1, 0], [2, 1], 1),
        ([1, 3], [1, 2], [0, 1, 0, 1], [1, 1], 0),
    ];
    for (kernel, strides, pads, dilations, ceil) in cases {
        let node = Node::new("MaxPool", 12)
            .ints("kernel_shape", &kernel)
            .ints("strides", &strides)
            .ints("pads", &pads)
            .ints("dilations", &dilations)
            .int("ceil_mode", ceil);
        let u: Vec<u8> = (0..n)
            .map(|i| if i % 13 == 0 { 0 } else { (i * 97 % 251) as u8 })
            .collect();
        let s: Vec<i8> = u.iter().map(|&v| v.wrapping_sub(128) as i8).collect();
        let float = |v: Vec<f32>| {
            node.run1(&[var(f32t(&shape, &v))])
                .unwrap()
                .as_f32()
                .unwrap()
                .to_vec()
        };
        let want_u = float(u.iter().map(|&v| v as f32).collect());
        let want_s = float(s.iter().map(|&v| v as f32).collect());
        let got_u = node.run1(&[var(u8t(&shape, &u))]).unwrap();
        let got_s = node.run1(&[var(i8t(&shape, &s))]).unwrap();
        let got_u: Vec<f32> = got_u.as_u8().unwrap().iter().map(|&v| v as f32).collect();
        let got_s: Vec<f32> = got_s.as_i8().unwrap().iter().map(|&v| v as f32).collect();
        assert_eq!(got_u, want_u, "uint8 {kernel:?} {strides:?} {pads:?}");
        assert_eq!(got_s, want_s, "int8 {kernel:?} {strides:?} {pads:?}");
    }
}

/// MaxPool and AveragePool (f32, the whole-plane path) and 8-bit MaxPool
/// against the definition, over several planes of negative values: the
/// padding, written once per task's phases, must be the pool's own (the
/// least value or zero) for every plane, rows of padding included.
#[test]
fn pooled_planes_match_the_definition() {
    let (c, h, w) = (5usize, 9usize, 10usize);
    let x: Vec<f32> = (0..c * h * w)
        .map(|i| -((i * 37 % 101) as f32) - 1.0)
        .collect();
    // (kernel, strides, pads: top, left, bottom, right)
    type Case = ([usize; 2], [usize; 2], [usize; 4]);
    let cases: [Case; 3] = [
        ([3, 3], [2, 2], [1, 1, 1, 1]),
        ([3, 3], [2, 2], [2, 1, 1, 2]),
        ([3, 2], [1, 2], [2, 0, 2, 1]),
    ];
    for ([kh, kw], [sh, sw], [pt, pl, pb, pr]) in cases {
        let oh = (h + pt + pb - kh) / sh + 1;
        let ow = (w + pl + pr - kw) / sw + 1;
        // Per output: the window's values inside the image, and its size.
        let window = |p: usize, y: usize, z: usize| {
            let mut vals = Vec::new();
            for b in 0..kh {
                for e in 0..kw {
                    let (r, q) = (
                        (y * sh + b) as isize - pt as isize,
                        (z * sw + e) as isize - pl as isize,
                    );
                    if r >= 0 && q >= 0 && (r as usize) < h && (q as usize) < w {
                        vals.push(x[(p * h + r as usize) * w + q as usize]);
                    }
                }
            }
            vals
        };
        let outputs = |f: &dyn Fn(Vec<f32>) -> f32| -> Vec<f32> {
            (0..c)
                .flat_map(|p| (0..oh).flat_map(move |y| (0..ow).map(move |z| (p, y, z))))
                .map(|(p, y, z)| f(window(p, y, z)))
                .collect()
        };
        let node = |op: &str, version: i64| {
            Node::new(op, version)
                .ints("kernel_shape", &[kh as i64, kw as i64])
                .ints("strides", &[sh as i64, sw as i64])
                .ints("pads", &[pt as i64, pl as i64, pb as i64, pr as i64])
        };
        let run = |n: Node| {
            n.run1(&[var(f32t(&[1, c, h, w], &x))])
                .unwrap()
                .as_f32()
                .unwrap()
                .to_vec()
        };
        let case = format!("{kh}x{kw} stride {sh}x{sw} pads {pt} {pl} {pb} {pr}");
        let max = outputs(&|v| v.into_iter().fold(f32::NEG_INFINITY, f32::max));
        assert_eq!(run(node("MaxPool", 12)), max, "MaxPool {case}");
        let mean = outputs(&|v| v.iter().sum::<f32>() / v.len() as f32);
        assert_close(&run(node("AveragePool", 11)), &mean, 1e-5);
        let padded = outputs(&|v| v.iter().sum::<f32>() / (kh * kw) as f32);
        assert_close(
            &run(node("AveragePool", 11).int("count_include_pad", 1)),
            &padded,
            1e-5,
        );
        // int8 MaxPool of the same (integral, in range) values.
        let s: Vec<i8> = x.iter().map(|&v| v as i8).collect();
        let got = node("MaxPool", 12)
            .run1(&[var(i8t(&[1, c, h, w], &s))])
            .unwrap();
        let got: Vec<f32> = got.as_i8().unwrap().iter().map(|&v| v as f32).collect();
        assert_eq!(got, max, "int8 MaxPool {case}");
    }
}
