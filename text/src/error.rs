//! The one error type of the text stack.

use std::path::PathBuf;

/// What went wrong reading a model folder's text files, tokenizing or
/// rendering a chat template; each names the file or the template.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A JSON file is malformed or a field has the wrong type.
    #[error("{}: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        message: String,
    },
    /// A folder has no `tokenizer.json`.
    #[error("{}: no tokenizer.json here; text needs the model folder's tokenizer (or pass token ids)", dir.display())]
    NoTokenizer {
        /// The folder.
        dir: PathBuf,
    },
    /// `tokenizer.json` could not be loaded, or encoding or decoding failed.
    #[error("tokenizer: {message}")]
    Tokenizer {
        /// The tokenizer library's message (with the file, when loading).
        message: String,
    },
    /// A token id the tokenizer does not have.
    #[error("token id {id} is outside the tokenizer's vocabulary of {vocab}")]
    UnknownToken {
        /// The id.
        id: i64,
        /// The tokenizer's vocabulary size, added tokens included.
        vocab: usize,
    },
    /// The folder has no chat template.
    #[error("{}: no chat template (tokenizer_config.json `chat_template` or chat_template.jinja)", dir.display())]
    NoChatTemplate {
        /// The folder.
        dir: PathBuf,
    },
    /// The chat template failed to parse or render (or called
    /// `raise_exception`).
    #[error("chat template: {message}")]
    Template {
        /// The template engine's message.
        message: String,
    },
}

impl TextError {
    pub(crate) fn tokenizer(e: impl std::fmt::Display) -> Self {
        Self::Tokenizer {
            message: e.to_string(),
        }
    }
}

/// Reads `path` as text.
pub(crate) fn read(path: &std::path::Path) -> Result<String, TextError> {
    std::fs::read_to_string(path).map_err(|source| TextError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Reads `path` as JSON.
pub(crate) fn read_json(path: &std::path::Path) -> Result<serde_json::Value, TextError> {
    serde_json::from_str(&read(path)?).map_err(|e| TextError::Config {
        path: path.to_owned(),
        message: e.to_string(),
    })
}
