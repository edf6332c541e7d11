//! Matrix-product kernels against their scalar references: every kernel
//! family this CPU has (plus portable), packed and unpacked weights,
//! randomized shapes with tails; packing determinism, layout keys, errors.

use onnx_prepared_kernels::ops::linalg::{self, reference};
use onnx_prepared_kernels::{
    Attributes, CpuFeatures, ElementType, InputInfo, KernelError, NodeSpec, Operator, PackedWeight,
    ParallelFor, Tensor, TensorData,
};

// ---------------------------------------------------------------- helpers

/// SplitMix64: small, deterministic test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`.
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[derive(Debug, Clone)]
enum Attr {
    Int(i64),
    Float(f32),
}

#[derive(Debug, Default)]
struct Attrs(Vec<(&'static str, Attr)>);

impl Attrs {
    fn typed<T>(
        &self,
        name: &str,
        expected: &'static str,
        pick: impl FnOnce(&Attr) -> Option<T>,
    ) -> Result<Option<T>, KernelError> {
        let Some((_, a)) = self.0.iter().find(|(n, _)| *n == name) else {
            return Ok(None);
        };
        pick(a).map(Some).ok_or_else(|| KernelError::AttributeType {
            name: name.into(),
            expected,
            found: "another type",
        })
    }
}

impl Attributes for Attrs {
    fn names(&self) -> Vec<String> {
        self.0.iter().map(|(n, _)| n.to_string()).collect()
    }
    fn int(&self, name: &str) -> Result<Option<i64>, KernelError> {
        self.typed(name, "INT", |a| match a {
            Attr::Int(v) => Some(*v),
            Attr::Float(_) => None,
        })
    }
    fn float(&self, name: &str) -> Result<Option<f32>, KernelError> {
        self.typed(name, "FLOAT", |a| match a {
            Attr::Float(v) => Some(*v),
            Attr::Int(_) => None,
        })
    }
    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, KernelError> {
        self.typed(name, "INTS", |_| None)
    }
    fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, KernelError> {
        self.typed(name, "FLOATS", |_| None)
    }
    fn string(&self, name: &str) -> Result<Option<String>, KernelError> {
        self.typed(name, "STRING", |_| None)
    }
    fn tensor(&self, name: &str) -> Result<Option<Tensor>, KernelError> {
        self.typed(name, "TENSOR", |_| None)
    }
}

fn operator(
    domain: &str,
    op_type: &str,
    attrs: &Attrs,
    inputs: usize,
    cpu: CpuFeatures,
) -> Result<Box<dyn Operator>, KernelError> {
    let spec = NodeSpec {
        domain,
        op_type,
        opset: 13,
        attributes: attrs,
        inputs,
        outputs: 1,
    };
    linalg::lookup_with_cpu(&spec, cpu).expect("a linalg operator")
}

/// Reports three threads and runs tasks last to first, so task splitting
/// and ordering assumptions are exercised without spawning threads.
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

/// The kernel families to test: portable plus whatever this CPU has. A
/// family the CPU lacks is reported on stderr (written directly, so the
/// test harness does not capture it), never skipped silently.
fn cpus() -> Vec<(&'static str, CpuFeatures)> {
    let have = CpuFeatures::detect();
    let mut v = vec![("portable", CpuFeatures::portable())];
    let mut lacking = Vec::new();
    if have.avx2 {
        v.push((
            "avx2",
            CpuFeatures {
                avx2: true,
                avx512: false,
                avx512vnni: false,
            },
        ));
    } else {
        lacking.push("avx2 (AVX2 + FMA)");
    }
    if have.avx512 {
        v.push(("avx512", have));
        if !have.avx512vnni {
            lacking.push("avx512vnni");
        }
    } else {
        lacking.push("avx512 (AVX-512 F/BW/DQ/VL)");
    }
    static REPORT: std::sync::Once = std::sync::Once::new();
    REPORT.call_once(|| {
        use std::io::Write as _;
        let ran: Vec<&str> = v.iter().map(|(label, _)| *label).collect();
        let mut line = format!("linalg_kernels: kernel families tested: {}", ran.join(", "));
        if !lacking.is_empty() {
            line += &format!("; NOT tested, this CPU lacks: {}", lacking.join(", "));
        }
        let _ = writeln!(std::io::stderr(), "{line}");
    });
    v
}

fn infos<'a>(inputs: &'a [Option<Tensor>], constant: &[usize]) -> Vec<Option<InputInfo<'a>>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_ref().map(|t| InputInfo {
                dtype: t.dtype(),
                shape: t.shape(),
                value: constant.contains(&i).then_some(t),
                constant: constant.contains(&i),
            })
        })
        .collect()
}

/// Packs what the operator offers for `constant` inputs on `cpu`.
fn prepack(
    op: &dyn Operator,
    inputs: &[Option<Tensor>],
    constant: &[usize],
    cpu: CpuFeatures,
) -> Option<(Vec<usize>, PackedWeight)> {
    prepack_on(op, inputs, constant, cpu, &Reversed)
}

/// [`prepack`], packing on `par`.
fn prepack_on(
    op: &dyn Operator,
    inputs: &[Option<Tensor>],
    constant: &[usize],
    cpu: CpuFeatures,
    par: &dyn ParallelFor,
) -> Option<(Vec<usize>, PackedWeight)> {
    let pre = op.prepack(&infos(inputs, constant), cpu)?;
    let sources: Vec<&Tensor> = pre
        .consumes()
        .iter()
        .map(|&i| inputs[i].as_ref().expect("consumed input"))
        .collect();
    let packed = pre.prepare(&sources, par).expect("prepare");
    assert_eq!(packed.layout, pre.layout());
    // The runtime charges this before packing.
    let shapes: Vec<&[usize]> = sources.iter().map(|t| t.shape()).collect();
    assert_eq!(pre.packed_bytes(&shapes), Some(packed.byte_len()));
    Some((pre.consumes().to_vec(), packed))
}

