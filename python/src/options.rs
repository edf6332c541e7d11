//! Session options read from a Python options object (cold path): the
//! attributes of `onnx_prepared.SessionOptions`, any of them missing or
//! `None` meaning the default, so that any object with a subset of them
//! works.

use std::path::PathBuf;

use onnx_prepared::cache::PreparedModelPolicy;
use onnx_prepared::model::ResolveOptions;
use onnx_prepared::{CpuFeatures, Domain, SessionOptions};
use pyo3::exceptions::{PyAttributeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Most threads `intra_op_num_threads` takes (as the CLI's `--threads`).
const MAX_THREADS: usize = 1024;

/// Attribute `name` of `options`; `None` when absent or `None`.
fn attr<'py>(options: &Bound<'py, PyAny>, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    match options.getattr(name) {
        Ok(v) if v.is_none() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_instance_of::<PyAttributeError>(options.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

fn extract<'py, T: FromPyObjectOwned<'py>>(
    options: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<Option<T>> {
    attr(options, name)?
        .map(|v| {
            v.extract::<T>().map_err(|e| {
                let e: PyErr = e.into();
                PyValueError::new_err(format!("SessionOptions.{name}: {}", e.value(v.py())))
            })
        })
        .transpose()
}

/// The runtime's options from `options` (`None`: every default).
pub fn session_options(options: Option<&Bound<'_, PyAny>>) -> PyResult<SessionOptions> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(options) = options else {
        return Ok(threads(SessionOptions::default(), cores));
    };
    let n = extract::<usize>(options, "intra_op_num_threads")?.unwrap_or(0);
    if n > MAX_THREADS {
        return Err(PyValueError::new_err(format!(
            "SessionOptions.intra_op_num_threads: {n} is more than {MAX_THREADS}"
        )));
    }
    let mut out = threads(SessionOptions::default(), if n == 0 { cores } else { n });
    if let Some(io) = extract::<usize>(options, "io_workers")?
        && io > 0
    {
        out = out.with_io_workers(io.min(MAX_THREADS));
    }
    let cache_dir = extract::<PathBuf>(options, "cache_dir")?;
    let cache_policy = match extract::<String>(options, "cache_policy")? {
        Some(p) => PreparedModelPolicy::parse(&p).ok_or_else(|| {
            PyValueError::new_err(format!(
                "SessionOptions.cache_policy: `{p}` is not disabled, read-only, \
                 build-if-missing or require-complete"
            ))
        })?,
        None if cache_dir.is_some() => PreparedModelPolicy::BuildIfMissing,
        None => PreparedModelPolicy::Disabled,
    };
    match cache_dir {
        Some(dir) => out = out.with_cache_dir(dir).with_cache_policy(cache_policy),
        None if cache_policy != PreparedModelPolicy::Disabled => {
            return Err(PyValueError::new_err(format!(
                "SessionOptions.cache_policy `{}` needs a cache_dir",
                cache_policy.name()
            )));
        }
        None => {}
    }
    if let Some(limits) = attr(options, "memory_limits")? {
        let limits = limits.cast_into::<PyDict>().map_err(|_| {
            PyValueError::new_err("SessionOptions.memory_limits: a dict of domain name to bytes")
        })?;
        for (key, value) in limits.iter() {
            let name: String = key.extract()?;
            let bytes: usize = value.extract().map_err(|_| {
                PyValueError::new_err(format!(
                    "SessionOptions.memory_limits[{name:?}]: a number of bytes (an int >= 0)"
                ))
            })?;
            let budget = match name.as_str() {
                "total" => out.budget().with_global(bytes),
                _ => match Domain::ALL.into_iter().find(|d| d.name() == name) {
                    Some(d) => out.budget().with_domain(d, bytes),
                    None => {
                        return Err(PyValueError::new_err(format!(
                            "SessionOptions.memory_limits: `{name}` is not a memory domain: \
                             preparation, prepared, execution, io or total"
                        )));
                    }
                },
            };
            out = out.with_budget(budget);
        }
    }
    out = out
        .with_trace(extract::<bool>(options, "enable_profiling")?.unwrap_or(false))
        .with_map_weights(extract::<bool>(options, "map_weights")?.unwrap_or(false))
        .with_resident_tables(extract::<bool>(options, "resident_tables")?.unwrap_or(false))
        .with_cache_copy_in(extract::<bool>(options, "cache_copy_in")?.unwrap_or(false));
    out = out.with_resolve(ResolveOptions {
        cpu: if extract::<bool>(options, "portable")?.unwrap_or(false) {
            CpuFeatures::portable()
        } else {
            CpuFeatures::detect()
        },
        int8_activations: extract::<bool>(options, "int8_activations")?.unwrap_or(false)
            || int8_by_config(options)?,
        ..ResolveOptions::default()
    });
    Ok(out)
}

/// `n` threads per run: the calling thread runs the inference (a
/// synchronous `run` helps) and `n - 1` CPU workers help its kernels, as
/// the CLI's `--threads n`.
fn threads(options: SessionOptions, n: usize) -> SessionOptions {
    options.with_threads(n)
}

/// onnxruntime's `session.qdq_matmulnbits_accuracy_level` config entry at
/// 4: int8 MatMulNBits activations, as `int8_activations`.
fn int8_by_config(options: &Bound<'_, PyAny>) -> PyResult<bool> {
    let Some(config) = attr(options, "_config")? else {
        return Ok(false);
    };
    let Ok(config) = config.cast_into::<PyDict>() else {
        return Ok(false);
    };
    Ok(
        match config.get_item("session.qdq_matmulnbits_accuracy_level")? {
            Some(v) => v.extract::<String>().is_ok_and(|v| v.trim() == "4"),
            None => false,
        },
    )
}
