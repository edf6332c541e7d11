//! Error objects (cold path but for the success check): [`OnnxpError`], its
//! [`OnnxpErrorKind`], and the boundary every entry point runs in
//! (`boundary`): a caught panic becomes an error, never an abort.

use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use onnx_prepared::{Error, ErrorKind};

/// The category of an error: the runtime's `ErrorKind`s, then the C API's
/// own.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnnxpErrorKind {
    /// No error: what `onnxp_error_kind(NULL)` returns.
    Ok = 0,
    /// The model file could not be read or does not describe a usable model.
    Model = 1,
    /// An initializer's external data is malformed or points somewhere it
    /// must not.
    ExternalData = 2,
    /// Reading a weight's payload failed.
    Payload = 3,
    /// The graph cannot be resolved to kernels (or its plan built).
    Resolve = 4,
    /// Bad inputs to a run: a missing, unknown or duplicate input, a wrong
    /// element type or shape, caller memory whose size does not match.
    Input = 5,
    /// A kernel failed while running.
    Kernel = 6,
    /// A memory limit refused an allocation.
    Budget = 7,
    /// A prepared object the run needed could not be produced.
    Preparation = 8,
    /// The run was cancelled.
    Cancelled = 9,
    /// The system refused a resource other than memory (a thread).
    System = 10,
    /// The prepared cache is corrupt, incomplete or cannot be used.
    Cache = 11,
    /// A NULL pointer, a string that is not UTF-8, an unknown name or an
    /// out-of-range enum value was passed.
    InvalidArgument = 100,
    /// The object is lent to a run in flight (a context), or was used
    /// against another object it does not belong to.
    Busy = 101,
    /// The library panicked; the panic was caught at the boundary. The
    /// objects passed to the call stay valid and may be released.
    Panic = 102,
    /// An error kind this version of the C API does not name.
    Other = 103,
}

impl From<ErrorKind> for OnnxpErrorKind {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Model => Self::Model,
            ErrorKind::ExternalData => Self::ExternalData,
            ErrorKind::Payload => Self::Payload,
            ErrorKind::Resolve => Self::Resolve,
            ErrorKind::Input => Self::Input,
            ErrorKind::Kernel => Self::Kernel,
            ErrorKind::Budget => Self::Budget,
            ErrorKind::Preparation => Self::Preparation,
            ErrorKind::Cancelled => Self::Cancelled,
            ErrorKind::System => Self::System,
            ErrorKind::Cache => Self::Cache,
            _ => Self::Other,
        }
    }
}

/// An error: a kind and a message. Returned by every function that can
/// fail (NULL on success); the caller owns it and frees it with
/// `onnxp_error_release`.
#[derive(Debug, Clone)]
pub struct OnnxpError {
    kind: OnnxpErrorKind,
    message: CString,
}

impl OnnxpError {
    /// An error of `kind` saying `message` (interior NULs are replaced).
    pub(crate) fn new(kind: OnnxpErrorKind, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.contains('\0') {
            message = message.replace('\0', "\u{fffd}");
        }
        Self {
            kind,
            message: CString::new(message).unwrap_or_default(),
        }
    }

    /// `InvalidArgument`.
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(OnnxpErrorKind::InvalidArgument, message)
    }

    /// A NULL pointer where `what` was expected.
    pub(crate) fn null(what: &str) -> Self {
        Self::invalid(format!("{what} is NULL"))
    }

    /// The kind.
    pub fn kind(&self) -> OnnxpErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        self.message.to_str().unwrap_or("")
    }

    /// The error a caught panic becomes.
    pub(crate) fn from_panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let detail = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Self::new(
            OnnxpErrorKind::Panic,
            format!("onnx-prepared panicked: {detail}"),
        )
    }
}

impl From<Error> for OnnxpError {
    fn from(e: Error) -> Self {
        Self::new(e.kind().into(), e.to_string())
    }
}

impl From<onnx_prepared::session::ExecutionError> for OnnxpError {
    fn from(e: onnx_prepared::session::ExecutionError) -> Self {
        Self::new(e.error.kind().into(), e.error.to_string())
    }
}

/// The result of the body of an entry point.
pub(crate) type Result<T, E = OnnxpError> = std::result::Result<T, E>;

/// Runs the body of an entry point: `Ok` becomes NULL, `Err` and a caught
/// panic a new error the caller owns. Costs nothing on success beyond the
/// body (no allocation; unwinding tables only).
pub(crate) fn boundary(body: impl FnOnce() -> Result<()>) -> *mut OnnxpError {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ptr::null_mut(),
        Ok(Err(e)) => Box::into_raw(Box::new(e)),
        Err(payload) => Box::into_raw(Box::new(OnnxpError::from_panic(&*payload))),
    }
}

/// Runs the body of an entry point that reports nothing (a release): a
/// panic is caught and dropped.
pub(crate) fn quiet(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

/// The kind of `error`; `ONNXP_ERROR_KIND_OK` for NULL.
///
/// Thread safety: any thread; an error may be read from several threads at
/// once.
///
/// # Safety
/// `error` is NULL or an error returned by this library and not released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_error_kind(error: *const OnnxpError) -> OnnxpErrorKind {
    // SAFETY: the caller passes NULL or a live error (function contract).
    match unsafe { error.as_ref() } {
        Some(e) => e.kind,
        None => OnnxpErrorKind::Ok,
    }
}

/// The message of `error`, NUL-terminated UTF-8, valid until the error is
/// released; an empty string for NULL.
///
/// Thread safety: any thread; an error may be read from several threads at
/// once.
///
/// # Safety
/// `error` is NULL or an error returned by this library and not released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_error_message(error: *const OnnxpError) -> *const c_char {
    static EMPTY: &CStr = c"";
    // SAFETY: the caller passes NULL or a live error (function contract).
    match unsafe { error.as_ref() } {
        Some(e) => e.message.as_ptr(),
        None => EMPTY.as_ptr(),
    }
}

/// Frees `error`. NULL is a no-op.
///
/// Thread safety: any thread, once per error, when no other thread uses it.
///
/// # Safety
/// `error` is NULL or an error returned by this library and not released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onnxp_error_release(error: *mut OnnxpError) {
    quiet(|| {
        if !error.is_null() {
            // SAFETY: a live error made by `Box::into_raw` in `boundary`,
            // released once (function contract).
            drop(unsafe { Box::from_raw(error) });
        }
    });
}
