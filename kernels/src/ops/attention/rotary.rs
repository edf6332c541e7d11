//! Rotary position embeddings: the shared row rotation (also used by
//! GroupQueryAttention's `do_rotary`), ONNX `RotaryEmbedding` (opset 23) and
//! com.microsoft `RotaryEmbedding`.
//!
//! The first `rotary_dim` elements of each head row are rotated in pairs by
//! the angle whose cosine and sine sit in the caches' row for the token's
//! position; the rest is copied. Pairs are `(x[i], x[i + rotary_dim / 2])`,
//! or `(x[2i], x[2i + 1])` when interleaved.

use super::Float;
use crate::ops::basic::common::{
    Attrs, Ints, check_inputs, check_len, input, optional, required, typed, typed_mut,
};
use crate::par::rows_chunk;
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Cos/sin caches (`half` values per position row) and the pairing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rotary<'a, T> {
    /// Cosines, `[positions, half]`.
    pub cos: &'a [T],
    /// Sines, same shape.
    pub sin: &'a [T],
    /// Rotated pairs per row (`rotary_dim / 2`).
    pub half: usize,
    /// Pairs are adjacent elements.
    pub interleaved: bool,
}

impl<T: Float> Rotary<'_, T> {
    /// Rows of the caches.
    pub(crate) fn positions(&self) -> usize {
        self.cos.len().checked_div(self.half).unwrap_or(usize::MAX)
    }

    /// `dst` = `src` rotated by cache row `pos` (the caller checked
    /// `pos < positions()` and `dst.len() == src.len() >= 2 * half`).
    #[inline]
    pub(crate) fn apply<S: Float, D: Float>(&self, src: &[S], dst: &mut [D], pos: usize) {
        let h = self.half;
        let cos = &self.cos[pos * h..pos * h + h];
        let sin = &self.sin[pos * h..pos * h + h];
        if self.interleaved {
            for i in 0..h {
                let (x1, x2) = (src[2 * i].to_f32(), src[2 * i + 1].to_f32());
                let (c, s) = (cos[i].to_f32(), sin[i].to_f32());
                dst[2 * i] = D::from_f32(c * x1 - s * x2);
                dst[2 * i + 1] = D::from_f32(s * x1 + c * x2);
            }
        } else {
            for i in 0..h {
                let (x1, x2) = (src[i].to_f32(), src[i + h].to_f32());
                let (c, s) = (cos[i].to_f32(), sin[i].to_f32());
                dst[i] = D::from_f32(c * x1 - s * x2);
                dst[i + h] = D::from_f32(s * x1 + c * x2);
            }
        }
        for (d, s) in dst[2 * h..].iter_mut().zip(&src[2 * h..]) {
            *d = D::from_f32(s.to_f32());
        }
    }
}

/// Which RotaryEmbedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RotaryKind {
    /// ai.onnx (inputs X, cos_cache, sin_cache, position_ids?).
    Onnx,
    /// com.microsoft (inputs input, position_ids, cos_cache, sin_cache).
    Microsoft,
}

/// RotaryEmbedding.
#[derive(Debug)]
pub(crate) struct RotaryEmbedding {
    kind: RotaryKind,
    interleaved: bool,
    rotary_dim: usize,
    num_heads: usize,
}

const OP: &str = "RotaryEmbedding";

fn shape_err(detail: impl std::fmt::Display) -> KernelError {
    KernelError::Shape(format!("{OP}: {detail}"))
}

