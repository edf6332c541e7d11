//! `onnx-prepared demo`: the fixtures, tiny-llm's four ways to a first
//! output with the streaming timeline, a greedy decode on the hot session,
//! and the same decode under a prepared-domain limit (cold path).

use std::path::{Path, PathBuf};
use std::time::Instant;

use onnx_prepared::decoder::{self, Lengths};
use onnx_prepared::model::Model;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::Tensor;

use super::LimitArgs;
use super::bench::{BENCH_DIMS, WARM_CACHE_NOTE, bench_modes};
use super::common::{all_cores, write_trace};
use super::report::BenchRun;

pub fn main(
    dir: Option<PathBuf>,
    trace: Option<PathBuf>,
    cache: Option<PathBuf>,
    limits: &LimitArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = dir.unwrap_or_else(onnx_prepared_fixtures::default_dir);
    let cache = cache.unwrap_or_else(|| dir.parent().unwrap_or(&dir).join("prepared-cache"));
    let start = Instant::now();
    let models = onnx_prepared_fixtures::ensure_all(&dir)?;
    println!(
        "fixtures ready in {} ({:.2?})",
        dir.display(),
        start.elapsed()
    );
    for path in &models {
        let start = Instant::now();
        let model = Model::open(path)?;
        let opened = start.elapsed();
        let external = model.external_bytes();
        println!(
            "  {:<28} {:>4} nodes {:>4} weights {:>10} external bytes, opened metadata-only in {:.2?}",
            path.file_name().unwrap_or_default().to_string_lossy(),
            model.graph().node.len(),
            model.weights().len(),
            external,
            opened
        );
    }
    let threads = all_cores();
    let run = bench_modes(
        &dir.join("tiny-llm.onnx"),
        threads,
        None,
        &[],
        Some(&cache),
        SessionOptions::default(),
    )?;
    println!(
        "\ntiny-llm, prefill T={} P=0, {threads} threads: {WARM_CACHE_NOTE}\n",
        BENCH_DIMS.tokens
    );
    print!("{}", run.report.table());
    println!(
        "\n`cached` is a second process's session: it reads packed weights from the prepared cache in {} \
         (a companion ONNX model + payloads) instead of reading and packing the sources",
        cache.display()
    );
    println!("\nstreaming mode: I/O, prepacks and inference overlap\n");
    print!("{}", run.streaming_trace.timeline(72));
    if let Some(path) = &trace {
        write_trace(path, &run.streaming_trace)?;
    }
    decode_tiny_llm(run)?;
    offload_tiny_llm(&dir.join("tiny-llm.onnx"), &cache, limits)
}

/// Decoding under a prepared-domain limit below the model's prepared
/// bytes: each step evicts objects after their last use and restores them
/// from the prepared cache (packed payloads: no source read, no prepack).
/// The default limit (`limits` replace it) is the 5 MiB of `docs/design.md`'s example: below
/// the 8 MiB embedding, which is then read row by row from its source,
/// and a quarter of the model; per step, what the residency did.
fn offload_tiny_llm(
    model: &Path,
    cache: &Path,
    limits: &LimitArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    use onnx_prepared::{BudgetLimits, Domain, PreparedModelPolicy};
    let budget = if limits.limits.is_empty() {
        BudgetLimits::unlimited().with_domain(Domain::Prepared, 5 << 20)
    } else {
        BudgetLimits::unlimited()
    };
    let session = RuntimeSession::open(
        model,
        limits.apply(
            SessionOptions::default()
                .with_budget(budget)
                .with_cache_dir(cache)
                .with_cache_policy(PreparedModelPolicy::BuildIfMissing)
                .with_trace(true),
        ),
    )?;
    let weights: u64 = session.plan().requirements().source_bytes.iter().sum();
    let shown: Vec<String> = Domain::ALL
        .into_iter()
        .filter_map(|d| {
            let limit = session.memory().domain(d).limit;
            (limit != onnx_prepared::UNLIMITED)
                .then(|| format!("{} {:.1} MiB", d.name(), limit as f64 / f64::from(1 << 20)))
        })
        .collect();
    println!(
        "\noffloading: the same decode under limits ({}; {:.1} MiB of weights); \
         objects are evicted after their step and restored from the prepared cache",
        shown.join(", "),
        weights as f64 / f64::from(1 << 20)
    );
    let prompt = 8;
    let len = Lengths {
        batch: 1,
        tokens: prompt,
        past: 0,
    };
    let mut ctx = RuntimeContext::new(&session);
    for (name, t) in decoder::generated_inputs(session.plan().resolved(), len, &[])? {
        ctx.set_input(&name, t)?;
    }
    let started = Instant::now();
    ctx = session.run(ctx)?;
    let first = started.elapsed();
    if let Some(trace) = session.trace() {
        let run = trace.events().iter().map(|e| e.run).max().unwrap_or(0);
        println!("\nthe prompt's run, step by step (live bytes as each step ended):\n");
        print!("{}", trace.arena_table(run));
        println!();
    }
    let mut before = Default::default();
    let mut row = |what: String, elapsed: std::time::Duration, token: i64| {
        let now: onnx_prepared::PreparationStats = session.preparation_stats();
        let was: &onnx_prepared::PreparationStats = &before;
        println!(
            "  {what:<24} -> token {token:<5} {elapsed:>9.2?}  evicted {:>2}  restored {:>2}  \
             packed read {:>9}  source read {:>9}  prepared peak {:>8}",
            now.evictions - was.evictions,
            now.restores - was.restores,
            now.cache.packed_bytes_read - was.cache.packed_bytes_read,
            now.source_bytes_read - was.source_bytes_read,
            session.memory().domain(Domain::Prepared).peak,
        );
        before = now;
    };
    decode_steps(&session, ctx, prompt, first, &mut row)
}

