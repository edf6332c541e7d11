//! Decoder-model conventions (cold path): which graph inputs of a causal
//! language model carry token ids, the attention mask, positions and the KV
//! cache, whatever exporter named them, and inputs generated from those
//! roles.
//!
//! Exporters name the same things differently: the fixtures use
//! `input_ids`, `attn_bias`, `past_key_0` → `present_key_0`; torch, optimum
//! and the ONNX Runtime GenAI builder use `attention_mask`, `position_ids`,
//! `past_key_values.0.key` → `present.0.key`, and GroupQueryAttention models
//! may take `seqlens_k` and `total_sequence_length`. Symbolic dims are named
//! freely (`sequence_length`, `past_sequence_length + 1`, `s10`): their
//! sizes come from the role of the input and the axis they appear on, so a
//! model is driven by two numbers, the new tokens `T` and the past length
//! `P`.
//!
//! `generate` holds the greedy decoding loop built on these roles.

mod generate;

use std::collections::BTreeSet;

use onnx_prepared_kernels::{DataMut, Tensor};

pub use generate::{
    Generated, Generator, KvCache, Next, genai_kv_cache, generate, generate_streaming,
    generate_with,
};

use crate::arena::{Ceiling, Domain, Reservation};
use crate::exec::RunError;
use crate::model::{Dim, GraphInput};
pub use crate::model::{InputRole, input_role, kv_cache_pairs};
use crate::model::{Operand, ResolvedModel};
use crate::{Error, model};

/// Sizes of the two numbers that drive a decoder model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lengths {
    /// Batch rows.
    pub batch: usize,
    /// New tokens this run.
    pub tokens: usize,
    /// Tokens already in the KV cache.
    pub past: usize,
}

/// The size each role gives the symbolic dim at `axis` of an input of rank
/// `rank`, if it decides it.
fn role_dim(role: InputRole, axis: usize, rank: usize, len: Lengths) -> Option<usize> {
    let last = rank.checked_sub(1)?;
    match role {
        InputRole::TokenIds | InputRole::PositionIds => Some(if axis == last && rank > 1 {
            len.tokens
        } else {
            len.batch
        }),
        InputRole::AttentionMask if axis == last => Some(len.past + len.tokens),
        InputRole::AttentionMask if rank >= 3 && axis + 1 == last => Some(len.tokens),
        InputRole::AttentionMask | InputRole::SeqlensK if axis == 0 => Some(len.batch),
        InputRole::PastKv if rank == 4 && axis == 2 => Some(len.past),
        InputRole::PastKv if rank == 3 && axis == 1 => Some(len.past),
        InputRole::PastKv if axis == 0 => Some(len.batch),
        InputRole::AttnBias if axis == last => Some(len.past + len.tokens),
        InputRole::AttnBias if axis + 1 == last => Some(len.tokens),
        _ => None,
    }
}

