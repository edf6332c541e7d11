//! `tokenizer.json` through the `tokenizers` crate (the Python package's
//! engine, with its Oniguruma regexes): encode, decode, and a streaming
//! decoder that never emits a broken UTF-8 sequence.

use std::path::Path;

use crate::error::TextError;

/// A loaded `tokenizer.json` (BPE, Unigram, WordPiece or WordLevel, with
/// its normalizer, pre-tokenizer, post-processor, decoder and added
/// tokens).
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    /// Loads a `tokenizer.json`.
    ///
    /// # Errors
    /// [`TextError::Io`] for an unreadable file, [`TextError::Tokenizer`]
    /// for one the library cannot load.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TextError> {
        let path = path.as_ref();
        let text = crate::error::read(path)?;
        let inner = text
            .parse::<tokenizers::Tokenizer>()
            .map_err(|e| TextError::Tokenizer {
                message: format!("{}: {e}", path.display()),
            })?;
        Ok(Self { inner })
    }

    /// The token ids of `text`; `add_special_tokens` adds what the
    /// tokenizer's post-processor adds (a BOS, `[CLS]`/`[SEP]`).
    ///
    /// # Errors
    /// [`TextError::Tokenizer`] when the tokenizer fails on this text.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<i64>, TextError> {
        let encoding = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(TextError::tokenizer)?;
        Ok(encoding.get_ids().iter().map(|&id| i64::from(id)).collect())
    }

    /// The text of `ids`; `skip_special_tokens` leaves out special added
    /// tokens (EOS, BOS, `<|im_end|>`).
    ///
    /// # Errors
    /// [`TextError::UnknownToken`] for an id outside the vocabulary.
    pub fn decode(&self, ids: &[i64], skip_special_tokens: bool) -> Result<String, TextError> {
        let ids = self.checked(ids)?;
        self.inner
            .decode(&ids, skip_special_tokens)
            .map_err(TextError::tokenizer)
    }

    /// Tokens in all, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The bytes token `id` stands for, when this is a byte-level
    /// tokenizer (its decoder is `ByteLevel`: each character of a vocabulary
    /// token is one byte); an added token gives its text's bytes, a special
    /// one none when `skip_special_tokens`. `None` for other tokenizers.
    ///
    /// # Errors
    /// [`TextError::UnknownToken`] for an id outside the vocabulary.
    pub fn token_bytes(
        &self,
        id: i64,
        skip_special_tokens: bool,
    ) -> Result<Option<Vec<u8>>, TextError> {
        if !matches!(
            self.inner.get_decoder(),
            Some(tokenizers::DecoderWrapper::ByteLevel(_))
        ) {
            return Ok(None);
        }
        let id = self.checked(&[id])?[0];
        let added = self.inner.get_added_vocabulary();
        if let Some(token) = added.simple_id_to_token(id) {
            if skip_special_tokens && added.is_special_token(&token) {
                return Ok(Some(Vec::new()));
            }
            return Ok(Some(token.into_bytes()));
        }
        let token = self.inner.id_to_token(id).unwrap_or_default();
        Ok(Some(
            token.chars().filter_map(crate::bytes::byte_of).collect(),
        ))
    }

    /// The id of a token (`"<|im_end|>"`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<i64> {
        self.inner.token_to_id(token).map(i64::from)
    }

    /// A streaming decoder: feed it ids one by one, get the text each
    /// completes.
    pub fn stream(&self, skip_special_tokens: bool) -> TextStream<'_> {
        TextStream {
            tokenizer: self,
            state: StreamState::new(skip_special_tokens),
        }
    }

    /// The text `id` completes after the ids `state` holds (possibly
    /// empty); the owned form of [`TextStream::step`], for a stream that
    /// cannot borrow its tokenizer.
    ///
    /// # Errors
    /// [`TextError::UnknownToken`] for an id outside the vocabulary.
    pub fn step(&self, state: &mut StreamState, id: i64) -> Result<String, TextError> {
        let id = self.checked(&[id])?[0];
        Ok(tokenizers::step_decode_stream(
            &self.inner,
            vec![id],
            state.skip_special_tokens,
            &mut state.ids,
            &mut state.prefix,
            &mut state.prefix_index,
        )
        .map_err(TextError::tokenizer)?
        .unwrap_or_default())
    }

    /// The text of the ids `state` holds back when the stream ends (an
    /// incomplete multi-byte character, decoded with U+FFFD as a whole
    /// decode would), so that every step's text and this one add up to
    /// the decode of all ids; empty when nothing is held back. The state
    /// then holds nothing.
    ///
    /// # Errors
    /// A decode the tokenizer refuses.
    pub fn finish(&self, state: &mut StreamState) -> Result<String, TextError> {
        let text = self
            .inner
            .decode(&state.ids, state.skip_special_tokens)
            .map_err(TextError::tokenizer)?;
        let rest = text
            .strip_prefix(state.prefix.as_str())
            .map(str::to_owned)
            .unwrap_or_default();
        *state = StreamState::new(state.skip_special_tokens);
        Ok(rest)
    }

    /// A stream state for text that continues earlier text (generated
    /// tokens after a prompt): a word-initial token keeps its leading space
    /// (`▁Paris` → `" Paris"`) instead of being decoded as the start of a
    /// text. The stream is seeded with an ordinary one-character token
    /// whose text is then left out.
    pub fn continuation(&self, skip_special_tokens: bool) -> StreamState {
        let mut state = StreamState::new(skip_special_tokens);
        let seed = (0..self.vocab_size().min(1 << 16) as u32).find_map(|id| {
            let text = self.inner.decode(&[id], skip_special_tokens).ok()?;
            let mut chars = text.chars();
            matches!((chars.next(), chars.next()), (Some(c), None) if c.is_ascii_alphanumeric())
                .then_some((id, text))
        });
        if let Some((id, text)) = seed {
            state.ids = vec![id];
            state.prefix = text;
            state.prefix_index = 1;
        }
        state
    }

    fn checked(&self, ids: &[i64]) -> Result<Vec<u32>, TextError> {
        let vocab = self.vocab_size();
        ids.iter()
            .map(|&id| {
                u32::try_from(id)
                    .ok()
                    .filter(|&u| (u as usize) < vocab)
                    .ok_or(TextError::UnknownToken { id, vocab })
            })
            .collect()
    }
}

/// The ids a streaming decode has seen and the text already returned.
#[derive(Debug, Clone, Default)]
pub struct StreamState {
    skip_special_tokens: bool,
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
}

impl StreamState {
    /// An empty stream; `skip_special_tokens` leaves special tokens out.
    pub fn new(skip_special_tokens: bool) -> Self {
        Self {
            skip_special_tokens,
            ..Self::default()
        }
    }
}

/// Text as tokens arrive ([`Tokenizer::stream`]): each step returns the
/// text the new id completes — empty while a multi-byte character or a
/// merge with the next token is still open — so the concatenation of the
/// steps is the decode of all ids.
#[derive(Debug)]
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    state: StreamState,
}

impl TextStream<'_> {
    /// The text `id` completes (possibly empty).
    ///
    /// # Errors
    /// [`TextError::UnknownToken`] for an id outside the vocabulary.
    pub fn step(&mut self, id: i64) -> Result<String, TextError> {
        self.tokenizer.step(&mut self.state, id)
    }

    /// The text still held back when the ids end ([`Tokenizer::finish`]).
    ///
    /// # Errors
    /// A decode the tokenizer refuses.
    pub fn finish(&mut self) -> Result<String, TextError> {
        self.tokenizer.finish(&mut self.state)
    }
}
