//! Decoding for any decoder model with a past/present KV cache: a step-wise
//! [`Generator`], and loops over it (greedy, or with the choice left to the
//! caller).

use std::borrow::Borrow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onnx_prepared_kernels::{DataRef, Tensor};

use super::{InputRole, Lengths, Rng, input_role, input_tensor, vocab_size};
use crate::Error;
use crate::exec::RunError;
use crate::model::ResolvedModel;
use crate::session::{RunInterrupt, RuntimeContext, RuntimeSession};

/// The result of [`generate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// The new tokens, in order.
    pub tokens: Vec<i64>,
    /// From the call to the first new token (the prompt's run, with the
    /// model's loading when the session was cold).
    pub time_to_first_token: Duration,
    /// The decode steps after the first token.
    pub decode_time: Duration,
}

impl Generated {
    /// New tokens per second over the decode steps after the first token
    /// (0 when there were none).
    pub fn tokens_per_s(&self) -> f64 {
        let steps = self.tokens.len().saturating_sub(1);
        if steps == 0 || self.decode_time.is_zero() {
            return 0.0;
        }
        steps as f64 / self.decode_time.as_secs_f64()
    }
}

fn unsupported(what: String) -> Error {
    RunError::Unsupported { what }.into()
}

/// Decodes `max_new_tokens` tokens greedily after `prompt` (batch 1): the
/// prompt runs as one prefill, then one token per run with the presents
/// moved into the pasts ([`RuntimeContext::bind_kv_cache`]) and the mask,
/// positions, `seqlens_k` and `total_sequence_length` grown each step.
///
/// # Errors
/// An empty prompt, a model without a logits output or whose past inputs
/// have no matching present outputs, and any run error.
pub fn generate(
    session: &RuntimeSession,
    prompt: &[i64],
    max_new_tokens: usize,
) -> Result<Generated, Error> {
    generate_with(session, prompt, max_new_tokens, KvCache::Growing)
}

/// How [`generate_with`] holds the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCache {
    /// Pasts of the tokens so far: each present (past + new) becomes the
    /// next past.
    Growing,
    /// The ONNX Runtime GenAI shared-buffer form: every past and present
    /// holds `capacity` positions; `seqlens_k` / the attention mask say how
    /// many are filled. The first past is zeros of that capacity.
    Shared {
        /// Positions per cache buffer (GenAI's `search.max_length`).
        capacity: usize,
        /// Positions of the window-sized buffers of sliding-window layers
        /// (pasts whose length dim is named `past_sliding_length`; GenAI's
        /// `sliding_window.window_size + cache_slack`), which hold the tail
        /// of longer sequences.
        window: Option<usize>,
    },
}

/// The cache form a GenAI-builder model runs with, from the
/// `genai_config.json` beside it (`search.past_present_share_buffer`,
/// `search.max_length`); `None` without one.
pub fn genai_kv_cache(model: &std::path::Path) -> Option<KvCache> {
    let text = std::fs::read_to_string(model.parent()?.join("genai_config.json")).ok()?;
    let config: serde_json::Value = serde_json::from_str(&text).ok()?;
    let search = config.get("search")?;
    let shared = search.get("past_present_share_buffer")?.as_bool()?;
    let capacity = usize::try_from(search.get("max_length")?.as_u64()?).ok()?;
    let window = config
        .pointer("/model/decoder/sliding_window")
        .and_then(|w| {
            let size = w.get("window_size")?.as_u64()?;
            let slack = w.get("cache_slack").and_then(|s| s.as_u64()).unwrap_or(0);
            usize::try_from(size.checked_add(slack)?).ok()
        })
        .map(|w| w.min(capacity));
    Some(if shared {
        KvCache::Shared { capacity, window }
    } else {
        KvCache::Growing
    })
}

/// [`generate`] with a chosen cache form.
///
/// # Errors
/// As [`generate`]; with a shared cache, a prompt plus new tokens beyond its
/// capacity.
pub fn generate_with(
    session: &RuntimeSession,
    prompt: &[i64],
    max_new_tokens: usize,
    cache: KvCache,
) -> Result<Generated, Error> {
    generate_streaming(session, prompt, max_new_tokens, cache, None, |logits, _| {
        Ok(Next::Token(argmax(logits)))
    })
}