/// Every symbolic dim name the model's inputs declare, sorted.
pub fn dim_names(inputs: &[GraphInput]) -> Vec<String> {
    let names: BTreeSet<String> = inputs
        .iter()
        .flat_map(|i| i.dims.iter().flatten())
        .filter_map(|d| match d {
            Dim::Symbolic(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    names.into_iter().collect()
}

/// Sizes given by name (`--dim NAME=SIZE`) turned into [`Lengths`] and the
/// sizes of other dims. A name the model does not declare is an error that
/// lists the names it does; a dim that a role sizes (the new tokens, the
/// past, the total) sets `T` or `P`.
pub fn lengths_from_dims(
    inputs: &[GraphInput],
    given: &[(String, usize)],
    mut len: Lengths,
) -> Result<(Lengths, Vec<(String, usize)>), Error> {
    let names = dim_names(inputs);
    let mut others = Vec::new();
    let mut total = None;
    for (name, value) in given {
        if !names.contains(name) {
            return Err(RunError::Unsupported {
                what: format!(
                    "--dim {name}: the model has no symbolic dim `{name}`; its dims are: {}",
                    if names.is_empty() {
                        "(none)".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            }
            .into());
        }
        // What this name stands for: probe with distinct sizes.
        let probe = Lengths {
            batch: 1_000_003,
            tokens: 1_000_033,
            past: 1_000_037,
        };
        let mut meaning = None;
        for input in inputs {
            let Some(dims) = &input.dims else { continue };
            let role = input_role(&input.name);
            for (axis, d) in dims.iter().enumerate() {
                if matches!(d, Dim::Symbolic(s) if s == name) {
                    meaning = meaning.or(role_dim(role, axis, dims.len(), probe));
                }
            }
        }
        match meaning {
            Some(v) if v == probe.tokens => len.tokens = *value,
            Some(v) if v == probe.past => len.past = *value,
            Some(v) if v == probe.batch => len.batch = *value,
            Some(_) => total = Some((name, *value)),
            None => others.push((name.clone(), *value)),
        }
    }
    if let Some((name, value)) = total {
        len.past = value
            .checked_sub(len.tokens)
            .ok_or_else(|| RunError::Unsupported {
                what: format!(
                    "--dim {name}={value} is below the number of new tokens ({})",
                    len.tokens
                ),
            })?;
    }
    Ok((len, others))
}

/// The vocabulary size: the rows of the embedding table the token ids
/// index (a `Gather` or `GatherBlockQuantized` fed by them, possibly through
/// a `Cast`), else the last fixed dim of the first output.
pub fn vocab_size(resolved: &ResolvedModel) -> Option<usize> {
    let ids = resolved
        .inputs()
        .iter()
        .position(|i| input_role(&i.name) == InputRole::TokenIds)?;
    let mut frontier = vec![model::ValueId(ids as u32)];
    for _ in 0..3 {
        let mut next = Vec::new();
        for node in resolved.nodes() {
            let reads = node
                .inputs
                .iter()
                .position(|i| matches!(i, Some(Operand::Value(v)) if frontier.contains(v)));
            let Some(at) = reads else { continue };
            let name = node.op.name();
            if name.starts_with("Gather") && at == 1 {
                let rows = match node.inputs.first() {
                    Some(Some(Operand::Inline(i))) => resolved.inline(*i).shape().first().copied(),
                    Some(Some(Operand::Prepared(r))) => {
                        let w = resolved.requirements()[r.0 as usize].sources[0];
                        let dims = resolved.model().weights()[w.index()].dims();
                        dims.first().map(|&d| d as usize)
                    }
                    Some(Some(Operand::Consumed(w))) => {
                        let dims = resolved.model().weights()[w.index()].dims();
                        dims.first().map(|&d| d as usize)
                    }
                    _ => None,
                };
                if rows.is_some() {
                    return rows;
                }
            }
            next.extend(node.outputs.iter().copied());
        }
        frontier = next;
    }
    let (_, out) = resolved.outputs().first()?;
    let Operand::Value(v) = out else { return None };
    resolved
        .nodes()
        .iter()
        .find_map(|n| {
            let i = n.outputs.iter().position(|o| o == v)?;
            n.probe_outputs.get(i)
        })
        .and_then(|info| info.shape.last().copied())
        .filter(|&d| d > 1)
}

/// The probe shape of the value called `name` (best effort: the shape
/// resolution inferred with placeholder dims).
fn probe_shape<'r>(resolved: &'r ResolvedModel, name: &str) -> Option<&'r [usize]> {
    resolved.nodes().iter().find_map(|n| {
        let i = n
            .outputs
            .iter()
            .position(|&o| resolved.value_name(o) == name)?;
        n.probe_outputs.get(i).map(|o| o.shape.as_slice())
    })
}

/// The head size of the KV cache, from the first attention node
/// (`GroupQueryAttention`, `Attention` with 3D inputs): its query width over
/// the number of heads (over all heads when Q, K and V come packed).
pub fn kv_head_size(resolved: &ResolvedModel) -> Option<usize> {
    use onnx_prepared_kernels::Attributes;
    for node in &resolved.model().graph().node {
        let op = node.op_type.as_deref().unwrap_or_default();
        if op != "GroupQueryAttention" && op != "Attention" {
            continue;
        }
        // Resolution already refused malformed attributes.
        let attrs = model::NodeAttributes::new(node).ok()?;
        let int = |name| attrs.int(name).ok().flatten();
        let heads = int("num_heads").or(int("q_num_heads"))?;
        let kv_heads = int("kv_num_heads").unwrap_or(heads);
        let query = probe_shape(resolved, node.input.first()?)?;
        if query.len() != 3 {
            continue;
        }
        let packed = node.input.get(1).is_none_or(String::is_empty);
        let parts = if packed { heads + 2 * kv_heads } else { heads };
        let parts = usize::try_from(parts).ok().filter(|&p| p > 0)?;
        return Some(query[2] / parts).filter(|&d| d > 0);
    }
    None
}

/// The window of the sliding-window layers whose KV buffers are
/// window-sized (`GroupQueryAttention` with `sliding_window_cache = 1`):
/// the largest `local_window_size` among them.
pub fn sliding_window(resolved: &ResolvedModel) -> Option<usize> {
    use onnx_prepared_kernels::Attributes;
    resolved
        .model()
        .graph()
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() == Some("GroupQueryAttention"))
        .filter_map(|n| {
            let attrs = model::NodeAttributes::new(n).ok()?;
            let int = |name| attrs.int(name).ok().flatten();
            (int("sliding_window_cache") == Some(1))
                .then(|| int("local_window_size"))
                .flatten()
                .and_then(|w| usize::try_from(w).ok())
        })
        .max()
}

/// Sizes of symbolic dims no role decides but the model does: the head
/// size of past KV inputs declared as a symbolic dim (the GenAI builder's
/// `kv_cache_dim`), and the length of window-sized KV buffers (its
/// `past_sliding_length`: the window, the least such a buffer holds).
pub fn model_dims(resolved: &ResolvedModel) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    let head = kv_head_size(resolved);
    let window = sliding_window(resolved);
    let mut add = |name: &String, size| {
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.clone(), size));
        }
    };
    for input in resolved.inputs() {
        if input_role(&input.name) != InputRole::PastKv {
            continue;
        }
        let dims = input.dims.as_deref().unwrap_or(&[]);
        if let (Some(head), Some(Dim::Symbolic(name))) = (head, dims.last()) {
            add(name, head);
        }
        if let (Some(window), Some(Dim::Symbolic(name))) = (window, dims.get(2))
            && name.contains("sliding")
        {
            add(name, window);
        }
    }
    out
}

