//! The prepacked QDQ MatMul (`ops::quant::qdq_matmul`) against
//! DequantizeLinear followed by a plain f32 matmul reference (both written
//! here), packed and unpacked, signed and unsigned, with and without zero
//! points, for every kernel family this CPU has.

mod basic_util;
mod quant_util;

use basic_util::{Rng, f32t};
use onnx_prepared_kernels::ops::quant::{qdq_matmul, qdq_matmul_with_cpu};
use onnx_prepared_kernels::{
    CpuFeatures, InputInfo, KernelError, Operator, ParallelFor, Sequential, Tensor, TensorData,
};
use quant_util::*;

/// One QDQ weight set.
struct Case {
    k: usize,
    n: usize,
    bs: usize,
    signed: bool,
    w: Tensor,
    scale: Tensor,
    zp: Option<Tensor>,
}

impl Case {
    fn new(rng: &mut Rng, k: usize, n: usize, bs: usize, signed: bool, with_zp: bool) -> Self {
        let blocks = k.div_ceil(bs);
        let q = |rng: &mut Rng, len: usize| -> Tensor {
            let v: Vec<u64> = (0..len).map(|_| rng.below(16)).collect();
            if signed {
                i8t(&[len], &v.iter().map(|&x| x as i8 - 8).collect::<Vec<_>>())
            } else {
                u8t(&[len], &v.iter().map(|&x| x as u8).collect::<Vec<_>>())
            }
        };
        let mut w = q(rng, k * n);
        w.set_shape(vec![k, n]).unwrap();
        let zp = with_zp.then(|| {
            let mut z = q(rng, blocks * n);
            z.set_shape(vec![blocks, n]).unwrap();
            z
        });
        let scale = f32t(
            &[blocks, n],
            &(0..blocks * n)
                .map(|_| rng.f32() * 0.1 + 0.02)
                .collect::<Vec<_>>(),
        );
        Self {
            k,
            n,
            bs,
            signed,
            w,
            scale,
            zp,
        }
    }

    fn quant(t: &Tensor) -> Vec<i32> {
        match t.data() {
            onnx_prepared_kernels::DataRef::I8(v) => v.iter().map(|&x| x as i32).collect(),
            onnx_prepared_kernels::DataRef::U8(v) => v.iter().map(|&x| x as i32).collect(),
            _ => panic!("not a quantized tensor"),
        }
    }

    /// DequantizeLinear(axis 0, block_size) of W, `[K, N]`.
    fn dequantized(&self) -> Vec<f32> {
        let w = Self::quant(&self.w);
        let z = self.zp.as_ref().map(Self::quant);
        let s = self.scale.as_f32().unwrap();
        let mut out = vec![0f32; self.k * self.n];
        for k in 0..self.k {
            for c in 0..self.n {
                let si = (k / self.bs) * self.n + c;
                let zp = z.as_ref().map_or(0, |z| z[si]);
                out[k * self.n + c] = (w[k * self.n + c] - zp) as f32 * s[si];
            }
        }
        out
    }

    /// `A [rows, K] * dequantized W`, accumulated in f64.
    fn reference(&self, a: &[f32], rows: usize) -> Vec<f32> {
        let w = self.dequantized();
        let mut y = vec![0f32; rows * self.n];
        for r in 0..rows {
            for c in 0..self.n {
                let mut acc = 0f64;
                for k in 0..self.k {
                    acc += a[r * self.k + k] as f64 * w[k * self.n + c] as f64;
                }
                y[r * self.n + c] = acc as f32;
            }
        }
        y
    }

    fn inputs<'a>(&'a self, a: &'a Tensor) -> Vec<Option<&'a Tensor>> {
        let mut v = vec![Some(a), Some(&self.w), Some(&self.scale)];
        if let Some(z) = &self.zp {
            v.push(Some(z));
        }
        v
    }
}

