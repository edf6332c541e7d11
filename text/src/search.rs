//! Search options: what a model folder's `genai_config.json` (`search`,
//! `model.eos_token_id`) or `generation_config.json` says, then what the
//! caller overrides.

use std::path::Path;

use serde_json::Value;

use crate::error::{TextError, read_json};

/// How the next token is chosen and when generation stops. The defaults
/// are greedy decoding with no penalty, as `transformers` and
/// onnxruntime-genai use when a folder says nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOptions {
    /// Sample (`true`) or take the largest logit (`false`).
    pub do_sample: bool,
    /// Logits are divided by it before sampling (> 0).
    pub temperature: f32,
    /// Sample among the `top_k` largest logits only; 0 keeps all.
    pub top_k: usize,
    /// Sample among the smallest set of tokens whose probabilities sum to
    /// at least `top_p`; 1 keeps all.
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` × the largest one;
    /// 0 keeps all.
    pub min_p: f32,
    /// `transformers`' repetition penalty on every token seen so far
    /// (prompt and output): a positive logit is divided by it, a negative
    /// one multiplied; 1 is none.
    pub repetition_penalty: f32,
    /// Token ids that end generation (the model's EOS ids).
    pub eos_token_ids: Vec<i64>,
    /// The most tokens in all (prompt and output), if the folder says.
    pub max_length: Option<usize>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            do_sample: false,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            eos_token_ids: Vec::new(),
            max_length: None,
        }
    }
}

impl SearchOptions {
    /// The options of a model folder: `genai_config.json` where present
    /// (onnxruntime-genai's `search` section and `model.eos_token_id`),
    /// else `generation_config.json` (`transformers`), else the defaults;
    /// EOS ids fall back to `config.json`'s.
    ///
    /// # Errors
    /// [`TextError::Config`] for malformed JSON or a field of the wrong type.
    pub fn from_folder(dir: &Path) -> Result<Self, TextError> {
        let mut options = Self::default();
        let genai = dir.join("genai_config.json");
        let hf = dir.join("generation_config.json");
        if genai.is_file() {
            let v = read_json(&genai)?;
            let f = Fields { path: &genai };
            if let Some(search) = v.get("search") {
                f.apply(search, &mut options)?;
            }
            if let Some(model) = v.get("model") {
                options.eos_token_ids = f.ids(model.get("eos_token_id"), "model.eos_token_id")?;
            }
        } else if hf.is_file() {
            let v = read_json(&hf)?;
            let f = Fields { path: &hf };
            f.apply(&v, &mut options)?;
            options.eos_token_ids = f.ids(v.get("eos_token_id"), "eos_token_id")?;
        }
        let config = dir.join("config.json");
        if options.eos_token_ids.is_empty() && config.is_file() {
            let v = read_json(&config)?;
            let f = Fields { path: &config };
            options.eos_token_ids = f.ids(v.get("eos_token_id"), "eos_token_id")?;
        }
        Ok(options)
    }

    /// Whether `id` ends generation.
    pub fn is_eos(&self, id: i64) -> bool {
        self.eos_token_ids.contains(&id)
    }
}

/// Typed field reads that name the file and the field on error.
struct Fields<'a> {
    path: &'a Path,
}

impl Fields<'_> {
    fn error(&self, field: &str, want: &str) -> TextError {
        TextError::Config {
            path: self.path.to_owned(),
            message: format!("`{field}` is not {want}"),
        }
    }

    fn apply(&self, v: &Value, o: &mut SearchOptions) -> Result<(), TextError> {
        if let Some(x) = v.get("do_sample") {
            o.do_sample = x
                .as_bool()
                .ok_or_else(|| self.error("do_sample", "true or false"))?;
        }
        let number = |name: &str, min: f64| -> Result<Option<f64>, TextError> {
            match v.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x
                    .as_f64()
                    .filter(|n| n.is_finite() && *n >= min)
                    .map(Some)
                    .ok_or_else(|| self.error(name, &format!("a number of at least {min}"))),
            }
        };
        if let Some(t) = number("temperature", 0.0)? {
            o.temperature = t as f32;
        }
        if let Some(k) = number("top_k", 0.0)? {
            o.top_k = k as usize;
        }
        if let Some(p) = number("top_p", 0.0)? {
            o.top_p = p as f32;
        }
        if let Some(p) = number("min_p", 0.0)? {
            o.min_p = p as f32;
        }
        if let Some(p) = number("repetition_penalty", 0.0)? {
            o.repetition_penalty = p as f32;
        }
        if let Some(n) = number("max_length", 1.0)? {
            o.max_length = Some(n as usize);
        }
        Ok(())
    }

    fn ids(&self, v: Option<&Value>, field: &str) -> Result<Vec<i64>, TextError> {
        match v {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Number(n)) => n
                .as_i64()
                .map(|id| vec![id])
                .ok_or_else(|| self.error(field, "a token id")),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_i64()
                        .ok_or_else(|| self.error(field, "a list of token ids"))
                })
                .collect(),
            Some(_) => Err(self.error(field, "a token id or a list of them")),
        }
    }
}
