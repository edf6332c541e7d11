//! The C API's argument checks: NULL pointers, bad strings, unknown enum
//! values and out-of-range indices are `InvalidArgument` errors (never a
//! crash); a missing model is a `Model` error; releasing NULL is a no-op;
//! `onnxp_error_kind(NULL)` is `Ok`.

mod common;

use std::ffi::{CStr, c_char};
use std::ptr;

use common::{c, fails, fixture, null, ok, open};
use onnx_prepared_capi::context::*;
use onnx_prepared_capi::error::*;
use onnx_prepared_capi::generate::onnxp_generate;
use onnx_prepared_capi::options::*;
use onnx_prepared_capi::run::*;
use onnx_prepared_capi::session::*;
use onnx_prepared_capi::{OnnxpErrorKind as K, OnnxpValueInfo};

#[test]
fn releasing_null_is_a_no_op_and_a_null_error_reads_as_ok() {
    // SAFETY: NULL is accepted by every release and error accessor.
    unsafe {
        onnxp_error_release(null());
        onnxp_options_release(null());
        onnxp_session_release(ptr::null());
        onnxp_context_release(null());
        onnxp_tensor_release(null());
        onnxp_run_handle_release(null());
        assert_eq!(onnxp_error_kind(ptr::null()), K::Ok);
        assert_eq!(CStr::from_ptr(onnxp_error_message(ptr::null())), c"");
    }
}

#[test]
fn null_arguments_are_invalid_argument_errors() {
    let session = open("gemm-chain");
    let ctx = session.context();
    let name = c("A");
    let mut count = 0usize;
    let mut info = std::mem::MaybeUninit::<OnnxpValueInfo>::uninit();
    let mut view = std::mem::MaybeUninit::<OnnxpTensorView>::uninit();
    let mut ready = false;
    let mut written = 0usize;
    // SAFETY: every pointer is NULL, live, or valid for its writes.
    let results = unsafe {
        [
            onnxp_options_create(null()),
            onnxp_options_set_workers(null(), 1, 1),
            onnxp_options_set_thread_count(null(), 2),
            onnxp_session_open(ptr::null(), ptr::null(), &mut ptr::null()),
            onnxp_session_open(fixture("gemm-chain").as_ptr(), ptr::null(), null()),
            onnxp_session_prepare(ptr::null()),
            onnxp_session_input_count(ptr::null(), &mut count),
            onnxp_session_input_count(session.0, null()),
            onnxp_session_input(session.0, 0, null()),
            onnxp_session_output(ptr::null(), 0, info.as_mut_ptr()),
            onnxp_context_create(ptr::null(), &mut null()),
            onnxp_context_create(session.0, null()),
            onnxp_context_set_input(null(), name.as_ptr(), 1, ptr::null(), 0, ptr::null(), 0),
            onnxp_context_set_input(ctx.0, ptr::null(), 1, ptr::null(), 0, ptr::null(), 0),
            // Two dims promised, none given.
            onnxp_context_set_input(ctx.0, name.as_ptr(), 1, ptr::null(), 2, ptr::null(), 0),
            // Bytes promised, none given.
            onnxp_context_set_input(
                ctx.0,
                name.as_ptr(),
                1,
                [1usize].as_ptr(),
                1,
                ptr::null(),
                4,
            ),
            onnxp_context_output(ctx.0, name.as_ptr(), null()),
            onnxp_context_output(null(), name.as_ptr(), view.as_mut_ptr()),
            onnxp_context_take_output(ctx.0, ptr::null(), &mut null()),
            onnxp_context_bind_cache(ctx.0, ptr::null(), name.as_ptr()),
            onnxp_tensor_view(ptr::null(), view.as_mut_ptr()),
            onnxp_run(ptr::null(), ctx.0),
            onnxp_run(session.0, null()),
            onnxp_run_async(session.0, ctx.0, None, null(), null()),
            onnxp_run_handle_wait(null()),
            onnxp_run_handle_cancel(null()),
            onnxp_run_handle_is_ready(ptr::null(), &mut ready),
            onnxp_run_handle_status(ptr::null(), null()),
            onnxp_generate(session.0, [1i64].as_ptr(), 1, 1, null(), &mut written),
            onnxp_generate(
                ptr::null(),
                [1i64].as_ptr(),
                1,
                1,
                [0i64].as_mut_ptr(),
                &mut written,
            ),
        ]
    };
    for (i, err) in results.into_iter().enumerate() {
        let (kind, message) = fails(err);
        assert_eq!(kind, K::InvalidArgument, "call {i}: {message}");
        assert!(message.contains("NULL"), "call {i}: {message}");
    }
}

#[test]
fn a_missing_model_is_a_model_error_naming_the_path() {
    let path = c("/nonexistent/model.onnx");
    let mut session = ptr::null();
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    let (kind, message) =
        fails(unsafe { onnxp_session_open(path.as_ptr(), ptr::null(), &mut session) });
    assert_eq!(kind, K::Model, "{message}");
    assert!(message.contains("/nonexistent/model.onnx"), "{message}");
    assert!(
        session.is_null(),
        "out-parameters are written only on success"
    );
}

