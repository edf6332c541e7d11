//! The native side of `onnx_prepared.genai` (onnxruntime-genai's API): a
//! model folder opened with its session, tokenizer, chat template and
//! search options; a step-wise generator over it. The Python module
//! (`python/onnx_prepared/genai.py`) gives them onnxruntime-genai's names.

use std::path::PathBuf;
use std::sync::Arc;

use onnx_prepared::decoder::{self, Generator, KvCache};
use onnx_prepared::{RuntimeSession, SessionOptions};
use onnx_prepared_text::{
    ByteStream, Message, ModelFolder, Sampler, SearchOptions, StreamState, Tokenizer,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors;

fn text_error(e: onnx_prepared_text::TextError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// A model folder: its decoder session, tokenizer (if it has one) and
/// search options.
#[pyclass(module = "onnx_prepared._onnx_prepared", name = "GenaiModel", frozen)]
pub struct GenaiModel {
    folder: ModelFolder,
    session: Arc<RuntimeSession>,
    tokenizer: Option<Arc<Tokenizer>>,
    /// The cache form the folder's `genai_config.json` names.
    cache: KvCache,
}

impl std::fmt::Debug for GenaiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GenaiModel")
            .field("dir", &self.folder.dir())
            .finish_non_exhaustive()
    }
}

impl GenaiModel {
    fn tokenizer(&self) -> PyResult<&Arc<Tokenizer>> {
        self.tokenizer.as_ref().ok_or_else(|| {
            PyRuntimeError::new_err(format!(
                "{}: no tokenizer.json in the model folder",
                self.folder.dir().display()
            ))
        })
    }
}

#[pymethods]
impl GenaiModel {
    /// Opens `folder` (or the folder of a model file) with `threads`
    /// threads in all.
    #[new]
    #[pyo3(signature = (folder, threads = 1))]
    fn new(py: Python<'_>, folder: PathBuf, threads: usize) -> PyResult<Self> {
        let folder = ModelFolder::open(&folder).map_err(text_error)?;
        let model = folder.model().to_owned();
        let options = SessionOptions::default().with_threads(threads.clamp(1, 1024));
        let session = py
            .detach(move || RuntimeSession::open(model, options))
            .map_err(|e| errors::from_error(py, &e))?;
        let tokenizer = match folder.tokenizer() {
            Ok(t) => Some(Arc::new(t)),
            Err(onnx_prepared_text::TextError::NoTokenizer { .. }) => None,
            Err(e) => return Err(text_error(e)),
        };
        let cache = decoder::genai_kv_cache(folder.model()).unwrap_or(KvCache::Growing);
        Ok(Self {
            folder,
            session: Arc::new(session),
            tokenizer,
            cache,
        })
    }

    /// The folder's search options as a dict (`do_sample`, `temperature`,
    /// `top_k`, `top_p`, `min_p`, `repetition_penalty`, `max_length`,
    /// `eos_token_ids`).
    fn search_options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let o = self.folder.search();
        let d = PyDict::new(py);
        d.set_item("do_sample", o.do_sample)?;
        d.set_item("temperature", o.temperature)?;
        d.set_item("top_k", o.top_k)?;
        d.set_item("top_p", o.top_p)?;
        d.set_item("min_p", o.min_p)?;
        d.set_item("repetition_penalty", o.repetition_penalty)?;
        d.set_item("max_length", o.max_length)?;
        d.set_item("eos_token_ids", o.eos_token_ids.clone())?;
        Ok(d)
    }

    /// The token ids of `text` (special tokens added as the tokenizer's
    /// post-processor says).
    fn encode(&self, text: &str) -> PyResult<Vec<i64>> {
        self.tokenizer()?.encode(text, true).map_err(text_error)
    }

    /// The text of `ids`, special tokens left out.
    fn decode(&self, ids: Vec<i64>) -> PyResult<String> {
        self.tokenizer()?.decode(&ids, true).map_err(text_error)
    }

    /// The id of `token`, if the vocabulary has it.
    fn token_id(&self, token: &str) -> PyResult<Option<i64>> {
        Ok(self.tokenizer()?.token_id(token))
    }

    /// `messages` (a JSON list of `{"role", "content"}`) through the chat
    /// template (`template`, else the folder's).
    #[pyo3(signature = (messages, add_generation_prompt = true, template = None))]
    fn apply_chat_template(
        &self,
        messages: &str,
        add_generation_prompt: bool,
        template: Option<String>,
    ) -> PyResult<String> {
        let messages: Vec<Message> = serde_json::from_str(messages)
            .map_err(|e| PyValueError::new_err(format!("messages: {e}")))?;
        let rendered = match template {
            Some(t) => onnx_prepared_text::ChatTemplate::new(t, &[])
                .render(&messages, add_generation_prompt),
            None => self
                .folder
                .chat_template()
                .map_err(text_error)?
                .render(&messages, add_generation_prompt),
        };
        rendered.map_err(text_error)
    }
}

