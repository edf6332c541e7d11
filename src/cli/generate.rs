//! `onnx-prepared generate`: text or token ids out of a decoder model with
//! a past/present KV cache (cold path but for the decoding loop itself).
//! The folder's tokenizer, chat template and search options come from
//! `onnx-prepared-text`.

use std::path::PathBuf;

use onnx_prepared::decoder::{self, Next};
use onnx_prepared::limits::MAX_NEW_TOKENS;
use onnx_prepared::session::{RuntimeSession, SessionOptions};
use onnx_prepared_text::{Message, ModelFolder, Sampler};

use super::text_out::{Interrupt, Output, SearchArgs};

use super::{CacheArgs, ChecksumArgs, LimitArgs};

/// Text or token ids out of a decoder model with a past/present KV cache: streams the text (or prints the ids), then time to first token and tokens/s.
#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["prompt", "chat", "prompt_ids"]))]
pub struct GenerateArgs {
    /// A model folder (its `genai_config.json` decoder, else `model.onnx`, with `tokenizer.json` and the configs beside it) or a `.onnx` file.
    model: PathBuf,
    /// The prompt as text, tokenized by the folder's `tokenizer.json` (special tokens added as its post-processor says).
    #[arg(long)]
    prompt: Option<String>,
    /// A user message, put through the folder's chat template (with the assistant's turn opened).
    #[arg(long)]
    chat: Option<String>,
    /// The prompt's token ids, comma-separated (e.g. `1,2,3`); prints ids.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    prompt_ids: Option<Vec<i64>>,
    /// How many tokens to generate at most (1 to 65,536).
    #[arg(long, default_value_t = 16, value_parser = parse_new_tokens)]
    max_new_tokens: usize,
    #[command(flatten)]
    search: SearchArgs,
    /// Threads in all (1 to 1024): this thread runs the inference, N - 1 CPU workers (at least one) help its kernels and prepack.
    #[arg(long, default_value_t = 1, value_parser = crate::cli::common::parse_threads)]
    threads: u16,
    /// Print `{"text": ..., "tokens": [...], "time_to_first_token_s": ..., "tokens_per_s": ..., "process_time_to_first_token_s": ...}` at the end instead of streaming (the first time from the session's first run, the last from the process's start).
    #[arg(long)]
    json: bool,
    /// Map external data files read-only and use suitably aligned weights in place (no read buffer, copy or decode); a data file truncated by another program while mapped kills the process.
    #[arg(long)]
    map_weights: bool,
    /// Quantize the activations of MatMulNBits nodes with accuracy_level = 4 to int8, as ONNX Runtime does (outputs differ from exact f32 by about 1 % of max|output|).
    #[arg(long)]
    int8_activations: bool,
    /// Write JSON counters (as `run --stats`; the time to first output is the first token's) to this file.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    checksums: ChecksumArgs,
}

/// `generate`: a streaming session (the prompt's run starts while the
/// weights load), then one token per step (on the hot path once every
/// weight is resident; under a prepared-domain limit, every step takes
/// the cold path and restores what was evicted).
pub fn main(
    args: &GenerateArgs,
    started: std::time::Instant,
) -> Result<(), Box<dyn std::error::Error>> {
    let folder = ModelFolder::open(&args.model)?;
    let text = args.prompt_ids.is_none();
    let tokenizer = if text {
        Some(folder.tokenizer()?)
    } else {
        None
    };
    let prompt: Vec<i64> = match (&args.prompt_ids, &tokenizer) {
        (Some(ids), _) => ids.clone(),
        (None, Some(t)) => match (&args.prompt, &args.chat) {
            (Some(p), _) => t.encode(p, true)?,
            (None, Some(c)) => {
                // The template writes the special tokens itself.
                let rendered = folder
                    .chat_template()?
                    .render(&[Message::new("user", c)], true)?;
                t.encode(&rendered, false)?
            }
            (None, None) => unreachable!("clap requires one input"),
        },
        (None, None) => unreachable!("a text prompt loads the tokenizer"),
    };
    let search = args.search.apply(folder.search());
    let threads = usize::from(args.threads);
    let session = RuntimeSession::open(
        folder.model(),
        args.cache.apply(
            args.checksums.apply(
                args.limits.apply(
                    SessionOptions::default()
                        .with_threads(threads)
                        .with_map_weights(args.map_weights)
                        .with_resolve(onnx_prepared::ResolveOptions {
                            int8_activations: args.int8_activations,
                            ..onnx_prepared::ResolveOptions::default()
                        }),
                ),
            ),
        )?,
    )?;
    // A GenAI-builder model runs in the cache form its config names.
    let cache = decoder::genai_kv_cache(folder.model()).unwrap_or(decoder::KvCache::Growing);
    let mut sampler = Sampler::new(search, args.search.seed);
    let mut out = Output::new(tokenizer.as_ref(), &args.search.stop, !args.json);
    let interrupt = Interrupt::install()?;
    let mut first_token = None;
    let generated = decoder::generate_streaming(
        &session,
        &prompt,
        args.max_new_tokens,
        cache,
        Some(interrupt.flag()),
        |logits, history| {
            if interrupt.happened() {
                return Ok(Next::Stop);
            }
            first_token.get_or_insert_with(|| started.elapsed());
            let id = sampler.next(logits, history).unwrap_or(0);
            let eos = !args.search.ignore_eos && sampler.options().is_eos(id);
            let stop = out.push(id, eos).map_err(|e| {
                onnx_prepared::Error::from(onnx_prepared::RunError::Unsupported {
                    what: format!("decoding token {id}: {e}"),
                })
            })?;
            Ok(if eos || stop {
                Next::Last(id)
            } else {
                Next::Token(id)
            })
        },
    )?;
    out.finish()?;
    if interrupt.happened() {
        eprintln!("\ninterrupted after {} tokens", generated.tokens.len());
    }
    if let Some(stats) = &args.stats {
        session.flush_cache();
        super::write_stats(stats, &session, generated.time_to_first_token)?;
    }
    if args.json {
        let mut json = serde_json::json!({
            "tokens": generated.tokens,
            "time_to_first_token_s": generated.time_to_first_token.as_secs_f64(),
            "tokens_per_s": generated.tokens_per_s(),
            "process_time_to_first_token_s": first_token.unwrap_or_default().as_secs_f64(),
        });
        if text {
            json["text"] = out.text.clone().into();
        }
        println!("{json}");
    } else {
        if text {
            println!();
        } else {
            let ids: Vec<String> = generated.tokens.iter().map(i64::to_string).collect();
            println!("{}", ids.join(","));
        }
        eprintln!(
            "time to first token {:.2?}, {:.1} tokens/s after it",
            generated.time_to_first_token,
            generated.tokens_per_s()
        );
    }
    Ok(())
}

/// `--max-new-tokens`: 1 to [`MAX_NEW_TOKENS`].
pub fn parse_new_tokens(s: &str) -> Result<usize, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of tokens"))?;
    if n == 0 || n > MAX_NEW_TOKENS as u64 {
        return Err(format!(
            "{n} new tokens: `generate --max-new-tokens` takes 1 to {MAX_NEW_TOKENS}"
        ));
    }
    Ok(n as usize)
}