/// What the chooser of [`generate_streaming`] decides after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Append this token and go on.
    Token(i64),
    /// Append this token and stop (an EOS id, a stop string completed).
    Last(i64),
    /// Stop without another token (the caller was interrupted).
    Stop,
}

/// [`generate_with`] with the choice of each token left to `choose`: it
/// gets the last row of the logits and every token so far (the prompt,
/// then the new ones) and returns what to do — so sampling, stop ids and
/// streaming the text live with the caller. Stops after
/// `max_new_tokens` tokens, when `choose` says so, or when `interrupt` is
/// set (the run in progress, the prompt's included, ends between two
/// kernels; the tokens so far are returned).
///
/// # Errors
/// As [`generate_with`], and what `choose` returns.
pub fn generate_streaming(
    session: &RuntimeSession,
    prompt: &[i64],
    max_new_tokens: usize,
    cache: KvCache,
    interrupt: Option<Arc<RunInterrupt>>,
    mut choose: impl FnMut(&[f32], &[i64]) -> Result<Next, Error>,
) -> Result<Generated, Error> {
    if prompt.is_empty() {
        return Err(unsupported("generating from an empty prompt".into()));
    }
    if let KvCache::Shared { capacity, .. } = cache
        && prompt.len().saturating_add(max_new_tokens) > capacity
    {
        return Err(unsupported(format!(
            "generating {max_new_tokens} tokens after a {}-token prompt in a shared KV cache of {capacity} positions",
            prompt.len()
        )));
    }
    let start = Instant::now();
    let mut generator = Generator::new(session, cache)?;
    generator.set_interrupt(interrupt.clone());
    // A run ended by the interrupt ends the generation with the tokens so far.
    let interrupted = |e: &Error| {
        e.kind() == crate::ErrorKind::Cancelled && interrupt.as_ref().is_some_and(|i| i.is_set())
    };
    let mut tokens = Vec::with_capacity(max_new_tokens.min(1 << 12));
    let mut time_to_first_token = Duration::ZERO;
    match generator.append(prompt) {
        Err(e) if interrupted(&e) => {
            return Ok(Generated {
                tokens,
                time_to_first_token,
                decode_time: Duration::ZERO,
            });
        }
        result => result?,
    }
    while tokens.len() < max_new_tokens {
        let decision = choose(generator.logits()?, generator.sequence())?;
        if tokens.is_empty() {
            time_to_first_token = start.elapsed();
        }
        let (Next::Token(next) | Next::Last(next)) = decision else {
            break;
        };
        tokens.push(next);
        if matches!(decision, Next::Last(_)) || tokens.len() == max_new_tokens {
            break;
        }
        match generator.append(&[next]) {
            Err(e) if interrupted(&e) => break,
            result => result?,
        }
    }
    let decode_time = start.elapsed().saturating_sub(time_to_first_token);
    Ok(Generated {
        tokens,
        time_to_first_token,
        decode_time,
    })
}

/// A decoder model driven one step at a time, as onnxruntime-genai's
/// `Generator` is: [`Generator::append`] runs the model on new tokens after
/// those already in its KV cache and keeps the logits of the last one;
/// [`Generator::rewind_to`] forgets the tail of the sequence. The caller
/// chooses tokens from [`Generator::logits`].
///
/// `S` is how it holds the session: `&RuntimeSession` for a loop in one
/// scope, `Arc<RuntimeSession>` for a generator that outlives it (a
/// binding's object).
#[derive(Debug)]
pub struct Generator<S: Borrow<RuntimeSession>> {
    session: S,
    cache: KvCache,
    /// The context between runs (taken while one runs).
    ctx: Option<RuntimeContext>,
    logits_name: String,
    vocab: usize,
    others: Vec<(String, usize)>,
    rng: Rng,
    /// Every token appended, in order.
    sequence: Vec<i64>,
    /// Tokens whose keys and values the bound cache holds (a prefix of
    /// `sequence`); 0 before the first run and after a rewind.
    cached: usize,
    /// Whether the context holds the logits of the sequence's last token.
    fresh: bool,
    /// Ends a run between kernels when set (a Ctrl-C during a prefill).
    interrupt: Option<Arc<RunInterrupt>>,
}

