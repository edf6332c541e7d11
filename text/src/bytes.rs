//! Byte-level tokens as bytes, and the streaming decode onnxruntime-genai's
//! `TokenizerStream` gives them: each character as its bytes complete, a
//! sequence that is not UTF-8 left out (a whole decode writes U+FFFD).

/// Whether byte `b` stands for itself in GPT-2's byte-to-character table
/// (printable Latin-1 but the soft hyphen); the other 68 bytes are the
/// characters from U+0100 on, in byte order.
fn printable(b: u32) -> bool {
    (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b)
}

/// The byte a character of a byte-level token stands for.
pub(crate) fn byte_of(c: char) -> Option<u8> {
    let c = c as u32;
    if c < 256 && printable(c) {
        return u8::try_from(c).ok();
    }
    // The others, in order: 0..=32, 127..=160 and 173.
    let b = match c.checked_sub(256)? {
        n @ 0..=32 => n,
        n @ 33..=66 => n - 33 + 127,
        67 => 173,
        _ => return None,
    };
    u8::try_from(b).ok()
}

/// Text as the bytes of tokens arrive ([`crate::Tokenizer::token_bytes`]),
/// as onnxruntime-genai streams it: every complete character is returned
/// once its bytes are in, one whose bytes are not valid UTF-8 is dropped,
/// and the bytes of a character still incomplete wait for the next token.
#[derive(Debug, Clone, Default)]
pub struct ByteStream {
    pending: Vec<u8>,
}

impl ByteStream {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The text `bytes` complete after the bytes held back.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut text = String::new();
        let mut at = 0;
        while at < self.pending.len() {
            // The length the lead byte announces (1 for a stray
            // continuation byte).
            let len = match self.pending[at] {
                b if b & 0xE0 == 0xC0 => 2,
                b if b & 0xF0 == 0xE0 => 3,
                b if b & 0xF8 == 0xF0 => 4,
                _ => 1,
            };
            let Some(unit) = self.pending.get(at..at + len) else {
                break; // incomplete: wait for the next token
            };
            if let Ok(s) = std::str::from_utf8(unit) {
                text.push_str(s);
            }
            at += len;
        }
        self.pending.drain(..at);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_table_inverts_gpt2s() {
        // Printable bytes stand for themselves; space is U+0120, newline
        // U+010A, the soft hyphen (0xAD) U+0143: GPT-2's table.
        assert_eq!(byte_of('a'), Some(b'a'));
        assert_eq!(byte_of('\u{120}'), Some(b' '));
        assert_eq!(byte_of('\u{10A}'), Some(b'\n'));
        assert_eq!(byte_of('\u{143}'), Some(0xAD));
        assert_eq!(byte_of('\u{100}'), Some(0));
        assert_eq!(byte_of('\u{200}'), None);
        let mut seen: Vec<u8> = (0u32..256 + 68)
            .filter_map(char::from_u32)
            .filter_map(byte_of)
            .collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 256);
    }

    #[test]
    fn characters_complete_across_pushes_and_invalid_ones_are_dropped() {
        let mut s = ByteStream::new();
        let smile = "😀".as_bytes();
        assert_eq!(s.push(b"a"), "a");
        assert_eq!(s.push(&smile[..2]), "");
        assert_eq!(s.push(&smile[2..]), "😀");
        // A stray continuation byte and a lead byte followed by ASCII.
        assert_eq!(s.push(&[0x80, b'b']), "b");
        assert_eq!(s.push(&[0xC3, b'c']), "");
        assert_eq!(s.push(b"d"), "d");
        assert_eq!(s.push("é".as_bytes()), "é");
    }
}
