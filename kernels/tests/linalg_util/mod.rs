//! Shared helpers of the matrix-product kernel tests: data, attributes,
//! operators on every kernel family, prepacking, running, tolerances.

// Each test binary uses a subset of these.
#![allow(dead_code, unused_imports)]

pub use onnx_prepared_kernels::ops::linalg::{self, reference};
pub use onnx_prepared_kernels::{
    Attributes, CpuFeatures, DataRef, ElementType, InputInfo, KernelError, NodeSpec, Operator,
    PackedWeight, ParallelFor, Tensor, TensorData,
};

/// SplitMix64: small, deterministic test data.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[-1, 1)`.
    pub fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[derive(Debug, Clone)]
pub enum Attr {
    Int(i64),
    Float(f32),
}

#[derive(Debug, Default)]
pub struct Attrs(pub Vec<(&'static str, Attr)>);

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

pub fn operator(
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
pub struct Reversed;

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
pub fn cpus() -> Vec<(&'static str, CpuFeatures)> {
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
                amx_int8: false,
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
        let mut line = format!("linalg tests: kernel families tested: {}", ran.join(", "));
        if !lacking.is_empty() {
            line += &format!("; NOT tested, this CPU lacks: {}", lacking.join(", "));
        }
        let _ = writeln!(std::io::stderr(), "{line}");
    });
    v
}

pub fn infos<'a>(inputs: &'a [Option<Tensor>], constant: &[usize]) -> Vec<Option<InputInfo<'a>>> {
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
pub fn prepack(
    op: &dyn Operator,
    inputs: &[Option<Tensor>],
    constant: &[usize],
    cpu: CpuFeatures,
) -> Option<(Vec<usize>, PackedWeight)> {
    prepack_on(op, inputs, constant, cpu, &Reversed)
}

/// [`prepack`], packing on `par`.
pub fn prepack_on(
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
pub fn run(
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
pub fn assert_close(got: &Tensor, want: &Tensor, tol: f32, ctx: &str) {
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

pub fn f32_tensor(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f32(shape.to_vec(), rng.f32s(n)).expect("tensor")
}

/// Tolerance relative to the largest expected magnitude. The kernels sum
/// up to about a thousand f32 products (blocked, in a different order than
/// the f64-accumulated reference, and 4-bit blocks scale once per block);
/// the rounding is about `sqrt(K) * 2^-24` of a typical term, i.e. a few
/// 1e-7 of the largest output, so 2e-5 leaves a wide margin while still
/// catching any wrong element, tail or block.
pub const TOL: f32 = 2e-5;

/// Declares one `#[test]` per case, each run on every kernel family.
#[macro_export]
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