/// A streaming decoder over a model's tokenizer.
#[pyclass(module = "onnx_prepared._onnx_prepared", name = "GenaiTokenizerStream")]
#[derive(Debug)]
pub struct GenaiTokenizerStream {
    tokenizer: Arc<Tokenizer>,
    state: StreamState,
    /// A byte-level tokenizer's stream, as onnxruntime-genai's decodes it
    /// (characters as their bytes complete, invalid ones left out).
    bytes: Option<ByteStream>,
}

#[pymethods]
impl GenaiTokenizerStream {
    /// A stream over `model`'s tokenizer.
    #[new]
    fn new(model: &GenaiModel) -> PyResult<Self> {
        let tokenizer = model.tokenizer()?.clone();
        // Generated text continues the prompt, as onnxruntime-genai's
        // stream decodes it.
        let state = tokenizer.continuation(true);
        let byte_level = tokenizer.vocab_size() > 0
            && tokenizer
                .token_bytes(0, true)
                .map_err(text_error)?
                .is_some();
        Ok(Self {
            tokenizer,
            state,
            bytes: byte_level.then(ByteStream::new),
        })
    }

    /// The text `token` completes (possibly empty).
    fn decode(&mut self, token: i64) -> PyResult<String> {
        if let Some(stream) = &mut self.bytes {
            let bytes = self
                .tokenizer
                .token_bytes(token, true)
                .map_err(text_error)?
                .unwrap_or_default();
            return Ok(stream.push(&bytes));
        }
        self.tokenizer
            .step(&mut self.state, token)
            .map_err(text_error)
    }
}

/// A step-wise generator: `append_tokens` runs the model, `generate_next_token`
/// chooses a token from the last logits (the model runs on it when the
/// next token is asked for).
#[pyclass(module = "onnx_prepared._onnx_prepared", name = "GenaiGenerator")]
#[derive(Debug)]
pub struct GenaiGenerator {
    generator: Generator<Arc<RuntimeSession>>,
    sampler: Sampler,
    /// The last token chosen, not yet run through the model.
    pending: Option<i64>,
    max_length: usize,
}

#[pymethods]
impl GenaiGenerator {
    /// A generator over `model` with `options` (the folder's search options
    /// as updated by `set_search_options`: keys of
    /// `GenaiModel.search_options`, and `random_seed`).
    #[new]
    fn new(model: &GenaiModel, options: &Bound<'_, PyDict>) -> PyResult<Self> {
        let get = |key: &str| options.get_item(key);
        let mut o: SearchOptions = model.folder.search().clone();
        // Each option given replaces the folder's.
        fn set<T: for<'a, 'py> FromPyObject<'a, 'py>>(
            value: Option<Bound<'_, PyAny>>,
            slot: &mut T,
        ) -> PyResult<()> {
            if let Some(v) = value {
                *slot = v.extract().map_err(Into::into)?;
            }
            Ok(())
        }
        set(get("do_sample")?, &mut o.do_sample)?;
        set(get("temperature")?, &mut o.temperature)?;
        set(get("top_k")?, &mut o.top_k)?;
        set(get("top_p")?, &mut o.top_p)?;
        set(get("min_p")?, &mut o.min_p)?;
        set(get("repetition_penalty")?, &mut o.repetition_penalty)?;
        let seed: i64 = match get("random_seed")? {
            Some(v) => v.extract()?,
            None => -1,
        };
        let seed = if seed < 0 {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        } else {
            seed as u64
        };
        let default_max = match model.cache {
            KvCache::Shared { capacity, .. } => capacity,
            KvCache::Growing => o
                .max_length
                .unwrap_or(onnx_prepared::limits::MAX_NEW_TOKENS),
        };
        let max_length: usize = match get("max_length")? {
            Some(v) => v.extract()?,
            None => o.max_length.unwrap_or(default_max),
        };
        if max_length == 0 {
            return Err(PyValueError::new_err("max_length must be at least 1"));
        }
        // A shared-buffer model holds max_length positions, as
        // onnxruntime-genai sizes its buffers.
        let cache = match model.cache {
            KvCache::Shared { window, .. } => KvCache::Shared {
                capacity: max_length,
                window: window.map(|w| w.min(max_length)),
            },
            KvCache::Growing => KvCache::Growing,
        };
        let generator = Generator::new(model.session.clone(), cache)
            .map_err(|e| Python::attach(|py| errors::from_error(py, &e)))?;
        Ok(Self {
            generator,
            sampler: Sampler::new(o, seed),
            pending: None,
            max_length,
        })
    }

