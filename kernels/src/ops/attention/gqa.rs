//! com.microsoft `GroupQueryAttention`, as ONNX Runtime's CPU provider runs
//! it for onnxruntime-genai's models.
//!
//! Inputs: query `[B, S, H*D]` (or packed QKV `[B, S, (H + 2*kvH)*D]` with
//! key and value omitted), key and value `[B, S, kvH*D]`, past_key and
//! past_value `[B, kvH, P, D]`, seqlens_k (`[B]`, total length - 1 per
//! batch), total_sequence_length (scalar), cos_cache and sin_cache
//! (`[max_position, rotary_dim / 2]`, used when `do_rotary`). Outputs:
//! `[B, S, H*D]` and present_key / present_value `[B, kvH, L, D]` with
//! `L = max(P, total_sequence_length)` (the past length plus S when
//! total_sequence_length is not a constant at resolution).
//!
//! The first prompt is the call where `S == total_sequence_length`: its
//! tokens sit at positions `0..S` and the past is ignored. Otherwise batch
//! `b`'s new tokens sit at `seqlens_k[b] + 1 - S ..`, after that many past
//! rows (so a past buffer shared with the present, of the maximum length,
//! works too). Present rows past the valid ones are zero. The query at
//! position `p` attends keys `0..=p` below the batch's total length, and
//! only the last `local_window_size` of them, `p + 1 - local_window_size ..=
//! p`, when the window is set (> 0): ONNX Runtime 1.32's window, and
//! `transformers`' `sliding_window`.
//!
//! With `sliding_window_cache = 1` the past and present buffers are
//! window-sized and cache-relative (`windowed.rs`): the present has the
//! past's shape and the absolute lengths may exceed it.

use std::ops::Range;

