//! The `onnx-prepared` command line (cold path): `inspect`, `plan`, `run`,
//! `bench` and `demo`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

mod cli;

use clap::{Parser, Subcommand};
use cli::{CacheArgs, ChecksumArgs, LimitArgs};
use onnx_prepared::decoder::{self, Lengths};
use onnx_prepared::limits::{MAX_CLI_THREADS, MAX_REPEAT};
use onnx_prepared::model::Model;
use onnx_prepared::model::inspect::InspectReport;
use onnx_prepared::model::{ResolveOptions, ResolvedModel};
use onnx_prepared::npz;
use onnx_prepared::plan::{PlanDump, PreparedExecutionPlan};
use onnx_prepared::session::report::{BenchRun, run_modes};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions, Trace};
use onnx_prepared_kernels::{CpuFeatures, Tensor};

#[derive(Parser)]
#[command(
    name = "onnx-prepared",
    version,
    about = "An ONNX runtime whose first inference starts before the model has finished loading"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a model's opsets, inputs, outputs, ops and weights without reading any payload.
    Inspect {
        /// The `.onnx` file.
        model: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Resolve a model and print its scoped plan: tasks, requirements, steps.
    Plan {
        /// The `.onnx` file.
        model: PathBuf,
        /// Print JSON (a stable interface for scripts) instead of text.
        #[arg(long)]
        json: bool,
        /// Use the portable layouts instead of the CPU's SIMD ones.
        #[arg(long)]
        portable: bool,
    },
    /// Run a model once (or repeatedly, for timing) on inputs from an .npz.
    Run {
        /// The `.onnx` file.
        model: PathBuf,
        /// Inputs as a NumPy .npz of named arrays; random inputs of the declared types when omitted.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Where to write the outputs (.npz, named by the graph's outputs).
        #[arg(long)]
        outputs: Option<PathBuf>,
        /// Threads in all (1 to 1024): this thread runs the inference, N - 1 CPU workers (at least one) help its kernels and prepack.
        #[arg(long, default_value_t = 1, value_parser = parse_threads)]
        threads: u16,
        /// Size of a symbolic input dim for generated inputs, e.g. `--dim T=128` (total defaults to P+T, others to 1).
        #[arg(long = "dim", value_parser = parse_dim)]
        dims: Vec<(String, usize)>,
        /// After the first run, run this many more times and print timing as JSON (at most 1000000).
        #[arg(long, default_value_t = 0, value_parser = parse_repeat)]
        repeat: usize,
        /// Use the portable layouts and scalar kernels instead of the CPU's SIMD ones.
        #[arg(long)]
        portable: bool,
        /// Quantize the activations of MatMulNBits nodes with accuracy_level = 4 to int8, as ONNX Runtime does (outputs differ from exact f32 by about 1 % of max|output|).
        #[arg(long)]
        int8_activations: bool,
        /// Write the session's Chrome trace (reads, prepacks, steps) to this file.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// How the outputs are made: `streaming` (a cold run, weights loading behind it; the default), `eager` (prepare, then run) or `hot` (the second run of a prepared session).
        #[arg(long, value_enum, default_value_t = RunMode::Streaming)]
        mode: RunMode,
        /// Write JSON counters (source and packed bytes read, prepacks, cache hits, misses and writes, time to first output from process start, peak live bytes per memory domain, peak resident set size) to this file.
        #[arg(long, value_name = "FILE")]
        stats: Option<PathBuf>,
        /// Map external data files read-only and use suitably aligned weights in place (no read buffer, copy or decode); a data file truncated by another program while mapped kills the process.
        #[arg(long)]
        map_weights: bool,
        #[command(flatten)]
        cache: CacheArgs,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        checksums: ChecksumArgs,
    },
    /// Measure the four ways to a first output (eager, streaming, prepared, hot), each in a fresh session.
    Bench {
        /// The `.onnx` file.
        model: PathBuf,
        /// Print JSON (a stable interface for scripts) instead of a table.
        #[arg(long)]
        json: bool,
        /// Threads in all (1 to 1024; default: every core): this thread runs the inference, N - 1 CPU workers (at least one) help its kernels and prepack.
        #[arg(long, value_parser = parse_threads)]
        threads: Option<u16>,
        /// Inputs as a NumPy .npz of named arrays; generated from the declared types when omitted.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Size of a symbolic input dim for generated inputs, e.g. `--dim T=8` (T defaults to 128, P to 0, total to P+T, others to 1).
        #[arg(long = "dim", value_parser = parse_dim)]
        dims: Vec<(String, usize)>,
        /// Write the streaming mode's Chrome trace to this file.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Map external data files read-only and use suitably aligned weights in place (no read buffer, copy or decode); a data file truncated by another program while mapped kills the process.
        #[arg(long)]
        map_weights: bool,
        /// Quantize the activations of MatMulNBits nodes with accuracy_level = 4 to int8, as ONNX Runtime does (outputs differ from exact f32 by about 1 % of max|output|).
        #[arg(long)]
        int8_activations: bool,
        #[command(flatten)]
        cache: CacheArgs,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        checksums: ChecksumArgs,
    },
    /// Greedy decoding for a decoder model with a past/present KV cache: prints the new token ids, time to first token and tokens/s.
    Generate(cli::generate::GenerateArgs),
    /// Generate the fixture models if missing, measure tiny-llm's four modes, show the streaming timeline and decode a few tokens.
    Demo {
        /// Where the fixtures live (default: target/fixtures).
        #[arg(long)]
        fixtures: Option<PathBuf>,
        /// Write the streaming mode's Chrome trace to this file.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// The prepared cache of the demo's second, cached session (default: target/prepared-cache).
        #[arg(long = "cache", value_name = "DIR")]
        cache: Option<PathBuf>,
        /// Memory limits of the offloaded decode (default `--limit prepared=5MiB`).
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Inspect, verify or prune a prepared cache directory.
    #[command(subcommand)]
    Cache(cli::cache::CacheCommand),
}

fn main() -> ExitCode {
    // Time to first output is measured from here (the process's start, but
    // for the loader).
    let started = Instant::now();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { model, json } => inspect(model, json),
        Command::Demo {
            fixtures,
            trace,
            cache,
            limits,
        } => cli::demo::main(fixtures, trace, cache, &limits),
        Command::Cache(command) => cli::cache::main(command),
        Command::Generate(args) => cli::generate::main(&args),
        Command::Bench {
            model,
            json,
            threads,
            inputs,
            dims,
            trace,
            map_weights,
            int8_activations,
            cache,
            limits,
            checksums,
        } => bench(BenchArgs {
            model,
            json,
            threads: threads.map_or_else(all_cores, usize::from),
            inputs,
            dims,
            trace,
            map_weights,
            int8_activations,
            cache,
            limits,
            checksums,
        }),
        Command::Plan {
            model,
            json,
            portable,
        } => plan(model, json, portable),
        Command::Run {
            model,
            inputs,
            outputs,
            threads,
            dims,
            repeat,
            portable,
            int8_activations,
            trace,
            mode,
            stats,
            map_weights,
            cache,
            limits,
            checksums,
        } => run(RunArgs {
            model,
            inputs,
            outputs,
            threads: threads.into(),
            dims,
            repeat,
            portable,
            int8_activations,
            trace,
            mode,
            stats,
            map_weights,
            cache,
            limits,
            checksums,
            started,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--threads`: 1 to [`MAX_CLI_THREADS`].
pub(crate) fn parse_threads(s: &str) -> Result<u16, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of threads"))?;
    if n == 0 {
        return Err("at least 1 thread is needed (the one running the inference)".into());
    }
    if n > MAX_CLI_THREADS as u64 {
        return Err(format!(
            "{n} threads is more than the {MAX_CLI_THREADS} a session may start"
        ));
    }
    Ok(n as u16)
}

/// `--repeat`: 0 to [`MAX_REPEAT`].
fn parse_repeat(s: &str) -> Result<usize, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of runs"))?;
    if n > MAX_REPEAT as u64 {
        return Err(format!(
            "{n} runs is more than the {MAX_REPEAT} `run --repeat` accepts"
        ));
    }
    Ok(n as usize)
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=SIZE"))?;
    let value = value
        .parse()
        .map_err(|_| format!("`{value}` is not a size"))?;
    Ok((name.to_owned(), value))
}

/// How `run` makes the outputs it writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RunMode {
    /// Prepare every weight, then run.
    Eager,
    /// Run a cold session: the run starts while the weights load.
    Streaming,
    /// Prepare, run once, and write the second (hot-path) run's outputs.
    Hot,
}

struct RunArgs {
    model: PathBuf,
    inputs: Option<PathBuf>,
    outputs: Option<PathBuf>,
    threads: usize,
    dims: Vec<(String, usize)>,
    repeat: usize,
    portable: bool,
    int8_activations: bool,
    trace: Option<PathBuf>,
    mode: RunMode,
    stats: Option<PathBuf>,
    map_weights: bool,
    cache: CacheArgs,
    limits: LimitArgs,
    checksums: ChecksumArgs,
    /// When the process started.
    started: Instant,
}

pub(crate) fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Generated inputs for a model's declared inputs: sizes by role
/// (`onnx_prepared::decoder`), `--dim` names checked against the model's.
fn generated_inputs(
    resolved: &ResolvedModel,
    dims: &[(String, usize)],
    defaults: Lengths,
) -> Result<Vec<(String, Tensor)>, Box<dyn std::error::Error>> {
    let (len, others) = decoder::lengths_from_dims(resolved.inputs(), dims, defaults)?;
    Ok(decoder::generated_inputs(resolved, len, &others)?)
}

pub(crate) fn write_trace(path: &Path, trace: &Trace) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::write(path, trace.to_chrome_json())
        .map_err(|e| format!("writing the trace to {}: {e}", path.display()))?;
    Ok(())
}

/// Eager preparation, then the first run (and `repeat` more on the hot
/// path), through a session.
fn run(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let cpu = if args.portable {
        CpuFeatures::portable()
    } else {
        CpuFeatures::detect()
    };
    let session = RuntimeSession::open(
        &args.model,
        args.cache
            .apply(args.checksums.apply(args.limits.apply(SessionOptions {
                // `--threads N`: this thread runs the inference (`run` is
                // synchronous) with N - 1 CPU workers helping its kernels.
                cpu_threads: args.threads.saturating_sub(1).max(1),
                intra_op_threads: Some(args.threads),
                trace: args.trace.is_some(),
                resolve: ResolveOptions {
                    cpu,
                    int8_activations: args.int8_activations,
                    ..ResolveOptions::default()
                },
                map_weights: args.map_weights,
                ..SessionOptions::default()
            })))?,
    )?;
    if args.mode != RunMode::Streaming {
        session.prepare()?;
    }
    let load = start.elapsed();
    let inputs = match &args.inputs {
        Some(path) => npz::read_npz(path)?,
        None => generated_inputs(session.plan().resolved(), &args.dims, RUN_DIMS)?,
    };
    let mut ctx = RuntimeContext::new(&session);
    for (name, value) in inputs {
        ctx.set_input(&name, value)?;
    }
    let first = Instant::now();
    let mut ctx = session.run(ctx)?;
    let first = first.elapsed();
    let first_output = args.started.elapsed();
    if args.mode == RunMode::Hot {
        ctx = session.run(ctx)?;
    }
    let outputs = ctx.take_outputs();
    if let Some(path) = &args.stats {
        // Cache writes run behind the first output; count them all.
        session.flush_cache();
        cli::write_stats(path, &session, first_output)?;
    }
    let mut times = Vec::with_capacity(args.repeat);
    for _ in 0..args.repeat {
        let t = Instant::now();
        ctx = session.run(ctx)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    if let Some(path) = &args.outputs {
        npz::write_npz(path, &outputs)?;
    }
    if let (Some(path), Some(trace)) = (&args.trace, session.trace()) {
        write_trace(path, trace)?;
    }
    if args.repeat > 0 {
        times.sort_by(f64::total_cmp);
        println!(
            "{}",
            serde_json::json!({
                "load_ms": load.as_secs_f64() * 1e3,
                "first_run_ms": first.as_secs_f64() * 1e3,
                "median_ms": times[times.len() / 2],
                "min_ms": times[0],
                "runs": times.len(),
                "threads": args.threads,
            })
        );
    } else {
        for (name, t) in &outputs {
            println!("{name:<24} {:<5} {:?}", t.dtype().name(), t.shape());
        }
        match args.mode {
            RunMode::Streaming => {
                eprintln!("opened in {load:.2?}; first run (weights loading behind it) {first:.2?}")
            }
            _ => eprintln!("loaded and prepacked in {load:.2?}, first run {first:.2?}"),
        }
    }
    Ok(())
}

struct BenchArgs {
    model: PathBuf,
    json: bool,
    threads: usize,
    inputs: Option<PathBuf>,
    dims: Vec<(String, usize)>,
    trace: Option<PathBuf>,
    map_weights: bool,
    int8_activations: bool,
    cache: CacheArgs,
    limits: LimitArgs,
    checksums: ChecksumArgs,
}

/// Generated bench inputs: a 128-token prefill with no past.
pub(crate) const BENCH_DIMS: Lengths = Lengths {
    batch: 1,
    tokens: 128,
    past: 0,
};

/// Generated run inputs: one new token after one past token.
const RUN_DIMS: Lengths = Lengths {
    batch: 1,
    tokens: 1,
    past: 1,
};

/// The four modes on `model` with inputs from `inputs` or generated.
pub(crate) fn bench_modes(
    model: &Path,
    threads: usize,
    inputs: Option<&Path>,
    dims: &[(String, usize)],
    cache: Option<&Path>,
    base: SessionOptions,
) -> Result<BenchRun, Box<dyn std::error::Error>> {
    let model = Model::open(model)?;
    let inputs = match inputs {
        Some(path) => npz::read_npz(path)?,
        None => {
            let resolved = ResolvedModel::resolve(model.clone(), &ResolveOptions::default())?;
            generated_inputs(&resolved, dims, BENCH_DIMS)?
        }
    };
    let options = SessionOptions {
        // As `run`: `threads` in all, this thread running the inference
        // with `threads - 1` CPU workers helping its kernels (at least one
        // worker, which also prepacks).
        cpu_threads: threads.saturating_sub(1).max(1),
        intra_op_threads: Some(threads),
        cache_dir: cache.map(Path::to_owned),
        ..base
    };
    Ok(run_modes(&model, &options.resolve, &options, &inputs)?)
}

pub(crate) const WARM_CACHE_NOTE: &str = "each mode runs in a fresh session (empty store, fresh budget); \
     the OS page cache is warm, so reads come from memory";

fn bench(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    // The cached mode completes the cache, then measures a session that
    // reads it: the policy is only checked.
    args.cache.apply(SessionOptions::default())?;
    let run = bench_modes(
        &args.model,
        args.threads,
        args.inputs.as_deref(),
        &args.dims,
        args.cache.dir.as_deref(),
        args.checksums.apply(args.limits.apply(SessionOptions {
            map_weights: args.map_weights,
            resolve: ResolveOptions {
                int8_activations: args.int8_activations,
                ..ResolveOptions::default()
            },
            ..SessionOptions::default()
        })),
    )?;
    if let Some(path) = &args.trace {
        write_trace(path, &run.streaming_trace)?;
    }
    if args.json {
        println!("{}", run.report.to_json());
    } else {
        println!(
            "{} ({} threads): {WARM_CACHE_NOTE}\n",
            args.model.display(),
            args.threads
        );
        print!("{}", run.report.table());
    }
    Ok(())
}

fn plan(path: PathBuf, json: bool, portable: bool) -> Result<(), Box<dyn std::error::Error>> {
    let model = Model::open(&path)?;
    let cpu = if portable {
        CpuFeatures::portable()
    } else {
        CpuFeatures::detect()
    };
    let resolved = ResolvedModel::resolve(
        model,
        &ResolveOptions {
            cpu,
            ..ResolveOptions::default()
        },
    )?;
    let plan = PreparedExecutionPlan::build(resolved)?;
    let dump = PlanDump::new(&plan);
    if json {
        println!("{}", serde_json::to_string_pretty(&dump)?);
    } else {
        print!("{}", dump.to_text());
    }
    Ok(())
}

fn inspect(path: PathBuf, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let model = Model::open(&path)?;
    let report = InspectReport::new(&model);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}
