//! The `onnx-prepared` command line (cold path): `inspect` and `demo`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use onnx_prepared::model::inspect::InspectReport;
use onnx_prepared::model::{FileSource, Model, PayloadSource};
use onnx_prepared::model::{ResolveOptions, ResolvedModel};
use onnx_prepared::npz;
use onnx_prepared::plan::{PlanDump, PreparedExecutionPlan};
use onnx_prepared::state::{Dim, DirectReplay, DirectReplayOptions};
use onnx_prepared_kernels::{CpuFeatures, ElementType, Tensor, TensorData};

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
        /// Threads for the kernels (at least 1).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        threads: u16,
        /// Size of a symbolic input dim for random inputs, e.g. `--dim T=128` (others default to 1).
        #[arg(long = "dim", value_parser = parse_dim)]
        dims: Vec<(String, usize)>,
        /// After the first run, run this many more times and print timing as JSON.
        #[arg(long, default_value_t = 0)]
        repeat: usize,
        /// Use the portable layouts and scalar kernels instead of the CPU's SIMD ones.
        #[arg(long)]
        portable: bool,
    },
    /// Generate the fixture models if missing and show what the demo runs on them.
    Demo {
        /// Where the fixtures live (default: target/fixtures).
        #[arg(long)]
        fixtures: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect { model, json } => inspect(model, json),
        Command::Demo { fixtures } => demo(fixtures),
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
        } => run(RunArgs {
            model,
            inputs,
            outputs,
            threads: threads.into(),
            dims,
            repeat,
            portable,
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

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=SIZE"))?;
    let value = value
        .parse()
        .map_err(|_| format!("`{value}` is not a size"))?;
    Ok((name.to_owned(), value))
}

struct RunArgs {
    model: PathBuf,
    inputs: Option<PathBuf>,
    outputs: Option<PathBuf>,
    threads: usize,
    dims: Vec<(String, usize)>,
    repeat: usize,
    portable: bool,
}

/// Deterministic random inputs of the declared types: floats in [-1, 1),
/// integers in [0, 10), booleans alternating.
fn random_inputs(
    replay: &DirectReplay,
    dims: &[(String, usize)],
) -> Result<Vec<(String, Tensor)>, Box<dyn std::error::Error>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut out = Vec::new();
    for input in replay.inputs() {
        let shape: Vec<usize> = input
            .dims
            .iter()
            .flatten()
            .map(|d| match d {
                Dim::Fixed(n) => *n,
                Dim::Symbolic(p) => dims.iter().find(|(n, _)| n == p).map_or(1, |(_, v)| *v),
                Dim::Unknown => 1,
            })
            .collect();
        let mut t = Tensor::zeros(input.dtype, shape)?;
        match t.data_mut() {
            TensorData::F32(v) => v
                .iter_mut()
                .for_each(|x| *x = (next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0),
            TensorData::F64(v) => v
                .iter_mut()
                .for_each(|x| *x = (next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0),
            TensorData::I64(v) => v.iter_mut().for_each(|x| *x = (next() % 10) as i64),
            TensorData::I32(v) => v.iter_mut().for_each(|x| *x = (next() % 10) as i32),
            TensorData::Bool(v) => v.iter_mut().enumerate().for_each(|(i, x)| *x = i % 2 == 0),
            _ => {}
        }
        out.push((input.name.clone(), t));
    }
    Ok(out)
}

fn run(args: RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let model = Model::open(&args.model)?;
    let source = FileSource::open(&model)?;
    let cpu = if args.portable {
        CpuFeatures::portable()
    } else {
        CpuFeatures::detect()
    };
    let mut replay = DirectReplay::new(
        &model,
        &source,
        DirectReplayOptions {
            threads: args.threads,
            cpu,
        },
    )?;
    let load = start.elapsed();
    let inputs = match &args.inputs {
        Some(path) => npz::read_npz(path)?,
        None => random_inputs(&replay, &args.dims)?,
    };
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let first = Instant::now();
    let outputs = replay.run(&named)?;
    let first = first.elapsed();
    let mut times = Vec::with_capacity(args.repeat);
    for _ in 0..args.repeat {
        let t = Instant::now();
        std::hint::black_box(replay.run(&named)?);
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    if let Some(path) = &args.outputs {
        npz::write_npz(path, &outputs)?;
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
        eprintln!("loaded and prepacked in {load:.2?}, first run {first:.2?}");
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

fn demo(dir: Option<PathBuf>) -> Result<(), Box<dyn std::error::Error>> {
    let dir = dir.unwrap_or_else(onnx_prepared_fixtures::default_dir);
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
        let external: u64 = model
            .weights()
            .iter()
            .filter(|w| w.is_external())
            .map(|w| w.byte_len())
            .sum();
        println!(
            "  {:<28} {:>4} nodes {:>4} weights {:>10} external bytes, opened metadata-only in {:.2?}",
            path.file_name().unwrap_or_default().to_string_lossy(),
            model.graph().node.len(),
            model.weights().len(),
            external,
            opened
        );
    }
    decode_tiny_llm(&dir.join("tiny-llm.onnx"))
}

/// Eager baseline on tiny-llm: load and prepack everything, prefill 16
/// tokens, then decode 8 tokens greedily, feeding the presents back.
fn decode_tiny_llm(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    const PROMPT: usize = 16;
    const STEPS: usize = 8;
    let start = Instant::now();
    let model = Model::open(path)?;
    let source = FileSource::open(&model)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut replay = DirectReplay::new(
        &model,
        &source,
        DirectReplayOptions {
            threads,
            cpu: CpuFeatures::detect(),
        },
    )?;
    println!(
        "\ntiny-llm: read and prepacked {} bytes of weights in {:.2?} ({} threads)",
        source.counters().total(),
        start.elapsed(),
        threads
    );
    let blocks = replay
        .inputs()
        .iter()
        .filter(|i| i.name.starts_with("past_key_"))
        .count();
    let kv_shape = |p: usize| vec![1, 8, p, 64];
    let mut pasts: Vec<Tensor> = (0..2 * blocks)
        .map(|_| Tensor::zeros(ElementType::F32, kv_shape(0)))
        .collect::<Result<_, _>>()?;
    let mut tokens: Vec<i64> = (0..PROMPT as i64).map(|i| (i * 37 + 11) % 8192).collect();
    let mut fed = 0;
    for step in 0..=STEPS {
        let t = tokens.len() - fed;
        let p = fed;
        let ids = Tensor::from_i64(vec![1, t], tokens[fed..].to_vec())?;
        // Additive causal mask: query i sees keys 0..=p+i.
        let bias: Vec<f32> = (0..t)
            .flat_map(|i| (0..p + t).map(move |j| if j <= p + i { 0.0 } else { -10000.0 }))
            .collect();
        let bias = Tensor::from_f32(vec![1, 1, t, p + t], bias)?;
        let names: Vec<String> = (0..blocks)
            .flat_map(|b| [format!("past_key_{b}"), format!("past_value_{b}")])
            .collect();
        let mut inputs: Vec<(&str, &Tensor)> = vec![("input_ids", &ids), ("attn_bias", &bias)];
        inputs.extend(names.iter().map(String::as_str).zip(pasts.iter()));
        let started = Instant::now();
        let outputs = replay.run(&inputs)?;
        let elapsed = started.elapsed();
        let logits = outputs[0].1.as_f32().ok_or("logits are f32")?;
        let last = &logits[(t - 1) * 8192..t * 8192];
        let next = last
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i as i64);
        pasts = outputs.into_iter().skip(1).map(|(_, t)| t).collect();
        fed = tokens.len();
        tokens.push(next);
        let what = if step == 0 {
            format!("prefill T={t}")
        } else {
            format!("decode  P={p}")
        };
        println!("  {what:<14} {elapsed:>10.2?}  -> token {next}");
    }
    println!(
        "\nThis is the eager baseline (everything loaded before the first token). Streaming the first \
         inference while later blocks load arrives with the scheduler."
    );
    Ok(())
}
