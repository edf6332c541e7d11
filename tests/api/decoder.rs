//! Decoder-model conventions: roles of inputs, KV-cache pairing and `--dim`
//! sizes, for the names the fixtures, torch, optimum and the ONNX Runtime
//! GenAI builder use.

use onnx_prepared::decoder::{
    InputRole, Lengths, input_role, input_shape, kv_cache_pairs, lengths_from_dims,
};
use onnx_prepared::exec::{Dim, GraphInput};
use onnx_prepared_kernels::ElementType;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

fn input(name: &str, dtype: ElementType, dims: &[&str]) -> GraphInput {
    GraphInput {
        name: name.into(),
        dtype,
        dims: Some(
            dims.iter()
                .map(|d| match d.parse() {
                    Ok(n) => Dim::Fixed(n),
                    Err(_) => Dim::Symbolic((*d).to_owned()),
                })
                .collect(),
        ),
    }
}

/// A GenAI-builder-shaped decoder: ids, mask, two layers of past KV.
fn genai_inputs() -> Vec<GraphInput> {
    let mut v = vec![
        input(
            "input_ids",
            ElementType::I64,
            &["batch_size", "sequence_length"],
        ),
        input(
            "attention_mask",
            ElementType::I64,
            &["batch_size", "total_sequence_length"],
        ),
    ];
    for l in 0..2 {
        for kv in ["key", "value"] {
            v.push(input(
                &format!("past_key_values.{l}.{kv}"),
                ElementType::F32,
                &["batch_size", "2", "past_sequence_length", "16"],
            ));
        }
    }
    v
}

#[test]
fn roles_follow_every_convention() {
    for (name, role) in [
        ("input_ids", InputRole::TokenIds),
        ("attention_mask", InputRole::AttentionMask),
        ("position_ids", InputRole::PositionIds),
        ("past_key_values.3.key", InputRole::PastKv),
        ("past_key_values.3.value", InputRole::PastKv),
        ("past_key_0", InputRole::PastKv),
        ("seqlens_k", InputRole::SeqlensK),
        ("total_sequence_length", InputRole::TotalSequenceLength),
        ("attn_bias", InputRole::AttnBias),
        ("pixel_values", InputRole::Other),
    ] {
        assert_eq!(input_role(name), role, "{name}");
    }
}

#[test]
fn kv_pairs_by_prefix_and_by_layer_and_kind() {
    // The fixtures: same suffix.
    let pairs = kv_cache_pairs(
        &names(&["input_ids", "past_key_0", "past_value_0", "past_key_1"]),
        &names(&[
            "logits",
            "present_key_0",
            "present_value_0",
            "present_key_1",
        ]),
    );
    assert_eq!(
        pairs,
        [
            ("present_key_0".to_owned(), "past_key_0".to_owned()),
            ("present_value_0".to_owned(), "past_value_0".to_owned()),
            ("present_key_1".to_owned(), "past_key_1".to_owned()),
        ]
    );
    // HF / optimum / GenAI: `present.N.kind` -> `past_key_values.N.kind`,
    // with layers 1 and 10 not confused.
    let pairs = kv_cache_pairs(
        &names(&[
            "input_ids",
            "past_key_values.10.value",
            "past_key_values.1.key",
            "past_key_values.1.value",
            "past_key_values.10.key",
        ]),
        &names(&[
            "logits",
            "present.1.key",
            "present.1.value",
            "present.10.key",
            "present.10.value",
        ]),
    );
    assert_eq!(
        pairs,
        [
            (
                "present.1.key".to_owned(),
                "past_key_values.1.key".to_owned()
            ),
            (
                "present.1.value".to_owned(),
                "past_key_values.1.value".to_owned()
            ),
            (
                "present.10.key".to_owned(),
                "past_key_values.10.key".to_owned()
            ),
            (
                "present.10.value".to_owned(),
                "past_key_values.10.value".to_owned()
            ),
        ]
    );
    // An output without a matching input stays unbound.
    assert!(kv_cache_pairs(&names(&["input_ids"]), &names(&["present.0.key"])).is_empty());
}

#[test]
fn dims_are_sized_by_role() {
    let inputs = genai_inputs();
    let len = Lengths {
        batch: 1,
        tokens: 16,
        past: 5,
    };
    assert_eq!(input_shape(&inputs[0], len, &[]), [1, 16]);
    assert_eq!(input_shape(&inputs[1], len, &[]), [1, 21]);
    assert_eq!(input_shape(&inputs[2], len, &[]), [1, 2, 5, 16]);
}

#[test]
fn dim_names_set_tokens_past_or_total() {
    let inputs = genai_inputs();
    let start = Lengths {
        batch: 1,
        tokens: 1,
        past: 1,
    };
    let given = [
        ("sequence_length".to_owned(), 7),
        ("past_sequence_length".to_owned(), 3),
    ];
    let (len, others) = lengths_from_dims(&inputs, &given, start).unwrap();
    assert_eq!((len.tokens, len.past), (7, 3));
    assert!(others.is_empty());
    // The total sets the past, given the new tokens.
    let given = [
        ("sequence_length".to_owned(), 4),
        ("total_sequence_length".to_owned(), 10),
    ];
    let (len, _) = lengths_from_dims(&inputs, &given, start).unwrap();
    assert_eq!((len.tokens, len.past), (4, 6));
    let given = [
        ("sequence_length".to_owned(), 4),
        ("total_sequence_length".to_owned(), 2),
    ];
    assert!(lengths_from_dims(&inputs, &given, start).is_err());
}

#[test]
fn an_unknown_dim_name_lists_the_models_names() {
    let err = lengths_from_dims(
        &genai_inputs(),
        &[("T".to_owned(), 8)],
        Lengths {
            batch: 1,
            tokens: 1,
            past: 0,
        },
    )
    .unwrap_err()
    .to_string();
    for name in [
        "`T`",
        "batch_size",
        "past_sequence_length",
        "sequence_length",
        "total_sequence_length",
    ] {
        assert!(err.contains(name), "{err}");
    }
}