#[test]
fn strings_that_are_not_utf8_are_invalid_arguments() {
    let bad = [0xffu8, 0xfe, 0];
    let mut session = ptr::null();
    // SAFETY: a NUL-terminated byte string and a valid out-pointer.
    let (kind, message) = fails(unsafe {
        onnxp_session_open(bad.as_ptr().cast::<c_char>(), ptr::null(), &mut session)
    });
    assert_eq!(kind, K::InvalidArgument);
    assert!(message.contains("UTF-8"), "{message}");
}

#[test]
fn unknown_enum_values_and_bad_counts_are_refused() {
    let mut options = null();
    // SAFETY: a valid out-pointer, then live options released once.
    unsafe {
        ok(onnxp_options_create(&mut options));
        let checks = [
            onnxp_options_set_memory_limit(options, 5, 1 << 20),
            onnxp_options_set_memory_limit(options, -1, 1 << 20),
            onnxp_options_set_cache_policy(options, 4),
            onnxp_options_set_workers(options, 0, 0),
            onnxp_options_set_thread_count(options, 0),
            onnxp_options_set_io_workers(options, 0),
        ];
        for err in checks {
            assert_eq!(fails(err).0, K::InvalidArgument);
        }
        ok(onnxp_options_set_memory_limit(options, 1, u64::MAX));
        ok(onnxp_options_set_pin_threads(options, false));
        ok(onnxp_options_set_map_weights(options, true));
        ok(onnxp_options_set_resident_tables(options, true));
        // A policy that needs a directory without one fails at open.
        ok(onnxp_options_set_cache_policy(options, 2));
        let mut session = ptr::null();
        let path = fixture("gemm-chain");
        let (kind, message) = fails(onnxp_session_open(path.as_ptr(), options, &mut session));
        assert_eq!(kind, K::InvalidArgument);
        assert!(message.contains("build-if-missing"), "{message}");
        // With one, it opens (and the directory is made on demand).
        let dir = tempfile::tempdir().expect("tempdir");
        let dir_c = c(dir.path().to_str().expect("UTF-8"));
        ok(onnxp_options_set_cache_dir(options, dir_c.as_ptr()));
        ok(onnxp_session_open(path.as_ptr(), options, &mut session));
        onnxp_session_release(session);
        ok(onnxp_options_set_cache_dir(options, ptr::null()));
        onnxp_options_release(options);
    }
}

#[test]
fn input_and_output_descriptions_name_symbolic_dims() {
    let session = open("tiny-llm");
    let (mut inputs, mut outputs) = (0usize, 0usize);
    let mut info = std::mem::MaybeUninit::<OnnxpValueInfo>::uninit();
    // SAFETY: a live session and valid out-pointers; the strings read live
    // as long as the session.
    unsafe {
        ok(onnxp_session_input_count(session.0, &mut inputs));
        ok(onnxp_session_output_count(session.0, &mut outputs));
        assert_eq!((inputs, outputs), (10, 9));
        ok(onnxp_session_input(session.0, 1, info.as_mut_ptr()));
        let info = info.assume_init();
        assert_eq!(CStr::from_ptr(info.name), c"attn_bias");
        assert_eq!(info.dtype, OnnxpElementType::Float);
        assert!(info.has_shape);
        let dims = std::slice::from_raw_parts(info.dims, info.rank);
        assert_eq!(dims, &[1, 1, -1, -1]);
        let names = std::slice::from_raw_parts(info.dim_names, info.rank);
        assert!(names[0].is_null() && names[1].is_null());
        assert_eq!(CStr::from_ptr(names[2]), c"T");
        assert_eq!(CStr::from_ptr(names[3]), c"total");

        let mut out = std::mem::MaybeUninit::<OnnxpValueInfo>::uninit();
        ok(onnxp_session_output(session.0, 0, out.as_mut_ptr()));
        let mut out = out.assume_init();
        assert_eq!(CStr::from_ptr(out.name), c"logits");
        let dims = std::slice::from_raw_parts(out.dims, out.rank);
        assert_eq!(dims, &[1, -1, 8192]);

        let (kind, message) = fails(onnxp_session_input(session.0, 10, &mut out));
        assert_eq!(kind, K::InvalidArgument);
        assert!(message.contains("out of range"), "{message}");
    }
}

/// The deprecated `onnxp_options_set_threads` keeps its old meaning (CPU
/// workers and a kernel's thread limit) and its checks, as
/// `onnxp_options_set_workers`; a session opened with either runs.
#[test]
#[allow(deprecated)]
fn the_deprecated_thread_setter_is_the_workers_setter() {
    let mut options = null();
    // SAFETY: a valid out-pointer, then live options released once.
    unsafe {
        ok(onnxp_options_create(&mut options));
        assert_eq!(
            fails(onnxp_options_set_threads(options, 0, 0)).0,
            K::InvalidArgument
        );
        let opens = |set: *mut OnnxpError| {
            ok(set);
            let mut session = ptr::null();
            let path = fixture("gemm-chain");
            ok(onnxp_session_open(path.as_ptr(), options, &mut session));
            ok(onnxp_session_prepare(session));
            onnxp_session_release(session);
        };
        opens(onnxp_options_set_threads(options, 1, 1));
        opens(onnxp_options_set_thread_count(options, 2));
        onnxp_options_release(options);
    }
}
