//! ONNX Attention against a naive f64 reference.

mod attention_util;
#[path = "basic_util/mod.rs"]
mod basic_util;

use attention_util::{
    Sizes, assert_close64, attention, bnsh_to_bsnh, bsnh_to_bnsh, concat_seq, f64s,
};
use basic_util::{In, Node, Rng, f32t, i64t, run_op, var};
use onnx_prepared_kernels::{InputInfo, KernelError, ParallelFor, Tensor, TensorData};

const NEG: f64 = f64::NEG_INFINITY;

fn vals(t: &Tensor) -> &[f32] {
    t.as_f32().unwrap()
}

fn bool_t(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::Bool(v.to_vec())).unwrap()
}

struct Case {
    z: Sizes,
    past: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    pk: Vec<f32>,
    pv: Vec<f32>,
}

impl Case {
    /// Random BNSH tensors; `total` = past + new keys.
    fn new(rng: &mut Rng, z: Sizes, past: usize) -> Self {
        let skv = z.total - past;
        Self {
            z,
            past,
            q: rng
                .f32s(z.b * z.hq * z.sq * z.d)
                .iter()
                .map(|v| v * 2.0)
                .collect(),
            k: rng
                .f32s(z.b * z.hkv * skv * z.d)
                .iter()
                .map(|v| v * 2.0)
                .collect(),
            v: rng.f32s(z.b * z.hkv * skv * z.dv),
            pk: rng.f32s(z.b * z.hkv * past * z.d),
            pv: rng.f32s(z.b * z.hkv * past * z.dv),
        }
    }

    fn skv(&self) -> usize {
        self.z.total - self.past
    }

    /// Reference keys/values (past + new) BNSH.
    fn kv(&self) -> (Vec<f64>, Vec<f64>) {
        let z = self.z;
        (
            concat_seq(
                &f64s(&self.pk),
                &f64s(&self.k),
                z.b,
                z.hkv,
                self.past,
                self.skv(),
                z.d,
            ),
            concat_seq(
                &f64s(&self.pv),
                &f64s(&self.v),
                z.b,
                z.hkv,
                self.past,
                self.skv(),
                z.dv,
            ),
        )
    }

    /// Inputs in 4-D layout (mask optional, past when `past > 0`).
    fn inputs4(&self, mask: Option<Tensor>) -> Vec<In> {
        let z = self.z;
        let mut ins = vec![
            var(f32t(&[z.b, z.hq, z.sq, z.d], &self.q)),
            var(f32t(&[z.b, z.hkv, self.skv(), z.d], &self.k)),
            var(f32t(&[z.b, z.hkv, self.skv(), z.dv], &self.v)),
            mask.map_or(In::Absent, var),
        ];
        if self.past > 0 {
            ins.push(var(f32t(&[z.b, z.hkv, self.past, z.d], &self.pk)));
            ins.push(var(f32t(&[z.b, z.hkv, self.past, z.dv], &self.pv)));
        }
        ins
    }

    /// Inputs in 3-D layout.
    fn inputs3(&self, mask: Option<Tensor>) -> Vec<In> {
        let z = self.z;
        let skv = self.skv();
        let to3 = |x: &[f32], h: usize, s: usize, d: usize| -> Vec<f32> {
            bnsh_to_bsnh(&f64s(x), z.b, h, s, d)
                .iter()
                .map(|&v| v as f32)
                .collect()
        };
        let mut ins = vec![
            var(f32t(
                &[z.b, z.sq, z.hq * z.d],
                &to3(&self.q, z.hq, z.sq, z.d),
            )),
            var(f32t(
                &[z.b, skv, z.hkv * z.d],
                &to3(&self.k, z.hkv, skv, z.d),
            )),
            var(f32t(
                &[z.b, skv, z.hkv * z.dv],
                &to3(&self.v, z.hkv, skv, z.dv),
            )),
            mask.map_or(In::Absent, var),
        ];
        if self.past > 0 {
            ins.push(var(f32t(&[z.b, z.hkv, self.past, z.d], &self.pk)));
            ins.push(var(f32t(&[z.b, z.hkv, self.past, z.dv], &self.pv)));
        }
        ins
    }

