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