/// Runs with the weights packed (when the operator offers a packing) and
/// returns `None` when it does not.
fn run_packed(
    op: &dyn Operator,
    case: &Case,
    a: &Tensor,
    cpu: CpuFeatures,
    par: &dyn ParallelFor,
) -> Option<Tensor> {
    let inputs = case.inputs(a);
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.map(|t| {
                if i == 0 {
                    InputInfo::dynamic(t.dtype(), t.shape())
                } else {
                    InputInfo::known(t)
                }
            })
        })
        .collect();
    let out = op.infer(&infos).unwrap();
    let pre = op.prepack(&infos, cpu)?;
    let consumed = pre.consumes().to_vec();
    assert_eq!(consumed, (1..inputs.len()).collect::<Vec<_>>());
    let sources: Vec<&Tensor> = consumed.iter().map(|&i| inputs[i].unwrap()).collect();
    let packed = pre.prepare(&sources, &Sequential).unwrap();
    assert_eq!(packed.layout, pre.layout());
    let shapes: Vec<&[usize]> = sources.iter().map(|t| t.shape()).collect();
    assert_eq!(pre.packed_bytes(&shapes), Some(packed.byte_len()));
    assert!(packed.layout.starts_with("qdq-"), "{}", packed.layout);
    // Same sources, same bytes.
    assert_eq!(packed, pre.prepare(&sources, &Sequential).unwrap());
    let mut exec_inputs = inputs.clone();
    for &i in &consumed {
        exec_inputs[i] = None;
    }
    let mut y = vec![Tensor::zeros(out[0].dtype, out[0].shape.clone()).unwrap()];
    op.execute(&exec_inputs, Some(&packed), &mut y, par)
        .unwrap();
    Some(y.remove(0))
}

fn cpus() -> Vec<CpuFeatures> {
    let mut v = vec![CpuFeatures::portable()];
    let have = CpuFeatures::detect();
    if have.avx2 {
        v.push(CpuFeatures {
            avx2: true,
            ..CpuFeatures::portable()
        });
    }
    if have.avx512 {
        v.push(have.without_amx());
    }
    if have.amx_int8 {
        v.push(have);
    }
    v
}

fn check(case: &Case, rows_list: &[usize], tol: f32) {
    let mut rng = Rng(99);
    for &rows in rows_list {
        let a = f32t(&[rows, case.k], &rng.f32s(rows * case.k));
        let want = case.reference(a.as_f32().unwrap(), rows);
        for cpu in cpus() {
            let op = qdq_matmul_with_cpu(case.bs, case.k, case.n, case.signed, cpu).unwrap();
            for par in [&Sequential as &dyn ParallelFor, &Reversed] {
                let label = format!(
                    "K {} N {} bs {} signed {} zp {} rows {rows} cpu {cpu:?}",
                    case.k,
                    case.n,
                    case.bs,
                    case.signed,
                    case.zp.is_some()
                );
                let y = run_with(op.as_ref(), &case.inputs(&a), par).unwrap();
                assert_eq!(y[0].shape(), &[rows, case.n]);
                let err = max_rel_err(y[0].as_f32().unwrap(), &want);
                assert!(err <= tol, "unpacked {label}: error {err}");
                let packs = case.bs.is_multiple_of(16);
                match run_packed(op.as_ref(), case, &a, cpu, par) {
                    Some(y) => {
                        assert!(packs, "{label}: packed an unsupported block size");
                        let err = max_rel_err(y.as_f32().unwrap(), &want);
                        assert!(err <= tol, "packed {label}: error {err}");
                    }
                    None => assert!(!packs, "{label}: no packing offered"),
                }
            }
        }
    }
}

#[test]
fn qdq_matmul_matches_dequantize_then_matmul() {
    let mut rng = Rng(1);
    for &(k, n, bs) in &[
        (64usize, 8usize, 32usize),
        (100, 7, 32),
        (40, 33, 16),
        (200, 17, 64),
        (300, 5, 128),
    ] {
        for signed in [true, false] {
            for zp in [false, true] {
                let case = Case::new(&mut rng, k, n, bs, signed, zp);
                check(&case, &[1, 2, 5], 2e-4);
            }
        }
    }
}

#[test]
fn qdq_matmul_block_sizes_beyond_the_q4_kernels() {
    let mut rng = Rng(2);
    // 256 and 48 run on the q4 kernels with blocks of 128 and 16; 24 and 5
    // take the scalar path (no packing).
    for &(k, n, bs) in &[
        (600usize, 9usize, 256usize),
        (100, 12, 48),
        (50, 6, 24),
        (23, 3, 5),
    ] {
        for signed in [true, false] {
            for zp in [false, true] {
                let case = Case::new(&mut rng, k, n, bs, signed, zp);
                check(&case, &[1, 4], 2e-4);
            }
        }
    }
}

