//! Runs through the C API on the fixtures: outputs equal the Rust API's;
//! wrong inputs are typed errors with messages and leave the context
//! usable; borrowed inputs are used in place for one run; outputs can be
//! taken; asynchronous runs call back exactly once, cancel, report status,
//! and give the context back; `generate` matches the Rust decoder.

#![allow(clippy::disallowed_types, clippy::disallowed_methods)] // test bookkeeping and threads

mod common;

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Context, Session, c, fails, fixture, null, ok, open};
use onnx_prepared::{RuntimeContext, RuntimeSession, SessionOptions, Tensor};
use onnx_prepared_capi::context::*;
use onnx_prepared_capi::generate::onnxp_generate;
use onnx_prepared_capi::run::*;
use onnx_prepared_capi::{OnnxpElementType, OnnxpErrorKind as K, OnnxpRunHandle};

const F32: i32 = OnnxpElementType::Float as i32;
const I64: i32 = OnnxpElementType::Int64 as i32;

fn a_values(seed: f32) -> Vec<f32> {
    (0..256)
        .map(|i| ((i % 13) as f32 - 6.0) * 0.1 + seed)
        .collect()
}

/// `gemm-chain`'s output Y for A = `a`, by the Rust API.
fn rust_y(a: &[f32]) -> Vec<f32> {
    let dir = onnx_prepared_fixtures::default_dir();
    let session =
        RuntimeSession::open(dir.join("gemm-chain.onnx"), SessionOptions::default()).unwrap();
    let ctx = RuntimeContext::new(&session)
        .with_input("A", Tensor::from_f32(vec![1, 256], a.to_vec()).unwrap())
        .unwrap();
    let ctx = session.run(ctx).unwrap();
    ctx.output("Y").unwrap().as_f32().unwrap().to_vec()
}

fn set_a(ctx: &Context, a: &[f32], borrowed: bool) -> *mut onnx_prepared_capi::OnnxpError {
    let name = c("A");
    let dims = [1usize, a.len()];
    let set = if borrowed {
        onnxp_context_set_input_borrowed
    } else {
        onnxp_context_set_input
    };
    // SAFETY: a live context; dims and data valid for the lengths given.
    unsafe {
        set(
            ctx.0,
            name.as_ptr(),
            F32,
            dims.as_ptr(),
            2,
            a.as_ptr().cast(),
            size_of_val(a),
        )
    }
}

/// Output `name` of `ctx` as f32s, or the error.
fn output(ctx: &Context, name: &str) -> Result<(Vec<usize>, Vec<f32>), (K, String)> {
    let name = c(name);
    let mut view = std::mem::MaybeUninit::<OnnxpTensorView>::uninit();
    // SAFETY: a live context and a valid out-pointer; the view is read
    // before the next call on the context.
    unsafe {
        if let Some(e) = common::outcome(onnxp_context_output(
            ctx.0,
            name.as_ptr(),
            view.as_mut_ptr(),
        )) {
            return Err(e);
        }
        Ok(read(&view.assume_init()))
    }
}

/// # Safety
/// `v` is a live view of f32 elements.
unsafe fn read(v: &OnnxpTensorView) -> (Vec<usize>, Vec<f32>) {
    assert_eq!(v.dtype, OnnxpElementType::Float);
    assert_eq!(v.byte_len, v.element_count * 4);
    // SAFETY: the view's pointers are valid for its lengths (caller).
    unsafe {
        (
            std::slice::from_raw_parts(v.dims, v.rank).to_vec(),
            std::slice::from_raw_parts(v.data.cast::<f32>(), v.element_count).to_vec(),
        )
    }
}

fn run(session: &Session, ctx: &Context) -> Option<(K, String)> {
    // SAFETY: a live session and its own live context.
    common::outcome(unsafe { onnxp_run(session.0, ctx.0) })
}

