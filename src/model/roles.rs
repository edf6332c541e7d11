//! Roles of a decoder model's inputs by the names exporters give them, and
//! the KV-cache pairing of outputs to inputs (see `crate::decoder`, which
//! drives a model by these roles).

use std::collections::BTreeSet;

/// What a graph input carries in a decoder model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRole {
    /// Token ids `[batch, T]`.
    TokenIds,
    /// Attention mask over past and new tokens `[batch, P + T]` (ones).
    AttentionMask,
    /// Positions of the new tokens `[batch, T]` (`P..P + T`).
    PositionIds,
    /// A past key or value cache `[batch, heads, P, head_size]`.
    PastKv,
    /// GroupQueryAttention's `seqlens_k` (`P + T - 1` per batch row).
    SeqlensK,
    /// GroupQueryAttention's `total_sequence_length` (`P + T`).
    TotalSequenceLength,
    /// An additive causal mask `[.., T, P + T]` (0 or -10000).
    AttnBias,
    /// Anything else.
    Other,
}

/// The role of input `name` (by the names exporters use).
pub fn input_role(name: &str) -> InputRole {
    let n = name.to_ascii_lowercase();
    if n.contains("position_ids") || n == "positions" {
        InputRole::PositionIds
    } else if n.contains("input_ids") || n == "ids" || n == "tokens" {
        InputRole::TokenIds
    } else if n.contains("attention_mask") {
        InputRole::AttentionMask
    } else if n.contains("seqlens_k") {
        InputRole::SeqlensK
    } else if n.contains("total_sequence_length") {
        InputRole::TotalSequenceLength
    } else if n == "attn_bias" || n.contains("causal_mask") {
        InputRole::AttnBias
    } else if (n.contains("past") || n.contains("cache")) && kv_kind(&n).is_some() {
        InputRole::PastKv
    } else {
        InputRole::Other
    }
}

/// `key` or `value` for a cache tensor's name.
fn kv_kind(lower: &str) -> Option<&'static str> {
    // `past_key_values.0.key`: the last of the two words decides.
    let k = lower.rfind("key");
    let v = lower.rfind("value");
    match (k, v) {
        (Some(k), Some(v)) => Some(if k > v { "key" } else { "value" }),
        (Some(_), None) => Some("key"),
        (None, Some(_)) => Some("value"),
        (None, None) => None,
    }
}

/// The numbers in a name (`past_key_values.12.key` → `[12]`).
fn numbers(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// Output → input pairs of a KV cache: each `present…` output and the
/// `past…` input it becomes on the next step. The fixtures' convention
/// (`present_key_0` → `past_key_0`) pairs by prefix; otherwise an output
/// and an input pair when they carry the same layer number and the same
/// kind (`present.3.value` → `past_key_values.3.value`).
pub fn kv_cache_pairs(inputs: &[String], outputs: &[String]) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let pasts: Vec<&String> = inputs
        .iter()
        .filter(|i| input_role(i) == InputRole::PastKv)
        .collect();
    for o in outputs {
        let lower = o.to_ascii_lowercase();
        if !lower.contains("present") {
            continue;
        }
        let by_prefix = o
            .strip_prefix("present")
            .map(|rest| format!("past{rest}"))
            .filter(|i| inputs.contains(i));
        let found = by_prefix.or_else(|| {
            let kind = kv_kind(&lower)?;
            let layer = numbers(o);
            let mut matches = pasts.iter().filter(|i| {
                let l = i.to_ascii_lowercase();
                kv_kind(&l) == Some(kind) && numbers(i) == layer && !taken.contains(i.as_str())
            });
            let first = matches.next()?;
            matches.next().is_none().then(|| (*first).clone())
        });
        if let Some(input) = found
            && taken.insert(input.clone())
        {
            pairs.push((o.clone(), input));
        }
    }
    pairs
}
