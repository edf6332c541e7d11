//! com.microsoft GroupQueryAttention against an f64 reference of ONNX
//! Runtime's CPU semantics (KV cache placement by seqlens_k, causal and
//! local-window limits, rotary on q and k).

mod attention_util;
#[path = "basic_util/mod.rs"]
mod basic_util;

use attention_util::{
    Sizes, assert_close64, attention, bnsh_to_bsnh, bsnh_to_bnsh, caches, f64s, rotate,
};
use basic_util::{In, Node, Rng, f32t, var};
use onnx_prepared_kernels::{KernelError, Sequential, Tensor, TensorData};

fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::I32(v.to_vec())).unwrap()
}

#[derive(Clone)]
struct Gqa {
    b: usize,
    s: usize,
    h: usize,
    kvh: usize,
    d: usize,
    /// Past buffer rows (0 = no past inputs).
    p: usize,
    seqlens: Vec<i32>,
    total: i32,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    pk: Vec<f32>,
    pv: Vec<f32>,
    /// (interleaved, rotary dim).
    rotary: Option<(bool, usize)>,
    window: i64,
    softcap: f32,
    packed: bool,
    /// total_sequence_length known at resolution.
    total_const: bool,
}

impl Gqa {
    #[allow(clippy::too_many_arguments)]
    fn new(
        rng: &mut Rng,
        b: usize,
        s: usize,
        h: usize,
        kvh: usize,
        d: usize,
        p: usize,
        seqlens: &[i32],
        total: i32,
    ) -> Self {
        Self {
            b,
            s,
            h,
            kvh,
            d,
            p,
            seqlens: seqlens.to_vec(),
            total,
            q: rng.f32s(b * s * h * d).iter().map(|v| v * 2.0).collect(),
            k: rng.f32s(b * s * kvh * d).iter().map(|v| v * 2.0).collect(),
            v: rng.f32s(b * s * kvh * d),
            pk: rng.f32s(b * kvh * p * d),
            pv: rng.f32s(b * kvh * p * d),
            rotary: None,
            window: -1,
            softcap: 0.0,
            packed: false,
            total_const: true,
        }
    }

    fn node(&self) -> Node {
        let mut n = Node::new("GroupQueryAttention", 1)
            .domain("com.microsoft")
            .int("num_heads", self.h as i64)
            .int("kv_num_heads", self.kvh as i64)
            .outputs(3);
        if let Some((inter, _)) = self.rotary {
            n = n
                .int("do_rotary", 1)
                .int("rotary_interleaved", inter as i64);
        }
        if self.window >= 0 {
            n = n.int("local_window_size", self.window);
        }
        if self.softcap > 0.0 {
            n = n.float("softcap", self.softcap);
        }
        n
    }

    fn caches(&self) -> (Vec<f32>, Vec<f32>, usize) {
        let half = self.rotary.map_or(0, |(_, r)| r / 2);
        let (c, s) = caches(32, half);
        (c, s, half)
    }

    fn inputs(&self) -> Vec<In> {
        let (b, s, h, kvh, d) = (self.b, self.s, self.h, self.kvh, self.d);
        let mut ins = if self.packed {
            let mut qkv = Vec::new();
            for t in 0..b * s {
                qkv.extend_from_slice(&self.q[t * h * d..(t + 1) * h * d]);
                qkv.extend_from_slice(&self.k[t * kvh * d..(t + 1) * kvh * d]);
                qkv.extend_from_slice(&self.v[t * kvh * d..(t + 1) * kvh * d]);
            }
            vec![
                var(f32t(&[b, s, (h + 2 * kvh) * d], &qkv)),
                In::Absent,
                In::Absent,
            ]
        } else {
            vec![
                var(f32t(&[b, s, h * d], &self.q)),
                var(f32t(&[b, s, kvh * d], &self.k)),
                var(f32t(&[b, s, kvh * d], &self.v)),
            ]
        };
        if self.p > 0 {
            ins.push(var(f32t(&[b, kvh, self.p, d], &self.pk)));
            ins.push(var(f32t(&[b, kvh, self.p, d], &self.pv)));
        } else {
            ins.extend([In::Absent, In::Absent]);
        }
        ins.push(var(i32t(&[b], &self.seqlens)));
        let total = i32t(&[], &[self.total]);
        ins.push(if self.total_const {
            In::Const(total)
        } else {
            var(total)
        });
        if self.rotary.is_some() {
            let (c, sn, half) = self.caches();
            ins.push(var(f32t(&[32, half], &c)));
            ins.push(var(f32t(&[32, half], &sn)));
        }
        ins
    }

