//! MatMulNBits with int8 activations (`KernelOptions::int8_activations`):
//! used for `accuracy_level = 4` only when opted in, within the stated
//! bound of the exact product, the same on every path (packed, unpacked,
//! threads), and attribute errors stay typed.

use onnx_prepared_kernels::ops::linalg::{self, reference};
use onnx_prepared_kernels::{
    Attributes, CpuFeatures, InputInfo, KernelError, KernelOptions, NodeSpec, Operator,
    ParallelFor, Sequential, Tensor, TensorData, registry,
};

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Integer attributes, plus one FLOAT `accuracy_level` when asked.
struct Attrs(Vec<(&'static str, i64)>, bool);

impl Attributes for Attrs {
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.0.iter().map(|a| a.0.to_string()).collect();
        if self.1 {
            names.push("accuracy_level".into());
        }
        names
    }
    fn int(&self, name: &str) -> Result<Option<i64>, KernelError> {
        if self.1 && name == "accuracy_level" {
            return Err(KernelError::AttributeType {
                name: name.into(),
                expected: "INT",
                found: "FLOAT",
            });
        }
        Ok(self.0.iter().find(|a| a.0 == name).map(|a| a.1))
    }
    fn float(&self, _: &str) -> Result<Option<f32>, KernelError> {
        Ok(None)
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

/// Reports three threads and runs tasks last to first.
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

fn attrs(k: usize, n: usize, bs: usize, level: Option<i64>) -> Attrs {
    let mut a = vec![
        ("K", k as i64),
        ("N", n as i64),
        ("bits", 4),
        ("block_size", bs as i64),
    ];
    if let Some(l) = level {
        a.push(("accuracy_level", l));
    }
    Attrs(a, false)
}

fn spec<'a>(attrs: &'a Attrs, inputs: usize) -> NodeSpec<'a> {
    NodeSpec {
        domain: "com.microsoft",
        op_type: "MatMulNBits",
        opset: 1,
        attributes: attrs,
        inputs,
        outputs: 1,
    }
}

/// `[A, B, scales, zero_points?]` of ONNX Runtime's shapes.
fn inputs(
    rng: &mut Rng,
    rows: usize,
    k: usize,
    n: usize,
    bs: usize,
    zp: bool,
) -> Vec<Option<Tensor>> {
    let blocks = k.div_ceil(bs);
    let bytes = (0..n * blocks * bs / 2).map(|_| rng.next() as u8).collect();
    let b = Tensor::new(vec![n, blocks, bs / 2], TensorData::U8(bytes)).expect("B");
    let scales = (0..n * blocks).map(|_| 0.02 + 0.01 * rng.f32()).collect();
    let scales = Tensor::from_f32(vec![n * blocks], scales).expect("scales");
    let a = Tensor::from_f32(vec![rows, k], (0..rows * k).map(|_| rng.f32()).collect()).expect("A");
    let zp = zp.then(|| {
        let z = (0..n * blocks.div_ceil(2))
            .map(|_| rng.next() as u8)
            .collect();
        Tensor::new(vec![n * blocks.div_ceil(2)], TensorData::U8(z)).expect("zp")
    });
    vec![Some(a), Some(b), Some(scales), zp]
}

/// Runs `op`, with the weights prepacked for `cpu` or not.
fn run(
    op: &dyn Operator,
    inputs: &[Option<Tensor>],
    pack: bool,
    cpu: CpuFeatures,
    par: &dyn ParallelFor,
) -> Vec<f32> {
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_ref().map(|t| InputInfo {
                dtype: t.dtype(),
                shape: t.shape(),
                value: (pack && i > 0).then_some(t),
                constant: pack && i > 0,
            })
        })
        .collect();
    let out = op.infer(&infos).expect("infer");
    let mut outputs = vec![Tensor::zeros(out[0].dtype, out[0].shape.clone()).expect("Y")];
    let mut refs: Vec<Option<&Tensor>> = inputs.iter().map(|t| t.as_ref()).collect();
    let packed = op.prepack(&infos, cpu).map(|pre| {
        let sources: Vec<&Tensor> = pre
            .consumes()
            .iter()
            .map(|&i| refs[i].expect("source"))
            .collect();
        let packed = pre
            .prepare(&sources, &onnx_prepared_kernels::Sequential)
            .expect("prepare");
        for &i in pre.consumes() {
            refs[i] = None;
        }
        packed
    });
    op.execute(&refs, packed.as_ref(), &mut outputs, par)
        .expect("execute");
    outputs[0].as_f32().expect("f32").to_vec()
}

fn cpus() -> Vec<CpuFeatures> {
    let have = CpuFeatures::detect();
    let mut out = vec![CpuFeatures::portable()];
    if have.avx2 {
        out.push(CpuFeatures {
            avx2: true,
            ..CpuFeatures::portable()
        });
    }
    if have.avx512 {
        out.push(have);
    }
    out
}