#[test]
fn a_copied_input_runs_like_the_rust_api_and_reruns_reuse_the_context() {
    let session = open("gemm-chain");
    let ctx = session.context();
    for seed in [0.0, 0.5, -0.25] {
        let a = a_values(seed);
        ok(set_a(&ctx, &a, false));
        assert_eq!(run(&session, &ctx), None);
        let (shape, y) = output(&ctx, "Y").expect("an output");
        assert_eq!(shape, vec![1, 256]);
        assert_eq!(y, rust_y(&a), "seed {seed}");
    }
}

#[test]
fn wrong_types_shapes_and_sizes_are_input_errors_and_the_context_stays_usable() {
    let session = open("gemm-chain");
    let ctx = session.context();
    let name = c("A");
    let ids = [1i64; 256];
    // SAFETY: a live context; dims and data valid for the lengths given.
    ok(unsafe {
        onnxp_context_set_input(
            ctx.0,
            name.as_ptr(),
            I64,
            [1usize, 256].as_ptr(),
            2,
            ids.as_ptr().cast(),
            2048,
        )
    });
    let (kind, message) = run(&session, &ctx).expect("a type error");
    assert_eq!(kind, K::Input);
    assert!(
        message.contains("`A`") && message.contains("f32") && message.contains("i64"),
        "{message}"
    );

    ok(set_a(&ctx, &[0.5; 7], false));
    let (kind, message) = run(&session, &ctx).expect("a shape error");
    assert_eq!(kind, K::Input);
    assert!(
        message.contains("[1, 7]") && message.contains("256"),
        "{message}"
    );

    // Bytes that do not match the dims fail at once.
    // SAFETY: a live context; the data is valid for 12 bytes.
    let (kind, message) = fails(unsafe {
        onnxp_context_set_input(
            ctx.0,
            name.as_ptr(),
            F32,
            [1usize, 4].as_ptr(),
            2,
            [0f32; 3].as_ptr().cast(),
            12,
        )
    });
    assert_eq!(kind, K::Input);
    assert!(message.contains("need 16 bytes, not 12"), "{message}");
    // An unknown input and an element type an input cannot have.
    let other = c("B");
    // SAFETY: as above.
    let (kind, message) = fails(unsafe {
        onnxp_context_set_input(
            ctx.0,
            other.as_ptr(),
            F32,
            [1usize].as_ptr(),
            1,
            [0f32].as_ptr().cast(),
            4,
        )
    });
    assert_eq!(kind, K::Input);
    assert!(message.contains("`B`"), "{message}");
    // SAFETY: as above.
    let (kind, _) = fails(unsafe {
        onnxp_context_set_input(
            ctx.0,
            name.as_ptr(),
            OnnxpElementType::Int4 as i32,
            [1usize].as_ptr(),
            1,
            [0u8].as_ptr().cast(),
            1,
        )
    });
    assert_eq!(kind, K::InvalidArgument);

    // No output yet; then a good input runs.
    let (kind, message) = output(&ctx, "Y").expect_err("no run finished");
    assert_eq!(kind, K::InvalidArgument);
    assert!(message.contains("no run has finished"), "{message}");
    let (_, message) = output(&ctx, "Z").expect_err("not an output");
    assert!(message.contains("not an output"), "{message}");
    let a = a_values(0.1);
    ok(set_a(&ctx, &a, false));
    assert_eq!(run(&session, &ctx), None);
    assert_eq!(output(&ctx, "Y").expect("an output").1, rust_y(&a));
}

#[test]
fn a_borrowed_input_is_read_in_place_for_one_run_only() {
    let session = open("gemm-chain");
    let ctx = session.context();
    let mut a = a_values(0.0);
    ok(set_a(&ctx, &a, true));
    // No copy: the run reads what the buffer holds when it runs.
    a.copy_from_slice(&a_values(0.75));
    assert_eq!(run(&session, &ctx), None);
    assert_eq!(
        output(&ctx, "Y").expect("an output").1,
        rust_y(&a_values(0.75))
    );
    // The next run does not read it again: it must be set anew.
    drop(a);
    let (kind, message) = run(&session, &ctx).expect("the borrow ended");
    assert_eq!(kind, K::Input);
    assert!(
        message.contains("`A`") && message.contains("borrowed"),
        "{message}"
    );
    let a = a_values(0.3);
    ok(set_a(&ctx, &a, true));
    assert_eq!(run(&session, &ctx), None);
    assert_eq!(output(&ctx, "Y").expect("an output").1, rust_y(&a));
}