    fn reference(
        &self,
        scale: f64,
        softcap: f64,
        bias: &dyn Fn(usize, usize, usize, usize) -> f64,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (k, v) = self.kv();
        attention(self.z, &f64s(&self.q), &k, &v, scale, softcap, bias)
    }
}

fn sizes(b: usize, hq: usize, hkv: usize, sq: usize, total: usize, d: usize, dv: usize) -> Sizes {
    Sizes {
        b,
        hq,
        hkv,
        sq,
        total,
        d,
        dv,
    }
}

fn attn(opset: i64) -> Node {
    Node::new("Attention", opset)
}

#[test]
fn four_d_plain_matches_reference() {
    let mut rng = Rng(1);
    let c = Case::new(&mut rng, sizes(2, 3, 3, 4, 6, 8, 8), 0);
    let y = attn(23).run1(&c.inputs4(None)).unwrap();
    assert_eq!(y.shape(), &[2, 3, 4, 8]);
    let (want, _, _) = c.reference(1.0 / 8f64.sqrt(), 0.0, &|_, _, _, _| 0.0);
    assert_close64(vals(&y), &want, 1e-5);
}

#[test]
fn causal_gqa_with_past_and_present() {
    let mut rng = Rng(2);
    for (hq, hkv) in [(6, 2), (4, 4), (8, 1)] {
        let c = Case::new(&mut rng, sizes(2, hq, hkv, 3, 8, 8, 5), 5);
        let out = attn(23)
            .int("is_causal", 1)
            .outputs(3)
            .run(&c.inputs4(None))
            .unwrap();
        let (want, _, _) = c.reference(1.0 / 8f64.sqrt(), 0.0, &|_, _, i, j| {
            if j <= 5 + i { 0.0 } else { NEG }
        });
        assert_close64(vals(&out[0]), &want, 1e-5);
        let (k, v) = c.kv();
        assert_eq!(out[1].shape(), &[2, hkv, 8, 8]);
        assert_eq!(out[2].shape(), &[2, hkv, 8, 5]);
        assert_close64(vals(&out[1]), &k, 0.0);
        assert_close64(vals(&out[2]), &v, 0.0);
    }
}

#[test]
fn three_d_float_mask_softcap_and_scale() {
    let mut rng = Rng(3);
    let c = Case::new(&mut rng, sizes(2, 4, 2, 3, 7, 4, 6), 2);
    let mask: Vec<f32> = rng.f32s(3 * 7);
    let node = attn(23)
        .int("q_num_heads", 4)
        .int("kv_num_heads", 2)
        .float("scale", 0.3)
        .float("softcap", 1.5)
        .outputs(3);
    let out = node.run(&c.inputs3(Some(f32t(&[3, 7], &mask)))).unwrap();
    assert_eq!(out[0].shape(), &[2, 3, 4 * 6]);
    let (want, _, _) = c.reference(0.3f32 as f64, 1.5, &|_, _, i, j| mask[i * 7 + j] as f64);
    let want = bnsh_to_bsnh(&want, 2, 4, 3, 6);
    assert_close64(vals(&out[0]), &want, 1e-5);
    let (k, _) = c.kv();
    assert_close64(vals(&out[1]), &k, 0.0);
}

#[test]
fn bool_mask_broadcast_and_fully_masked_rows_are_zero() {
    let mut rng = Rng(4);
    let c = Case::new(&mut rng, sizes(2, 2, 2, 3, 5, 4, 4), 0);
    // [B, 1, Sq, total]; batch 1 row 2 masks everything.
    let mut m = vec![false; 2 * 3 * 5];
    for (n, v) in m.iter_mut().enumerate() {
        *v = rng.below(3) != 0;
        if n >= 15 + 10 {
            *v = false;
        }
    }
    let y = attn(23)
        .run1(&c.inputs4(Some(bool_t(&[2, 1, 3, 5], &m))))
        .unwrap();
    let (want, _, _) = c.reference(0.5, 0.0, &|b, _, i, j| {
        if m[(b * 3 + i) * 5 + j] { 0.0 } else { NEG }
    });
    assert_close64(vals(&y), &want, 1e-5);
    let y = vals(&y);
    for h in 0..2 {
        assert!(y[((2 + h) * 3 + 2) * 4..][..4].iter().all(|&v| v == 0.0));
    }
}

