//! The `onnx-prepared` command line (cold path): `inspect`, `plan`, `run`,
//! `bench`, `generate`, `demo` and `cache`. This file holds the arguments
//! and the dispatch; each subcommand lives in `cli/`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

mod cli;

use clap::{Parser, Subcommand};
use cli::bench::BenchArgs;
use cli::common::{self, all_cores};
use cli::run::{RunArgs, RunMode};
use cli::{CacheArgs, ChecksumArgs, LimitArgs};

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
        /// The kernel family (`scalar` is `--portable`); default: the best this CPU has.
        #[arg(long, value_enum, conflicts_with = "portable")]
        isa: Option<common::IsaChoice>,
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
        #[arg(long, default_value_t = 1, value_parser = common::parse_threads)]
        threads: u16,
        /// Size of a symbolic input dim for generated inputs, e.g. `--dim T=128` (total defaults to P+T, others to 1).
        #[arg(long = "dim", value_parser = common::parse_dim)]
        dims: Vec<(String, usize)>,
        /// After the first run, run this many more times and print timing as JSON (at most 1000000).
        #[arg(long, default_value_t = 0, value_parser = common::parse_repeat)]
        repeat: usize,
        /// Use the portable layouts and scalar kernels instead of the CPU's SIMD ones.
        #[arg(long)]
        portable: bool,
        /// The kernel family every operator uses (`scalar` is `--portable`); default: the best this CPU has.
        #[arg(long, value_enum, conflicts_with = "portable")]
        isa: Option<common::IsaChoice>,
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
        #[arg(long, value_parser = common::parse_threads)]
        threads: Option<u16>,
        /// Inputs as a NumPy .npz of named arrays; generated from the declared types when omitted.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// Size of a symbolic input dim for generated inputs, e.g. `--dim T=8` (T defaults to 128, P to 0, total to P+T, others to 1).
        #[arg(long = "dim", value_parser = common::parse_dim)]
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
    /// Text or token ids out of a decoder model with a past/present KV cache: streams the text (or prints the ids), then time to first token and tokens/s.
    Generate(cli::generate::GenerateArgs),
    /// Encode texts with a model folder's tokenizer.json and render conversations with its chat template, as JSON lines.
    Tokenize(cli::tokenize::TokenizeArgs),
    /// Chat with a model folder: each line on stdin is a user message, the reply streams to stdout; the KV cache carries the conversation across turns.
    Chat(cli::chat::ChatArgs),
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
        Command::Inspect { model, json } => cli::inspect::inspect(&model, json),
        Command::Demo {
            fixtures,
            trace,
            cache,
            limits,
        } => cli::demo::main(fixtures, trace, cache, &limits),
        Command::Cache(command) => cli::cache::main(command),
        Command::Generate(args) => cli::generate::main(&args, started),
        Command::Tokenize(args) => cli::tokenize::main(&args),
        Command::Chat(args) => cli::chat::main(&args),
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
        } => cli::bench::main(BenchArgs {
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
            isa,
        } => common::cpu_features(isa, portable)
            .map_err(Into::into)
            .and_then(|cpu| cli::inspect::plan(&model, json, cpu)),
        Command::Run {
            model,
            inputs,
            outputs,
            threads,
            dims,
            repeat,
            portable,
            isa,
            int8_activations,
            trace,
            mode,
            stats,
            map_weights,
            cache,
            limits,
            checksums,
        } => cli::run::main(RunArgs {
            model,
            inputs,
            outputs,
            threads: threads.into(),
            dims,
            repeat,
            portable,
            isa,
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
