//! [`ExecutionHandle`]: the caller's side of a preparation or a run (protocol
//! "handles" in the module docs).

use std::fmt;
use std::sync::Arc;

use super::preparation::Preparation;
use super::run::RunContinuation;
use super::status::{Naming, prepare_error, status_of};
use super::{ExecutionError, FREE_RUNS, RuntimeContext, SessionInner, Status};
use crate::exec::RunError;
use crate::scheduler::Submission;
use crate::sync::{AtomicBool, Ordering};

enum Kind {
    Prepare(Arc<Preparation>),
    Run {
        submission: Submission,
        runner: Arc<RunContinuation>,
    },
}

impl Kind {
    /// How the submission's tasks are named in its diagnostics.
    fn naming(&self) -> Naming {
        match self {
            Kind::Prepare(_) => Naming::SessionTasks,
            Kind::Run { .. } => Naming::Run,
        }
    }
}

struct HandleInner {
    session: Arc<SessionInner>,
    kind: Kind,
    /// An eager handle's interest was released (interest step 2).
    released: AtomicBool,
}

impl HandleInner {
    /// Interest step 2 for this handle (idempotent).
    fn release_interest(&self, cancelled: bool) {
        match &self.kind {
            Kind::Prepare(p) => {
                if !self.released.swap(true, Ordering::AcqRel) {
                    self.session.release(p, true, cancelled);
                }
            }
            Kind::Run { runner, .. } => runner.release_interest(cancelled),
        }
    }
}

/// A submission in flight: a preparation (`T = ()`) or a run
/// (`T = RuntimeContext`). Moveable; `wait` consumes it. Dropping a live
/// handle waits for the submission's terminal state (it never detaches);
/// forgetting one is sound.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
/// # use onnx_prepared::plan::PreparedExecutionPlan;
/// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions, Status};
/// # use onnx_prepared_kernels::Tensor;
/// # let dir = onnx_prepared_fixtures::default_dir();
/// # onnx_prepared_fixtures::ensure_all(&dir)?;
/// # let model = Model::open(dir.join("gemm-chain.onnx"))?;
/// # let plan = PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?;
/// let session = RuntimeSession::new(plan, SessionOptions::default())?;
/// let prepare = session.prepare_async(); // eager preparation, in the background
/// # let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256])?;
/// let run = session.run_async(RuntimeContext::new(&session).with_input("A", a)?);
/// if run.status() == Status::Running {
///     // ... other work; `run.cancel()` would stop it ...
/// }
/// match run.wait() {
///     Ok(ctx) => assert_eq!(ctx.outputs().len(), 1),
///     Err(e) => panic!("{e}; failing task: {:?}", e.diagnostics.failed_task),
/// }
/// prepare.wait()?;
/// # Ok(()) }
/// ```
pub struct ExecutionHandle<T> {
    inner: Option<HandleInner>,
    /// `wait` runs ready tasks of the submission on the calling thread.
    helping: bool,
    _output: std::marker::PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for ExecutionHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionHandle")
            .field("ready", &self.is_ready())
            .finish()
    }
}

impl ExecutionHandle<()> {
    /// The handle of an eager preparation on which the caller registered
    /// interest (interest step 1).
    pub(super) fn for_preparation(
        session: Arc<SessionInner>,
        preparation: Arc<Preparation>,
    ) -> Self {
        Self {
            inner: Some(HandleInner {
                session,
                kind: Kind::Prepare(preparation),
                released: AtomicBool::new(false),
            }),
            helping: false,
            _output: std::marker::PhantomData,
        }
    }
}

impl ExecutionHandle<RuntimeContext> {
    /// The handle of a run started by [`run::start`](super::run::start);
    /// with `helping`, `wait` runs the continuation on the calling thread.
    pub(super) fn for_run(
        session: Arc<SessionInner>,
        submission: Submission,
        runner: Arc<RunContinuation>,
        helping: bool,
    ) -> Self {
        Self {
            inner: Some(HandleInner {
                session,
                kind: Kind::Run { submission, runner },
                released: AtomicBool::new(false),
            }),
            helping,
            _output: std::marker::PhantomData,
        }
    }
}

impl<T> ExecutionHandle<T> {
    fn inner(&self) -> &HandleInner {
        self.inner.as_ref().expect("present until wait")
    }

    fn submission(&self) -> &Submission {
        match &self.inner().kind {
            Kind::Prepare(p) => &p.submission,
            Kind::Run { submission, .. } => submission,
        }
    }

    /// Whether the submission reached its terminal state (`wait` would not
    /// block).
    pub fn is_ready(&self) -> bool {
        self.submission().is_done()
    }