    /// (output [B, S, H*D], present_key, present_value) with `len` present rows.
    fn reference(&self, len: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (b, s, h, kvh, d) = (self.b, self.s, self.h, self.kvh, self.d);
        let first = self.total as usize == s;
        let past_of = |bi: usize| {
            if first {
                0
            } else {
                self.seqlens[bi] as usize + 1 - s
            }
        };
        let pos = |bi: usize, i: usize| {
            if first {
                if i <= self.seqlens[bi] as usize { i } else { 1 }
            } else {
                past_of(bi) + i
            }
        };
        let (cos, sin, half) = self.caches();
        let (cos, sin) = (f64s(&cos), f64s(&sin));
        let rot = |x: &[f64], p: usize| match self.rotary {
            Some((inter, _)) => rotate(x, &cos, &sin, half, p, inter),
            None => x.to_vec(),
        };
        let mut q = bsnh_to_bnsh(&self.q, b, s, h, d);
        for bi in 0..b {
            for hi in 0..h {
                for i in 0..s {
                    let o = ((bi * h + hi) * s + i) * d;
                    let r = rot(&q[o..o + d], pos(bi, i));
                    q[o..o + d].copy_from_slice(&r);
                }
            }
        }
        let new_k = bsnh_to_bnsh(&self.k, b, s, kvh, d);
        let new_v = bsnh_to_bnsh(&self.v, b, s, kvh, d);
        let mut pk = vec![0.0; b * kvh * len * d];
        let mut pv = vec![0.0; b * kvh * len * d];
        for bi in 0..b {
            let pb = past_of(bi);
            for g in 0..kvh {
                for j in 0..pb + s {
                    let o = ((bi * kvh + g) * len + j) * d;
                    if j < pb {
                        let src = ((bi * kvh + g) * self.p + j) * d;
                        for t in 0..d {
                            pk[o + t] = self.pk[src + t] as f64;
                            pv[o + t] = self.pv[src + t] as f64;
                        }
                    } else {
                        let src = ((bi * kvh + g) * s + j - pb) * d;
                        let r = rot(&new_k[src..src + d], pos(bi, j - pb));
                        pk[o..o + d].copy_from_slice(&r);
                        pv[o..o + d].copy_from_slice(&new_v[src..src + d]);
                    }
                }
            }
        }
        let z = Sizes {
            b,
            hq: h,
            hkv: kvh,
            sq: s,
            total: len,
            d,
            dv: d,
        };
        let window = self.window;
        let bias = |bi: usize, _: usize, i: usize, j: usize| {
            let p = past_of(bi) + i;
            let ok = j <= p
                && j <= self.seqlens[bi] as usize
                // The last `window` positions, the query's own included.
                && (window <= 0 || j + window as usize > p);
            if ok { 0.0 } else { f64::NEG_INFINITY }
        };
        let (y, _, _) = attention(
            z,
            &q,
            &pk,
            &pv,
            1.0 / (d as f64).sqrt(),
            self.softcap as f64,
            &bias,
        );
        (bnsh_to_bsnh(&y, b, h, s, d), pk, pv)
    }