#[test]
fn a_taken_output_is_the_callers_and_leaves_the_context() {
    let session = open("gemm-chain");
    let ctx = session.context();
    let a = a_values(0.2);
    ok(set_a(&ctx, &a, false));
    assert_eq!(run(&session, &ctx), None);
    let name = c("Y");
    let mut tensor = null();
    let mut view = std::mem::MaybeUninit::<OnnxpTensorView>::uninit();
    // SAFETY: a live context and valid out-pointers; the tensor is read
    // while live and released once.
    unsafe {
        ok(onnxp_context_take_output(ctx.0, name.as_ptr(), &mut tensor));
        let (kind, message) = output(&ctx, "Y").expect_err("taken");
        assert_eq!(kind, K::InvalidArgument);
        assert!(message.contains("taken"), "{message}");
        assert_eq!(
            fails(onnxp_context_take_output(ctx.0, name.as_ptr(), &mut null())).0,
            K::InvalidArgument
        );
        // A new run fills the context again; the taken tensor is untouched.
        ok(set_a(&ctx, &a_values(0.9), false));
        assert_eq!(run(&session, &ctx), None);
        ok(onnxp_tensor_view(tensor, view.as_mut_ptr()));
        let (shape, y) = read(&view.assume_init());
        assert_eq!(shape, vec![1, 256]);
        assert_eq!(y, rust_y(&a));
        onnxp_tensor_release(tensor);
    }
}

unsafe extern "C" fn count(user_data: *mut c_void) {
    // SAFETY: every caller passes a live `AtomicUsize`.
    let calls = unsafe { &*user_data.cast::<AtomicUsize>() };
    calls.fetch_add(1, Ordering::SeqCst);
}

fn start(session: &Session, ctx: &Context, calls: &AtomicUsize) -> *mut OnnxpRunHandle {
    let mut handle = null();
    // SAFETY: a live session and context; `calls` outlives the handle,
    // which every caller waits or releases before it goes.
    ok(unsafe {
        onnxp_run_async(
            session.0,
            ctx.0,
            Some(count),
            ptr::from_ref(calls).cast_mut().cast(),
            &mut handle,
        )
    });
    handle
}

fn status(handle: *mut OnnxpRunHandle) -> OnnxpStatus {
    let mut s = OnnxpStatus::Running;
    // SAFETY: a live handle and a valid out-pointer.
    ok(unsafe { onnxp_run_handle_status(handle, &mut s) });
    s
}

#[test]
fn an_async_run_calls_back_once_and_gives_the_context_back() {
    let session = open("gemm-chain");
    let ctx = session.context();
    let calls = AtomicUsize::new(0);
    for round in 0..20 {
        let a = a_values(round as f32 * 0.01);
        ok(set_a(&ctx, &a, round % 2 == 0));
        let handle = start(&session, &ctx, &calls);
        // Lent to the run until its handle is waited.
        let (kind, _) = fails(set_a(&ctx, &a, false));
        assert_eq!(kind, K::Busy);
        // SAFETY: a live handle, waited twice, then released once.
        unsafe {
            ok(onnxp_run_handle_wait(handle));
            assert_eq!(
                calls.load(Ordering::SeqCst),
                round + 1,
                "exactly once by the time wait returns"
            );
            let mut ready = false;
            ok(onnxp_run_handle_is_ready(handle, &mut ready));
            assert!(ready);
            assert_eq!(status(handle), OnnxpStatus::Succeeded);
            ok(onnxp_run_handle_wait(handle));
            onnxp_run_handle_release(handle);
        }
        assert_eq!(output(&ctx, "Y").expect("an output").1, rust_y(&a));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 20);
}