    /// Calls `f` exactly once, when the submission reaches its terminal
    /// state: on the thread that finishes it — a pool worker, a thread in
    /// `wait` or [`cancel`](Self::cancel) that ran or cancelled its last
    /// task, or a dropping handle's — or at once on the calling thread when
    /// it has finished already. When `f` runs,
    /// [`is_ready`](Self::is_ready) is true and `wait` does not block.
    ///
    /// `f` runs inside the runtime's completion path (on a worker thread it
    /// delays that worker's next task): it must not block, and must not
    /// wait for another submission of the same pool. It is dropped on the
    /// thread that ran it, so it must not own the last reference to the
    /// session (dropping a session joins its pool's workers). Registering
    /// several callbacks calls each once, in order.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
    /// # use onnx_prepared::plan::PreparedExecutionPlan;
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// # let model = Model::open(dir.join("gemm-chain.onnx"))?;
    /// # let plan = PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?;
    /// use std::sync::mpsc;
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
    /// use onnx_prepared_kernels::Tensor;
    ///
    /// let session = RuntimeSession::new(plan, SessionOptions::default())?;
    /// let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256])?;
    /// let run = session.run_async(RuntimeContext::new(&session).with_input("A", a)?);
    /// let (done, finished) = mpsc::channel();
    /// run.on_complete(move || done.send(()).expect("receiver alive"));
    /// finished.recv()?; // the run finished (on a worker, here)
    /// assert!(run.is_ready());
    /// assert_eq!(run.wait()?.outputs().len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn on_complete(&self, f: impl FnOnce() + Send + 'static) {
        self.submission().on_done(Box::new(f));
    }

    /// Blocks until the submission reached its terminal state
    /// ([`is_ready`](Self::is_ready) is then true) without taking its
    /// result: for a caller that waits on one thread while another may
    /// [`cancel`](Self::cancel), then takes the result with `wait` (which
    /// no longer blocks on the submission). A run's `wait_ready` runs the
    /// continuation on the calling thread when no worker claimed it yet, as
    /// `wait` does.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
    /// # use onnx_prepared::plan::PreparedExecutionPlan;
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// # let model = Model::open(dir.join("gemm-chain.onnx"))?;
    /// # let plan = PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?;
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
    /// use onnx_prepared_kernels::Tensor;
    ///
    /// let session = RuntimeSession::new(plan, SessionOptions::default())?;
    /// let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256])?;
    /// let run = session.run_async(RuntimeContext::new(&session).with_input("A", a)?);
    /// std::thread::scope(|s| {
    ///     s.spawn(|| run.wait_ready()); // waits; `run.cancel()` stays callable here
    /// });
    /// assert!(run.is_ready());
    /// assert_eq!(run.wait()?.outputs().len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn wait_ready(&self) {
        match &self.inner().kind {
            Kind::Prepare(p) => {
                p.submission.wait();
            }
            Kind::Run { submission, .. } if self.helping => {
                submission.wait_helping();
            }
            Kind::Run { submission, .. } => {
                submission.wait();
            }
        }
    }

    /// Cooperative cancellation: tasks that have not started never run; a
    /// suspended run ends cancelled, its pins released. The session's
    /// preparation (its reads and prepacks) is shared: it is cancelled
    /// only when no other run and no live eager `prepare` handle still
    /// needs it (protocol "interest"); otherwise it goes on for them, and a
    /// cancelled prepare handle's `wait` reports what they made of it.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
    /// # use onnx_prepared::plan::PreparedExecutionPlan;
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// # let plan = |name: &str| -> Result<PreparedExecutionPlan, Box<dyn std::error::Error>> {
    /// #     let model = Model::open(dir.join(format!("{name}.onnx")))?;
    /// #     Ok(PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?)
    /// # };
    /// use onnx_prepared::ErrorKind;
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
    /// use onnx_prepared_kernels::Tensor;
    ///
    /// let session = RuntimeSession::new(plan("tiny-llm")?, SessionOptions::default())?;
    /// let ctx = RuntimeContext::new(&session)
    ///     .with_input("input_ids", Tensor::from_i64(vec![1, 1], vec![7])?)?;
    /// let run = session.run_async(ctx);
    /// run.cancel();
    /// match run.wait() {
    ///     // Cancelled before it finished: the context comes back.
    ///     Err(e) => {
    ///         assert!(matches!(e.error.kind(), ErrorKind::Cancelled | ErrorKind::Input));
    ///         assert!(e.context.is_some());
    ///     }
    ///     Ok(_) => unreachable!("inputs are missing: the run cannot succeed"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn cancel(&self) {
        let inner = self.inner();
        if let Kind::Run { submission, runner } = &inner.kind {
            submission.cancel_token().cancel();
            // A run blocked on an object in its caller's thread wakes and
            // ends cancelled.
            runner.unblock();
            // A run suspended on an object ends cancelled: its continuation
            // on the store is taken back (a run still executing may register
            // one after this; it is taken back once the submission is
            // terminal).
            if submission.is_done() {
                runner.deregister();
            }
        }
        inner.release_interest(true);
    }

    /// The current status, with diagnostics once failed.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
    /// # use onnx_prepared::plan::PreparedExecutionPlan;
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// # let plan = |name: &str| -> Result<PreparedExecutionPlan, Box<dyn std::error::Error>> {
    /// #     let model = Model::open(dir.join(format!("{name}.onnx")))?;
    /// #     Ok(PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?)
    /// # };
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions, Status};
    /// use onnx_prepared_kernels::Tensor;
    ///
    /// let session = RuntimeSession::new(plan("gemm-chain")?, SessionOptions::default())?;
    /// let bad = Tensor::from_f32(vec![1, 7], vec![0.0; 7])?; // A is [*, 256]
    /// let run = session.run_async(RuntimeContext::new(&session).with_input("A", bad)?);
    /// while run.status() == Status::Running {
    ///     std::thread::yield_now();
    /// }
    /// let Status::Failed(diagnostics) = run.status() else { unreachable!() };
    /// assert_eq!(diagnostics.failed_task.unwrap().0, "run");
    /// let err = run.wait().unwrap_err();
    /// assert!(err.to_string().contains("A"), "{err}");
    /// # Ok(()) }
    /// ```
    pub fn status(&self) -> Status {
        let submission = self.submission();
        if !submission.is_done() {
            return Status::Running;
        }
        status_of(
            &self.inner().session,
            self.inner().kind.naming(),
            &submission.wait(),
        )
    }

    fn finish(&mut self) -> Result<Option<RuntimeContext>, ExecutionError> {
        let inner = self.inner.take().expect("wait once");
        let session = inner.session.clone();
        match &inner.kind {
            Kind::Prepare(p) => {
                let outcome = p.submission.wait();
                inner.release_interest(false);
                match status_of(&session, inner.kind.naming(), &outcome) {
                    Status::Succeeded if session.state.all_resident() => Ok(None),
                    // Objects produced by another submission (a run's
                    // on-demand preparation) or evicted since: settle and
                    // re-check each one (protocol "prepared").
                    Status::Succeeded | Status::Running => session.ensure_resident().map(|()| None),
                    status => Err(prepare_error(status)),
                }
            }
            Kind::Run { submission, runner } => {
                let outcome = if self.helping {
                    submission.wait_helping()
                } else {
                    submission.wait()
                };
                runner.deregister();
                let (ctx, error) = runner.slot.with(|s| (s.ctx.take(), s.error.take()));
                let status = status_of(&session, inner.kind.naming(), &outcome);
                inner.release_interest(status == Status::Cancelled);
                if let Kind::Run { submission, runner } = inner.kind {
                    session.free_runs.with(|free| {
                        if free.len() < FREE_RUNS {
                            free.push((runner, submission));
                        }
                    });
                }
                match (status, error) {
                    (Status::Succeeded, _) => Ok(ctx),
                    (Status::Cancelled, _) => Err(ExecutionError {
                        error: RunError::Cancelled.into(),
                        diagnostics: Box::default(),
                        context: ctx.map(Box::new),
                    }),
                    (Status::Failed(diagnostics), Some(error)) => Err(ExecutionError {
                        error,
                        diagnostics: Box::new(diagnostics),
                        context: ctx.map(Box::new),
                    }),
                    (status, _) => Err(ExecutionError {
                        error: RunError::Unsupported {
                            what: format!("the run ended without its result: {status:?}"),
                        }
                        .into(),
                        diagnostics: Box::default(),
                        context: ctx.map(Box::new),
                    }),
                }
            }
        }
    }
}

