//! Kernel benchmarks named after the fixtures' workloads: the `tiny-llm`
//! MatMulNBits projections (packed, best ISA, vs the scalar reference) at
//! decode (M = 1) and prefill (M = 128), its attention MatMuls, and the
//! `gemm-*` / `many-small-nodes` Gemms packed vs unpacked. Setup (data,
//! packing, output allocation) is outside the measured loop.
//!
//! `tiny-llm/matmul_nbits_int8/m{1,128}` times the same packed weight with
//! f32 and with int8 activations (`accuracy_level = 4`, opted in) side by
//! side.
//!
//! Throughput: M = 1 MatMulNBits reports bytes of packed weight per second;
//! everything else reports multiply-adds x 2 (FLOP) as elements per second.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use onnx_prepared::scheduler::{WorkerPool, WorkerPoolOptions};
use onnx_prepared_kernels::ops::linalg::reference;
use onnx_prepared_kernels::{
    Attributes, CpuFeatures, InputInfo, KernelError, KernelOptions, NodeSpec, Operator,
    PackedWeight, ParallelFor, Prepack, Sequential, Tensor, TensorData, registry,
};

/// Integer and float attributes.
#[derive(Debug, Default)]
struct Attrs(Vec<(&'static str, i64)>, Vec<(&'static str, f32)>);

impl Attributes for Attrs {
    fn names(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|a| a.0.to_string())
            .chain(self.1.iter().map(|a| a.0.to_string()))
            .collect()
    }
    fn int(&self, name: &str) -> Result<Option<i64>, KernelError> {
        Ok(self.0.iter().find(|a| a.0 == name).map(|a| a.1))
    }
    fn float(&self, name: &str) -> Result<Option<f32>, KernelError> {
        Ok(self.1.iter().find(|a| a.0 == name).map(|a| a.1))
    }
    fn ints(&self, _: &str) -> Result<Option<Vec<i64>>, KernelError> {
        Ok(None)
    }
    fn floats(&self, _: &str) -> Result<Option<Vec<f32>>, KernelError> {
        Ok(None)
    }
    fn string(&self, _: &str) -> Result<Option<String>, KernelError> {
        Ok(None)
    }
    fn tensor(&self, _: &str) -> Result<Option<Tensor>, KernelError> {
        Ok(None)
    }
}

/// SplitMix64 data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
            .collect()
    }
}

/// A single-output node of opset 21.
fn operator(
    domain: &str,
    op_type: &str,
    attrs: &Attrs,
    inputs: usize,
    options: KernelOptions,
) -> Box<dyn Operator> {
    let spec = NodeSpec {
        domain,
        op_type,
        opset: 21,
        attributes: attrs,
        inputs,
        outputs: 1,
    };
    registry::operator_with(&spec, options).expect("operator")
}

/// What the operator sees: input 0 at run time, every other a constant.
fn constant_weights(inputs: &[Option<Tensor>]) -> Vec<Option<InputInfo<'_>>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_ref().map(|t| InputInfo {
                dtype: t.dtype(),
                shape: t.shape(),
                value: (i > 0).then_some(t),
                constant: i > 0,
            })
        })
        .collect()
}

/// The inputs `pre` packs, in its order.
fn sources<'a>(pre: &dyn Prepack, inputs: &'a [Option<Tensor>]) -> Vec<&'a Tensor> {
    pre.consumes()
        .iter()
        .map(|&i| inputs[i].as_ref().expect("source"))
        .collect()
}

/// A resolved node with its inputs, packed weight and output, ready to run.
struct Prepared {
    op: Box<dyn Operator>,
    inputs: Vec<Option<Tensor>>,
    consumed: Vec<usize>,
    packed: Option<PackedWeight>,
    outputs: Vec<Tensor>,
}

impl Prepared {
    fn new(
        domain: &str,
        op_type: &str,
        attrs: &Attrs,
        inputs: Vec<Option<Tensor>>,
        pack: bool,
    ) -> Self {
        Self::with_options(
            domain,
            op_type,
            attrs,
            inputs,
            pack,
            KernelOptions::default(),
        )
    }

    fn with_options(
        domain: &str,
        op_type: &str,
        attrs: &Attrs,
        inputs: Vec<Option<Tensor>>,
        pack: bool,
        options: KernelOptions,
    ) -> Self {
        let op = operator(domain, op_type, attrs, inputs.len(), options);
        let infos = constant_weights(&inputs);
        let out = op.infer(&infos).expect("infer");
        let outputs = vec![Tensor::zeros(out[0].dtype, out[0].shape.clone()).expect("output")];
        let (consumed, packed) = match pack
            .then(|| op.prepack(&infos, CpuFeatures::detect()))
            .flatten()
        {
            Some(pre) => (
                pre.consumes().to_vec(),
                Some(
                    pre.prepare(&sources(&*pre, &inputs), &Sequential)
                        .expect("prepare"),
                ),
            ),
            None => (Vec::new(), None),
        };
        Self {
            op,
            inputs,
            consumed,
            packed,
            outputs,
        }
    }

