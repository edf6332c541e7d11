//! `onnx-prepared generate`: greedy decoding for a decoder model with a
//! past/present KV cache (cold path but for the decoding loop itself).

use std::path::PathBuf;

use onnx_prepared::decoder;
use onnx_prepared::limits::MAX_NEW_TOKENS;
use onnx_prepared::session::{RuntimeSession, SessionOptions};

use super::{CacheArgs, ChecksumArgs, LimitArgs};

/// Greedy decoding for a decoder model with a past/present KV cache: prints the new token ids, time to first token and tokens/s.
#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// The `.onnx` file.
    model: PathBuf,
    /// The prompt's token ids, comma-separated (e.g. `1,2,3`).
    #[arg(long, value_delimiter = ',', required = true, num_args = 1..)]
    prompt_ids: Vec<i64>,
    /// How many tokens to generate (at most 65,536).
    #[arg(long, default_value_t = 16, value_parser = parse_new_tokens)]
    max_new_tokens: usize,
    /// Threads in all (1 to 1024): this thread runs the inference, N - 1 CPU workers (at least one) help its kernels and prepack.
    #[arg(long, default_value_t = 1, value_parser = crate::cli::common::parse_threads)]
    threads: u16,
    /// Print `{"tokens": [...], "time_to_first_token_s": ..., "tokens_per_s": ...}`.
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
/// weights load), then greedy decoding (on the hot path once every
/// weight is resident; under a prepared-domain limit, every step takes
/// the cold path and restores what was evicted).
pub fn main(args: &GenerateArgs) -> Result<(), Box<dyn std::error::Error>> {
    let threads = usize::from(args.threads);
    let session = RuntimeSession::open(
        &args.model,
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
    let cache = decoder::genai_kv_cache(&args.model).unwrap_or(decoder::KvCache::Growing);
    let out = decoder::generate_with(&session, &args.prompt_ids, args.max_new_tokens, cache)?;
    if let Some(stats) = &args.stats {
        session.flush_cache();
        super::write_stats(stats, &session, out.time_to_first_token)?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "tokens": out.tokens,
                "time_to_first_token_s": out.time_to_first_token.as_secs_f64(),
                "tokens_per_s": out.tokens_per_s(),
            })
        );
    } else {
        let ids: Vec<String> = out.tokens.iter().map(i64::to_string).collect();
        println!("{}", ids.join(","));
        eprintln!(
            "time to first token {:.2?}, {:.1} tokens/s after it",
            out.time_to_first_token,
            out.tokens_per_s()
        );
    }
    Ok(())
}

/// `--max-new-tokens`: 1 to [`MAX_NEW_TOKENS`].
fn parse_new_tokens(s: &str) -> Result<usize, String> {
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