use super::Float;
use super::core::{attend, fill_row_ranges, fill_rows};
use super::problem::{Problem, QueryRotary, Rows, Strides};
use super::rotary::Rotary;
use crate::ops::basic::common::{
    Attrs, Ints, check_inputs, check_len, input, optional, required, typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const OP: &str = "GroupQueryAttention";

/// Inputs this implementation reads (later ones, e.g. position_ids,
/// attention_bias, head_sink, must be absent).
const INPUTS: usize = 9;

fn shape_err(detail: impl std::fmt::Display) -> KernelError {
    KernelError::Shape(format!("{OP}: {detail}"))
}

/// GroupQueryAttention.
#[derive(Debug)]
pub(crate) struct GroupQueryAttention {
    heads: usize,
    kv_heads: usize,
    scale: f32,
    softcap: f32,
    window: usize,
    /// `sliding_window_cache`: cache-relative, window-sized KV buffers.
    sliding_cache: bool,
    rotary: bool,
    interleaved: bool,
}

/// Sizes from the input shapes.
#[derive(Debug, Clone, Copy)]
struct Dims {
    batch: usize,
    seq: usize,
    d: usize,
    packed: bool,
    past: usize,
    /// Rotated pairs per head row (0 without rotary).
    half: usize,
}

impl GroupQueryAttention {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(
            spec,
            OP,
            &[
                "num_heads",
                "kv_num_heads",
                "scale",
                "softcap",
                "local_window_size",
                "do_rotary",
                "rotary_interleaved",
                "smooth_softmax",
                "sliding_window_cache",
            ],
        )?;
        let heads = |name: &'static str| -> Result<usize, KernelError> {
            match attrs.int(name)? {
                Some(v) if v > 0 => Ok(v as usize),
                Some(v) => Err(attrs.error(name, format!("{v} is not a positive head count"))),
                None => Err(attrs.error(name, "is required")),
            }
        };
        let (h, kvh) = (heads("num_heads")?, heads("kv_num_heads")?);
        if h % kvh != 0 {
            return Err(attrs.error(
                "kv_num_heads",
                format!("num_heads {h} is not a multiple of kv_num_heads {kvh}"),
            ));
        }
        kvh.checked_mul(2)
            .and_then(|kv| kv.checked_add(h))
            .ok_or_else(|| KernelError::Overflow {
                op: OP,
                what: format!("num_heads {h} + 2 * kv_num_heads {kvh}"),
            })?;
        let scale = attrs.float("scale")?.unwrap_or(0.0);
        let softcap = attrs.float("softcap")?.unwrap_or(0.0);
        if !scale.is_finite() {
            return Err(attrs.error("scale", format!("{scale} is not finite")));
        }
        if !(softcap >= 0.0 && softcap.is_finite()) {
            return Err(attrs.error("softcap", format!("{softcap} is not a finite value >= 0")));
        }
        let window = attrs.int_or("local_window_size", -1)?;
        if window < -1 {
            return Err(attrs.error("local_window_size", format!("{window} is not -1 or >= 0")));
        }
        let flag = |name: &'static str| -> Result<bool, KernelError> {
            match attrs.int_or(name, 0)? {
                0 => Ok(false),
                1 => Ok(true),
                v => Err(attrs.error(name, format!("{v} is not 0 or 1"))),
            }
        };
        let rotary = flag("do_rotary")?;
        let interleaved = flag("rotary_interleaved")?;
        let sliding_cache = flag("sliding_window_cache")?;
        if sliding_cache && window <= 0 {
            return Err(attrs.error(
                "sliding_window_cache",
                "1 needs a local_window_size of at least 1",
            ));
        }
        if flag("smooth_softmax")? {
            return Err(attrs.error("smooth_softmax", "1 is not supported (only 0)"));
        }
        if spec.outputs != 3 {
            return Err(shape_err(format!(
                "3 outputs expected (output, present_key, present_value), {} requested; \
                 the attention-scores output is not supported",
                spec.outputs
            )));
        }
        Ok(Self {
            heads: h,
            kv_heads: kvh,
            scale,
            softcap,
            window: window.max(0) as usize,
            sliding_cache,
            rotary,
            interleaved,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn dims(
        &self,
        q: &[usize],
        k: Option<&[usize]>,
        v: Option<&[usize]>,
        past: Option<(&[usize], &[usize])>,
        seqlens: &[usize],
        total: &[usize],
        cos: Option<(&[usize], &[usize])>,
    ) -> Result<Dims, KernelError> {
        let (h, kvh) = (self.heads, self.kv_heads);
        let [batch, seq, hidden] = *q else {
            return Err(shape_err(format!("query must be 3-D, got {q:?}")));
        };
        let (d, packed) = match (k, v) {
            (None, None) => {
                let n = h + 2 * kvh;
                if hidden % n != 0 {
                    return Err(shape_err(format!(
                        "packed QKV hidden size {hidden} is not a multiple of {n} heads"
                    )));
                }
                (hidden / n, true)
            }
            (Some(k), Some(v)) => {
                if hidden % h != 0 {
                    return Err(shape_err(format!(
                        "query hidden size {hidden} is not a multiple of {h} heads"
                    )));
                }
                let d = hidden / h;
                let want = [batch, seq, kvh * d];
                if k != want || v != want {
                    return Err(shape_err(format!(
                        "key {k:?} and value {v:?} must be {want:?}"
                    )));
                }
                (d, false)
            }
            _ => return Err(shape_err("key and value must be given together")),
        };
        let past = match past {
            None => 0,
            Some((pk, pv)) => match pk {
                [b, g, p, pd] if *b == batch && *g == kvh && *pd == d && pk == pv => *p,
                _ => {
                    return Err(shape_err(format!(
                        "past_key {pk:?} and past_value {pv:?} must both be [{batch}, {kvh}, past, {d}]"
                    )));
                }
            },
        };
        if seqlens != [batch] {
            return Err(shape_err(format!(
                "seqlens_k must be [{batch}], got {seqlens:?}"
            )));
        }
        if crate::element_count(total) != Some(1) {
            return Err(shape_err(format!(
                "total_sequence_length must hold one value, got shape {total:?}"
            )));
        }
        let half = match (self.rotary, cos) {
            (false, _) => 0,
            (true, None) => return Err(shape_err("do_rotary needs cos_cache and sin_cache")),
            (true, Some((c, s))) => match c {
                [_, half] if c == s && *half > 0 && 2 * half <= d => *half,
                _ => {
                    return Err(shape_err(format!(
                        "cos_cache {c:?} and sin_cache {s:?} must both be [max_position, n] with 0 < 2n <= {d}"
                    )));
                }
            },
        };
        Ok(Dims {
            batch,
            seq,
            d,
            packed,
            past,
            half,
        })
    }

    /// [`Self::run`] for the query's element type.
    fn run_typed(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
        in_place: bool,
    ) -> Result<(), KernelError> {
        match input(OP, inputs, 0)?.dtype() {
            ElementType::F32 => self.run::<f32>(inputs, outputs, par, in_place),
            ElementType::F16 => self.run::<half::f16>(inputs, outputs, par, in_place),
            ElementType::BF16 => self.run::<half::bf16>(inputs, outputs, par, in_place),
            dtype => Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
    }

    /// The step; `in_place`: the past is not given, the presents hold it
    /// (their buffers are the pasts', [`Operator::execute_in_place`]), and
    /// only the new rows are written.
    fn run<'a, T: Float>(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &'a mut [Tensor],
        par: &dyn ParallelFor,
        in_place: bool,
    ) -> Result<(), KernelError> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let q_t = input(OP, inputs, 0)?;
        let (k_t, v_t) = (get(1), get(2));
        let (pk_t, pv_t) = if in_place {
            (None, None)
        } else {
            (get(3), get(4))
        };
        let seqlens_t = input(OP, inputs, 5)?;
        let total_t = input(OP, inputs, 6)?;
        let (cos_t, sin_t) = (get(7), get(8));
        let present_shape = |i: usize| -> Result<[usize; 4], KernelError> {
            let shape = outputs.get(i).map_or(&[][..], Tensor::shape);
            <[usize; 4]>::try_from(shape)
                .map_err(|_| shape_err(format!("present output {i} has shape {shape:?}")))
        };
        let held = if in_place {
            Some((present_shape(1)?, present_shape(2)?))
        } else {
            None
        };
        let past_shapes = match (pk_t, pv_t, &held) {
            (_, _, Some((k, v))) => Some((&k[..], &v[..])),
            (Some(k), Some(v), None) => Some((k.shape(), v.shape())),
            (None, None, None) => None,
            _ => return Err(shape_err("past_key and past_value must be given together")),
        };
        let cos_shapes = match (cos_t, sin_t) {
            (Some(c), Some(s)) => Some((c.shape(), s.shape())),
            _ => None,
        };
        let dims = self.dims(
            q_t.shape(),
            k_t.map(Tensor::shape),
            v_t.map(Tensor::shape),
            past_shapes,
            seqlens_t.shape(),
            total_t.shape(),
            cos_shapes,
        )?;
        let (h, kvh, d, s, batch) = (self.heads, self.kv_heads, dims.d, dims.seq, dims.batch);
        let seqlens = Ints::of(OP, seqlens_t)?;
        let total = Ints::of(OP, total_t)?.get(0);
        let [y, pk_out, pv_out] = outputs else {
            return Err(shape_err(format!(
                "3 outputs expected, {} given",
                outputs.len()
            )));
        };
        let len = match pk_out.shape() {
            [_, _, l, _] => *l,
            other => return Err(shape_err(format!("present_key has shape {other:?}"))),
        };
        let first = total == s as i64;
        // Per batch: tokens before the new ones (validated once here). A
        // windowed cache holds the tail of longer sequences.
        let windowed = self.sliding_cache;
        for b in 0..batch {
            let tot = seqlens.get(b) + 1;
            let past = if first { 0 } else { tot - s as i64 };
            if tot < 1
                || past < 0
                || (!windowed
                    && (tot > len as i64 || past as usize > dims.past || past as usize + s > len))
            {
                return Err(KernelError::Invalid {
                    op: OP,
                    detail: format!(
                        "seqlens_k[{b}] = {} does not fit {s} new tokens, {} past rows and {len} present rows",
                        tot - 1,
                        dims.past
                    ),
                });
            }
        }
        let past_of = |b: usize| -> usize {
            if first {
                0
            } else {
                (seqlens.get(b) + 1) as usize - s
            }
        };
        let position = |b: usize, i: usize| -> usize {
            if first {
                if (i as i64) < seqlens.get(b) + 1 {
                    i
                } else {
                    1
                }
            } else {
                past_of(b) + i
            }
        };
        let rotary = match (self.rotary, cos_t, sin_t) {
            (true, Some(c), Some(sn)) => {
                let r = Rotary {
                    cos: typed::<T>(OP, c)?,
                    sin: typed::<T>(OP, sn)?,
                    half: dims.half,
                    interleaved: self.interleaved,
                };
                let last = (0..batch)
                    .flat_map(|b| (0..s).map(move |i| (b, i)))
                    .map(|(b, i)| position(b, i))
                    .max()
                    .unwrap_or(0);
                if batch * s > 0 && last >= r.positions() {
                    return Err(KernelError::Invalid {
                        op: OP,
                        detail: format!(
                            "position {last} is outside the rotary caches' {} rows",
                            r.positions()
                        ),
                    });
                }
                Some(r)
            }
            _ => None,
        };
        let qkv = typed::<T>(OP, q_t)?;
        let (q_strides, kv_strides, k_new, v_new) = if dims.packed {
            let st = Strides::bsnh(s, h + 2 * kvh, d);
            (st, st, &qkv[h * d..], &qkv[(h + kvh) * d..])
        } else {
            let k = typed::<T>(OP, input(OP, inputs, 1)?)?;
            let v = typed::<T>(OP, input(OP, inputs, 2)?)?;
            check_len(OP, "key", k.len(), batch * s * kvh * d)?;
            check_len(OP, "value", v.len(), batch * s * kvh * d)?;
            (Strides::bsnh(s, h, d), Strides::bsnh(s, kvh, d), k, v)
        };
        let want_q = batch * s * if dims.packed { h + 2 * kvh } else { h } * d;
        check_len(OP, "query", qkv.len(), want_q)?;
        let past_strides = Strides::bnsh(dims.past, kvh, d);
        let present_strides = Strides::bnsh(len, kvh, d);
        let empty: &[T] = &[];
        if windowed && (0..batch).any(|b| past_of(b) + s > len) {
            let pasts: Vec<usize> = (0..batch).map(past_of).collect();
            let steps = super::windowed::plan(&pasts, s, len, self.window)?;
            // A window that moves rewrites every row: a past held in the
            // presents is read from a copy (charged as scratch).
            let copies = if in_place {
                Some((
                    typed::<T>(OP, pk_out)?.to_vec(),
                    typed::<T>(OP, pv_out)?.to_vec(),
                ))
            } else {
                None
            };
            let past_k = match (pk_t, &copies) {
                (_, Some((k, _))) => &k[..],
                (Some(t), None) => typed::<T>(OP, t)?,
                (None, None) => empty,
            };
            let past_v = match (pv_t, &copies) {
                (_, Some((_, v))) => &v[..],
                (Some(t), None) => typed::<T>(OP, t)?,
                (None, None) => empty,
            };
            let step = super::windowed::Windowed {
                heads: (h, kvh),
                d,
                s,
                window: self.window,
                scale: if self.scale == 0.0 {
                    1.0 / (d as f32).sqrt()
                } else {
                    self.scale
                },
                softcap: self.softcap,
                steps: &steps,
                q: (qkv, q_strides),
                new: (k_new, v_new, kv_strides),
                past: (past_k, past_v, past_strides),
                rotary,
                position: &position,
            };
            let y = typed_mut::<T>(OP, y)?;
            check_len(OP, "output", y.len(), batch * s * h * d)?;
            let pk = typed_mut::<T>(OP, pk_out)?;
            let pv = typed_mut::<T>(OP, pv_out)?;
            return step.run(y, [pk, pv], len, par);
        }
        for (dst, past_t, new, rotate) in [
            (&mut *pk_out, pk_t, k_new, true),
            (&mut *pv_out, pv_t, v_new, false),
        ] {
            let dst = typed_mut::<T>(OP, dst)?;
            check_len(OP, "present", dst.len(), batch * kvh * len * d)?;
            let past = past_t
                .map(|t| typed::<T>(OP, t))
                .transpose()?
                .unwrap_or(empty);
            let rot = if rotate { rotary } else { None };
            let new_row = |b: usize, g: usize, j: usize, row: &mut [T]| {
                let p = past_of(b);
                let o = kv_strides.b * b + kv_strides.s * (j - p) + kv_strides.h * g;
                let src = &new[o..o + d];
                match &rot {
                    Some(r) => r.apply(src, row, position(b, j - p)),
                    None => row.copy_from_slice(src),
                }
            };
            if in_place {
                // The past rows are in place; rows after the new ones
                // keep whatever the buffer held (never read as keys).
                let rows = |b: usize| past_of(b)..past_of(b) + s;
                fill_row_ranges(dst, kvh, (len, s), d, &rows, par, &new_row);
                continue;
            }
            fill_rows(dst, kvh, (len, s), d, par, &|b, g, j, row| {
                let p = past_of(b);
                if j < p {
                    let o = past_strides.b * b + past_strides.h * g + j * d;
                    row.copy_from_slice(&past[o..o + d]);
                } else if j < p + s {
                    new_row(b, g, j, row);
                } else {
                    row.fill(T::default());
                }
            });
        }
        let window = self.window;
        let keys = |b: usize, i: usize| -> Range<usize> {
            let p = past_of(b) + i;
            let hi = (p + 1).min((seqlens.get(b) + 1) as usize);
            let lo = if window > 0 {
                (p + 1).saturating_sub(window)
            } else {
                0
            };
            lo.min(hi)..hi
        };
        let present = |t: &'a Tensor| -> Result<Rows<'a, T>, KernelError> {
            Ok(Rows::single(typed::<T>(OP, t)?, present_strides, d))
        };
        let problem = Problem {
            batch,
            q_heads: h,
            kv_heads: kvh,
            q_len: s,
            d,
            dv: d,
            q: qkv,
            q_strides,
            k: present(pk_out)?,
            v: present(pv_out)?,
            keys: &keys,
            mask: None,
            scale: if self.scale == 0.0 {
                1.0 / (d as f32).sqrt()
            } else {
                self.scale
            },
            softcap: self.softcap,
            rotary: rotary.map(|rotary| QueryRotary {
                rotary,
                position: &position,
            }),
            out_bsnh: true,
        };
        let y = typed_mut::<T>(OP, y)?;
        check_len(OP, "output", y.len(), batch * s * h * d)?;
        attend(&problem, y, par);
        Ok(())
    }
}