    fn run(&mut self) {
        self.run_on(&Sequential);
    }

    fn run_on(&mut self, par: &dyn ParallelFor) {
        let refs: Vec<Option<&Tensor>> = self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if self.consumed.contains(&i) {
                    None
                } else {
                    t.as_ref()
                }
            })
            .collect();
        self.op
            .execute(&refs, self.packed.as_ref(), &mut self.outputs, par)
            .expect("execute");
        black_box(&self.outputs);
    }
}

/// The tiny-llm projections: (name, K, N).
const PROJECTIONS: [(&str, usize, usize); 5] = [
    ("qkv", 512, 1536),
    ("attn_out", 512, 512),
    ("gate_up", 512, 4096),
    ("down", 2048, 512),
    ("lm_head", 512, 8192),
];
const BLOCK: usize = 32;

fn nbits_inputs(
    rng: &mut Rng,
    m: usize,
    k: usize,
    n: usize,
) -> (reference::NBitsParams, Vec<Option<Tensor>>) {
    let p = reference::NBitsParams {
        k,
        n,
        bits: 4,
        block_size: BLOCK,
    };
    let blocks = p.blocks();
    let bytes: Vec<u8> = (0..n * blocks * BLOCK / 2)
        .map(|_| rng.next() as u8)
        .collect();
    let b = Tensor::new(vec![n, blocks, BLOCK / 2], TensorData::U8(bytes)).expect("B");
    let scales = Tensor::from_f32(
        vec![n * blocks],
        rng.f32s(n * blocks)
            .iter()
            .map(|x| 0.01 + 0.01 * x)
            .collect(),
    )
    .expect("scales");
    let a = Tensor::from_f32(vec![1, m, k], rng.f32s(m * k)).expect("A");
    (p, vec![Some(a), Some(b), Some(scales)])
}

fn nbits_attrs(p: &reference::NBitsParams) -> Attrs {
    Attrs(
        vec![
            ("K", p.k as i64),
            ("N", p.n as i64),
            ("bits", 4),
            ("block_size", p.block_size as i64),
            ("accuracy_level", 0),
        ],
        vec![],
    )
}

fn matmul_nbits(c: &mut Criterion) {
    let mut rng = Rng(1);
    for m in [1, 128] {
        let mut group = c.benchmark_group(format!("tiny-llm/matmul_nbits/m{m}"));
        for (name, k, n) in PROJECTIONS {
            let (p, inputs) = nbits_inputs(&mut rng, m, k, n);
            let attrs = nbits_attrs(&p);
            let mut prepared =
                Prepared::new("com.microsoft", "MatMulNBits", &attrs, inputs.clone(), true);
            let layout = prepared
                .packed
                .as_ref()
                .map_or("unpacked".into(), |w| w.layout.clone());
            let bytes = prepared.packed.as_ref().map_or(0, |w| w.byte_len()) as u64;
            group.throughput(if m == 1 {
                Throughput::Bytes(bytes)
            } else {
                Throughput::Elements((2 * m * k * n) as u64)
            });
            group.sample_size(if m == 1 { 100 } else { 20 });
            group.bench_function(format!("{name}_{k}x{n}/packed/{layout}"), |bch| {
                bch.iter(|| prepared.run())
            });
            group.sample_size(10);
            let [Some(a), Some(b), Some(s)] = &inputs[..] else {
                unreachable!()
            };
            group.bench_function(format!("{name}_{k}x{n}/reference"), |bch| {
                bch.iter(|| {
                    black_box(reference::matmul_nbits(&p, a, b, s, None, None).expect("reference"))
                })
            });
        }
        group.finish();
    }
}

/// Packing a 4-bit weight (the cold path of every MatMulNBits): tiny-llm's
/// LM head and the 8x model's, bytes of ONNX Runtime's `B` per second.
fn matmul_nbits_pack(c: &mut Criterion) {
    let mut rng = Rng(9);
    let mut group = c.benchmark_group("pack/matmul_nbits");
    group.sample_size(20);
    for (name, k, n) in [("lm_head", 512, 8192), ("lm_head_8x", 1024, 32000)] {
        let (p, inputs) = nbits_inputs(&mut rng, 1, k, n);
        let attrs = nbits_attrs(&p);
        let op = operator(
            "com.microsoft",
            "MatMulNBits",
            &attrs,
            inputs.len(),
            KernelOptions::default(),
        );
        let pre = op
            .prepack(&constant_weights(&inputs), CpuFeatures::detect())
            .expect("MatMulNBits packs constant weights");
        let sources = sources(&*pre, &inputs);
        group.throughput(Throughput::Bytes((n * k / 2) as u64));
        group.bench_function(format!("{name}_{k}x{n}"), |bch| {
            bch.iter(|| black_box(pre.prepare(&sources, &Sequential).expect("prepare")))
        });
    }
    group.finish();
}