/// Greedy decode on the hot session: the next token from the hot run's last
/// logits, then single-token steps.
fn decode_tiny_llm(run: BenchRun) -> Result<(), Box<dyn std::error::Error>> {
    let (session, ctx) = run.hot;
    println!("\ngreedy decode on the hot session (presents fed back as pasts):");
    let mut row = |what: String, elapsed: std::time::Duration, token: i64| {
        let what = if elapsed.is_zero() {
            format!("{what} (hot run)")
        } else {
            format!("{what} {elapsed:>9.2?}")
        };
        println!("  {what:<24} -> token {token}");
    };
    decode_steps(
        &session,
        ctx,
        BENCH_DIMS.tokens,
        std::time::Duration::ZERO,
        &mut row,
    )
}

/// Greedy decoding from a finished prompt run in `ctx` (`prompt` tokens,
/// which took `first`): the next token from its last logits, then
/// single-token steps; the context's KV-cache binding feeds each run's
/// presents back as the next run's pasts. `row` reports each step.
fn decode_steps(
    session: &RuntimeSession,
    mut ctx: RuntimeContext,
    prompt: usize,
    first: std::time::Duration,
    row: &mut dyn FnMut(String, std::time::Duration, i64),
) -> Result<(), Box<dyn std::error::Error>> {
    const STEPS: usize = 8;
    const VOCAB: usize = 8192;
    let greedy = |outputs: &[(String, Tensor)]| -> Result<i64, Box<dyn std::error::Error>> {
        let logits = outputs
            .iter()
            .find(|(n, _)| n == "logits")
            .and_then(|(_, t)| t.as_f32())
            .ok_or("tiny-llm's logits are f32")?;
        let t = logits.len() / VOCAB;
        Ok(logits[(t - 1) * VOCAB..t * VOCAB]
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as i64))
    };
    let outputs = ctx.take_outputs();
    let mut next = greedy(&outputs)?;
    row(format!("prefill T={prompt}"), first, next);
    // The prefill's presents become the first pasts; from then on the
    // context's cache binding moves each run's presents into its pasts.
    for (name, present) in outputs {
        if let Some(suffix) = name.strip_prefix("present_") {
            ctx.set_input(&format!("past_{suffix}"), present)?;
        }
    }
    ctx.bind_kv_cache();
    for fed in prompt..prompt + STEPS {
        ctx.set_input("input_ids", Tensor::from_i64(vec![1, 1], vec![next])?)?;
        ctx.set_input(
            "attn_bias",
            Tensor::from_f32(vec![1, 1, 1, fed + 1], vec![0.0; fed + 1])?,
        )?;
        let started = Instant::now();
        ctx = session.run(ctx)?;
        let elapsed = started.elapsed();
        next = greedy(ctx.outputs())?;
        row(format!("decode  P={fed}"), elapsed, next);
    }
    Ok(())
}
