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

    /// The id of a token (`"<|im_end|>"`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<i64> {
        self.inner.token_to_id(token).map(i64::from)
    }

    /// A streaming decoder: feed it ids one by one, get the text each
    /// completes.
    pub fn stream(&self, skip_special_tokens: bool) -> TextStream<'_> {
        TextStream {
            tokenizer: self,
            inner: self.inner.decode_stream(skip_special_tokens),
        }
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

type Stream<'a> = tokenizers::DecodeStream<
    'a,
    tokenizers::ModelWrapper,
    tokenizers::NormalizerWrapper,
    tokenizers::PreTokenizerWrapper,
    tokenizers::PostProcessorWrapper,
    tokenizers::DecoderWrapper,
>;

/// Text as tokens arrive ([`Tokenizer::stream`]): each step returns the
/// text the new id completes — empty while a multi-byte character or a
/// merge with the next token is still open — so the concatenation of the
/// steps is the decode of all ids.
pub struct TextStream<'a> {
    tokenizer: &'a Tokenizer,
    inner: Stream<'a>,
}

impl std::fmt::Debug for TextStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextStream").finish_non_exhaustive()
    }
}

impl TextStream<'_> {
    /// The text `id` completes (possibly empty).
    ///
    /// # Errors
    /// [`TextError::UnknownToken`] for an id outside the vocabulary.
    pub fn step(&mut self, id: i64) -> Result<String, TextError> {
        let id = self.tokenizer.checked(&[id])?[0];
        Ok(self
            .inner
            .step(id)
            .map_err(TextError::tokenizer)?
            .unwrap_or_default())
    }
}
