//! `ExecutionHandle::on_complete` (each callback exactly once, whichever
//! thread finishes the run, in registration order, after `is_ready`) and
//! `RuntimeContext::take_output` (one output leaves with its I/O charge).

#![allow(clippy::disallowed_types)] // test bookkeeping

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use onnx_prepared::ErrorKind;
use onnx_prepared::arena::Domain;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::Tensor;

fn session(name: &str) -> RuntimeSession {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let options = SessionOptions::default()
        .with_cpu_workers(1)
        .with_io_workers(1);
    RuntimeSession::open(dir.join(format!("{name}.onnx")), options).expect("opens")
}

fn gemm_context(session: &RuntimeSession) -> RuntimeContext {
    let a = Tensor::from_f32(vec![1, 256], vec![0.25; 256]).expect("tensor");
    RuntimeContext::new(session)
        .with_input("A", a)
        .expect("an input")
}

#[test]
fn callbacks_run_once_each_in_order_after_the_run_is_ready() {
    let session = session("gemm-chain");
    for round in 0..20 {
        let run = session.run_async(gemm_context(&session));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (done, finished) = mpsc::channel();
        for k in 0..2 {
            let (calls, done) = (calls.clone(), done.clone());
            run.on_complete(move || {
                calls.lock().expect("not poisoned").push(k);
                done.send(()).expect("receiver alive");
            });
        }
        finished.recv().expect("first callback");
        finished.recv().expect("second callback");
        assert!(run.is_ready(), "round {round}");
        let ctx = run.wait().expect("runs");
        assert_eq!(ctx.outputs().len(), 1);
        // Nothing calls them again after wait.
        assert_eq!(*calls.lock().expect("not poisoned"), vec![0, 1]);
    }
}

#[test]
fn a_callback_registered_after_completion_runs_at_once_on_the_caller() {
    let session = session("gemm-chain");
    let run = session.run_async(gemm_context(&session));
    while !run.is_ready() {
        std::thread::yield_now();
    }
    let caller = std::thread::current().id();
    let ran_on = Arc::new(Mutex::new(None));
    let slot = ran_on.clone();
    run.on_complete(move || {
        *slot.lock().expect("not poisoned") = Some(std::thread::current().id())
    });
    assert_eq!(*ran_on.lock().expect("not poisoned"), Some(caller));
    run.wait().expect("runs");
}

#[test]
fn a_cancelled_or_dropped_run_calls_back_exactly_once() {
    let session = session("tiny-llm");
    let calls = Arc::new(AtomicUsize::new(0));
    for _ in 0..10 {
        // Inputs are missing: the run cannot succeed, whether cancelled first
        // or not.
        let ctx = RuntimeContext::new(&session)
            .with_input(
                "input_ids",
                Tensor::from_i64(vec![1, 1], vec![7]).expect("ids"),
            )
            .expect("an input");
        let run = session.run_async(ctx);
        let c = calls.clone();
        run.on_complete(move || {
            c.fetch_add(1, Ordering::SeqCst);
        });
        run.cancel();
        let err = run.wait().expect_err("cancelled or missing inputs");
        assert!(matches!(
            err.error.kind(),
            ErrorKind::Cancelled | ErrorKind::Input
        ));
    }
    settled(&calls, 10);
    // A dropped handle waits for the run; its callback runs once.
    let run = session.run_async(RuntimeContext::new(&session));
    let c = calls.clone();
    run.on_complete(move || {
        c.fetch_add(1, Ordering::SeqCst);
    });
    drop(run);
    settled(&calls, 11);
}

/// Asserts `calls` reaches `n` and stays there: `wait` returns once the run
/// finished, while the thread that finished it may still be calling back.
fn settled(calls: &AtomicUsize, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while calls.load(Ordering::SeqCst) < n && std::time::Instant::now() < deadline {
        onnx_prepared::sync::thread::yield_now();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        n,
        "each callback exactly once"
    );
}

#[test]
fn take_output_moves_one_output_and_its_io_charge() {
    let session = session("gemm-chain");
    let mut ctx = session.run(gemm_context(&session)).expect("runs");
    assert_eq!(session.memory().domain(Domain::Io).live, 256 * 4);
    assert!(ctx.take_output("nope").is_none());
    let y = ctx.take_output("Y").expect("an output");
    assert_eq!(y.shape(), &[1, 256]);
    assert_eq!(session.memory().domain(Domain::Io).live, 0);
    assert_eq!(ctx.output_bytes(), 0);
    // Its place holds an empty tensor until the next run fills it.
    assert!(ctx.output("Y").expect("the slot").is_empty());
    let ctx = session.run(ctx).expect("runs again");
    assert_eq!(ctx.output("Y").expect("refilled"), &y);
}