impl<S: Borrow<RuntimeSession>> Generator<S> {
    /// A generator over `session` (batch 1) holding its KV cache as `cache`
    /// says.
    ///
    /// # Errors
    /// A model without a token-ids input, a logits output, or with past
    /// inputs that have no matching present outputs.
    pub fn new(session: S, cache: KvCache) -> Result<Self, Error> {
        let resolved = session.borrow().plan().resolved().clone();
        let (logits_name, vocab) = decoder_outputs(&resolved)?;
        let others = super::model_dims(&resolved);
        let ctx = context(session.borrow(), &None)?;
        Ok(Self {
            session,
            cache,
            ctx: Some(ctx),
            logits_name,
            vocab,
            others,
            rng: Rng::default(),
            sequence: Vec::new(),
            cached: 0,
            fresh: false,
            interrupt: None,
        })
    }

    /// Ends the generator's runs between kernels while `interrupt` is set:
    /// an [`append`](Self::append) in progress (a long prefill) fails with
    /// [`RunError::Cancelled`] and the generator starts again from an empty
    /// cache, as after any failed run.
    pub fn set_interrupt(&mut self, interrupt: Option<Arc<RunInterrupt>>) {
        if let Some(ctx) = &mut self.ctx {
            ctx.set_interrupt(interrupt.clone());
        }
        self.interrupt = interrupt;
    }

    /// Every token appended so far.
    pub fn sequence(&self) -> &[i64] {
        &self.sequence
    }

    /// The logits of the sequence's last token (one per vocabulary entry).
    ///
    /// # Errors
    /// Before the first [`Generator::append`], after a rewind, or when the
    /// logits output is not f32.
    pub fn logits(&self) -> Result<&[f32], Error> {
        match (&self.ctx, self.fresh) {
            (Some(ctx), true) => last_row(ctx, &self.logits_name),
            _ => Err(unsupported(
                "reading logits before any token was appended since the last rewind".into(),
            )),
        }
    }

    /// Forgets every token from position `len` on. A shared-buffer cache
    /// keeps the rows of the kept tokens; other caches are rebuilt from
    /// them by the next append.
    ///
    /// # Errors
    /// A `len` beyond the sequence.
    pub fn rewind_to(&mut self, len: usize) -> Result<(), Error> {
        if len > self.sequence.len() {
            return Err(unsupported(format!(
                "rewinding to {len} tokens of a {}-token sequence",
                self.sequence.len()
            )));
        }
        if len < self.sequence.len() {
            self.sequence.truncate(len);
            self.fresh = false;
            // A shared buffer keeps the rows before `len` (later ones are
            // overwritten; seqlens_k and the mask hide them). Other caches
            // (grown to the old length, or window-sized and compacted) are
            // rebuilt from the kept tokens.
            if matches!(self.cache, KvCache::Shared { window: None, .. }) && len > 0 {
                self.cached = self.cached.min(len);
            } else {
                self.cached = 0;
                self.ctx = Some(context(self.session.borrow(), &self.interrupt)?);
            }
        }
        Ok(())
    }

    /// Runs the model on `tokens` after the sequence so far (and on any
    /// rewound prefix not in the cache yet).
    ///
    /// # Errors
    /// Empty `tokens`, a shared cache that would overflow, and run errors
    /// (after which the generator starts again from an empty cache).
    pub fn append(&mut self, tokens: &[i64]) -> Result<(), Error> {
        if tokens.is_empty() {
            return Err(unsupported("appending no tokens".into()));
        }
        let total = self.sequence.len() + tokens.len();
        if let KvCache::Shared { capacity, .. } = self.cache
            && total > capacity
        {
            return Err(unsupported(format!(
                "{total} tokens in a shared KV cache of {capacity} positions"
            )));
        }
        self.sequence.extend_from_slice(tokens);
        let result = self.run();
        if result.is_err() {
            self.sequence.truncate(total - tokens.len());
            self.cached = 0;
            self.fresh = false;
            self.ctx = Some(context(self.session.borrow(), &self.interrupt)?);
        }
        result
    }