/// Sizes resolved from the input shapes.
#[derive(Debug, Clone, Copy)]
struct Layout {
    batch: usize,
    seq: usize,
    heads: usize,
    head: usize,
    half: usize,
    /// Input is `[B, H, S, D]`.
    bnsh: bool,
    /// Position ids: none (3-D caches indexed by batch and token), one
    /// offset, or one per token.
    positions: Positions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Positions {
    None,
    Offset,
    PerToken,
}

impl RotaryEmbedding {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: RotaryKind) -> Result<Self, KernelError> {
        let allowed: &[&str] = match kind {
            RotaryKind::Onnx => &["interleaved", "rotary_embedding_dim", "num_heads"],
            RotaryKind::Microsoft => &[
                "interleaved",
                "rotary_embedding_dim",
                "num_heads",
                "scale",
                "is_packed_batching",
            ],
        };
        if kind == RotaryKind::Onnx && spec.opset < 23 {
            return Err(KernelError::UnsupportedOp {
                domain: String::new(),
                op_type: OP.into(),
                opset: spec.opset,
            });
        }
        let attrs = Attrs::new(spec, OP, allowed)?;
        let interleaved = match attrs.int_or("interleaved", 0)? {
            0 => false,
            1 => true,
            v => return Err(attrs.error("interleaved", format!("{v} is not 0 or 1"))),
        };
        let rotary_dim = attrs.int_or("rotary_embedding_dim", 0)?;
        let num_heads = attrs.int_or("num_heads", 0)?;
        if rotary_dim < 0 || rotary_dim % 2 != 0 {
            return Err(attrs.error(
                "rotary_embedding_dim",
                format!("{rotary_dim} is not an even value >= 0"),
            ));
        }
        if num_heads < 0 {
            return Err(attrs.error("num_heads", format!("{num_heads} is negative")));
        }
        if attrs.int_or("is_packed_batching", 0)? != 0 {
            return Err(attrs.error(
                "is_packed_batching",
                "packed batching is not supported (only 0)",
            ));
        }
        if spec.outputs != 1 {
            return Err(shape_err(format!(
                "1 output expected, {} requested",
                spec.outputs
            )));
        }
        Ok(Self {
            kind,
            interleaved,
            rotary_dim: rotary_dim as usize,
            num_heads: num_heads as usize,
        })
    }

    /// Input positions of (x, cos, sin, position_ids).
    fn slots(&self) -> [usize; 4] {
        match self.kind {
            RotaryKind::Onnx => [0, 1, 2, 3],
            RotaryKind::Microsoft => [0, 2, 3, 1],
        }
    }

    fn layout(
        &self,
        x: &[usize],
        cos: &[usize],
        sin: &[usize],
        pos: Option<&[usize]>,
    ) -> Result<Layout, KernelError> {
        if cos != sin {
            return Err(shape_err(format!(
                "cos_cache {cos:?} and sin_cache {sin:?} differ in shape"
            )));
        }
        let (batch, seq, heads, head, bnsh) = match *x {
            [b, h, s, d] => (b, s, h, d, true),
            [b, s, hidden] => {
                let heads = if self.num_heads > 0 {
                    self.num_heads
                } else if self.kind == RotaryKind::Onnx {
                    return Err(shape_err("a 3-D input needs the num_heads attribute"));
                } else {
                    // ORT: without num_heads the head size is the full
                    // rotary size the caches give.
                    let half = *cos.last().unwrap_or(&0);
                    if half == 0 || self.rotary_dim != 0 {
                        return Err(shape_err(
                            "a 3-D input needs num_heads when rotary_embedding_dim is set",
                        ));
                    }
                    hidden / half / 2
                };
                if heads == 0 || hidden % heads != 0 {
                    return Err(shape_err(format!(
                        "hidden size {hidden} is not a multiple of {heads} heads"
                    )));
                }
                (b, s, heads, hidden / heads, false)
            }
            _ => {
                return Err(shape_err(format!(
                    "the input must have rank 3 or 4, got {x:?}"
                )));
            }
        };
        let rot = if self.rotary_dim > 0 {
            self.rotary_dim
        } else {
            head
        };
        if rot > head || rot % 2 != 0 {
            return Err(shape_err(format!(
                "rotary dimension {rot} must be even and at most the head size {head}"
            )));
        }
        let half = rot / 2;
        let positions = match (self.kind, pos) {
            (RotaryKind::Onnx, None) => {
                if cos != [batch, seq, half] {
                    return Err(shape_err(format!(
                        "without position_ids the caches must be [{batch}, {seq}, {half}], got {cos:?}"
                    )));
                }
                Positions::None
            }
            (_, Some(p)) => {
                if cos.len() != 2 || cos[1] != half {
                    return Err(shape_err(format!(
                        "with position_ids the caches must be [max_position, {half}], got {cos:?}"
                    )));
                }
                if p == [batch, seq] {
                    Positions::PerToken
                } else if self.kind == RotaryKind::Microsoft && crate::element_count(p) == Some(1) {
                    Positions::Offset
                } else {
                    return Err(shape_err(format!(
                        "position_ids must be [{batch}, {seq}], got {p:?}"
                    )));
                }
            }
            (RotaryKind::Microsoft, None) => return Err(shape_err("position_ids is required")),
        };
        Ok(Layout {
            batch,
            seq,
            heads,
            head,
            half,
            bnsh,
            positions,
        })
    }

