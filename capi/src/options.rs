//! Session options (cold path): [`OnnxpOptions`] wraps `SessionOptions`;
//! one setter per knob a C caller needs.

use std::ffi::c_char;
use std::path::PathBuf;

use onnx_prepared::{Domain, PreparedModelPolicy, SessionOptions};

use crate::error::{OnnxpError, boundary, quiet};
use crate::{arg, out_arg, str_arg};

/// Options for `onnxp_session_open`: threads, I/O workers, pinning, memory
/// limits, the prepared cache. Made by `onnxp_options_create` with the
/// runtime's defaults; read (not kept) by `onnxp_session_open`.
#[derive(Debug, Clone, Default)]
pub struct OnnxpOptions {
    pub(crate) inner: SessionOptions,
}

/// A memory domain whose live bytes a limit caps
/// (`onnxp_options_set_memory_limit`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnnxpMemoryDomain {
    /// Source buffers and scratch of reads, prepacks and cache writes.
    Preparation = 0,
    /// Resident prepared (packed) weights; under a limit, the least
    /// recently used are evicted and restored when needed.
    Prepared = 1,
    /// A run's intermediates and kernel workspaces.
    Execution = 2,
    /// Outputs held by contexts, and staged inputs.
    Io = 3,
    /// Every domain together.
    Global = 4,
}

/// What a session does with the prepared cache
/// (`onnxp_options_set_cache_policy`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnnxpCachePolicy {
    /// Ignore any prepared cache and never write one (the default).
    Disabled = 0,
    /// Use compatible entries; build misses in memory only.
    ReadOnly = 1,
    /// Use compatible entries; build misses and persist them.
    BuildIfMissing = 2,
    /// Fail at open when a prepared object has no compatible entry.
    RequireComplete = 3,
}

/// Runs `f` on the options behind `options`.
///
/// # Safety
/// `options` is NULL or live and used by no other thread.
/// Replaces `o` with `f(o)` (the options' builder methods take them by value).
fn set(o: &mut SessionOptions, f: impl FnOnce(SessionOptions) -> SessionOptions) {
    *o = f(std::mem::take(o));
}

unsafe fn with_options(
    options: *mut OnnxpOptions,
    f: impl FnOnce(&mut SessionOptions) -> Result<(), OnnxpError>,
) -> *mut OnnxpError {
    boundary(|| {
        // SAFETY: NULL or live and not shared (the caller's contract).
        let options = unsafe { options.as_mut() }.ok_or_else(|| OnnxpError::null("options"))?;
        f(&mut options.inner)
    })
}

/// Writes new options with the runtime's defaults to `*out`: a CPU worker
/// per core, two I/O workers, no pinning, no memory limit, no prepared
/// cache.
///
/// Thread safety: any thread.
///
/// # Safety
/// `out` is NULL or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_create(out: *mut *mut OnnxpOptions) -> *mut OnnxpError {
    boundary(|| {
        out_arg(out, "out")?;
        let options = Box::into_raw(Box::default());
        // SAFETY: checked non-NULL; valid for a write (the caller's contract).
        unsafe { out.write(options) };
        Ok(())
    })
}

/// Frees `options`. NULL is a no-op. Sessions opened with them are not
/// affected.
///
/// Thread safety: once, when no other thread uses the options.
///
/// # Safety
/// `options` is NULL or made by `onnxp_options_create` and not released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_release(options: *mut OnnxpOptions) {
    quiet(|| {
        if !options.is_null() {
            // SAFETY: made by `Box::into_raw` in `onnxp_options_create`,
            // released once (the caller's contract).
            drop(unsafe { Box::from_raw(options) });
        }
    });
}

/// Sets `threads` threads per run in all, as the CLI's `--threads` and
/// Python's `intra_op_num_threads` count them: the thread that runs the
/// inference and `threads - 1` CPU workers helping its kernels (at least
/// one worker is started, for prepacks); kernels use at most `threads`
/// threads.
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_thread_count(
    options: *mut OnnxpOptions,
    threads: usize,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            if threads == 0 {
                return Err(OnnxpError::invalid(
                    "threads must be at least 1 (the one running the inference)",
                ));
            }
            set(o, |v| v.with_threads(threads));
            Ok(())
        })
    }
}

/// Sets the number of CPU workers of the session's pool (kernels and
/// prepacks; at least 1) and the most threads one kernel uses, the calling
/// thread included (`intra_op_threads`; 0: the caller plus every CPU
/// worker).
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_workers(
    options: *mut OnnxpOptions,
    cpu_workers: usize,
    intra_op_threads: usize,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            if cpu_workers == 0 {
                return Err(OnnxpError::invalid("cpu_workers must be at least 1"));
            }
            set(o, |v| {
                v.with_cpu_workers(cpu_workers)
                    .with_intra_op_threads(intra_op_threads)
            });
            Ok(())
        })
    }
}

/// Deprecated name of [`onnxp_options_set_workers`] (same arguments and
/// meaning: CPU workers, not threads in all).
///
/// # Safety
/// As [`onnxp_options_set_workers`].
#[unsafe(no_mangle)]
#[deprecated(note = "use onnxp_options_set_workers (or onnxp_options_set_thread_count)")]
pub unsafe extern "C" fn onnxp_options_set_threads(
    options: *mut OnnxpOptions,
    cpu_threads: usize,
    intra_op_threads: usize,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe { onnxp_options_set_workers(options, cpu_threads, intra_op_threads) }
}

