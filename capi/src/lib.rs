//! The C API of onnx-prepared (`include/onnx_prepared.h`, generated from
//! this crate by `tools/c_header.sh`).
//!
//! # Conventions
//!
//! * Every object is an opaque handle the caller owns and frees with its
//!   `*_release` function (releasing NULL is a no-op). No function takes
//!   ownership of an argument implicitly.
//! * Every function that can fail returns an `OnnxpError*`: NULL on
//!   success, else an error the caller frees with `onnxp_error_release`,
//!   with `onnxp_error_kind` and `onnxp_error_message`. Out-parameters are
//!   written only on success.
//! * Every entry point catches panics (`error::boundary`): a panic becomes
//!   an `ONNXP_ERROR_KIND_PANIC` error and never unwinds into C or aborts.
//! * Each function states its thread safety in its documentation.
//!
//! # Files
//!
//! `error.rs`: errors and the boundary; `options.rs`: session options;
//! `session.rs`: opening a session and its inputs and outputs;
//! `context.rs`: a run's inputs and outputs, owned output tensors;
//! `run.rs`: blocking and asynchronous runs; `generate.rs`: greedy decoding.
//! They use one another only in that order.

// The C API wraps the public face only: its locks belong to no protocol of
// the engine's loom-checked `sync` seam (which is not public), so it names
// std's directly.
#![allow(clippy::disallowed_types)]

pub mod context;
pub mod error;
pub mod generate;
pub mod options;
pub mod run;
pub mod session;

use std::ffi::{CStr, c_char};

pub use context::{OnnxpContext, OnnxpTensor, OnnxpTensorView};
pub use error::{OnnxpError, OnnxpErrorKind};
pub use options::{OnnxpCachePolicy, OnnxpMemoryDomain, OnnxpOptions};
pub use run::{OnnxpCompletionFn, OnnxpRunHandle, OnnxpStatus};
pub use session::{OnnxpElementType, OnnxpSession, OnnxpValueInfo};

use error::Result;

/// `ptr` as a reference, or an `InvalidArgument` error naming `what`.
///
/// # Safety
/// `ptr` is NULL or valid for reads for `'a`.
pub(crate) unsafe fn arg<'a, T>(ptr: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: the caller's contract.
    unsafe { ptr.as_ref() }.ok_or_else(|| OnnxpError::null(what))
}

/// `ptr` as a UTF-8 string, or an `InvalidArgument` error naming `what`.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn str_arg<'a>(ptr: *const c_char, what: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(OnnxpError::null(what));
    }
    // SAFETY: non-NULL and NUL-terminated (the caller's contract).
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| OnnxpError::invalid(format!("{what} is not UTF-8")))
}

/// Checks that an out-parameter is not NULL (before any work is done).
pub(crate) fn out_arg<T>(ptr: *mut T, what: &str) -> Result<()> {
    if ptr.is_null() {
        Err(OnnxpError::null(what))
    } else {
        Ok(())
    }
}

/// `len` elements at `ptr` (any pointer when `len` is 0), or an error.
///
/// # Safety
/// When `len > 0`, `ptr` is NULL or valid for reads of `len` elements for
/// `'a`.
pub(crate) unsafe fn slice_arg<'a, T>(ptr: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(OnnxpError::null(what));
    }
    if !ptr.is_aligned() {
        return Err(OnnxpError::invalid(format!("{what} is misaligned")));
    }
    // SAFETY: non-NULL, aligned, and valid for `len` elements (the caller's
    // contract).
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}