#[test]
fn short_mask_pads_with_masked_keys_and_causal_combines() {
    let mut rng = Rng(5);
    let c = Case::new(&mut rng, sizes(1, 2, 1, 4, 9, 8, 8), 5);
    // Covers 7 of the 9 keys; causal as well.
    let mask = rng.f32s(4 * 7);
    let y = attn(24)
        .int("is_causal", 1)
        .run1(&c.inputs4(Some(f32t(&[4, 7], &mask))))
        .unwrap();
    let (want, _, _) = c.reference(1.0 / 8f64.sqrt(), 0.0, &|_, _, i, j| {
        if j >= 7 || j > 5 + i {
            NEG
        } else {
            mask[i * 7 + j] as f64
        }
    });
    assert_close64(vals(&y), &want, 1e-5);
}

#[test]
fn long_sequences_cross_key_blocks() {
    let mut rng = Rng(6);
    // 150 keys: several key blocks, large logits to exercise the rescaling.
    let mut c = Case::new(&mut rng, sizes(1, 2, 2, 5, 150, 16, 8), 145);
    for v in c.q.iter_mut() {
        *v *= 4.0;
    }
    let y = attn(23).int("is_causal", 1).run1(&c.inputs4(None)).unwrap();
    let (want, _, _) = c.reference(0.25, 0.0, &|_, _, i, j| {
        if j <= 145 + i { 0.0 } else { NEG }
    });
    assert_close64(vals(&y), &want, 1e-4);
}

#[test]
fn qk_matmul_output_modes() {
    let mut rng = Rng(7);
    let c = Case::new(&mut rng, sizes(2, 2, 1, 3, 6, 4, 4), 2);
    let mask = rng.f32s(3 * 6);
    let bias = |_: usize, _: usize, i: usize, j: usize| {
        if j > 2 + i {
            NEG
        } else {
            mask[i * 6 + j] as f64
        }
    };
    for mode in 0..4 {
        let node = attn(23)
            .int("is_causal", 1)
            .int("qk_matmul_output_mode", mode)
            .float("softcap", 2.0)
            .outputs(4);
        let out = node.run(&c.inputs4(Some(f32t(&[3, 6], &mask)))).unwrap();
        let (y, scores, probs) = c.reference(0.5, 2.0, &bias);
        assert_close64(vals(&out[0]), &y, 1e-5);
        assert_eq!(out[3].shape(), &[2, 2, 3, 6]);
        let want: Vec<f64> = match mode {
            0 | 1 => scores,
            2 => scores
                .iter()
                .enumerate()
                .map(|(n, s)| {
                    let (i, j) = ((n / 6) % 3, n % 6);
                    s + bias(0, 0, i, j)
                })
                .collect(),
            _ => probs,
        };
        assert_close64(vals(&out[3]), &want, 1e-5);
    }
}

#[test]
fn nonpad_kv_seqlen_limits_keys_and_aligns_causal() {
    let mut rng = Rng(8);
    let c = Case::new(&mut rng, sizes(2, 2, 2, 2, 6, 8, 8), 0);
    let lens = [4i64, 6];
    let mut ins = c.inputs4(None);
    ins.extend([In::Absent, In::Absent, var(i64t(&[2], &lens))]);
    let y = attn(24).int("is_causal", 1).run1(&ins).unwrap();
    let (want, _, _) = c.reference(1.0 / 8f64.sqrt(), 0.0, &|b, _, i, j| {
        let n = lens[b] as usize;
        if j < n && j <= n - 2 + i { 0.0 } else { NEG }
    });
    assert_close64(vals(&y), &want, 1e-5);
    // Opset 23 has no seventh input.
    assert!(attn(23).run(&ins).is_err());
}