    fn run<T: Float>(
        &self,
        inputs: &[Option<&Tensor>],
        out: &mut Tensor,
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let [xi, ci, si, pi] = self.slots();
        let x_t = input(OP, inputs, xi)?;
        let cos_t = input(OP, inputs, ci)?;
        let sin_t = input(OP, inputs, si)?;
        let pos_t = inputs.get(pi).copied().flatten();
        let l = self.layout(
            x_t.shape(),
            cos_t.shape(),
            sin_t.shape(),
            pos_t.map(Tensor::shape),
        )?;
        let x = typed::<T>(OP, x_t)?;
        let rot = Rotary {
            cos: typed::<T>(OP, cos_t)?,
            sin: typed::<T>(OP, sin_t)?,
            half: l.half,
            interleaved: self.interleaved,
        };
        let pos = pos_t.map(|p| Ints::of(OP, p)).transpose()?;
        // Every cache row used must exist.
        let limit = i64::try_from(rot.positions()).unwrap_or(i64::MAX);
        let bad = |p: i64| KernelError::Invalid {
            op: OP,
            detail: format!("position id {p} is outside the caches' {limit} rows"),
        };
        if let Some(pos) = &pos {
            for k in 0..pos.len() {
                let p = pos.get(k);
                let last = if l.positions == Positions::Offset {
                    i64::try_from(l.seq)
                        .ok()
                        .and_then(|s| p.checked_add(s.saturating_sub(1)))
                        .ok_or_else(|| bad(p))?
                } else {
                    p
                };
                if p < 0 || last >= limit {
                    return Err(bad(last.max(p)));
                }
            }
        }
        let o = typed_mut::<T>(OP, out)?;
        check_len(OP, "output", o.len(), x.len())?;
        if o.is_empty() || l.head == 0 {
            return Ok(());
        }
        // Bounded by the output's length (not empty).
        let rows = crate::ops::basic::common::numel(&[l.batch, l.seq, l.heads]);
        let chunk = rows_chunk(par, rows, l.head);
        for_each_chunk_mut(par, o, chunk, &|offset, dst: &mut [T]| {
            for (n, d) in dst.chunks_exact_mut(l.head).enumerate() {
                let r = offset / l.head + n;
                let (b, s) = if l.bnsh {
                    (r / (l.heads * l.seq), r % l.seq)
                } else {
                    (r / (l.heads * l.seq), (r / l.heads) % l.seq)
                };
                let p = match (&pos, l.positions) {
                    (Some(p), Positions::PerToken) => p.get(b * l.seq + s) as usize,
                    (Some(p), Positions::Offset) => p.get(0) as usize + s,
                    _ => b * l.seq + s,
                };
                rot.apply(&x[r * l.head..(r + 1) * l.head], d, p);
            }
        });
        Ok(())
    }
}

impl Operator for RotaryEmbedding {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 3, 4)?;
        let [xi, ci, si, pi] = self.slots();
        let x = required(OP, inputs, xi)?;
        let cos = required(OP, inputs, ci)?;
        let sin = required(OP, inputs, si)?;
        let pos = optional(inputs, pi);
        if !matches!(
            x.dtype,
            ElementType::F32 | ElementType::F16 | ElementType::BF16
        ) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: x.dtype,
            });
        }
        for c in [cos, sin] {
            if c.dtype != x.dtype {
                return Err(shape_err(format!(
                    "the caches hold {} where the input is {}",
                    c.dtype, x.dtype
                )));
            }
        }
        if let Some(p) = pos
            && !matches!(p.dtype, ElementType::I64 | ElementType::I32)
        {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: p.dtype,
            });
        }
        self.layout(x.shape, cos.shape, sin.shape, pos.map(|p| p.shape))?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let out = crate::ops::basic::common::output(OP, outputs, 0)?;
        match out.dtype() {
            ElementType::F32 => self.run::<f32>(inputs, out, par),
            ElementType::F16 => self.run::<half::f16>(inputs, out, par),
            ElementType::BF16 => self.run::<half::bf16>(inputs, out, par),
            dtype => Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
    }
}
