//! What several subcommands share: argument parsers, thread counts,
//! generated inputs and trace files.

use std::path::Path;

use onnx_prepared::CpuFeatures;
use onnx_prepared::ResolvedModel;
use onnx_prepared::Tensor;
use onnx_prepared::decoder::{self, Lengths};
use onnx_prepared::limits::{MAX_CLI_THREADS, MAX_REPEAT};
use onnx_prepared::session::Trace;

/// `--threads`: 1 to [`MAX_CLI_THREADS`].
/// `--isa`: the kernel family every operator uses (each family has a
/// scalar reference, so CI runs all of them on one AVX-512 machine).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsaChoice {
    /// Portable layouts and scalar kernels (the same as `--portable`).
    Scalar,
    /// AVX2 and FMA.
    Avx2,
    /// AVX-512 F/BW/DQ/VL (and VNNI where the CPU has it), without AMX.
    Avx512,
    /// AVX-512 with VNNI and AMX-INT8 (the int8 products on tiles).
    Amx,
}

/// The CPU features `--isa` or `--portable` ask for (all this CPU has when
/// neither is given). An instruction set this CPU lacks is an error, not a
/// silent fallback.
pub fn cpu_features(isa: Option<IsaChoice>, portable: bool) -> Result<CpuFeatures, String> {
    let have = CpuFeatures::detect();
    let lacks = |name: &str| format!("--isa {name}: this CPU lacks {name}");
    match (isa, portable) {
        (Some(IsaChoice::Scalar), _) | (None, true) => Ok(CpuFeatures::portable()),
        (None, false) => Ok(have),
        (Some(IsaChoice::Avx2), _) if have.avx2 => Ok(CpuFeatures {
            avx2: true,
            avx512: false,
            avx512vnni: false,
            amx_int8: false,
        }),
        (Some(IsaChoice::Avx2), _) => Err(lacks("avx2")),
        (Some(IsaChoice::Avx512), _) if have.avx512 => Ok(have.without_amx()),
        (Some(IsaChoice::Avx512), _) => Err(lacks("avx512")),
        (Some(IsaChoice::Amx), _) if have.amx_int8 => Ok(have),
        (Some(IsaChoice::Amx), _) => Err(lacks("amx (AMX-INT8 with the kernel's permission)")),
    }
}

pub fn parse_threads(s: &str) -> Result<u16, String> {
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
pub fn parse_repeat(s: &str) -> Result<usize, String> {
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

/// `--dim NAME=SIZE`.
pub fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=SIZE"))?;
    let value = value
        .parse()
        .map_err(|_| format!("`{value}` is not a size"))?;
    Ok((name.to_owned(), value))
}

/// Every core the process may use (at least 1): `bench`'s and `demo`'s
/// default thread count.
pub fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Generated inputs for a model's declared inputs: sizes by role
/// (`onnx_prepared::decoder`), `--dim` names checked against the model's.
pub fn generated_inputs(
    resolved: &ResolvedModel,
    dims: &[(String, usize)],
    defaults: Lengths,
) -> Result<Vec<(String, Tensor)>, Box<dyn std::error::Error>> {
    let (len, others) = decoder::lengths_from_dims(resolved.inputs(), dims, defaults)?;
    Ok(decoder::generated_inputs(resolved, len, &others)?)
}

/// `--trace FILE`: `trace` as Chrome trace JSON.
pub fn write_trace(path: &Path, trace: &Trace) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::write(path, trace.to_chrome_json())
        .map_err(|e| format!("writing the trace to {}: {e}", path.display()))?;
    Ok(())
}