#[test]
fn cancelled_failed_and_unwaited_runs_call_back_once() {
    let session = open("tiny-llm");
    let calls = AtomicUsize::new(0);
    for round in 0..10 {
        let ctx = session.context();
        // Only input_ids: the run cannot succeed, cancelled or not.
        let ids = c("input_ids");
        // SAFETY: a live context; dims and data valid for their lengths.
        ok(unsafe {
            onnxp_context_set_input(
                ctx.0,
                ids.as_ptr(),
                I64,
                [1usize, 1].as_ptr(),
                2,
                [7i64].as_ptr().cast(),
                8,
            )
        });
        let handle = start(&session, &ctx, &calls);
        // SAFETY: a live handle, cancelled twice, waited, released once.
        unsafe {
            ok(onnxp_run_handle_cancel(handle));
            ok(onnxp_run_handle_cancel(handle));
            let (kind, message) = fails(onnxp_run_handle_wait(handle));
            match kind {
                K::Cancelled => assert_eq!(status(handle), OnnxpStatus::Cancelled),
                K::Input => {
                    assert!(message.contains("missing"), "{message}");
                    assert_eq!(status(handle), OnnxpStatus::Failed);
                }
                other => panic!("{other:?}: {message}"),
            }
            // The same result again.
            assert_eq!(fails(onnxp_run_handle_wait(handle)).0, kind);
            onnxp_run_handle_release(handle);
        }
        assert_eq!(calls.load(Ordering::SeqCst), round + 1);
    }
    // A handle released unwaited waits, calls back, and gives the context
    // back with its outputs.
    let gemm = open("gemm-chain");
    let ctx = gemm.context();
    let a = a_values(0.4);
    ok(set_a(&ctx, &a, false));
    let handle = start(&gemm, &ctx, &calls);
    // SAFETY: a live handle, released once.
    unsafe { onnxp_run_handle_release(handle) };
    assert_eq!(calls.load(Ordering::SeqCst), 11);
    assert_eq!(output(&ctx, "Y").expect("given back").1, rust_y(&a));
}

#[test]
fn a_context_runs_only_on_its_own_session_and_outlives_a_released_session() {
    let gemm = open("gemm-chain");
    let other = open("gemm-chain");
    let ctx = gemm.context();
    ok(set_a(&ctx, &a_values(0.0), false));
    let (kind, message) = run(&other, &ctx).expect("another session");
    assert_eq!(kind, K::InvalidArgument);
    assert!(message.contains("another session"), "{message}");
    // The context keeps its session alive after the caller releases it.
    let raw = gemm.0;
    drop(gemm);
    let a = a_values(0.6);
    ok(set_a(&ctx, &a, false));
    // SAFETY: the session is alive through the context's reference; only
    // compared by address and used for this run.
    assert!(common::outcome(unsafe { onnxp_run(raw, ctx.0) }).is_none());
    assert_eq!(output(&ctx, "Y").expect("an output").1, rust_y(&a));
}

#[test]
fn generate_matches_the_rust_decoder_and_refuses_what_it_cannot_decode() {
    let session = open("tiny-llm");
    let prompt = [1i64, 2, 3, 4];
    let mut tokens = [0i64; 5];
    let mut written = 0usize;
    // SAFETY: a live session; buffers valid for their lengths.
    ok(unsafe {
        onnxp_generate(
            session.0,
            prompt.as_ptr(),
            4,
            5,
            tokens.as_mut_ptr(),
            &mut written,
        )
    });
    assert_eq!(written, 5);
    let path = fixture("tiny-llm");
    let rust = RuntimeSession::open(path.to_str().unwrap(), SessionOptions::default()).unwrap();
    let expected = onnx_prepared::decoder::generate(&rust, &prompt, 5).unwrap();
    assert_eq!(tokens.to_vec(), expected.tokens);

    // SAFETY: as above.
    unsafe {
        // An empty prompt, also when no token is asked for.
        for new_tokens in [5, 0] {
            let (kind, message) = fails(onnxp_generate(
                session.0,
                prompt.as_ptr(),
                0,
                new_tokens,
                tokens.as_mut_ptr(),
                &mut written,
            ));
            assert_eq!(kind, K::Input);
            assert!(message.contains("empty prompt"), "{message}");
        }
        let (kind, _) = fails(onnxp_generate(
            session.0,
            prompt.as_ptr(),
            4,
            1 << 20,
            tokens.as_mut_ptr(),
            &mut written,
        ));
        assert_eq!(kind, K::Input);
        ok(onnxp_generate(
            session.0,
            prompt.as_ptr(),
            4,
            0,
            null(),
            &mut written,
        ));
        assert_eq!(written, 0);
        let gemm = open("gemm-chain");
        let (kind, message) = fails(onnxp_generate(
            gemm.0,
            prompt.as_ptr(),
            4,
            2,
            tokens.as_mut_ptr(),
            &mut written,
        ));
        assert_eq!(kind, K::Input);
        assert!(message.contains("input_ids"), "{message}");
    }
}