    /// Runs the tokens of the sequence the cache does not hold yet.
    fn run(&mut self) -> Result<(), Error> {
        let mut ctx = self.ctx.take().expect("a context between runs");
        let ids = &self.sequence[self.cached..];
        let len = Lengths {
            batch: 1,
            tokens: ids.len(),
            past: self.cached,
        };
        let session = self.session.borrow();
        for input in session.plan().resolved().inputs() {
            let role = input_role(&input.name);
            if role == InputRole::PastKv && self.cached > 0 {
                continue; // the bound present of the last run
            }
            let t = match (role, self.cache) {
                (InputRole::PastKv, KvCache::Shared { capacity, window }) => {
                    let full = Lengths {
                        past: capacity,
                        ..len
                    };
                    let mut shape = super::input_shape(input, full, &self.others);
                    // A window-sized buffer as the config sizes it (window
                    // and slack), else as the model's window.
                    if let (Some(w), Some(axis)) = (window, sliding_axis(input)) {
                        shape[axis] = w;
                    }
                    Tensor::zeros(input.dtype, shape).map_err(|source| RunError::Kernel {
                        node: format!("KV cache `{}`", input.name),
                        source,
                    })?
                }
                _ => input_tensor(
                    input,
                    len,
                    &self.others,
                    Some(ids),
                    self.vocab,
                    &mut self.rng,
                )?,
            };
            ctx.set_input(&input.name, t)?;
        }
        let ctx = session.run(ctx).map_err(|e| e.error)?;
        self.ctx = Some(ctx);
        self.cached += ids.len();
        self.fresh = true;
        Ok(())
    }
}

/// A context with the KV cache bound (presents become the next pasts) and
/// the generator's interrupt.
fn context(
    session: &RuntimeSession,
    interrupt: &Option<Arc<RunInterrupt>>,
) -> Result<RuntimeContext, Error> {
    let mut ctx = RuntimeContext::new(session);
    ctx.bind_kv_cache();
    ctx.set_interrupt(interrupt.clone());
    for i in session.plan().resolved().inputs() {
        if input_role(&i.name) == InputRole::PastKv
            && !ctx.cache_bindings().iter().any(|(_, p)| *p == i.name)
        {
            return Err(unsupported(format!(
                "generating: past input `{}` has no matching present output",
                i.name
            )));
        }
    }
    Ok(ctx)
}

/// The axis of a past input's length when it is a sliding-window layer's
/// window-sized buffer (GenAI names that dim `past_sliding_length`).
fn sliding_axis(input: &crate::model::GraphInput) -> Option<usize> {
    let dims = input.dims.as_deref()?;
    (dims.len() == 4).then_some(2).filter(
        |&a| matches!(&dims[a], crate::model::Dim::Symbolic(name) if name.contains("sliding")),
    )
}

/// The logits output of a decoder model (the output whose name contains
/// `logits`, else the first) and its vocabulary size; an error when the
/// model has no token-ids input or no output.
fn decoder_outputs(resolved: &ResolvedModel) -> Result<(String, usize), Error> {
    let inputs = resolved.inputs();
    if !inputs
        .iter()
        .any(|i| input_role(&i.name) == InputRole::TokenIds)
    {
        return Err(unsupported(
            "generating with a model that has no token-ids input (`input_ids`)".into(),
        ));
    }
    let outputs: Vec<&str> = resolved.outputs().iter().map(|(n, _)| n.as_str()).collect();
    let logits = outputs
        .iter()
        .find(|n| n.contains("logits"))
        .or(outputs.first())
        .map(|n| (*n).to_owned())
        .ok_or_else(|| unsupported("generating with a model that has no outputs".into()))?;
    let vocab = vocab_size(resolved).unwrap_or(usize::MAX);
    Ok((logits, vocab))
}

/// The last row of `logits` after a run.
fn last_row<'c>(ctx: &'c RuntimeContext, logits: &str) -> Result<&'c [f32], Error> {
    let out = ctx.output(logits)?;
    let DataRef::F32(values) = out.data() else {
        return Err(unsupported(format!(
            "generating from `{logits}` of type {}, not f32",
            out.dtype()
        )));
    };
    let width = out.shape().last().copied().unwrap_or(0);
    if width == 0 || values.len() < width {
        return Err(unsupported(format!(
            "generating from `{logits}` of shape {:?}",
            out.shape()
        )));
    }
    Ok(&values[values.len() - width..])
}

/// The greedy choice: the index of the first largest logit.
fn argmax(row: &[f32]) -> i64 {
    row.iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 { (i, v) } else { best }
        })
        .0 as i64
}
