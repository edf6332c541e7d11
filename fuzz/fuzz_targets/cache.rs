//! The prepared cache's parsers on hostile bytes. The first byte picks
//! what the rest is: even, a companion model (`Manifest::parse`); odd, one
//! payload (`decode_payload`).
//!
//! Oracles: a manifest that parses, written and parsed again, has the same
//! entries and digests; a payload that decodes, encoded and decoded again,
//! encodes to the same bytes (bytes, so NaN payloads compare).
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_prepared::cache::{Decoded, Manifest, decode_payload, encode_packed, encode_tensor};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let path = std::path::Path::new("fuzz.prepared.onnx");
        let Ok(m) = Manifest::parse(rest, path) else {
            return;
        };
        let again = Manifest::parse(&m.to_bytes(), path).expect("parse what was written");
        assert_eq!(again.entries, m.entries, "entries changed through write and parse");
        assert_eq!(again.source_digests, m.source_digests);
        assert!(again.rejected.is_empty(), "a written entry was rejected");
    } else {
        let Ok(decoded) = decode_payload(rest) else {
            return;
        };
        let encode = |d: &Decoded| match d {
            Decoded::Tensor(t) => encode_tensor(t),
            Decoded::Packed(p) => encode_packed(p),
        };
        let bytes = encode(&decoded);
        let back = decode_payload(&bytes).expect("decode what was encoded");
        assert_eq!(encode(&back), bytes, "the payload changed through encode and decode");
    }
});