/// A deterministic pseudo-random stream (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Default for Rng {
    fn default() -> Self {
        Self(0x9e37_79b9_7f4a_7c15)
    }
}

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The shape `input` takes for `len` (symbolic dims sized by role, then
/// by `others`, else 1).
pub fn input_shape(input: &GraphInput, len: Lengths, others: &[(String, usize)]) -> Vec<usize> {
    let role = input_role(&input.name);
    let dims = input.dims.as_deref().unwrap_or(&[]);
    dims.iter()
        .enumerate()
        .map(|(axis, d)| match d {
            Dim::Fixed(n) => *n,
            Dim::Symbolic(name) => others
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| *v)
                .or_else(|| role_dim(role, axis, dims.len(), len))
                .unwrap_or(1),
            Dim::Unknown => role_dim(role, axis, dims.len(), len).unwrap_or(1),
        })
        .collect()
}

/// One input for `len`, filled by role: `ids` (or random ids below
/// `vocab`), a mask of ones, positions `P..P + T`, `seqlens_k` and
/// `total_sequence_length`, a causal `attn_bias`; other floats uniform in
/// [-1, 1), other integers in [0, 10), booleans alternating. Its bytes are
/// charged to the process's allocation ceiling while it is built: a size
/// past it is a typed error before anything is allocated.
pub fn input_tensor(
    input: &GraphInput,
    len: Lengths,
    others: &[(String, usize)],
    ids: Option<&[i64]>,
    vocab: usize,
    rng: &mut Rng,
) -> Result<Tensor, Error> {
    let shape = input_shape(input, len, others);
    let _charge = charge_inputs(&[(input, &shape)])?;
    fill_input(input, shape, len, ids, vocab, rng)
}

/// Charges the bytes of `inputs` (each with its shape) together to the
/// process's allocation ceiling, in the I/O domain.
fn charge_inputs(inputs: &[(&GraphInput, &Vec<usize>)]) -> Result<Reservation, Error> {
    let bytes = inputs.iter().try_fold(0usize, |sum, (input, shape)| {
        sum.checked_add(crate::model::tensor_bytes(input.dtype, shape))
    });
    let what = || match inputs {
        [(input, shape)] => format!("generated input `{}` of shape {shape:?}", input.name),
        _ => {
            let names: Vec<String> = inputs
                .iter()
                .map(|(i, shape)| format!("`{}` {shape:?}", i.name))
                .collect();
            format!("generating the inputs {}", names.join(", "))
        }
    };
    Ok(Ceiling::process().charge(Domain::Io, what, bytes.unwrap_or(usize::MAX))?)
}

