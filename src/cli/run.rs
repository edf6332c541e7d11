//! `onnx-prepared run`: one inference on inputs from an .npz (or
//! generated), optionally repeated for timing (cold path but for the
//! repeated runs).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use onnx_prepared::decoder::Lengths;
use onnx_prepared::npz;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::{ResolveOptions, Tensor};

use super::common::{generated_inputs, write_trace};
use super::{CacheArgs, ChecksumArgs, LimitArgs};

/// How `run` makes the outputs it writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RunMode {
    /// Prepare every weight, then run.
    Eager,
    /// Run a cold session: the run starts while the weights load.
    Streaming,
    /// Prepare, run once, and write the second (hot-path) run's outputs.
    Hot,
}

/// `run`'s arguments.
pub struct RunArgs {
    /// The `.onnx` file.
    pub model: PathBuf,
    /// Inputs as a NumPy .npz (generated when `None`).
    pub inputs: Option<PathBuf>,
    /// Where to write the outputs.
    pub outputs: Option<PathBuf>,
    /// Threads in all.
    pub threads: usize,
    /// `--dim` sizes of generated inputs.
    pub dims: Vec<(String, usize)>,
    /// Runs after the first, timed.
    pub repeat: usize,
    /// `--portable`.
    pub portable: bool,
    /// `--isa`.
    pub isa: Option<super::common::IsaChoice>,
    /// `--int8-activations`.
    pub int8_activations: bool,
    /// Where to write the session's trace.
    pub trace: Option<PathBuf>,
    /// `--mode`.
    pub mode: RunMode,
    /// Where to write the JSON counters.
    pub stats: Option<PathBuf>,
    /// `--map-weights`.
    pub map_weights: bool,
    /// `--cache`, `--cache-policy`.
    pub cache: CacheArgs,
    /// `--limit`, `--resident-tables`.
    pub limits: LimitArgs,
    /// `--checksums`.
    pub checksums: ChecksumArgs,
    /// When the process started.
    pub started: Instant,
}

/// Generated run inputs: one new token after one past token.
const RUN_DIMS: Lengths = Lengths {
    batch: 1,
    tokens: 1,
    past: 1,
};

/// `run`: eager preparation (but in the streaming mode), then the first
/// run (and `repeat` more on the hot path), through a session.
pub fn main(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let session = open_session(&args)?;
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
        super::write_stats(path, &session, first_output)?;
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
        print_timing(&args, load, first, times);
    } else {
        print_outputs(&args, &outputs, load, first);
    }
    Ok(())
}

/// The session `args` ask for: `--threads N` in all, this thread running
/// the inference (`run` is synchronous) with N - 1 CPU workers helping its
/// kernels.
fn open_session(args: &RunArgs) -> Result<RuntimeSession, Box<dyn std::error::Error>> {
    let cpu = super::common::cpu_features(args.isa, args.portable)?;
    let options = SessionOptions::default()
        .with_threads(args.threads)
        .with_trace(args.trace.is_some())
        .with_resolve(ResolveOptions {
            cpu,
            int8_activations: args.int8_activations,
            ..ResolveOptions::default()
        })
        .with_map_weights(args.map_weights);
    let options = args
        .cache
        .apply(args.checksums.apply(args.limits.apply(options)))?;
    Ok(RuntimeSession::open(&args.model, options)?)
}

/// `--repeat N`: the load, first-run and repeated-run times as JSON.
fn print_timing(args: &RunArgs, load: Duration, first: Duration, mut times: Vec<f64>) {
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
}

/// Each output's name, type and shape; the times on stderr.
fn print_outputs(args: &RunArgs, outputs: &[(String, Tensor)], load: Duration, first: Duration) {
    for (name, t) in outputs {
        println!("{name:<24} {:<5} {:?}", t.dtype().name(), t.shape());
    }
    match args.mode {
        RunMode::Streaming => {
            eprintln!("opened in {load:.2?}; first run (weights loading behind it) {first:.2?}")
        }
        _ => eprintln!("loaded and prepacked in {load:.2?}, first run {first:.2?}"),
    }
}