    fn check(&self, len: usize) {
        let out = self.node().run(&self.inputs()).unwrap();
        assert_eq!(out[0].shape(), &[self.b, self.s, self.h * self.d]);
        assert_eq!(out[1].shape(), &[self.b, self.kvh, len, self.d]);
        assert_eq!(out[2].shape(), &[self.b, self.kvh, len, self.d]);
        let (y, pk, pv) = self.reference(len);
        assert_close64(out[1].as_f32().unwrap(), &pk, 1e-6);
        assert_close64(out[2].as_f32().unwrap(), &pv, 0.0);
        assert_close64(out[0].as_f32().unwrap(), &y, 1e-5);
        if self.p == len {
            self.check_in_place(&out);
        }
    }

    /// A past buffer as long as the present, updated in place (the
    /// presents start as the pasts, the past inputs absent): the same
    /// output and present rows as `want`, the rows after each batch's new
    /// ones left as the past held them.
    fn check_in_place(&self, want: &[Tensor]) {
        let mut inputs = self.inputs();
        inputs[3] = In::Absent;
        inputs[4] = In::Absent;
        let op = self.node().build(inputs.len()).unwrap();
        let shape = [self.b, self.kvh, self.p, self.d];
        let mut outputs = vec![
            Tensor::zeros(
                onnx_prepared_kernels::ElementType::F32,
                want[0].shape().to_vec(),
            )
            .unwrap(),
            f32t(&shape, &self.pk),
            f32t(&shape, &self.pv),
        ];
        let tensors: Vec<Option<&Tensor>> = inputs.iter().map(In::tensor).collect();
        op.execute_in_place(&tensors, None, &mut outputs, &Sequential)
            .unwrap();
        assert_eq!(outputs[0].as_f32().unwrap(), want[0].as_f32().unwrap());
        let first = self.total as usize == self.s;
        for (got, (full, past)) in outputs[1..]
            .iter()
            .zip(want[1..].iter().zip([&self.pk, &self.pv]))
        {
            let (got, full) = (got.as_f32().unwrap(), full.as_f32().unwrap());
            for (row, (g, f)) in got.chunks(self.d).zip(full.chunks(self.d)).enumerate() {
                let (bi, j) = (row / (self.kvh * self.p), row % self.p);
                let filled = if first {
                    self.s
                } else {
                    self.seqlens[bi] as usize + 1
                };
                let keep = &past[row * self.d..(row + 1) * self.d];
                assert_eq!(g, if j < filled { f } else { keep }, "row {row}");
            }
        }
    }
}

#[test]
fn prompt_without_past() {
    let mut rng = Rng(1);
    for rotary in [None, Some((false, 8)), Some((true, 8)), Some((false, 4))] {
        for packed in [false, true] {
            let mut g = Gqa::new(&mut rng, 2, 5, 4, 2, 8, 0, &[4, 4], 5);
            g.rotary = rotary;
            g.packed = packed;
            g.check(5);
        }
    }
}

#[test]
fn token_generation_with_past() {
    let mut rng = Rng(2);
    for total_const in [true, false] {
        let mut g = Gqa::new(&mut rng, 2, 1, 6, 2, 8, 6, &[6, 6], 7);
        g.rotary = Some((false, 8));
        g.total_const = total_const;
        g.check(7);
    }
}

#[test]
fn shared_buffer_with_per_batch_lengths() {
    let mut rng = Rng(3);
    // A max-length past buffer: batch 0 holds 3 valid rows, batch 1 six.
    let mut g = Gqa::new(&mut rng, 2, 1, 4, 1, 8, 10, &[3, 6], 7);
    g.rotary = Some((true, 8));
    g.check(10);
}