/// Infers, optionally packs the `constant` inputs, and executes.
fn run(
    op: &dyn Operator,
    inputs: &[Option<Tensor>],
    constant: &[usize],
    cpu: CpuFeatures,
    par: &dyn ParallelFor,
) -> Result<(Tensor, Option<String>), KernelError> {
    let out = op.infer(&infos(inputs, constant))?;
    let mut outputs = vec![Tensor::zeros(out[0].dtype, out[0].shape.clone())?];
    let packed = if constant.is_empty() {
        None
    } else {
        prepack(op, inputs, constant, cpu)
    };
    let mut refs: Vec<Option<&Tensor>> = inputs.iter().map(|t| t.as_ref()).collect();
    if let Some((consumes, _)) = &packed {
        for &i in consumes {
            refs[i] = None;
        }
    }
    op.execute(&refs, packed.as_ref().map(|p| &p.1), &mut outputs, par)?;
    Ok((outputs.remove(0), packed.map(|p| p.1.layout)))
}

/// `|got - want| <= tol * max(|want|)` elementwise, with shapes equal.
fn assert_close(got: &Tensor, want: &Tensor, tol: f32, ctx: &str) {
    assert_eq!(got.shape(), want.shape(), "{ctx}: shape");
    let (g, w) = (got.as_f32().expect("f32"), want.as_f32().expect("f32"));
    let scale = w.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    let mut worst = (0f32, 0);
    for (i, (x, y)) in g.iter().zip(w).enumerate() {
        let e = (x - y).abs();
        if e.is_nan() || e > worst.0 {
            worst = (e, i);
        }
    }
    assert!(
        worst.0 <= tol * scale,
        "{ctx}: max error {} at {} (got {}, want {}), tolerance {} x {scale}",
        worst.0,
        worst.1,
        g[worst.1],
        w[worst.1],
        tol
    );
}

fn f32_tensor(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape.to_vec(), rng.f32s(n)).expect("tensor")
}

/// Tolerance relative to the largest expected magnitude. The kernels sum
/// up to about a thousand f32 products (blocked, in a different order than
/// the f64-accumulated reference, and 4-bit blocks scale once per block);
/// the rounding is about `sqrt(K) * 2^-24` of a typical term, i.e. a few
/// 1e-7 of the largest output, so 2e-5 leaves a wide margin while still
/// catching any wrong element, tail or block.
const TOL: f32 = 2e-5;

/// Declares one `#[test]` per case, each run on every kernel family.
macro_rules! kernel_suite {
    ($($name:ident => $case:path;)*) => {$(
        #[test]
        fn $name() {
            for (label, cpu) in cpus() {
                $case(label, cpu);
            }
        }
    )*};
}

kernel_suite! {
    matmul_2d_matches_reference => matmul_2d;
    matmul_batched_matches_reference => matmul_batched;
    gemm_matches_reference => gemm_all;
    matmul_nbits_matches_reference => nbits_all;
    matmul_nbits_batched_and_large => nbits_large;
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
                    Some(&*format!("matmul-f32-nr{nr}-{label}"))
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
                layout.starts_with(&format!("matmul-nbits-q4-b{}-", case.p.block_size)),
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
        for (k, n, zp) in [(1003, 2101, Zp::U8), (1024, 2048, Zp::None)] {
            let case = nbits_case(&mut rng, &[2, k], n, 32, zp, false);
            let (op, consts) = nbits_operator(&case, cpu);
            let b = case.inputs[1].as_ref().expect("B");
            assert!(b.byte_len() >= 1 << 20, "large enough to split");
            let seq = &onnx_prepared_kernels::Sequential;
            let (_, one) = prepack_on(&*op, &case.inputs, consts, cpu, seq).expect("packs");
            let (_, split) = prepack(&*op, &case.inputs, consts, cpu).expect("packs");
            assert_eq!(one, split, "{label} K={k} N={n}");
            check_nbits(label, cpu, &case, &Reversed);
        }
    }
}

#[test]
fn f32_packing_is_deterministic() {
    let mut rng = Rng(9);
    let b = f32_tensor(&mut rng, &[37, 45]);
    let a = f32_tensor(&mut rng, &[2, 37]);
    let mut keys = Vec::new();
    for (_, cpu) in cpus() {
        let op = operator("", "MatMul", &Attrs::default(), 2, cpu).expect("op");
        let inputs = [Some(a.clone()), Some(b.clone())];
        let (_, p1) = prepack(&*op, &inputs, &[1], cpu).expect("packs");
        let (_, p2) = prepack(&*op, &inputs, &[1], cpu).expect("packs");
        assert_eq!(p1, p2);
        // Panels [ceil(N / NR)][K][NR]: columns past N are zero.
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
        assert_eq!(panels.len(), 45usize.div_ceil(nr) * 37 * nr);
        for (i, &v) in panels.iter().enumerate() {
            let (panel, col) = (i / (37 * nr), i % nr);
            if panel * nr + col >= 45 {
                assert_eq!(v.to_bits(), 0, "padding at {i}");
            }
        }
        keys.push(p1.layout);
    }
    let mut unique = keys.clone();
    unique.dedup();
    assert_eq!(unique, keys, "one key per ISA");
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
