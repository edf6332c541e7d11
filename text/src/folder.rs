//! A model folder: the decoder model and the text files beside it.

use std::path::{Path, PathBuf};

use crate::error::{TextError, read_json};
use crate::search::SearchOptions;
use crate::template::ChatTemplate;
use crate::tokenizer::Tokenizer;

/// A decoder model with its folder's `tokenizer.json`, chat template and
/// search options.
#[derive(Debug, Clone)]
pub struct ModelFolder {
    dir: PathBuf,
    model: PathBuf,
    search: SearchOptions,
    template: Option<ChatTemplate>,
}

impl ModelFolder {
    /// Opens a folder, or the folder of a model file. A folder's model is
    /// the decoder `genai_config.json` names (`model.decoder.filename`),
    /// else `model.onnx`. Reads the search options and the chat template;
    /// the tokenizer is loaded by [`ModelFolder::tokenizer`].
    ///
    /// # Errors
    /// [`TextError::Io`] for a folder without the model, and the errors of
    /// [`SearchOptions::from_folder`] and [`ChatTemplate::from_folder`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TextError> {
        let path = path.as_ref();
        let (dir, model) = if path.is_dir() {
            let genai = path.join("genai_config.json");
            let name = if genai.is_file() {
                read_json(&genai)?
                    .pointer("/model/decoder/filename")
                    .and_then(|f| f.as_str())
                    .map(str::to_owned)
            } else {
                None
            };
            let name = name.unwrap_or_else(|| "model.onnx".to_owned());
            if name.contains('/') || name.contains('\\') || name == ".." {
                return Err(TextError::Config {
                    path: genai,
                    message: format!(
                        "`model.decoder.filename` `{name}` is not a file name in the folder"
                    ),
                });
            }
            (path.to_owned(), path.join(name))
        } else {
            let dir = path
                .parent()
                .map_or_else(|| PathBuf::from("."), Path::to_owned);
            let dir = if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            };
            (dir, path.to_owned())
        };
        if !model.is_file() {
            return Err(TextError::Io {
                path: model,
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        Ok(Self {
            search: SearchOptions::from_folder(&dir)?,
            template: ChatTemplate::from_folder(&dir)?,
            dir,
            model,
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The decoder model file.
    pub fn model(&self) -> &Path {
        &self.model
    }

    /// The folder's search options.
    pub fn search(&self) -> &SearchOptions {
        &self.search
    }

    /// The folder's chat template.
    ///
    /// # Errors
    /// [`TextError::NoChatTemplate`] when it has none.
    pub fn chat_template(&self) -> Result<&ChatTemplate, TextError> {
        self.template
            .as_ref()
            .ok_or_else(|| TextError::NoChatTemplate {
                dir: self.dir.clone(),
            })
    }

    /// Loads the folder's `tokenizer.json`.
    ///
    /// # Errors
    /// [`TextError::NoTokenizer`] when there is none, else as
    /// [`Tokenizer::from_file`].
    pub fn tokenizer(&self) -> Result<Tokenizer, TextError> {
        let path = self.dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(TextError::NoTokenizer {
                dir: self.dir.clone(),
            });
        }
        Tokenizer::from_file(path)
    }
}