/// [`input_tensor`] of `shape`, charged by the caller.
fn fill_input(
    input: &GraphInput,
    shape: Vec<usize>,
    len: Lengths,
    ids: Option<&[i64]>,
    vocab: usize,
    rng: &mut Rng,
) -> Result<Tensor, Error> {
    let role = input_role(&input.name);
    let mut t = Tensor::zeros(input.dtype, shape.clone()).map_err(|source| RunError::Kernel {
        node: format!("generated input `{}`", input.name),
        source,
    })?;
    let last = shape.last().copied().unwrap_or(1).max(1);
    let value = |k: usize, rng: &mut Rng| -> f64 {
        match role {
            InputRole::TokenIds => match ids {
                Some(ids) if !ids.is_empty() => ids[k % last % ids.len()] as f64,
                _ => (rng.next_u64() % vocab.max(1) as u64) as f64,
            },
            InputRole::AttentionMask => 1.0,
            InputRole::PositionIds => (len.past + k % last) as f64,
            InputRole::SeqlensK => (len.past + len.tokens).saturating_sub(1) as f64,
            InputRole::TotalSequenceLength => (len.past + len.tokens) as f64,
            InputRole::AttnBias => {
                let queries = shape.len().checked_sub(2).map_or(1, |a| shape[a]).max(1);
                let (i, j) = ((k / last) % queries, k % last);
                let past = last.saturating_sub(queries);
                if j <= past + i { 0.0 } else { -10000.0 }
            }
            _ => f64::NAN,
        }
    };
    match t.view_mut() {
        DataMut::F32(v) => {
            for (k, x) in v.iter_mut().enumerate() {
                let r = value(k, rng);
                *x = if r.is_nan() {
                    (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                } else {
                    r as f32
                };
            }
        }
        DataMut::F64(v) => {
            for (k, x) in v.iter_mut().enumerate() {
                let r = value(k, rng);
                *x = if r.is_nan() {
                    (rng.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
                } else {
                    r
                };
            }
        }
        DataMut::I64(v) => {
            for (k, x) in v.iter_mut().enumerate() {
                let r = value(k, rng);
                *x = if r.is_nan() {
                    (rng.next_u64() % 10) as i64
                } else {
                    r as i64
                };
            }
        }
        DataMut::I32(v) => {
            for (k, x) in v.iter_mut().enumerate() {
                let r = value(k, rng);
                *x = if r.is_nan() {
                    (rng.next_u64() % 10) as i32
                } else {
                    r as i32
                };
            }
        }
        DataMut::Bool(v) => {
            for (k, x) in v.iter_mut().enumerate() {
                let r = value(k, rng);
                *x = if r.is_nan() { k % 2 == 0 } else { r != 0.0 };
            }
        }
        _ => {}
    }
    Ok(t)
}

/// Inputs for every declared graph input at `len` (see [`input_tensor`]).
pub fn generated_inputs(
    resolved: &ResolvedModel,
    len: Lengths,
    others: &[(String, usize)],
) -> Result<Vec<(String, Tensor)>, Error> {
    let vocab = vocab_size(resolved).unwrap_or(8192);
    let mut others = others.to_vec();
    for (name, size) in model_dims(resolved) {
        if !others.iter().any(|(n, _)| *n == name) {
            others.push((name, size));
        }
    }
    let others = &others;
    let mut rng = Rng::default();
    // Every input is sized and charged before the first is allocated.
    let shapes: Vec<Vec<usize>> = resolved
        .inputs()
        .iter()
        .map(|i| input_shape(i, len, others))
        .collect();
    let sized: Vec<(&GraphInput, &Vec<usize>)> = resolved.inputs().iter().zip(&shapes).collect();
    let _charge = charge_inputs(&sized)?;
    resolved
        .inputs()
        .iter()
        .zip(shapes)
        .map(|(i, shape)| {
            Ok((
                i.name.clone(),
                fill_input(i, shape, len, None, vocab, &mut rng)?,
            ))
        })
        .collect()
}
