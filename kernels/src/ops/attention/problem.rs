//! What one attention call computes ([`Problem`]): queries, keys and values
//! with their layouts, the key range and mask of each row, scale, soft cap
//! and query rotation, and how an output row maps to (batch, head,
//! position). The kernels that compute it are in `core` and `panels`.

use std::ops::Range;

use super::Float;
use super::rotary::Rotary;

/// Keys scored at once (a stack array of scores).
pub(crate) const KEY_BLOCK: usize = 64;

/// Element offsets of a `[batch, seq, head]`-indexed tensor whose head rows
/// are contiguous.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Strides {
    /// Batch stride.
    pub b: usize,
    /// Sequence stride.
    pub s: usize,
    /// Head stride.
    pub h: usize,
}

/// Strides saturate: a tensor with elements bounds every stride used to
/// reach them, and an empty one (whose other dims may be huge) is never
/// indexed.
impl Strides {
    /// `[B, S, H, D]` (the 3-D `[B, S, H*D]` layout).
    pub(crate) fn bsnh(s: usize, h: usize, d: usize) -> Self {
        Self {
            b: s.saturating_mul(h).saturating_mul(d),
            s: h.saturating_mul(d),
            h: d,
        }
    }

    /// `[B, H, S, D]`.
    pub(crate) fn bnsh(s: usize, h: usize, d: usize) -> Self {
        Self {
            b: h.saturating_mul(s).saturating_mul(d),
            s: d,
            h: s.saturating_mul(d),
        }
    }

    #[inline(always)]
    pub(crate) fn at(&self, b: usize, s: usize, h: usize) -> usize {
        b * self.b + s * self.s + h * self.h
    }
}

/// Key or value rows: `past` (BNSH, the first `past_len` rows of each head)
/// followed by `new` (rows `past_len..`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rows<'a, T> {
    /// Past rows (`[B, H, cap, width]`, empty when none).
    pub past: &'a [T],
    /// Past layout.
    pub past_strides: Strides,
    /// Past rows used per head.
    pub past_len: usize,
    /// New rows.
    pub new: &'a [T],
    /// New layout.
    pub new_strides: Strides,
    /// Row width.
    pub width: usize,
}

impl<'a, T> Rows<'a, T> {
    /// Every row in one buffer laid out by `strides` (no separate past).
    pub fn single(buf: &'a [T], strides: Strides, width: usize) -> Self {
        Self {
            past: &[],
            past_strides: strides,
            past_len: 0,
            new: buf,
            new_strides: strides,
            width,
        }
    }

    /// Rows `j0..j0 + n` of head `g` of batch `b` as (data, offset of the
    /// first, stride) when they lie all in `past` or all in `new`.
    #[inline(always)]
    pub(crate) fn run(
        &self,
        b: usize,
        g: usize,
        j0: usize,
        n: usize,
    ) -> Option<(&'a [T], usize, usize)> {
        if j0 + n <= self.past_len {
            Some((
                self.past,
                self.past_strides.at(b, j0, g),
                self.past_strides.s,
            ))
        } else if j0 >= self.past_len {
            let o = self.new_strides.at(b, j0 - self.past_len, g);
            Some((self.new, o, self.new_strides.s))
        } else {
            None
        }
    }

    /// Row `j` of head `g` of batch `b`.
    #[inline(always)]
    pub(crate) fn row(&self, b: usize, g: usize, j: usize) -> &'a [T] {
        if j < self.past_len {
            let o = self.past_strides.at(b, j, g);
            &self.past[o..o + self.width]
        } else {
            let o = self.new_strides.at(b, j - self.past_len, g);
            &self.new[o..o + self.width]
        }
    }
}

/// Mask values.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MaskData<'a, T> {
    /// `true` = attend.
    Bool(&'a [bool]),
    /// Added to the scores.
    Float(&'a [T]),
}

/// An attention mask broadcast to `[B, H, Sq, total]`; keys at or past
/// `len` are masked out (a mask shorter than the key sequence).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mask<'a, T> {
    /// The elements.
    pub data: MaskData<'a, T>,
    /// Strides for batch, query head, query row and key (0 = broadcast).
    pub strides: [usize; 4],
    /// Keys the mask covers.
    pub len: usize,
}