impl Operator for GroupQueryAttention {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 7, 12)?;
        if let Some(i) = (INPUTS..inputs.len()).find(|&i| inputs[i].is_some()) {
            return Err(shape_err(format!(
                "input {i} (position_ids, attention_bias or head_sink) is not supported"
            )));
        }
        let q = required(OP, inputs, 0)?;
        let k = optional(inputs, 1);
        let v = optional(inputs, 2);
        let pk = optional(inputs, 3);
        let pv = optional(inputs, 4);
        let seqlens = required(OP, inputs, 5)?;
        let total = required(OP, inputs, 6)?;
        let cos = optional(inputs, 7);
        let sin = optional(inputs, 8);
        let t = q.dtype;
        if !matches!(t, ElementType::F32 | ElementType::F16 | ElementType::BF16) {
            return Err(KernelError::UnsupportedType { op: OP, dtype: t });
        }
        for (name, i) in [
            ("key", k),
            ("value", v),
            ("past_key", pk),
            ("past_value", pv),
            ("cos_cache", cos),
            ("sin_cache", sin),
        ] {
            if let Some(i) = i
                && i.dtype != t
            {
                return Err(shape_err(format!(
                    "{name} holds {} where query holds {t}",
                    i.dtype
                )));
            }
        }
        for i in [seqlens, total] {
            if !matches!(i.dtype, ElementType::I32 | ElementType::I64) {
                return Err(KernelError::UnsupportedType {
                    op: OP,
                    dtype: i.dtype,
                });
            }
        }
        let past = match (pk, pv) {
            (Some(k), Some(v)) => Some((k.shape, v.shape)),
            (None, None) => None,
            _ => return Err(shape_err("past_key and past_value must be given together")),
        };
        let caches = match (cos, sin) {
            (Some(c), Some(s)) => Some((c.shape, s.shape)),
            (None, None) => None,
            _ => return Err(shape_err("cos_cache and sin_cache must be given together")),
        };
        let dims = self.dims(
            q.shape,
            k.map(|i| i.shape),
            v.map(|i| i.shape),
            past,
            seqlens.shape,
            total.shape,
            caches,
        )?;
        let known = total
            .value
            .and_then(|v| v.to_i64_vec())
            .and_then(|v| v.first().copied());
        let len = match known {
            _ if self.sliding_cache => {
                if past.is_none() {
                    return Err(shape_err(
                        "sliding_window_cache needs past_key and past_value",
                    ));
                }
                dims.past
            }
            Some(tot) => {
                if tot < dims.seq as i64 {
                    return Err(shape_err(format!(
                        "total_sequence_length {tot} is below the {} new tokens",
                        dims.seq
                    )));
                }
                (tot as usize).max(dims.past)
            }
            None => dims
                .past
                .checked_add(dims.seq)
                .ok_or_else(|| KernelError::Overflow {
                    op: OP,
                    what: format!("past {} + new {} tokens", dims.past, dims.seq),
                })?,
        };
        let (b, s, d) = (dims.batch, dims.seq, dims.d);
        let present = vec![b, self.kv_heads, len, d];
        crate::element_count(&present).ok_or_else(|| KernelError::Overflow {
            op: OP,
            what: format!("the present cache {present:?}"),
        })?;
        Ok(vec![
            OutputInfo {
                dtype: t,
                shape: vec![b, s, self.heads * d],
            },
            OutputInfo {
                dtype: t,
                shape: present.clone(),
            },
            OutputInfo {
                dtype: t,
                shape: present,
            },
        ])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        self.run_typed(inputs, outputs, par, false)
    }

    /// past_key into present_key, past_value into present_value: a shared
    /// buffer (ONNX Runtime GenAI's `past_present_share_buffer`) takes the
    /// new rows where it is.
    fn in_place(&self) -> &'static [(usize, usize)] {
        &[(3, 1), (4, 2)]
    }

    fn execute_in_place(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        self.run_typed(inputs, outputs, par, true)
    }

    /// A sliding-window cache updated in place copies its presents when
    /// the window moves.
    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        if !self.sliding_cache {
            return 0;
        }
        [3, 4]
            .iter()
            .filter_map(|&i| inputs.get(i).copied().flatten())
            .map(|i| {
                crate::element_count(i.shape)
                    .and_then(|n| i.dtype.byte_len(n as u64))
                    .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX))
            })
            .fold(0, usize::saturating_add)
    }
}