#[test]
fn qdq_matmul_batched_and_one_dimensional_a() {
    let mut rng = Rng(3);
    let case = Case::new(&mut rng, 64, 10, 32, true, true);
    let op = qdq_matmul(32, 64, 10, true).unwrap();
    let a = f32t(&[2, 3, 64], &rng.f32s(6 * 64));
    let y = run_with(op.as_ref(), &case.inputs(&a), &Sequential).unwrap();
    assert_eq!(y[0].shape(), &[2, 3, 10]);
    let want = case.reference(a.as_f32().unwrap(), 6);
    assert!(max_rel_err(y[0].as_f32().unwrap(), &want) <= 2e-4);
    let a1 = f32t(&[64], &a.as_f32().unwrap()[..64]);
    let y = run_with(op.as_ref(), &case.inputs(&a1), &Sequential).unwrap();
    assert_eq!(y[0].shape(), &[10]);
    assert!(max_rel_err(y[0].as_f32().unwrap(), &want[..10]) <= 2e-4);
}

#[test]
fn qdq_matmul_packs_int4_like_matmul_nbits() {
    // INT4 without zero points packs MatMulNBits' default zero point (no
    // zero-point part); UINT4 without zero points packs explicit zeros.
    let mut rng = Rng(4);
    for (signed, parts) in [(true, 3usize), (false, 4)] {
        let case = Case::new(&mut rng, 32, 8, 32, signed, false);
        let a = f32t(&[1, 32], &rng.f32s(32));
        let op = qdq_matmul_with_cpu(32, 32, 8, signed, CpuFeatures::portable()).unwrap();
        let inputs = case.inputs(&a);
        let infos: Vec<Option<InputInfo<'_>>> =
            inputs.iter().map(|t| t.map(InputInfo::known)).collect();
        let pre = op.prepack(&infos, CpuFeatures::portable()).unwrap();
        let packed = pre.prepare(&[&case.w, &case.scale], &Sequential).unwrap();
        assert_eq!(packed.parts.len(), parts, "signed {signed}");
        let zp = if signed { "0" } else { "f32" };
        assert_eq!(
            packed.layout,
            format!(
                "qdq-{}4-bs32-matmul-nbits-q4-v1-b32-zp{zp}-t8-portable",
                if signed { "s" } else { "u" }
            )
        );
    }
}

#[test]
fn qdq_matmul_rejects_bad_inputs() {
    let mut rng = Rng(5);
    for (name, (bs, k, n)) in [
        ("block_size", (0, 8, 8)),
        ("K", (16, 0, 8)),
        ("N", (16, 8, 0)),
    ] {
        match qdq_matmul(bs, k, n, true).unwrap_err() {
            KernelError::Attribute { name: got, .. } => assert_eq!(got, name),
            e => panic!("{e:?}"),
        }
    }
    let case = Case::new(&mut rng, 32, 4, 16, true, true);
    let op = qdq_matmul(16, 32, 4, true).unwrap();
    let a = f32t(&[1, 32], &rng.f32s(32));
    // A with the wrong K, or not f32.
    let bad_a = f32t(&[1, 31], &rng.f32s(31));
    assert!(matches!(
        run_with(op.as_ref(), &case.inputs(&bad_a), &Sequential).unwrap_err(),
        KernelError::Shape(_)
    ));
    let a64 = Tensor::new(vec![1, 32], TensorData::F64(vec![0.0; 32])).unwrap();
    assert!(matches!(
        run_with(op.as_ref(), &case.inputs(&a64), &Sequential).unwrap_err(),
        KernelError::UnsupportedType { .. }
    ));
    // W of the other signedness; scale of the wrong shape; missing scale.
    let unsigned = qdq_matmul(16, 32, 4, false).unwrap();
    assert!(matches!(
        run_with(unsigned.as_ref(), &case.inputs(&a), &Sequential).unwrap_err(),
        KernelError::Shape(_)
    ));
    let bad_scale = f32t(&[1, 4], &[1.0; 4]);
    let ins = [Some(&a), Some(&case.w), Some(&bad_scale)];
    assert!(matches!(
        run_with(op.as_ref(), &ins, &Sequential).unwrap_err(),
        KernelError::Shape(_)
    ));
    assert!(run_with(op.as_ref(), &[Some(&a), Some(&case.w), None], &Sequential).is_err());
    // Values outside the 4-bit range are refused when packing.
    let mut w = i8t(&[32 * 4], &[9; 32 * 4]);
    w.set_shape(vec![32, 4]).unwrap();
    let infos = [
        Some(InputInfo::dynamic(a.dtype(), a.shape())),
        Some(InputInfo::known(&w)),
        Some(InputInfo::known(&case.scale)),
    ];
    let pre = op.prepack(&infos, CpuFeatures::portable()).unwrap();
    assert!(matches!(
        pre.prepare(&[&w, &case.scale], &Sequential).unwrap_err(),
        KernelError::Invalid { .. }
    ));
    // A packing from the wrong sources count.
    assert!(pre.prepare(&[&w], &Sequential).is_err());
}
