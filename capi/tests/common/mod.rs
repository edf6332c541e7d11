//! Helpers of the C API tests: fixture paths, and errors turned into Rust
//! values (each error is read and released exactly once).

#![allow(dead_code)]

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::ptr;

use onnx_prepared_capi::context::{onnxp_context_create, onnxp_context_release};
use onnx_prepared_capi::error::{onnxp_error_kind, onnxp_error_message, onnxp_error_release};
use onnx_prepared_capi::options::{
    onnxp_options_create, onnxp_options_release, onnxp_options_set_io_workers,
    onnxp_options_set_workers,
};
use onnx_prepared_capi::session::{onnxp_session_open, onnxp_session_release};
use onnx_prepared_capi::{OnnxpContext, OnnxpError, OnnxpErrorKind, OnnxpSession};

/// The `.onnx` path of fixture `name`, written if missing.
pub fn fixture(name: &str) -> CString {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let path: PathBuf = dir.join(format!("{name}.onnx"));
    CString::new(path.to_str().expect("UTF-8 path")).expect("no NUL")
}

/// The kind and message of `err` (released), or `None` for NULL.
pub fn outcome(err: *mut OnnxpError) -> Option<(OnnxpErrorKind, String)> {
    if err.is_null() {
        return None;
    }
    // SAFETY: a live error returned by the library, read then released once.
    unsafe {
        let kind = onnxp_error_kind(err);
        let message = CStr::from_ptr(onnxp_error_message(err))
            .to_str()
            .expect("UTF-8 message")
            .to_owned();
        onnxp_error_release(err);
        Some((kind, message))
    }
}

/// Panics with the message when `err` is not NULL.
#[track_caller]
pub fn ok(err: *mut OnnxpError) {
    if let Some((kind, message)) = outcome(err) {
        panic!("unexpected error {kind:?}: {message}");
    }
}

/// The kind and message of an error that must be there.
#[track_caller]
pub fn fails(err: *mut OnnxpError) -> (OnnxpErrorKind, String) {
    outcome(err).expect("an error")
}

/// A session on fixture `name` with one CPU worker and one I/O worker.
pub fn open(name: &str) -> Session {
    let path = fixture(name);
    let mut options = ptr::null_mut();
    let mut session = ptr::null();
    // SAFETY: valid out-pointers and a NUL-terminated path; the options are
    // released once, after open read them.
    unsafe {
        ok(onnxp_options_create(&mut options));
        ok(onnxp_options_set_workers(options, 1, 0));
        ok(onnxp_options_set_io_workers(options, 1));
        ok(onnxp_session_open(path.as_ptr(), options, &mut session));
        onnxp_options_release(options);
    }
    Session(session)
}

/// A session released on drop.
pub struct Session(pub *const OnnxpSession);

// SAFETY: the C API documents every session function as callable from any
// thread, concurrently; the pointer is released once, on drop.
unsafe impl Send for Session {}
// SAFETY: as for `Send`.
unsafe impl Sync for Session {}

impl Session {
    /// A new context for it.
    pub fn context(&self) -> Context {
        let mut ctx = ptr::null_mut();
        // SAFETY: a live session and a valid out-pointer.
        ok(unsafe { onnxp_context_create(self.0, &mut ctx) });
        Context(ctx)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: the session's reference, released once.
        unsafe { onnxp_session_release(self.0) };
    }
}

/// A context released on drop.
pub struct Context(pub *mut OnnxpContext);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: made by onnxp_context_create, released once.
        unsafe { onnxp_context_release(self.0) };
    }
}

/// `s` as a C string.
pub fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// A null pointer of any type (for argument checks).
pub fn null<T>() -> *mut T {
    ptr::null_mut()
}