#[test]
fn kv_cache_pairs_bind_and_unknown_bindings_fail() {
    let session = open("tiny-llm");
    let ctx = session.context();
    let mut pairs = 0usize;
    let (present, past, logits) = (c("present_key_0"), c("past_key_0"), c("logits"));
    // SAFETY: a live context and valid pointers.
    unsafe {
        ok(onnxp_context_bind_kv_cache(ctx.0, &mut pairs));
        ok(onnxp_context_bind_kv_cache(ctx.0, null()));
        ok(onnxp_context_bind_cache(
            ctx.0,
            present.as_ptr(),
            past.as_ptr(),
        ));
        let (kind, message) = fails(onnxp_context_bind_cache(
            ctx.0,
            past.as_ptr(),
            logits.as_ptr(),
        ));
        assert_eq!(kind, K::Input);
        assert!(message.contains("past_key_0"), "{message}");
    }
    assert_eq!(pairs, 8);
}

/// Sets every tiny-llm input for a prompt of `t` tokens and an empty cache.
fn tiny_prompt(ctx: &Context, t: usize) {
    let ids: Vec<i64> = (1..=t as i64).collect();
    let bias: Vec<f32> = (0..t * t)
        .map(|k| if k % t <= k / t { 0.0 } else { -10000.0 })
        .collect();
    let (ids_name, bias_name) = (c("input_ids"), c("attn_bias"));
    // SAFETY: a live context; dims and data valid for their lengths.
    unsafe {
        ok(onnxp_context_set_input(
            ctx.0,
            ids_name.as_ptr(),
            I64,
            [1, t].as_ptr(),
            2,
            ids.as_ptr().cast(),
            t * 8,
        ));
        ok(onnxp_context_set_input(
            ctx.0,
            bias_name.as_ptr(),
            F32,
            [1, 1, t, t].as_ptr(),
            4,
            bias.as_ptr().cast(),
            t * t * 4,
        ));
        for layer in 0..4 {
            for kv in ["key", "value"] {
                let name = c(&format!("past_{kv}_{layer}"));
                ok(onnxp_context_set_input(
                    ctx.0,
                    name.as_ptr(),
                    F32,
                    [1, 8, 0, 64].as_ptr(),
                    4,
                    ptr::null(),
                    0,
                ));
            }
        }
    }
}

/// What a callback that inspects its own handle saw.
#[derive(Default)]
struct Probe {
    handle: std::sync::atomic::AtomicPtr<OnnxpRunHandle>,
    calls: AtomicUsize,
    /// Bit 0: the handle was known; bit 1: it read ready and not running.
    seen: AtomicUsize,
}

unsafe extern "C" fn probe(user_data: *mut c_void) {
    // SAFETY: every caller passes a live `Probe`.
    let p = unsafe { &*user_data.cast::<Probe>() };
    p.calls.fetch_add(1, Ordering::SeqCst);
    let handle = p.handle.load(Ordering::SeqCst);
    if handle.is_null() {
        return;
    }
    let (mut ready, mut s) = (false, OnnxpStatus::Running);
    // SAFETY: the handle is live until its wait returned, which happens
    // only after this callback returns.
    unsafe {
        ok(onnxp_run_handle_is_ready(handle, &mut ready));
        ok(onnxp_run_handle_status(handle, &mut s));
    }
    let good = usize::from(ready && s != OnnxpStatus::Running) << 1;
    p.seen.store(1 | good, Ordering::SeqCst);
}