#[test]
fn level_4_quantizes_only_when_opted_in_and_stays_within_two_percent() {
    let mut rng = Rng(21);
    let on = KernelOptions {
        int8_activations: true,
        ..KernelOptions::default()
    };
    for (rows, k, n, bs, zp) in [
        (1, 256, 40, 32, false),
        (3, 100, 17, 16, true),
        (17, 512, 33, 64, false),
        (2, 72, 8, 32, true),
    ] {
        let inputs = inputs(&mut rng, rows, k, n, bs, zp);
        let exact = reference::matmul_nbits(
            &reference::NBitsParams {
                k,
                n,
                bits: 4,
                block_size: bs,
            },
            inputs[0].as_ref().expect("A"),
            inputs[1].as_ref().expect("B"),
            inputs[2].as_ref().expect("scales"),
            inputs[3].as_ref(),
            None,
        )
        .expect("reference");
        let exact = exact.as_f32().expect("f32");
        let max = exact.iter().fold(0f32, |m, x| m.max(x.abs()));
        let mut int8_outputs: Vec<Vec<f32>> = Vec::new();
        for cpu in cpus() {
            for level in [None, Some(0), Some(1), Some(4)] {
                for options in [KernelOptions::default(), on] {
                    let a = attrs(k, n, bs, level);
                    let op = linalg::lookup_with(&spec(&a, 4), cpu, options)
                        .expect("linalg")
                        .expect("op");
                    for pack in [false, true] {
                        for par in [&Sequential as &dyn ParallelFor, &Reversed] {
                            let y = run(&*op, &inputs, pack, cpu, par);
                            let err = y
                                .iter()
                                .zip(exact)
                                .fold(0f32, |m, (g, e)| m.max((g - e).abs()));
                            let ctx = format!(
                                "{cpu:?} level {level:?} {options:?} M {rows} K {k} N {n} zp {zp}"
                            );
                            if level == Some(4) && options.int8_activations {
                                assert!(
                                    err > 1e-4 * max && err <= 0.02 * max,
                                    "{ctx}: {err} vs {max}"
                                );
                                int8_outputs.push(y);
                            } else {
                                assert!(err <= 1e-4 * max, "{ctx}: {err} vs {max}");
                            }
                        }
                    }
                }
            }
        }
        // Every family, packed or not, threads or not: the same bits.
        assert!(int8_outputs.windows(2).all(|w| {
            w[0].iter()
                .zip(&w[1])
                .all(|(x, y)| x.to_bits() == y.to_bits())
        }));
    }
}

#[test]
fn the_registry_passes_the_options_through() {
    let mut rng = Rng(22);
    let inputs = inputs(&mut rng, 2, 64, 16, 32, false);
    let a = attrs(64, 16, 32, Some(4));
    let cpu = CpuFeatures::detect();
    let exact = run(
        &*registry::operator(&spec(&a, 4)).expect("op"),
        &inputs,
        true,
        cpu,
        &Sequential,
    );
    let on = KernelOptions {
        int8_activations: true,
        ..KernelOptions::default()
    };
    let int8 = run(
        &*registry::operator_with(&spec(&a, 4), on).expect("op"),
        &inputs,
        true,
        cpu,
        &Sequential,
    );
    let off = run(
        &*registry::operator_with(&spec(&a, 4), KernelOptions::default()).expect("op"),
        &inputs,
        true,
        cpu,
        &Sequential,
    );
    assert_eq!(exact, off);
    assert_ne!(exact, int8);
}

#[test]
fn attribute_errors_stay_typed_with_int8_on() {
    let on = KernelOptions {
        int8_activations: true,
        ..KernelOptions::default()
    };
    let cpu = CpuFeatures::detect();
    let mut float_level = attrs(64, 8, 32, None);
    float_level.1 = true;
    let err = linalg::lookup_with(&spec(&float_level, 3), cpu, on)
        .expect("linalg")
        .expect_err("FLOAT level");
    assert!(matches!(err, KernelError::AttributeType { .. }), "{err:?}");
    let mut bits8 = attrs(64, 8, 32, Some(4));
    bits8.0[2].1 = 8;
    let err = linalg::lookup_with(&spec(&bits8, 3), cpu, on)
        .expect("linalg")
        .expect_err("bits 8");
    assert!(
        matches!(err, KernelError::Attribute { name: "bits", .. }),
        "{err:?}"
    );
    let err = linalg::lookup_with(&spec(&attrs(64, 8, 48, Some(4)), 3), cpu, on)
        .expect("linalg")
        .expect_err("block 48");
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
}