impl ExecutionHandle<()> {
    /// Blocks until every prepared object is resident (or preparation
    /// failed): `Ok` means each one was resident when it was checked.
    ///
    /// # Errors
    /// The first failed preparation task, with the tasks it suppressed; an
    /// object whose production failed in another submission, or that stayed
    /// missing (evicted each time) through a few renewed preparations.
    pub fn wait(mut self) -> Result<(), ExecutionError> {
        self.finish().map(|_| ())
    }
}

impl ExecutionHandle<RuntimeContext> {
    /// Blocks until the run reached its terminal state and returns the
    /// context with its outputs.
    ///
    /// # Errors
    /// The run's first error, with diagnostics and the context.
    pub fn wait(mut self) -> Result<RuntimeContext, ExecutionError> {
        self.finish()
            .map(|ctx| ctx.expect("a finished run hands its context back"))
    }
}

impl<T> Drop for ExecutionHandle<T> {
    /// Waits for the submission's terminal state (documented: a live handle
    /// never detaches).
    fn drop(&mut self) {
        if let Some(inner) = &self.inner {
            let cancelled = match &inner.kind {
                Kind::Prepare(p) => p.submission.wait().cancelled > 0,
                Kind::Run { submission, runner } => {
                    let cancelled = submission.wait_helping().cancelled > 0;
                    // Nobody will take the context: free it (and its budget
                    // charges) now, and the continuation a cancelled run
                    // left on the store with it.
                    runner.deregister();
                    drop(runner.slot.with(|s| s.ctx.take()));
                    cancelled
                }
            };
            inner.release_interest(cancelled);
        }
    }
}