#[test]
fn a_callback_may_read_its_own_handle_and_cancel_may_race_wait() {
    // A panic on any thread (a worker dropping its own pool, say) is
    // counted; no other test of this file panics.
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    let (mut saw_handle, mut cancelled) = (0, 0);
    for round in 0..6 {
        // A cold session each round: the prompt's run streams the weights.
        let session = open("tiny-llm");
        let ctx = session.context();
        tiny_prompt(&ctx, 16);
        let p = Probe::default();
        let mut handle = null();
        // SAFETY: a live session and context; `p` outlives the handle,
        // which is waited and released below.
        ok(unsafe {
            onnxp_run_async(
                session.0,
                ctx.0,
                Some(probe),
                ptr::from_ref(&p).cast_mut().cast(),
                &mut handle,
            )
        });
        p.handle.store(handle, Ordering::SeqCst);
        let handle_addr = handle as usize;
        // Half the rounds cancel from another thread while this one waits.
        let canceller = (round % 2 == 1).then(|| {
            std::thread::spawn(move || {
                // SAFETY: the handle is released only after this thread
                // is joined.
                ok(unsafe { onnxp_run_handle_cancel(handle_addr as *mut OnnxpRunHandle) });
            })
        });
        // SAFETY: a live handle, waited, then released once (after the
        // canceller is joined).
        let result = common::outcome(unsafe { onnxp_run_handle_wait(handle) });
        if let Some(t) = canceller {
            t.join().expect("canceller");
        }
        match &result {
            None => assert_eq!(status(handle), OnnxpStatus::Succeeded),
            Some((K::Cancelled, _)) => {
                assert!(round % 2 == 1);
                assert_eq!(status(handle), OnnxpStatus::Cancelled);
            }
            Some(other) => panic!("round {round}: {other:?}"),
        }
        // SAFETY: released once.
        unsafe { onnxp_run_handle_release(handle) };
        assert_eq!(p.calls.load(Ordering::SeqCst), 1, "round {round}");
        let seen = p.seen.load(Ordering::SeqCst);
        assert!(
            seen == 0 || seen == 3,
            "round {round}: the callback saw {seen:#b}"
        );
        saw_handle += usize::from(seen == 3);
        cancelled += usize::from(result.is_some());
        if result.is_none() {
            assert_eq!(output_shape(&ctx, "logits"), vec![1, 16, 8192]);
        }
    }
    eprintln!("{saw_handle} of 6 callbacks read their handle; {cancelled} of 3 cancels won");
    // A cold prompt's run outlasts storing its handle by far.
    assert!(saw_handle > 0);
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a thread panicked");
}

#[test]
fn runs_on_one_session_overlap_from_several_threads() {
    let session = open("gemm-chain");
    let expected: Vec<Vec<f32>> = (0..4).map(|k| rust_y(&a_values(k as f32 * 0.1))).collect();
    std::thread::scope(|s| {
        for (k, want) in expected.iter().enumerate() {
            let session = &session;
            s.spawn(move || {
                let ctx = session.context();
                let a = a_values(k as f32 * 0.1);
                for _ in 0..50 {
                    ok(set_a(&ctx, &a, k % 2 == 0));
                    assert_eq!(run(session, &ctx), None);
                    assert_eq!(&output(&ctx, "Y").expect("an output").1, want);
                }
            });
        }
    });
}

fn output_shape(ctx: &Context, name: &str) -> Vec<usize> {
    let name = c(name);
    let mut view = std::mem::MaybeUninit::<OnnxpTensorView>::uninit();
    // SAFETY: a live context and a valid out-pointer; the dims are read
    // before the next call on the context.
    unsafe {
        ok(onnxp_context_output(
            ctx.0,
            name.as_ptr(),
            view.as_mut_ptr(),
        ));
        let v = view.assume_init();
        std::slice::from_raw_parts(v.dims, v.rank).to_vec()
    }
}