#[test]
fn sliding_window_opset_25() {
    let mut rng = Rng(9);
    let c = Case::new(&mut rng, sizes(1, 2, 2, 4, 7, 4, 4), 3);
    let y = attn(25)
        .int("left_window_size", 2)
        .int("right_window_size", 1)
        .run1(&c.inputs4(None))
        .unwrap();
    let (want, _, _) = c.reference(0.5, 0.0, &|_, _, i, j| {
        let p = 3 + i as i64;
        let j = j as i64;
        if j >= p - 2 && j <= p + 1 { 0.0 } else { NEG }
    });
    assert_close64(vals(&y), &want, 1e-5);
    // The window attributes do not exist before opset 25.
    assert!(attn(23).int("left_window_size", 2).build(3).is_err());
}

/// `x` as an f16 input of `shape`.
fn f16_var(shape: &[usize], x: &[f32]) -> In {
    var(Tensor::new(
        shape.to_vec(),
        TensorData::F16(x.iter().map(|&v| half::f16::from_f32(v)).collect()),
    )
    .unwrap())
}

/// `x` rounded to f16 and back (what an f16 input holds).
fn f16_round(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}

/// An f16 output's values as f32.
fn f16_values(y: &Tensor) -> Vec<f32> {
    match y.data() {
        onnx_prepared_kernels::DataRef::F16(v) => v.iter().map(|v| v.to_f32()).collect(),
        _ => panic!("f16 output expected"),
    }
}

#[test]
fn f16_inputs() {
    let mut rng = Rng(10);
    let c = Case::new(&mut rng, sizes(1, 2, 1, 3, 5, 8, 8), 0);
    let y = attn(23)
        .run1(&[
            f16_var(&[1, 2, 3, 8], &c.q),
            f16_var(&[1, 1, 5, 8], &c.k),
            f16_var(&[1, 1, 5, 8], &c.v),
        ])
        .unwrap();
    let got = f16_values(&y);
    let z = c.z;
    let (want, _, _) = attention(
        z,
        &f64s(&f16_round(&c.q)),
        &f64s(&f16_round(&c.k)),
        &f64s(&f16_round(&c.v)),
        1.0 / 8f64.sqrt(),
        0.0,
        &|_, _, _, _| 0.0,
    );
    assert_close64(&got, &want, 3e-3);
}

#[test]
fn wide_heads_long_causal_prompt() {
    let mut rng = Rng(12);
    // 80 positions of 64-wide heads after 3 past keys, two query heads per
    // key head: transposed key panels, values accumulated 64 floats at a
    // time, two key blocks per late row.
    let mut c = Case::new(&mut rng, sizes(1, 4, 2, 80, 83, 64, 64), 3);
    for v in c.q.iter_mut() {
        *v *= 3.0;
    }
    let y = attn(23).int("is_causal", 1).run1(&c.inputs4(None)).unwrap();
    let (want, _, _) = c.reference(0.125, 0.0, &|_, _, i, j| {
        if j <= 3 + i { 0.0 } else { NEG }
    });
    assert_close64(vals(&y), &want, 1e-4);
}

#[test]
fn f16_wide_heads() {
    let mut rng = Rng(13);
    // Nine positions, four query heads on one key head, 64-wide: the f16
    // keys are converted into panels, the f16 values accumulated in slices.
    let c = Case::new(&mut rng, sizes(1, 4, 1, 9, 9, 64, 64), 0);
    let y = attn(23)
        .int("is_causal", 1)
        .run1(&[
            f16_var(&[1, 4, 9, 64], &c.q),
            f16_var(&[1, 1, 9, 64], &c.k),
            f16_var(&[1, 1, 9, 64], &c.v),
        ])
        .unwrap();
    let got = f16_values(&y);
    let (want, _, _) = attention(
        c.z,
        &f64s(&f16_round(&c.q)),
        &f64s(&f16_round(&c.k)),
        &f64s(&f16_round(&c.v)),
        0.125,
        0.0,
        &|_, _, i, j| if j <= i { 0.0 } else { NEG },
    );
    assert_close64(&got, &want, 3e-3);
}

/// Runs tasks in reverse on the calling thread, as other threads would
/// interleave them.
struct Reversed;

