//! ONNX `Attention` (opsets 23-25): 3-D (`[B, S, heads * size]` with
//! `q_num_heads`/`kv_num_heads`) or 4-D (`[B, heads, S, size]`) Q, K, V;
//! optional `attn_mask` (bool: true = attend, or float: added), past and
//! present key/value caches, `is_causal` (aligned to the end of the past),
//! grouped KV heads, `scale`, `softcap`, all four `qk_matmul_output_mode`s;
//! opset 24's `nonpad_kv_seqlen` and opset 25's `left_window_size` /
//! `right_window_size`. A query row whose every key is masked out yields 0.

use std::ops::Range;

use super::Float;
use super::core::{attend, attend_with_scores, fill_rows};
use super::problem::{Mask, MaskData, Problem, QkMode, Rows, Strides};
use crate::ops::basic::common::{
    Attrs, Ints, check_inputs, check_len, input, numel, optional, required, typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const OP: &str = "Attention";

fn shape_err(detail: impl std::fmt::Display) -> KernelError {
    KernelError::Shape(format!("{OP}: {detail}"))
}

/// ONNX Attention.
#[derive(Debug)]
pub(crate) struct Attention {
    is_causal: bool,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    mode: QkMode,
    scale: Option<f32>,
    softcap: f32,
    left: i64,
    right: i64,
    outputs: usize,
    opset: i64,
}

/// Sizes from the input shapes.
#[derive(Debug, Clone, Copy)]
struct Dims {
    batch: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    dv: usize,
    past: usize,
    /// 3-D inputs.
    bsnh: bool,
}

impl Dims {
    fn total(&self) -> usize {
        self.past + self.skv
    }
}

impl Attention {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        if spec.opset < 23 {
            return Err(KernelError::UnsupportedOp {
                domain: String::new(),
                op_type: OP.into(),
                opset: spec.opset,
            });
        }
        let mut allowed = vec![
            "is_causal",
            "kv_num_heads",
            "q_num_heads",
            "qk_matmul_output_mode",
            "scale",
            "softcap",
            "softmax_precision",
        ];
        if spec.opset >= 25 {
            allowed.extend(["left_window_size", "right_window_size"]);
        }
        let attrs = Attrs::new(spec, OP, &allowed)?;
        let is_causal = match attrs.int_or("is_causal", 0)? {
            0 => false,
            1 => true,
            v => return Err(attrs.error("is_causal", format!("{v} is not 0 or 1"))),
        };
        let heads = |name: &'static str| -> Result<Option<usize>, KernelError> {
            match attrs.int(name)? {
                None => Ok(None),
                Some(v) if v > 0 => Ok(Some(v as usize)),
                Some(v) => Err(attrs.error(name, format!("{v} is not a positive head count"))),
            }
        };
        let q_heads = heads("q_num_heads")?;
        let kv_heads = heads("kv_num_heads")?;
        let mode = match attrs.int_or("qk_matmul_output_mode", 0)? {
            // The reference captures the scores after the soft cap for both.
            0 | 1 => QkMode::Scores,
            2 => QkMode::Biased,
            3 => QkMode::Softmax,
            v => {
                return Err(attrs.error(
                    "qk_matmul_output_mode",
                    format!("{v} is not one of 0, 1, 2, 3"),
                ));
            }
        };
        let scale = attrs.float("scale")?;
        if let Some(s) = scale
            && !s.is_finite()
        {
            return Err(attrs.error("scale", format!("{s} is not finite")));
        }
        let softcap = attrs.float("softcap")?.unwrap_or(0.0);
        if !(softcap >= 0.0 && softcap.is_finite()) {
            return Err(attrs.error("softcap", format!("{softcap} is not a finite value >= 0")));
        }
        // Any precision is accepted: scores are always computed in f32.
        let _ = attrs.int("softmax_precision")?;
        let window = |name: &'static str| -> Result<i64, KernelError> {
            let v = attrs.int_or(name, -1)?;
            if v < -1 {
                return Err(attrs.error(name, format!("{v} is not -1 or >= 0")));
            }
            Ok(v)
        };
        let left = window("left_window_size")?;
        let right = window("right_window_size")?;
        if spec.outputs == 0 || spec.outputs > 4 {
            return Err(shape_err(format!(
                "1 to 4 outputs expected, {} requested",
                spec.outputs
            )));
        }
        Ok(Self {
            is_causal,
            q_heads,
            kv_heads,
            mode,
            scale,
            softcap,
            left,
            right,
            outputs: spec.outputs,
            opset: spec.opset,
        })
    }

    fn max_inputs(&self) -> usize {
        if self.opset >= 24 { 7 } else { 6 }
    }

    fn dims(
        &self,
        q: &[usize],
        k: &[usize],
        v: &[usize],
        past: Option<(&[usize], &[usize])>,
    ) -> Result<Dims, KernelError> {
        let split = |hidden: usize, heads: usize, what: &str| -> Result<usize, KernelError> {
            if !hidden.is_multiple_of(heads) {
                return Err(shape_err(format!(
                    "{what} hidden size {hidden} is not a multiple of {heads} heads"
                )));
            }
            Ok(hidden / heads)
        };
        let dims = match (q, k, v) {
            ([b, sq, qh], [kb, skv, kh], [vb, vs, vh]) => {
                let (Some(hq), Some(hkv)) = (self.q_heads, self.kv_heads) else {
                    return Err(shape_err(
                        "3-D inputs need the q_num_heads and kv_num_heads attributes",
                    ));
                };
                if kb != b || vb != b || vs != skv {
                    return Err(shape_err(format!("inconsistent Q {q:?}, K {k:?}, V {v:?}")));
                }
                let d = split(*qh, hq, "Q")?;
                if split(*kh, hkv, "K")? != d {
                    return Err(shape_err(format!(
                        "K head size {} differs from Q head size {d}",
                        kh / hkv
                    )));
                }
                Dims {
                    batch: *b,
                    hq,
                    hkv,
                    sq: *sq,
                    skv: *skv,
                    d,
                    dv: split(*vh, hkv, "V")?,
                    past: 0,
                    bsnh: true,
                }
            }
            ([b, hq, sq, d], [kb, hkv, skv, kd], [vb, vh, vs, dv]) => {
                if kb != b || vb != b || vh != hkv || vs != skv || kd != d {
                    return Err(shape_err(format!("inconsistent Q {q:?}, K {k:?}, V {v:?}")));
                }
                if self.q_heads.is_some_and(|h| h != *hq)
                    || self.kv_heads.is_some_and(|h| h != *hkv)
                {
                    return Err(shape_err(
                        "q_num_heads / kv_num_heads disagree with the 4-D input shapes",
                    ));
                }
                Dims {
                    batch: *b,
                    hq: *hq,
                    hkv: *hkv,
                    sq: *sq,
                    skv: *skv,
                    d: *d,
                    dv: *dv,
                    past: 0,
                    bsnh: false,
                }
            }
            _ => {
                return Err(shape_err(format!(
                    "Q, K and V must all be 3-D or all 4-D, got {q:?}, {k:?}, {v:?}"
                )));
            }
        };
        if dims.hkv == 0 || dims.hq % dims.hkv != 0 {
            return Err(shape_err(format!(
                "{} query heads are not a multiple of {} key/value heads",
                dims.hq, dims.hkv
            )));
        }
        let mut dims = dims;
        if let Some((pk, pv)) = past {
            let (b, h) = (dims.batch, dims.hkv);
            match (pk, pv) {
                ([pb, ph, pl, pd], [vb, vh, vl, vd])
                    if *pb == b
                        && *vb == b
                        && *ph == h
                        && *vh == h
                        && pl == vl
                        && *pd == dims.d
                        && *vd == dims.dv =>
                {
                    dims.past = *pl;
                }
                _ => {
                    return Err(shape_err(format!(
                        "past_key {pk:?} / past_value {pv:?} must be [{b}, {h}, past, {}] / [{b}, {h}, past, {}]",
                        dims.d, dims.dv
                    )));
                }
            }
        }
        dims.past
            .checked_add(dims.skv)
            .ok_or_else(|| shape_err("sequence lengths overflow"))?;
        Ok(dims)
    }

    /// Mask strides over `[B, Hq, Sq, total]` and the keys it covers.
    fn mask_layout(dims: &Dims, shape: &[usize]) -> Result<([usize; 4], usize), KernelError> {
        if shape.is_empty() || shape.len() > 4 {
            return Err(shape_err(format!(
                "attn_mask must have rank 1 to 4, got {shape:?}"
            )));
        }
        let total = dims.total();
        let mut md = [1usize; 4];
        md[4 - shape.len()..].copy_from_slice(shape);
        let target = [dims.batch, dims.hq, dims.sq];
        let mut strides = [0usize; 4];
        let mut stride = 1usize;
        for a in (0..4).rev() {
            strides[a] = if md[a] == 1 { 0 } else { stride };
            stride = stride.saturating_mul(md[a]);
        }
        for a in 0..3 {
            if md[a] != 1 && md[a] != target[a] {
                return Err(shape_err(format!(
                    "attn_mask {shape:?} does not broadcast to [{}, {}, {}, {total}]",
                    dims.batch, dims.hq, dims.sq
                )));
            }
        }
        let len = match md[3] {
            1 => total,
            n if n <= total => n,
            n => {
                return Err(shape_err(format!(
                    "attn_mask covers {n} keys, more than the {total} given"
                )));
            }
        };
        Ok((strides, len))
    }

    fn run<T: Float>(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let q_t = input(OP, inputs, 0)?;
        let k_t = input(OP, inputs, 1)?;
        let v_t = input(OP, inputs, 2)?;
        let mask_t = inputs.get(3).copied().flatten();
        let pk_t = inputs.get(4).copied().flatten();
        let pv_t = inputs.get(5).copied().flatten();
        let nonpad_t = inputs.get(6).copied().flatten();
        let past = match (pk_t, pv_t) {
            (Some(k), Some(v)) => Some((k.shape(), v.shape())),
            (None, None) => None,
            _ => return Err(shape_err("past_key and past_value must be given together")),
        };
        let dims = self.dims(q_t.shape(), k_t.shape(), v_t.shape(), past)?;
        let total = dims.total();
        let (k_new, v_new) = if dims.bsnh {
            (
                Strides::bsnh(dims.skv, dims.hkv, dims.d),
                Strides::bsnh(dims.skv, dims.hkv, dims.dv),
            )
        } else {
            (
                Strides::bnsh(dims.skv, dims.hkv, dims.d),
                Strides::bnsh(dims.skv, dims.hkv, dims.dv),
            )
        };
        let empty: &[T] = &[];
        let k = Rows {
            past: pk_t
                .map(|t| typed::<T>(OP, t))
                .transpose()?
                .unwrap_or(empty),
            past_strides: Strides::bnsh(dims.past, dims.hkv, dims.d),
            past_len: dims.past,
            new: typed::<T>(OP, k_t)?,
            new_strides: k_new,
            width: dims.d,
        };
        let v = Rows {
            past: pv_t
                .map(|t| typed::<T>(OP, t))
                .transpose()?
                .unwrap_or(empty),
            past_strides: Strides::bnsh(dims.past, dims.hkv, dims.dv),
            past_len: dims.past,
            new: typed::<T>(OP, v_t)?,
            new_strides: v_new,
            width: dims.dv,
        };
        let q = typed::<T>(OP, q_t)?;
        check_len(
            OP,
            "Q",
            q.len(),
            numel(&[dims.batch, dims.hq, dims.sq, dims.d]),
        )?;
        check_len(
            OP,
            "K",
            k.new.len(),
            numel(&[dims.batch, dims.hkv, dims.skv, dims.d]),
        )?;
        check_len(
            OP,
            "V",
            v.new.len(),
            numel(&[dims.batch, dims.hkv, dims.skv, dims.dv]),
        )?;
        let mask = match mask_t {
            None => None,
            Some(m) => {
                let (strides, len) = Self::mask_layout(&dims, m.shape())?;
                let data = match m.dtype() {
                    ElementType::Bool => MaskData::Bool(typed::<bool>(OP, m)?),
                    _ => MaskData::Float(typed::<T>(OP, m)?),
                };
                Some(Mask { data, strides, len })
            }
        };
        let nonpad = nonpad_t.map(|t| Ints::of(OP, t)).transpose()?;
        if let Some(n) = &nonpad {
            if dims.past > 0 || past.is_some() {
                return Err(shape_err(
                    "nonpad_kv_seqlen cannot be combined with past_key/past_value",
                ));
            }
            check_len(OP, "nonpad_kv_seqlen", n.len(), dims.batch)?;
        }
        let (causal, left, right, sq, past_len) = (
            self.is_causal,
            self.left,
            self.right,
            dims.sq as i64,
            dims.past as i64,
        );
        let keys = move |b: usize, i: usize| -> Range<usize> {
            let t = total as i64;
            let (mut lo, mut hi) = (0i64, t);
            let offset = match &nonpad {
                Some(n) => {
                    hi = hi.min(n.get(b));
                    n.get(b).saturating_sub(sq)
                }
                None => past_len,
            };
            let p = (i as i64).saturating_add(offset);
            if causal {
                hi = hi.min(p.saturating_add(1));
            }
            if left >= 0 {
                lo = lo.max(p.saturating_sub(left));
            }
            if right >= 0 {
                hi = hi.min(p.saturating_add(right).saturating_add(1));
            }
            let hi = hi.clamp(0, t);
            lo.clamp(0, hi) as usize..hi as usize
        };
        let problem = Problem {
            batch: dims.batch,
            q_heads: dims.hq,
            kv_heads: dims.hkv,
            q_len: dims.sq,
            d: dims.d,
            dv: dims.dv,
            q,
            q_strides: if dims.bsnh {
                Strides::bsnh(dims.sq, dims.hq, dims.d)
            } else {
                Strides::bnsh(dims.sq, dims.hq, dims.d)
            },
            k,
            v,
            keys: &keys,
            mask,
            scale: self.scale.unwrap_or(1.0 / (dims.d as f32).sqrt()),
            softcap: self.softcap,
            rotary: None,
            out_bsnh: dims.bsnh,
        };
        let n = outputs.len();
        let (y, rest) = outputs
            .split_first_mut()
            .ok_or_else(|| shape_err("no output given"))?;
        let y = typed_mut::<T>(OP, y)?;
        check_len(
            OP,
            "Y",
            y.len(),
            numel(&[dims.batch, dims.hq, dims.sq, dims.dv]),
        )?;
        for (slot, rows) in rest.iter_mut().take(2).zip([k, v]) {
            let dst = typed_mut::<T>(OP, slot)?;
            check_len(
                OP,
                "present",
                dst.len(),
                numel(&[dims.batch, dims.hkv, total, rows.width]),
            )?;
            let fresh = total.saturating_sub(rows.past_len);
            fill_rows(
                dst,
                dims.hkv,
                (total, fresh),
                rows.width,
                par,
                &|b, g, j, row| row.copy_from_slice(rows.row(b, g, j)),
            );
        }
        if n >= 4 && !rest[2].is_empty() {
            let scores = typed_mut::<T>(OP, &mut rest[2])?;
            check_len(
                OP,
                "qk_matmul_output",
                scores.len(),
                numel(&[dims.batch, dims.hq, dims.sq, total]),
            )?;
            attend_with_scores(&problem, y, scores, total, self.mode);
        } else {
            attend(&problem, y, par);
        }
        Ok(())
    }
}