/// The shared buffer updated in place (`check` runs both forms when the
/// past is as long as the present): a prompt into an empty buffer, and
/// decode steps with per-batch lengths, packed or not, rotated or not.
#[test]
fn shared_buffer_updated_in_place() {
    let mut rng = Rng(9);
    for (packed, rotary) in [
        (false, None),
        (true, Some((false, 8))),
        (true, Some((true, 8))),
    ] {
        // A prompt of 4 into a 9-row buffer.
        let mut g = Gqa::new(&mut rng, 2, 4, 4, 2, 8, 9, &[3, 2], 4);
        g.packed = packed;
        g.rotary = rotary;
        g.check(9);
        // One token after 5 and 8 rows.
        let mut g = Gqa::new(&mut rng, 2, 1, 4, 2, 8, 9, &[5, 8], 9);
        g.packed = packed;
        g.rotary = rotary;
        g.check(9);
    }
}

#[test]
fn subsequent_prompt_chunk() {
    let mut rng = Rng(4);
    let mut g = Gqa::new(&mut rng, 1, 3, 2, 2, 8, 4, &[6], 7);
    g.rotary = Some((false, 8));
    g.check(7);
}

#[test]
fn local_window_and_softcap() {
    let mut rng = Rng(5);
    let mut g = Gqa::new(&mut rng, 1, 6, 4, 2, 8, 0, &[5], 6);
    g.window = 2;
    g.softcap = 3.0;
    g.check(6);
    let mut g = Gqa::new(&mut rng, 2, 1, 4, 2, 8, 7, &[7, 4], 8);
    g.window = 3;
    g.check(8);
}

#[test]
fn long_context_decode() {
    let mut rng = Rng(6);
    // 200 past rows: several key blocks.
    let mut g = Gqa::new(&mut rng, 1, 1, 8, 2, 16, 200, &[200], 201);
    g.q.iter_mut().for_each(|v| *v *= 3.0);
    g.check(201);
}

#[test]
fn errors() {
    let mut rng = Rng(7);
    let g = Gqa::new(&mut rng, 1, 1, 4, 2, 8, 4, &[9], 10);
    // seqlens_k past the present buffer.
    assert!(matches!(
        g.node().run(&g.inputs()),
        Err(KernelError::Invalid { .. })
    ));
    let g = Gqa::new(&mut rng, 1, 1, 4, 2, 8, 4, &[-3], 5);
    assert!(matches!(
        g.node().run(&g.inputs()),
        Err(KernelError::Invalid { .. })
    ));
    // do_rotary without caches.
    let mut r = Gqa::new(&mut rng, 1, 2, 4, 2, 8, 0, &[1], 2);
    let ins = r.inputs();
    r.rotary = Some((false, 8));
    assert!(r.node().run(&ins).is_err());
    let base = || {
        Node::new("GroupQueryAttention", 1)
            .domain("com.microsoft")
            .int("num_heads", 4)
            .int("kv_num_heads", 2)
            .outputs(3)
    };
    assert!(matches!(
        base().int("smooth_softmax", 1).build(7),
        Err(KernelError::Attribute { .. })
    ));
    assert!(matches!(
        base().int("kv_num_heads", 3).build(7),
        Err(KernelError::Attribute { .. })
    ));
    assert!(matches!(
        base().int("bogus", 3).build(7),
        Err(KernelError::Attribute { .. })
    ));
    assert!(base().outputs(1).build(7).is_err());
    // key without value.
    let g = Gqa::new(&mut rng, 1, 2, 4, 2, 8, 0, &[1], 2);
    let mut ins = g.inputs();
    ins[2] = In::Absent;
    assert!(matches!(g.node().run(&ins), Err(KernelError::Shape(_))));
}

#[test]
fn long_prompt_with_wide_heads() {
    let mut rng = Rng(8);
    // 70 positions of 64-wide heads, four query heads per key head: keys
    // are scored from transposed panels, values accumulated 64 floats at a
    // time, across two key blocks; large logits make later blocks rescale
    // and some weights underflow to zero.
    for scale in [1.0f32, 12.0] {
        let mut g = Gqa::new(&mut rng, 2, 70, 8, 2, 64, 0, &[69, 69], 70);
        g.q.iter_mut().for_each(|v| *v *= scale);
        g.check(70);
    }
}