// SAFETY: every index of `0..tasks` exactly once, on the calling thread,
// all before `run` returns.
unsafe impl ParallelFor for Reversed {
    fn threads(&self) -> usize {
        4
    }
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).rev().for_each(task);
    }
}

#[test]
fn parallel_split_matches_sequential() {
    let mut rng = Rng(11);
    let c = Case::new(&mut rng, sizes(2, 4, 2, 5, 9, 8, 8), 4);
    let node = attn(23)
        .int("is_causal", 1)
        .int("q_num_heads", 4)
        .int("kv_num_heads", 2)
        .outputs(3);
    let ins = c.inputs3(None);
    let want = node.run(&ins).unwrap();
    let op = node.build(ins.len()).unwrap();
    let tensors: Vec<Option<Tensor>> = ins
        .iter()
        .map(|i| match i {
            In::Var(t) | In::Const(t) => Some(t.clone()),
            In::Absent => None,
        })
        .collect();
    let infos: Vec<Option<InputInfo<'_>>> = tensors
        .iter()
        .map(|t| t.as_ref().map(|t| InputInfo::dynamic(t.dtype(), t.shape())))
        .collect();
    let shapes = op.infer(&infos).unwrap();
    let mut outs: Vec<Tensor> = shapes
        .iter()
        .map(|o| Tensor::zeros(o.dtype, o.shape.clone()).unwrap())
        .collect();
    let refs: Vec<Option<&Tensor>> = tensors.iter().map(Option::as_ref).collect();
    op.execute(&refs, None, &mut outs, &Reversed).unwrap();
    for (g, w) in outs.iter().zip(&want) {
        assert_eq!(vals(g), vals(w));
    }
    // Sanity: the 3-D result agrees with the reference too.
    let (y, _, _) = c.reference(1.0 / 8f64.sqrt(), 0.0, &|_, _, i, j| {
        if j <= 4 + i { 0.0 } else { NEG }
    });
    assert_close64(vals(&outs[0]), &bnsh_to_bsnh(&y, 2, 4, 5, 8), 1e-5);
    let _ = bsnh_to_bnsh;
}

#[test]
fn errors() {
    let mut rng = Rng(12);
    let c = Case::new(&mut rng, sizes(1, 3, 2, 2, 4, 4, 4), 0);
    // 3 query heads over 2 KV heads.
    assert!(matches!(
        attn(23).run(&c.inputs4(None)),
        Err(KernelError::Shape(_))
    ));
    let c = Case::new(&mut rng, sizes(1, 2, 2, 2, 4, 4, 4), 0);
    // 3-D inputs without head counts.
    assert!(matches!(
        attn(23).run(&c.inputs3(None)),
        Err(KernelError::Shape(_))
    ));
    // A mask that does not broadcast.
    let bad = f32t(&[3, 4], &[0.0; 12]);
    assert!(matches!(
        attn(23).run(&c.inputs4(Some(bad))),
        Err(KernelError::Shape(_))
    ));
    // A mask longer than the keys.
    let bad = f32t(&[2, 5], &[0.0; 10]);
    assert!(matches!(
        attn(23).run(&c.inputs4(Some(bad))),
        Err(KernelError::Shape(_))
    ));
    // Integer inputs.
    let ints = vec![var(i64t(&[1, 1, 1, 1], &[1])); 3];
    assert!(matches!(
        attn(23).run(&ints),
        Err(KernelError::UnsupportedType { .. })
    ));
    // Unknown attribute, bad mode, opset before Attention existed.
    assert!(matches!(
        attn(23).int("bogus", 1).build(3),
        Err(KernelError::Attribute { .. })
    ));
    assert!(matches!(
        attn(23).int("qk_matmul_output_mode", 4).build(3),
        Err(KernelError::Attribute { .. })
    ));
    assert!(matches!(
        attn(22).build(3),
        Err(KernelError::UnsupportedOp { .. })
    ));
    // past_key without past_value.
    let mut ins = c.inputs4(None);
    ins.push(var(f32t(&[1, 2, 1, 4], &[0.0; 8])));
    assert!(attn(23).run(&ins).is_err());
    let _ = run_op;
}
