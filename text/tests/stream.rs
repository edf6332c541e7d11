//! Streaming decode with the committed byte-level BPE tokenizer: the text
//! of each step plus what `finish` flushes is the decode of all ids, also
//! when the ids end inside a multi-byte character.

use std::path::Path;

use onnx_prepared_text::Tokenizer;

fn bpe() -> Tokenizer {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/models/tokenizers/bpe/tokenizer.json");
    Tokenizer::from_file(path).unwrap()
}

#[test]
fn steps_and_finish_add_up_to_the_whole_decode() {
    let tokenizer = bpe();
    for text in ["plain words here", "emoji 😀🎉 and 日本語", "Привет 👨‍👩‍👧"]
    {
        let ids = tokenizer.encode(text, false).unwrap();
        // Every prefix of the ids: most end inside a character's bytes.
        for end in 1..=ids.len() {
            let mut stream = tokenizer.stream(true);
            let mut streamed = String::new();
            for &id in &ids[..end] {
                streamed.push_str(&stream.step(id).unwrap());
            }
            let held = stream.finish().unwrap();
            streamed.push_str(&held);
            assert_eq!(
                streamed,
                tokenizer.decode(&ids[..end], true).unwrap(),
                "{text:?}, {end} ids"
            );
            // Nothing is held twice.
            assert_eq!(stream.finish().unwrap(), "");
        }
    }
    // The text of a character cut short is flushed as U+FFFD, not dropped.
    let ids = tokenizer.encode("😀", false).unwrap();
    assert!(ids.len() > 1, "{ids:?}");
    let mut stream = tokenizer.stream(true);
    let steps: String = ids[..ids.len() - 1]
        .iter()
        .map(|&id| stream.step(id).unwrap())
        .collect();
    assert_eq!(steps, "");
    assert!(stream.finish().unwrap().contains('\u{FFFD}'));
}

/// A byte-level tokenizer's tokens are bytes: those of an encoding are the
/// text's bytes, streamed as onnxruntime-genai streams them.
#[test]
fn byte_level_tokens_are_the_texts_bytes() {
    let tokenizer = bpe();
    let text = "tabs\tand  spaces, Привет 😀 日本語";
    let ids = tokenizer.encode(text, false).unwrap();
    let mut bytes = Vec::new();
    let mut stream = onnx_prepared_text::ByteStream::new();
    let mut streamed = String::new();
    for &id in &ids {
        let b = tokenizer
            .token_bytes(id, true)
            .unwrap()
            .expect("byte-level");
        streamed.push_str(&stream.push(&b));
        bytes.extend(b);
    }
    assert_eq!(bytes, text.as_bytes());
    assert_eq!(streamed, text);
    // A special token is skipped, or its text.
    let end = tokenizer.token_id("<|im_end|>").unwrap();
    assert_eq!(tokenizer.token_bytes(end, true).unwrap(), Some(Vec::new()));
    assert_eq!(
        tokenizer.token_bytes(end, false).unwrap(),
        Some(b"<|im_end|>".to_vec())
    );
}
