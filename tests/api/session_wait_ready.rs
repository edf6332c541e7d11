//! `ExecutionHandle::wait_ready` blocks on one thread while another cancels
//! the same handle: a run suspended on a weight whose read is held at a
//! gate stays unfinished while the waiter waits, ends cancelled once
//! cancelled, and `wait` then returns at once with `Cancelled`.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use onnx_prepared::ErrorKind;
use onnx_prepared::model::{
    FaultInjectingSource, FileSource, Model, ReadFault, ResolveOptions, ResolvedModel, WeightId,
};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions, Status};
use onnx_prepared::sync::Latch;
use onnx_prepared_kernels::Tensor;

/// A session of `gemm-chain` (one CPU and one I/O worker) whose
/// `chain1.weight` read waits at the returned gate, closed.
fn gated_session() -> (RuntimeSession, Arc<Latch>) {
    gated_session_with(
        SessionOptions::default()
            .with_cpu_workers(1)
            .with_io_workers(1),
    )
}

/// [`gated_session`] with `options`.
fn gated_session_with(options: SessionOptions) -> (RuntimeSession, Arc<Latch>) {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let model = Model::open(dir.join("gemm-chain.onnx")).unwrap();
    let weight = WeightId(
        model
            .weights()
            .iter()
            .position(|w| w.name() == "chain1.weight")
            .unwrap() as u32,
    );
    let gate = Arc::new(Latch::new()); // closed: chain1's read waits
    let source = Arc::new(
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(weight, ReadFault::Gate(gate.clone())),
    );
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    let plan = PreparedExecutionPlan::build(resolved).unwrap();
    let session = RuntimeSession::with_source(plan, source, options).unwrap();
    (session, gate)
}

/// A run of `session` started asynchronously, and a thread waiting for it
/// in `wait_ready` that sends `is_ready()` once that returns.
fn run_waited_on_a_thread(
    session: &RuntimeSession,
) -> (
    Arc<onnx_prepared::session::ExecutionHandle<RuntimeContext>>,
    onnx_prepared::sync::thread::JoinHandle<()>,
    mpsc::Receiver<bool>,
) {
    let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256]).unwrap();
    let run = Arc::new(session.run_async(RuntimeContext::new(session).with_input("A", a).unwrap()));
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = {
        let run = run.clone();
        onnx_prepared::sync::thread::spawn(move || {
            run.wait_ready();
            done_tx.send(run.is_ready()).unwrap();
        })
    };
    (run, waiter, done_rx)
}

#[test]
fn a_waiting_thread_returns_when_another_cancels() {
    let (session, gate) = gated_session();
    let (run, waiter, done_rx) = run_waited_on_a_thread(&session);
    // The run cannot finish while the read is held: the waiter waits.
    let early = done_rx.recv_timeout(Duration::from_millis(200));
    run.cancel(); // from this thread, while the waiter holds the handle
    let ready = done_rx.recv_timeout(Duration::from_secs(60));
    gate.open(); // the held read completes (nobody needs it now)
    waiter.join().unwrap();
    assert!(early.is_err(), "wait_ready returned before the run ended");
    assert_eq!(ready, Ok(true), "wait_ready returned on cancellation");

    let run = Arc::into_inner(run).expect("the waiter's clone is gone");
    let err = run.wait().unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Cancelled);
    assert!(err.context.is_some(), "the context comes back");
}

/// A synchronous run whose weight is still being read blocks on the
/// caller's own thread (rather than parking and going on on a worker) and
/// goes on there once the read completes: same outputs as a hot run.
#[test]
fn a_synchronous_run_waits_for_a_held_read_on_its_own_thread_and_finishes() {
    let (session, gate) = gated_session();
    let session = Arc::new(session);
    let input = || {
        let a = Tensor::from_f32(vec![2, 256], (0..512).map(|i| i as f32 / 512.0).collect());
        RuntimeContext::new(&session)
            .with_input("A", a.unwrap())
            .unwrap()
    };
    let (done_tx, done_rx) = mpsc::channel();
    let runner = {
        let (session, ctx) = (session.clone(), input());
        onnx_prepared::sync::thread::spawn(move || {
            let out = session.run(ctx).map(|ctx| ctx.outputs().to_vec());
            done_tx.send(out.map_err(|e| e.to_string())).unwrap();
        })
    };
    let early = done_rx.recv_timeout(Duration::from_millis(200));
    assert!(
        early.is_err(),
        "the run finished before its weight was read"
    );
    gate.open();
    let cold = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the run finishes once the read completes")
        .expect("the run succeeds");
    runner.join().unwrap();
    let hot = session.run(input()).unwrap().outputs().to_vec();
    assert!(!cold.is_empty());
    assert_eq!(cold, hot);
}

/// Holds the CPU worker that runs it until its gate opens.
struct Hold(Arc<Latch>);

impl TaskRunner for Hold {
    fn run(&self, _task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.0.wait();
        Ok(())
    }
}

/// The pool's one CPU worker is held, so the run can only go on on the
/// thread waiting in `wait_ready` (protocol "help"): it prepares what it
/// needs there and blocks on the held read; a cancel from another thread
/// wakes it and the run ends cancelled.
#[test]
fn a_run_blocked_on_its_waiting_thread_ends_cancelled_when_another_cancels() {
    let pool = Arc::new(WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 1,
        io_workers: 1,
        pin_cpu_workers: false,
    }));
    let (session, gate) = gated_session_with(SessionOptions::default().with_pool(pool.clone()));
    let held = Arc::new(Latch::new());
    let graph = TaskGraph::new(
        &[ResourceClass::Cpu],
        &[Priority::Critical],
        &Csr::from_rows(&[vec![]]),
    )
    .unwrap();
    let hold = pool.submit(graph, Arc::new(Hold(held.clone()))).unwrap();
    let (run, waiter, done_rx) = run_waited_on_a_thread(&session);
    let early = done_rx.recv_timeout(Duration::from_millis(200));
    run.cancel();
    // Nothing else wakes it: the cancel released the preparation, so the
    // held read's object is never made.
    let ready = done_rx.recv_timeout(Duration::from_secs(60));
    assert!(early.is_err(), "wait_ready returned before the run ended");
    assert_eq!(ready, Ok(true), "the blocked run woke on the cancel");
    gate.open();
    held.open();
    waiter.join().unwrap();
    hold.wait();
    assert_eq!(run.status(), Status::Cancelled);
    let run = Arc::into_inner(run).expect("the waiter's clone is gone");
    let err = run.wait().unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Cancelled);
    assert!(err.context.is_some(), "the context comes back");
}