/// Sets the number of I/O workers (weight reads; at least 1).
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_io_workers(
    options: *mut OnnxpOptions,
    io_workers: usize,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            if io_workers == 0 {
                return Err(OnnxpError::invalid("io_workers must be at least 1"));
            }
            set(o, |v| v.with_io_workers(io_workers));
            Ok(())
        })
    }
}

/// Pins the CPU workers to cores (`pin` true) or not.
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_pin_threads(
    options: *mut OnnxpOptions,
    pin: bool,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            set(o, |v| v.with_pin_threads(pin));
            Ok(())
        })
    }
}

/// Maps the model's external data files and uses aligned weights in place
/// (`map` true) instead of reading them. A data file truncated by another
/// program while it is mapped kills the process (SIGBUS).
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_map_weights(
    options: *mut OnnxpOptions,
    map: bool,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            set(o, |v| v.with_map_weights(map));
            Ok(())
        })
    }
}

/// Reads large tables that only row gathers read (embeddings) whole and
/// keeps them in memory (`resident` true), instead of reading the rows
/// each run picks from the model's data file (the default: such a table
/// never counts in the process's memory, and a run reads one row per
/// token). Rows are read from the data file as it was verified: a run
/// after the file was written, truncated or touched in place fails with
/// an error saying it changed (open the model again).
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_resident_tables(
    options: *mut OnnxpOptions,
    resident: bool,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            set(o, |v| v.with_resident_tables(resident));
            Ok(())
        })
    }
}

/// Caps the live bytes of `domain` (an `OnnxpMemoryDomain` value) at
/// `bytes`; `UINT64_MAX` removes the limit. An allocation the limit refuses
/// fails with `ONNXP_ERROR_KIND_BUDGET` (reads wait for room instead).
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_memory_limit(
    options: *mut OnnxpOptions,
    domain: i32,
    bytes: u64,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            let budget = o.budget();
            let budget = match domain {
                0 => budget.with_domain(Domain::Preparation, bytes),
                1 => budget.with_domain(Domain::Prepared, bytes),
                2 => budget.with_domain(Domain::Execution, bytes),
                3 => budget.with_domain(Domain::Io, bytes),
                4 => budget.with_global(bytes),
                _ => {
                    return Err(OnnxpError::invalid(format!(
                        "{domain} is not an OnnxpMemoryDomain"
                    )));
                }
            };
            set(o, |v| v.with_budget(budget));
            Ok(())
        })
    }
}

/// Sets the prepared cache's directory (`dir`, UTF-8), or clears it when
/// `dir` is NULL. A policy other than `ONNXP_CACHE_POLICY_DISABLED` needs a
/// directory.
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live; `dir` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_cache_dir(
    options: *mut OnnxpOptions,
    dir: *const c_char,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            // The policy stays as set (`onnxp_options_set_cache_policy`).
            let policy = o.cache_policy();
            if dir.is_null() {
                set(o, |v| v.without_cache().with_cache_policy(policy));
            } else {
                // SAFETY: non-NULL and NUL-terminated (the caller's contract).
                let dir = PathBuf::from(str_arg(dir, "dir")?);
                set(o, |v| v.with_cache_dir(dir).with_cache_policy(policy));
            }
            Ok(())
        })
    }
}

/// Sets what the session does with the prepared cache (`policy`, an
/// `OnnxpCachePolicy` value).
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_cache_policy(
    options: *mut OnnxpOptions,
    policy: i32,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            let policy = match policy {
                0 => PreparedModelPolicy::Disabled,
                1 => PreparedModelPolicy::ReadOnly,
                2 => PreparedModelPolicy::BuildIfMissing,
                3 => PreparedModelPolicy::RequireComplete,
                _ => {
                    return Err(OnnxpError::invalid(format!(
                        "{policy} is not an OnnxpCachePolicy"
                    )));
                }
            };
            set(o, |v| v.with_cache_policy(policy));
            Ok(())
        })
    }
}

/// The options behind `options` (defaults for NULL), checked for a policy
/// without a directory.
///
/// # Safety
/// `options` is NULL or live.
pub(crate) unsafe fn session_options(
    options: *const OnnxpOptions,
) -> Result<SessionOptions, OnnxpError> {
    let o = if options.is_null() {
        SessionOptions::default()
    } else {
        // SAFETY: non-NULL and live (the caller's contract).
        unsafe { arg(options, "options") }?.inner.clone()
    };
    if o.cache_dir().is_none() && o.cache_policy() != PreparedModelPolicy::Disabled {
        return Err(OnnxpError::invalid(format!(
            "cache policy {} needs a cache directory (onnxp_options_set_cache_dir)",
            o.cache_policy().name()
        )));
    }
    Ok(o)
}

/// Copies each prepared-cache payload into memory when it is read
/// (`copy` true) instead of mapping it. Every payload is checked before
/// use either way, and one truncated or rewritten before it is read is a
/// miss; the hazard this removes: another program truncating a payload
/// file while the session holds it mapped kills the process (SIGBUS). Set
/// it for cache folders other programs write or clean.
///
/// Thread safety: not with other calls on the same options.
///
/// # Safety
/// `options` is NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_options_set_cache_copy_in(
    options: *mut OnnxpOptions,
    copy: bool,
) -> *mut OnnxpError {
    // SAFETY: forwarded contract.
    unsafe {
        with_options(options, |o| {
            set(o, |v| v.with_cache_copy_in(copy));
            Ok(())
        })
    }
}