    /// Runs the model on `tokens` after the sequence so far.
    fn append_tokens(&mut self, py: Python<'_>, tokens: Vec<i64>) -> PyResult<()> {
        let mut all = Vec::with_capacity(tokens.len() + 1);
        all.extend(self.pending.take());
        all.extend_from_slice(&tokens);
        if all.is_empty() {
            return Ok(());
        }
        if self.generator.sequence().len() + all.len() > self.max_length {
            return Err(PyRuntimeError::new_err(format!(
                "{} tokens exceed max_length {}",
                self.generator.sequence().len() + all.len(),
                self.max_length
            )));
        }
        let generator = &mut self.generator;
        py.detach(move || generator.append(&all))
            .map_err(|e| errors::from_error(py, &e))
    }

    /// Chooses the next token (after running the model on the last one).
    fn generate_next_token(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(last) = self.pending.take() {
            let generator = &mut self.generator;
            py.detach(move || generator.append(&[last]))
                .map_err(|e| errors::from_error(py, &e))?;
        }
        let logits = self
            .generator
            .logits()
            .map_err(|e| errors::from_error(py, &e))?;
        let next = self
            .sampler
            .next(logits, self.generator.sequence())
            .ok_or_else(|| PyRuntimeError::new_err("the model returned no logits"))?;
        self.pending = Some(next);
        Ok(())
    }

    /// The token the last `generate_next_token` chose.
    fn get_next_tokens(&self) -> Vec<i64> {
        self.pending
            .or_else(|| self.generator.sequence().last().copied())
            .into_iter()
            .collect()
    }

    /// Every token: the appended ones and the chosen ones.
    fn get_sequence(&self) -> Vec<i64> {
        let mut s = self.generator.sequence().to_vec();
        s.extend(self.pending);
        s
    }

    /// Whether the last token is an EOS id or the sequence is max_length
    /// long.
    fn is_done(&self) -> bool {
        let len = self.generator.sequence().len() + usize::from(self.pending.is_some());
        self.pending
            .is_some_and(|t| self.sampler.options().is_eos(t))
            || len >= self.max_length
    }

    /// Keeps the first `length` tokens; generation goes on from them.
    fn rewind_to(&mut self, py: Python<'_>, length: usize) -> PyResult<()> {
        let kept = self.generator.sequence().len();
        if length > kept + usize::from(self.pending.is_some()) {
            return Err(PyValueError::new_err(format!(
                "rewind_to({length}) on a sequence of {} tokens",
                kept + usize::from(self.pending.is_some())
            )));
        }
        if length > kept {
            return Ok(()); // the pending token stays
        }
        self.pending = None;
        if length == kept {
            return Ok(()); // the logits are the kept sequence's
        }
        // The last kept token runs again with the next step, which
        // rebuilds the cache of the prefix before it.
        let last = length.checked_sub(1).map(|i| self.generator.sequence()[i]);
        self.generator
            .rewind_to(length.saturating_sub(1))
            .map_err(|e| errors::from_error(py, &e))?;
        self.pending = last;
        Ok(())
    }
}
