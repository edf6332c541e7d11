//! Text in and text out for decoder models: the `tokenizer.json`,
//! `tokenizer_config.json`, `genai_config.json` and `generation_config.json`
//! that model folders carry, turned into token ids, prompts, search options
//! and the choice of each next token.
//!
//! The runtime itself (`onnx-prepared`) knows nothing of text: its
//! generation loop hands each step's logits to a [`Sampler`], and the
//! command line and the Python package put this crate around it.
//!
//! ```no_run
//! use onnx_prepared_text::{ModelFolder, Sampler};
//!
//! # fn main() -> Result<(), onnx_prepared_text::TextError> {
//! let folder = ModelFolder::open("models/qwen2-genai-int4")?;
//! let tokenizer = folder.tokenizer()?;
//! let ids = tokenizer.encode("The capital of France is", true)?;
//! let mut sampler = Sampler::new(folder.search().clone(), 7);
//! let next = sampler.next(&[0.1, 2.0, -1.0], &ids).expect("a non-empty row");
//! let mut stream = tokenizer.stream(true);
//! print!("{}", stream.step(next)?);
//! # Ok(()) }
//! ```

mod bytes;
mod error;
mod folder;
mod sample;
mod search;
mod template;
mod tokenizer;

pub use bytes::ByteStream;
pub use error::TextError;
pub use folder::ModelFolder;
pub use sample::Sampler;
pub use search::SearchOptions;
pub use template::{ChatTemplate, Message};
pub use tokenizer::{StreamState, TextStream, Tokenizer};