impl<T: Float> Mask<'_, T> {
    #[inline(always)]
    pub(crate) fn base(&self, b: usize, h: usize, i: usize) -> usize {
        b * self.strides[0] + h * self.strides[1] + i * self.strides[2]
    }

    /// Adds the bias of keys `j0..j0 + s.len()` to `s`.
    #[inline(always)]
    pub(crate) fn add(&self, base: usize, j0: usize, s: &mut [f32]) {
        let sj = self.strides[3];
        for (t, v) in s.iter_mut().enumerate() {
            let j = j0 + t;
            *v += self.bias(base, j, sj);
        }
    }

    #[inline(always)]
    pub(crate) fn bias(&self, base: usize, j: usize, sj: usize) -> f32 {
        if j >= self.len {
            return f32::NEG_INFINITY;
        }
        match self.data {
            MaskData::Bool(m) => {
                if m[base + j * sj] {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            }
            MaskData::Float(m) => m[base + j * sj].to_f32(),
        }
    }
}

/// Rotary embedding applied to each query row before scoring.
#[derive(Clone, Copy)]
pub(crate) struct QueryRotary<'a, T> {
    /// The caches.
    pub rotary: Rotary<'a, T>,
    /// Position of query row `i` of batch `b`.
    pub position: &'a (dyn Fn(usize, usize) -> usize + Sync),
}

/// Everything one attention call needs.
#[derive(Clone, Copy)]
pub(crate) struct Problem<'a, T> {
    /// Batch size.
    pub batch: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads (divides `q_heads`).
    pub kv_heads: usize,
    /// Query rows per batch.
    pub q_len: usize,
    /// Q/K head size.
    pub d: usize,
    /// V head size.
    pub dv: usize,
    /// Queries.
    pub q: &'a [T],
    /// Query layout.
    pub q_strides: Strides,
    /// Keys.
    pub k: Rows<'a, T>,
    /// Values.
    pub v: Rows<'a, T>,
    /// Key positions `[lo, hi)` that query row `i` of batch `b` may attend
    /// (causal, window and padding limits; the mask applies within).
    pub keys: &'a (dyn Fn(usize, usize) -> Range<usize> + Sync),
    /// The mask.
    pub mask: Option<Mask<'a, T>>,
    /// Score scale.
    pub scale: f32,
    /// Soft cap (`c * tanh(s / c)`); 0 = off.
    pub softcap: f32,
    /// Rotary embedding of the queries.
    pub rotary: Option<QueryRotary<'a, T>>,
    /// Output layout: `[B, Sq, H, dv]` when true, else `[B, H, Sq, dv]`.
    pub out_bsnh: bool,
}

/// What the QK output holds (ONNX `qk_matmul_output_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QkMode {
    /// Scaled (and soft-capped) scores.
    Scores,
    /// Scores plus the mask's bias.
    Biased,
    /// Softmax probabilities.
    Softmax,
}

impl<T: Float> Problem<'_, T> {
    /// (batch, head, query row) of output row `r`.
    #[inline(always)]
    pub(crate) fn decode(&self, r: usize) -> (usize, usize, usize) {
        let (h, s) = (self.q_heads, self.q_len);
        if self.out_bsnh {
            (r / (h * s), r % h, (r / h) % s)
        } else {
            (r / (h * s), (r / s) % h, r % s)
        }
    }

    /// Loads query row (b, h, i) as scaled f32 (rotated first when asked).
    #[inline(always)]
    pub(crate) fn load_q(&self, b: usize, h: usize, i: usize, q: &mut [f32]) {
        let o = self.q_strides.at(b, i, h);
        let src = &self.q[o..o + self.d];
        match &self.rotary {
            Some(r) => r.rotary.apply(src, q, (r.position)(b, i)),
            None => {
                for (d, &s) in q.iter_mut().zip(src) {
                    *d = s.to_f32();
                }
            }
        }
        for v in q.iter_mut() {
            *v *= self.scale;
        }
    }

    #[inline(always)]
    pub(crate) fn cap(&self, s: &mut [f32]) {
        if self.softcap > 0.0 {
            let c = self.softcap;
            for v in s.iter_mut() {
                *v = c * (*v / c).tanh();
            }
        }
    }
}
