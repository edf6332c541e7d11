//! `onnx-prepared bench`: the four ways to a first output (eager,
//! streaming, prepared, hot; cached with `--cache`), each in a fresh
//! session, as a table or JSON (cold path).

use std::path::{Path, PathBuf};

use onnx_prepared::decoder::Lengths;
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::npz;
use onnx_prepared::session::SessionOptions;

use super::common::{generated_inputs, write_trace};
use super::report::{BenchRun, run_modes};
use super::{CacheArgs, ChecksumArgs, LimitArgs};

/// Generated bench inputs: a 128-token prefill with no past.
pub const BENCH_DIMS: Lengths = Lengths {
    batch: 1,
    tokens: 128,
    past: 0,
};

/// What the bench table's heading says of its conditions.
pub const WARM_CACHE_NOTE: &str = "each mode runs in a fresh session (empty store, fresh budget); \
     the OS page cache is warm, so reads come from memory";

/// `bench`'s arguments.
pub struct BenchArgs {
    /// The `.onnx` file.
    pub model: PathBuf,
    /// JSON instead of a table.
    pub json: bool,
    /// Threads in all.
    pub threads: usize,
    /// Inputs as a NumPy .npz (generated when `None`).
    pub inputs: Option<PathBuf>,
    /// `--dim` sizes of generated inputs.
    pub dims: Vec<(String, usize)>,
    /// Where to write the streaming mode's trace.
    pub trace: Option<PathBuf>,
    /// `--map-weights`.
    pub map_weights: bool,
    /// `--int8-activations`.
    pub int8_activations: bool,
    /// `--cache`, `--cache-policy`.
    pub cache: CacheArgs,
    /// `--limit`, `--resident-tables`.
    pub limits: LimitArgs,
    /// `--checksums`.
    pub checksums: ChecksumArgs,
}

/// The four modes on `model` with inputs from `inputs` or generated.
pub fn bench_modes(
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
    // As `run`: `threads` in all, this thread running the inference with
    // `threads - 1` CPU workers helping its kernels (at least one worker,
    // which also prepacks).
    let options = base.with_threads(threads);
    let options = match cache {
        Some(dir) => options.with_cache_dir(dir),
        None => options.without_cache(),
    };
    Ok(run_modes(&model, &options.resolve(), &options, &inputs)?)
}

/// `bench`.
pub fn main(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    // The cached mode completes the cache, then measures a session that
    // reads it: the policy is only checked.
    args.cache.apply(SessionOptions::default())?;
    let run = bench_modes(
        &args.model,
        args.threads,
        args.inputs.as_deref(),
        &args.dims,
        args.cache.dir.as_deref(),
        args.checksums.apply(
            args.limits.apply(
                SessionOptions::default()
                    .with_map_weights(args.map_weights)
                    .with_resolve(ResolveOptions {
                        int8_activations: args.int8_activations,
                        ..ResolveOptions::default()
                    }),
            ),
        ),
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
