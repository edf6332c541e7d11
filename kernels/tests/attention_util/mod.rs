//! Scalar f64 references for the attention-family tests: layouts, a naive
//! attention (full score matrix, bias, softmax, weighted sum) and rotary
//! rotation.

#![allow(dead_code)]

/// `[B, S, H, D]` -> `[B, H, S, D]`.
pub fn bsnh_to_bnsh(x: &[f32], b: usize, s: usize, h: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                for di in 0..d {
                    out[((bi * h + hi) * s + si) * d + di] =
                        x[((bi * s + si) * h + hi) * d + di] as f64;
                }
            }
        }
    }
    out
}

/// `[B, H, S, D]` -> `[B, S, H, D]`.
pub fn bnsh_to_bsnh(x: &[f64], b: usize, h: usize, s: usize, d: usize) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                for di in 0..d {
                    out[((bi * s + si) * h + hi) * d + di] = x[((bi * h + hi) * s + si) * d + di];
                }
            }
        }
    }
    out
}

pub fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| v as f64).collect()
}

/// Concatenates `[B, H, P, D]` and `[B, H, S, D]` along the sequence.
pub fn concat_seq(
    past: &[f64],
    new: &[f64],
    b: usize,
    h: usize,
    p: usize,
    s: usize,
    d: usize,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(b * h * (p + s) * d);
    for bh in 0..b * h {
        out.extend_from_slice(&past[bh * p * d..(bh + 1) * p * d]);
        out.extend_from_slice(&new[bh * s * d..(bh + 1) * s * d]);
    }
    out
}

/// Sizes of one reference problem (all tensors BNSH).
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    /// Keys per head row in `k`/`v`.
    pub total: usize,
    pub d: usize,
    pub dv: usize,
}

/// Naive attention. `bias(b, h, i, j)` is added to the score (NEG_INFINITY
/// masks a key). Returns `(y [B, Hq, Sq, dv], scores [B, Hq, Sq, total],
/// probs)`; the scores are scaled and soft-capped (before the bias). A row
/// whose bias is -inf everywhere is zero.
pub fn attention(
    z: Sizes,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    scale: f64,
    softcap: f64,
    bias: &dyn Fn(usize, usize, usize, usize) -> f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let group = z.hq / z.hkv;
    let mut y = vec![0.0; z.b * z.hq * z.sq * z.dv];
    let mut scores = vec![0.0; z.b * z.hq * z.sq * z.total];
    let mut probs = vec![0.0; z.b * z.hq * z.sq * z.total];
    for b in 0..z.b {
        for h in 0..z.hq {
            let g = h / group;
            for i in 0..z.sq {
                let qr = &q[((b * z.hq + h) * z.sq + i) * z.d..][..z.d];
                let row = ((b * z.hq + h) * z.sq + i) * z.total;
                let mut s = vec![0.0; z.total];
                for j in 0..z.total {
                    let kr = &k[((b * z.hkv + g) * z.total + j) * z.d..][..z.d];
                    let mut x: f64 = qr.iter().zip(kr).map(|(a, c)| a * c).sum::<f64>() * scale;
                    if softcap > 0.0 {
                        x = softcap * (x / softcap).tanh();
                    }
                    scores[row + j] = x;
                    s[j] = x + bias(b, h, i, j);
                }
                if (0..z.total).all(|j| bias(b, h, i, j) == f64::NEG_INFINITY) {
                    continue;
                }
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                for j in 0..z.total {
                    let p = e[j] / sum;
                    probs[row + j] = p;
                    let vr = &v[((b * z.hkv + g) * z.total + j) * z.dv..][..z.dv];
                    for (o, &x) in y[((b * z.hq + h) * z.sq + i) * z.dv..][..z.dv]
                        .iter_mut()
                        .zip(vr)
                    {
                        *o += p * x;
                    }
                }
            }
        }
    }
    (y, scores, probs)
}

/// Rotates one head row by the angles of cache row `pos` (f64).
pub fn rotate(
    x: &[f64],
    cos: &[f64],
    sin: &[f64],
    half: usize,
    pos: usize,
    interleaved: bool,
) -> Vec<f64> {
    let mut out = x.to_vec();
    for i in 0..half {
        let (c, s) = (cos[pos * half + i], sin[pos * half + i]);
        let (a, b) = if interleaved {
            (2 * i, 2 * i + 1)
        } else {
            (i, i + half)
        };
        out[a] = c * x[a] - s * x[b];
        out[b] = s * x[a] + c * x[b];
    }
    out
}

/// Cos/sin caches of `positions` rows of `half` angles (`pos * theta_i`).
pub fn caches(positions: usize, half: usize) -> (Vec<f32>, Vec<f32>) {
    let mut cos = Vec::new();
    let mut sin = Vec::new();
    for p in 0..positions {
        for i in 0..half {
            let a = p as f64 / 10000f64.powf(2.0 * i as f64 / (2 * half) as f64);
            cos.push(a.cos() as f32);
            sin.push(a.sin() as f32);
        }
    }
    (cos, sin)
}

pub fn assert_close64(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_infinite() {
            g as f64 == w
        } else {
            (g as f64 - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}