impl Operator for Attention {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 3, self.max_inputs())?;
        let q = required(OP, inputs, 0)?;
        let k = required(OP, inputs, 1)?;
        let v = required(OP, inputs, 2)?;
        let mask = optional(inputs, 3);
        let pk = optional(inputs, 4);
        let pv = optional(inputs, 5);
        let nonpad = optional(inputs, 6);
        let t = q.dtype;
        if !matches!(t, ElementType::F32 | ElementType::F16 | ElementType::BF16) {
            return Err(KernelError::UnsupportedType { op: OP, dtype: t });
        }
        for (name, i) in [
            ("K", Some(k)),
            ("V", Some(v)),
            ("past_key", pk),
            ("past_value", pv),
        ] {
            if let Some(i) = i
                && i.dtype != t
            {
                return Err(shape_err(format!(
                    "{name} holds {} where Q holds {t}",
                    i.dtype
                )));
            }
        }
        let past = match (pk, pv) {
            (Some(k), Some(v)) => Some((k.shape, v.shape)),
            (None, None) => None,
            _ => return Err(shape_err("past_key and past_value must be given together")),
        };
        let dims = self.dims(q.shape, k.shape, v.shape, past)?;
        if let Some(m) = mask {
            if m.dtype != ElementType::Bool && m.dtype != t {
                return Err(shape_err(format!(
                    "attn_mask holds {}; it must be bool or {t} like Q",
                    m.dtype
                )));
            }
            Self::mask_layout(&dims, m.shape)?;
        }
        if let Some(n) = nonpad {
            if past.is_some() {
                return Err(shape_err(
                    "nonpad_kv_seqlen cannot be combined with past_key/past_value",
                ));
            }
            if !matches!(n.dtype, ElementType::I64 | ElementType::I32) {
                return Err(KernelError::UnsupportedType {
                    op: OP,
                    dtype: n.dtype,
                });
            }
            if n.shape != [dims.batch] {
                return Err(shape_err(format!(
                    "nonpad_kv_seqlen must be [{}], got {:?}",
                    dims.batch, n.shape
                )));
            }
        }
        let total = dims.total();
        let y = if dims.bsnh {
            vec![
                dims.batch,
                dims.sq,
                dims.hq
                    .checked_mul(dims.dv)
                    .ok_or_else(|| KernelError::Overflow {
                        op: OP,
                        what: format!("q_num_heads {} x head size {}", dims.hq, dims.dv),
                    })?,
            ]
        } else {
            vec![dims.batch, dims.hq, dims.sq, dims.dv]
        };
        let all = [
            y,
            vec![dims.batch, dims.hkv, total, dims.d],
            vec![dims.batch, dims.hkv, total, dims.dv],
            vec![dims.batch, dims.hq, dims.sq, total],
        ];
        Ok(all
            .into_iter()
            .take(self.outputs)
            .map(|shape| OutputInfo { dtype: t, shape })
            .collect())
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let q = input(OP, inputs, 0)?;
        match q.dtype() {
            ElementType::F32 => self.run::<f32>(inputs, outputs, par),
            ElementType::F16 => self.run::<half::f16>(inputs, outputs, par),
            ElementType::BF16 => self.run::<half::bf16>(inputs, outputs, par),
            dtype => Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
    }
}