/// f32 vs int8 activations on one packed weight, at decode and prefill.
fn matmul_nbits_int8(c: &mut Criterion) {
    let mut rng = Rng(5);
    let int8 = KernelOptions {
        int8_activations: true,
        ..KernelOptions::default()
    };
    for m in [1, 128] {
        let mut group = c.benchmark_group(format!("tiny-llm/matmul_nbits_int8/m{m}"));
        for (k, n) in [(512, 2048), (2048, 512)] {
            let (p, inputs) = nbits_inputs(&mut rng, m, k, n);
            let mut attrs = nbits_attrs(&p);
            attrs.0.retain(|a| a.0 != "accuracy_level");
            attrs.0.push(("accuracy_level", 4));
            group.throughput(Throughput::Elements((2 * m * k * n) as u64));
            group.sample_size(if m == 1 { 100 } else { 20 });
            for (label, options) in [("f32", KernelOptions::default()), ("int8", int8)] {
                let mut prepared = Prepared::with_options(
                    "com.microsoft",
                    "MatMulNBits",
                    &attrs,
                    inputs.clone(),
                    true,
                    options,
                );
                group.bench_function(format!("{k}x{n}/{label}"), |bch| {
                    bch.iter(|| prepared.run())
                });
            }
        }
        group.finish();
    }
}

fn gemm(c: &mut Criterion) {
    let mut rng = Rng(2);
    for (fixture, size) in [("gemm", 256), ("many-small-nodes", 16)] {
        let mut group = c.benchmark_group(format!("{fixture}/gemm_{size}x{size}"));
        for m in [1, 16] {
            for trans_b in [0, 1] {
                let a = Tensor::from_f32(vec![m, size], rng.f32s(m * size)).expect("A");
                let w = Tensor::from_f32(vec![size, size], rng.f32s(size * size)).expect("B");
                let bias = Tensor::from_f32(vec![size], rng.f32s(size)).expect("C");
                let attrs = Attrs(vec![("transB", trans_b)], vec![]);
                group.throughput(Throughput::Elements((2 * m * size * size) as u64));
                for pack in [true, false] {
                    let inputs = vec![Some(a.clone()), Some(w.clone()), Some(bias.clone())];
                    let mut prepared = Prepared::new("", "Gemm", &attrs, inputs, pack);
                    let label = if pack { "packed" } else { "unpacked" };
                    group.bench_function(format!("m{m}/transB{trans_b}/{label}"), |bch| {
                        bch.iter(|| prepared.run())
                    });
                }
            }
        }
        group.finish();
    }
}

fn attention(c: &mut Criterion) {
    let mut rng = Rng(3);
    let mut group = c.benchmark_group("tiny-llm/attention_matmul");
    for (t, past) in [(128, 0), (1, 128)] {
        let total = past + t;
        for (name, sa, sb) in [
            ("qk", [1, 8, t, 64], [1, 8, 64, total]),
            ("pv", [1, 8, t, total], [1, 8, total, 64]),
        ] {
            let a = Tensor::from_f32(sa.to_vec(), rng.f32s(sa.iter().product())).expect("A");
            let b = Tensor::from_f32(sb.to_vec(), rng.f32s(sb.iter().product())).expect("B");
            group.throughput(Throughput::Elements((2 * 8 * sa[2] * sa[3] * sb[3]) as u64));
            let mut prepared = Prepared::new(
                "",
                "MatMul",
                &Attrs::default(),
                vec![Some(a), Some(b)],
                false,
            );
            group.bench_function(format!("{name}/t{t}_p{past}"), |bch| {
                bch.iter(|| prepared.run())
            });
        }
    }
    group.finish();
}

/// The MatMulNBits and attention products again on two threads (the
/// caller plus one helper of the runtime's pool).
fn two_threads(c: &mut Criterion) {
    let workers = WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 1,
        io_workers: 0,
        pin_cpu_workers: false,
    });
    let pool = workers.lease();
    let mut rng = Rng(4);
    let mut group = c.benchmark_group("tiny-llm/two_threads");
    for m in [1, 128] {
        for (name, k, n) in PROJECTIONS {
            let (p, inputs) = nbits_inputs(&mut rng, m, k, n);
            let attrs = nbits_attrs(&p);
            let mut prepared = Prepared::new("com.microsoft", "MatMulNBits", &attrs, inputs, true);
            // The split must not change a single bit of the result.
            prepared.run();
            let sequential = prepared.outputs.clone();
            prepared.run_on(&pool);
            assert_eq!(prepared.outputs, sequential, "{name}: two threads differ");
            let bytes = prepared.packed.as_ref().map_or(0, |w| w.byte_len()) as u64;
            group.throughput(if m == 1 {
                Throughput::Bytes(bytes)
            } else {
                Throughput::Elements((2 * m * k * n) as u64)
            });
            group.sample_size(if m == 1 { 100 } else { 20 });
            group.bench_function(format!("matmul_nbits/m{m}/{name}_{k}x{n}"), |bch| {
                bch.iter(|| prepared.run_on(&pool))
            });
        }
    }
    group.finish();
}

criterion_group!(
    benches,
    matmul_nbits,
    matmul_nbits_int8,
    matmul_nbits_pack,
    gemm,
    attention,
    two_threads
);
criterion_main!(benches);
