//! The asynchronous session API: [`RuntimeSession`] owns the plan, the
//! mutable state and a lease of a [`WorkerPool`]; [`prepare_async`] and
//! [`run_async`] return an [`ExecutionHandle`] at once; `prepare` and `run`
//! are exactly the async call followed by [`ExecutionHandle::wait`].
//!
//! # Protocols
//!
//! **Preparation** (session tasks: every read and prepack of the plan):
//! 1. The session keeps at most one live preparation submission
//!    ([`TaskGraph::session_graph`], run by [`SessionTasks`]). A streaming
//!    one (started by the first `run_async`) holds its tasks behind the
//!    look-ahead window; an eager one ([`RuntimeSession::prepare_async`])
//!    releases everything. Asking for eager preparation while a streaming
//!    one is live opens its window fully instead of starting a second.
//! 2. A preparation that finished (or whose producer of a needed object
//!    already ran, the object having been evicted since) is replaced by a
//!    new one: tasks whose objects are resident skip at once, so only the
//!    missing generations are produced again.
//!
//! **Run** (one suspendable continuation per inference, not a task per
//! node):
//! 1. `run_async` moves the [`RuntimeContext`] into a one-task submission
//!    on the CPU lane; it never blocks and never waits for preparation.
//! 2. The task lowers (once per input shapes) and loads the inputs. If the
//!    session's readiness epoch equals the store's (every object resident
//!    since the last publish or eviction), it replays every action under one
//!    epoch guard: the hot path.
//! 3. Otherwise it replays steps while their objects are resident, moving
//!    the preparation's look-ahead frontier after each one. At a missing
//!    object it advances the preparation's window to its step,
//!    promotes the object's producer chain to critical, reports a stall
//!    (the window grows), registers a continuation on the object's next
//!    completion and suspends; the continuation resumes it exactly once.
//! 4. Resumed, it re-checks the object: resident → go on. An object whose
//!    latest generation failed (seen at any check, before or after a
//!    suspension) fails the run with the typed error naming the failing
//!    preparation task; only an explicit `prepare` retries it.
//! 5. Kernels' parallel regions run on the pool's CPU workers (the lease).
//!
//! **Prepared**: a prepare handle's `wait` returns `Ok` only once every
//! prepared object was seen resident (file `resident.rs`).
//!
//! **Handles**: [`ExecutionHandle::wait`] returns after the submission
//! reached its single terminal state, with the context (outputs filled) or
//! an [`ExecutionError`] carrying the context back. Dropping a live handle
//! waits; forgetting one is sound (the submission owns the context and the
//! session state through `Arc`s, never borrows from the caller).
//!
//! [`prepare_async`]: RuntimeSession::prepare_async
//! [`run_async`]: RuntimeSession::run_async

mod context;
mod options;
pub mod report;
mod resident;
mod status;
mod trace;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

pub use context::RuntimeContext;
pub use options::SessionOptions;
pub use status::{Diagnostics, ExecutionError, Status};
pub use trace::{Trace, TraceEvent, TraceLane};

use status::{Naming, prepare_error, status_of};

use crate::Error;
use crate::arena::MemoryBudget;
use crate::error::RunError;
use crate::model::{FileSource, PayloadSource};
use crate::plan::{Csr, PreparedExecutionPlan, Priority, RequirementId, ResourceClass, TaskId};
use crate::scheduler::{
    Submission, SubmitOptions, TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool,
};
use crate::state::{PreparedExecutionState, Progress, SessionTasks};
use crate::store::{Outcome, Registration, Residency};
use crate::sync::{AtomicBool, AtomicU64, Lock, Ordering};

/// The live preparation submission and what its tasks hold.
struct Preparation {
    submission: Submission,
    streaming: bool,
    runner: Arc<PreparationRunner>,
    /// Who still needs it (protocol "interest").
    interest: Lock<Interest>,
}

/// Who registers interest in the preparation it gets.
enum Holder<'a> {
    /// An eager prepare handle.
    Eager,
    /// A run, holding the preparation it registered on.
    Run(&'a Lock<Option<Arc<Preparation>>>),
}

/// Live eager prepare handles and runs registered on a preparation.
#[derive(Default)]
struct Interest {
    eager: usize,
    runs: usize,
}

impl Preparation {
    /// Interest step 1 (under the session's preparation lock): one more
    /// eager handle or run needs this preparation.
    fn register(&self, eager: bool) {
        self.interest.with(|i| {
            if eager {
                i.eager += 1;
            } else {
                i.runs += 1;
            }
        });
    }

    /// Interest step 2 (under the session's preparation lock, like step
    /// 1, so a preparation is never cancelled between being chosen and
    /// registered on): an eager handle or run no longer needs it. With
    /// `cancelled` (the handle was cancelled) and nobody else interested,
    /// the preparation is cancelled: its tasks not yet started never run,
    /// running ones are joined; a later run starts a new preparation that
    /// produces only what is still missing.
    fn release(&self, eager: bool, cancelled: bool) {
        let last = self.interest.with(|i| {
            let count = if eager { &mut i.eager } else { &mut i.runs };
            *count = count.saturating_sub(1);
            i.eager == 0 && i.runs == 0
        });
        if !last || self.submission.is_done() {
            return;
        }
        if cancelled {
            self.stop();
        } else if self.streaming {
            // Its last run ended (done or failed): nothing advances the
            // window any more, so the rest completes in the background.
            self.submission.advance(u32::MAX - 1);
        }
    }
}

impl Preparation {
    /// Cancels what has not started, resumes reads the budget gate
    /// suspended (into the cancelled submission: they end) and drops the
    /// sources waiting for prepacks that will not run.
    fn stop(&self) {
        if !self.submission.is_done() {
            self.submission.cancel_token().cancel();
        }
        self.runner.tasks.resume_suspended();
        self.runner.tasks.release_held();
    }
}

impl Drop for Preparation {
    /// Nobody holds the preparation any more (no handle, no run, not the
    /// session's current one): what never started never will. Reads the
    /// budget gate suspended hold the submission through their resume
    /// handles, inside the runner the submission holds, so they are
    /// resumed (into the cancelled submission) to break that cycle.
    fn drop(&mut self) {
        self.stop();
    }
}

struct SessionInner {
    state: Arc<PreparedExecutionState>,
    pool: Arc<WorkerPool>,
    session_graph: Arc<TaskGraph>,
    session_ids: Box<[TaskId]>,
    /// Per requirement, the session-graph task that publishes it.
    publisher: Box<[TaskId]>,
    preparation: Lock<Option<Arc<Preparation>>>,
    /// The store's readiness epoch at which every object was seen resident
    /// (`u64::MAX`: not known to be).
    ready_epoch: AtomicU64,
    options: SessionOptions,
    /// The one-task graph of a run continuation.
    run_graph: Arc<TaskGraph>,
    trace: Option<Arc<Trace>>,
    /// Numbers runs for the trace.
    runs: AtomicU64,
    /// Finished run submissions kept for reuse (protocol "resubmit"): a
    /// steady stream of runs allocates no submission.
    free_runs: Lock<Vec<(Arc<RunContinuation>, Submission)>>,
}

/// Run submissions kept for reuse per session.
const FREE_RUNS: usize = 8;

/// Runs the preparation's tasks (a session-graph id is mapped to its plan
/// task), tracing each one when the session traces.
struct PreparationRunner {
    tasks: SessionTasks<'static>,
    ids: Box<[TaskId]>,
    trace: Option<Arc<Trace>>,
}

impl TaskRunner for PreparationRunner {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let t = self.ids[task.0 as usize];
        let Some(trace) = &self.trace else {
            return self.tasks.run(t, ctx);
        };
        let start = Instant::now();
        let result = self.tasks.run(t, ctx);
        let plan = self.tasks.state().plan();
        let lane = match plan.tasks().kind[t.0 as usize] {
            crate::plan::TaskKind::ReadSource => TraceLane::Io,
            _ => TraceLane::Prepack,
        };
        trace.record(
            lane,
            &plan.tasks().name[t.0 as usize],
            start,
            Instant::now(),
            0,
        );
        result
    }
}

/// A prepared-execution session over one plan.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
/// use onnx_prepared::plan::PreparedExecutionPlan;
/// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
/// use onnx_prepared_kernels::Tensor;
///
/// # let dir = onnx_prepared_fixtures::default_dir();
/// # onnx_prepared_fixtures::ensure_all(&dir)?;
/// let model = Model::open(dir.join("gemm-chain.onnx"))?; // reads no weight bytes
/// let resolved = ResolvedModel::resolve(model, &ResolveOptions::default())?;
/// let plan = PreparedExecutionPlan::build(resolved)?;
/// let session = RuntimeSession::new(plan, SessionOptions::default())?;
/// let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256])?;
/// let ctx = RuntimeContext::new(&session).with_input("A", a)?;
/// let run = session.run_async(ctx); // returns at once; weights stream in
/// let ctx = run.wait()?; // outputs filled
/// assert_eq!(ctx.outputs()[0].1.shape(), &[1, 256]);
/// # Ok(()) }
/// ```
pub struct RuntimeSession {
    inner: Arc<SessionInner>,
}

impl fmt::Debug for RuntimeSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeSession")
            .field("requirements", &self.inner.publisher.len())
            .field("session_tasks", &self.inner.session_ids.len())
            .finish_non_exhaustive()
    }
}

impl RuntimeSession {
    /// A session over `plan`, reading payloads from the model's files.
    ///
    /// # Errors
    /// The model's external data files cannot be opened.
    pub fn new(plan: PreparedExecutionPlan, options: SessionOptions) -> Result<Self, Error> {
        let source = Arc::new(FileSource::open(plan.resolved().model())?);
        Self::with_source(plan, source, options)
    }

    /// A session over `plan` reading payloads through `source` (a
    /// memory-mapped or fault-injecting source, for example).
    ///
    /// # Errors
    /// The plan's session tasks do not form a valid graph (a plan bug).
    pub fn with_source(
        plan: PreparedExecutionPlan,
        source: Arc<dyn PayloadSource>,
        options: SessionOptions,
    ) -> Result<Self, Error> {
        let plan = Arc::new(plan);
        let (graph, ids) = TaskGraph::session_graph(&plan).map_err(plan_error)?;
        let mut publisher = vec![TaskId(u32::MAX); plan.requirements().len()];
        for (local, t) in ids.iter().enumerate() {
            if let Some(r) = plan.tasks().publishes[t.0 as usize] {
                publisher[r.0 as usize] = TaskId(local as u32);
            }
        }
        let pool = options.worker_pool()?;
        let run_graph = TaskGraph::new(
            &[ResourceClass::Cpu],
            &[Priority::Critical],
            &Csr::from_rows(&[Vec::<TaskId>::new()]),
        )
        .map_err(plan_error)?;
        let budget = MemoryBudget::new(options.budget);
        let state = Arc::new(
            PreparedExecutionState::new(plan, source, budget).with_checksums(options.checksums),
        );
        Ok(Self {
            inner: Arc::new(SessionInner {
                state,
                pool,
                session_graph: Arc::new(graph),
                session_ids: ids,
                publisher: publisher.into(),
                preparation: Lock::new(None),
                ready_epoch: AtomicU64::new(u64::MAX),
                trace: options.trace.then(|| Arc::new(Trace::new())),
                runs: AtomicU64::new(0),
                free_runs: Lock::new(Vec::with_capacity(FREE_RUNS)),
                options,
                run_graph: Arc::new(run_graph),
            }),
        })
    }

    /// The session's state: plan, prepared-object store, budget.
    pub fn state(&self) -> &Arc<PreparedExecutionState> {
        &self.inner.state
    }

    /// Blocks until the session's latest preparation reached its terminal
    /// state: every task done, or failed or cancelled with its running
    /// tasks joined. Returns at once when none was started. A streaming
    /// preparation releases its tasks as its runs advance, so call this
    /// after they ended (or after `prepare_async`).
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
    /// use onnx_prepared::session::{RuntimeSession, SessionOptions};
    ///
    /// let session = RuntimeSession::new(plan("gemm-chain")?, SessionOptions::default())?;
    /// session.wait_idle(); // nothing started yet
    /// drop(session.prepare_async()); // dropping a live handle waits
    /// session.wait_idle();
    /// assert!(session.is_hot());
    /// # Ok(()) }
    /// ```
    pub fn wait_idle(&self) {
        if let Some(p) = self.inner.preparation.with(|p| p.clone()) {
            p.submission.wait();
        }
    }

    /// The pool the session runs on.
    pub fn pool(&self) -> &Arc<WorkerPool> {
        &self.inner.pool
    }

    /// Eager preparation: every session task is submitted (under the
    /// budget gate and priorities, no window); the handle completes once
    /// every prepared object is resident. Never blocks.
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
    /// use onnx_prepared::session::{RuntimeSession, SessionOptions};
    ///
    /// let session = RuntimeSession::new(plan("gemm-chain")?, SessionOptions::default())?;
    /// let preparing = session.prepare_async(); // returns at once
    /// // ... open files, build inputs ...
    /// preparing.wait()?;
    /// assert!(session.is_hot()); // every prepared object is resident
    /// # Ok(()) }
    /// ```
    pub fn prepare_async(&self) -> ExecutionHandle<()> {
        let preparation = self.inner.preparation(false, None, Holder::Eager);
        ExecutionHandle {
            inner: Some(HandleInner {
                session: self.inner.clone(),
                kind: Kind::Prepare(preparation),
                released: AtomicBool::new(false),
            }),
            helping: false,
            _output: std::marker::PhantomData,
        }
    }

    /// `prepare_async().wait()`.
    ///
    /// # Errors
    /// The first failed preparation task, with diagnostics.
    pub fn prepare(&self) -> Result<(), ExecutionError> {
        self.prepare_async().wait()
    }

    /// Starts an inference on `ctx`'s inputs and returns at once (protocol
    /// "run"); `ctx` comes back from [`ExecutionHandle::wait`] with its
    /// outputs. Never blocks and never refuses because preparation is still
    /// running.
    pub fn run_async(&self, ctx: RuntimeContext) -> ExecutionHandle<RuntimeContext> {
        self.start_run(ctx, true)
    }

    /// Run step 1; `wake == false` when the caller waits at once and runs
    /// the continuation itself.
    fn start_run(&self, ctx: RuntimeContext, wake: bool) -> ExecutionHandle<RuntimeContext> {
        let id = self.inner.runs.fetch_add(1, Ordering::Relaxed) + 1;
        let slot = RunSlot {
            ctx: Some(ctx),
            started: false,
            error: None,
            id,
        };
        let inner = &self.inner;
        let (runner, submission) = match inner.free_runs.with(Vec::pop) {
            Some((runner, done)) => {
                runner.slot.with(|s| *s = slot);
                let submission = inner
                    .pool
                    .resubmit_with(done, wake)
                    .unwrap_or_else(|_| unreachable!("kept only once finished"));
                (runner, submission)
            }
            None => {
                let runner = Arc::new(RunContinuation {
                    session: Arc::downgrade(inner),
                    slot: Lock::new(slot),
                    interest: Lock::default(),
                    waiting: Lock::default(),
                });
                let submission = inner
                    .pool
                    .submit(inner.run_graph.clone(), runner.clone())
                    .expect("the session's pool has CPU workers");
                (runner, submission)
            }
        };
        ExecutionHandle {
            inner: Some(HandleInner {
                session: inner.clone(),
                kind: Kind::Run { submission, runner },
                released: AtomicBool::new(false),
            }),
            helping: false,
            _output: std::marker::PhantomData,
        }
    }

    /// `run_async(ctx).wait()`.
    ///
    /// # Errors
    /// Invalid inputs, a kernel error, a prepared object that could not be
    /// produced, or cancellation; the error carries the context back.
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
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
    /// use onnx_prepared_kernels::Tensor;
    ///
    /// let session = RuntimeSession::new(plan("gemm-chain")?, SessionOptions::default())?;
    /// let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256])?;
    /// let ctx = session.run(RuntimeContext::new(&session).with_input("A", a)?)?;
    /// assert_eq!(ctx.output("Y").expect("graph output").shape(), &[1, 256]);
    /// # Ok(()) }
    /// ```
    pub fn run(&self, ctx: RuntimeContext) -> Result<RuntimeContext, ExecutionError> {
        // The same submission and continuation as `run_async`; the caller,
        // about to block, runs the continuation itself (protocol "help").
        let mut handle = self.start_run(ctx, false);
        handle.helping = true;
        handle.wait()
    }

    /// The session's trace, when [`SessionOptions::trace`] is on.
    pub fn trace(&self) -> Option<&Arc<Trace>> {
        self.inner.trace.as_ref()
    }

    /// Whether every prepared object is resident now (the next run takes
    /// the hot path).
    pub fn is_hot(&self) -> bool {
        self.inner.is_hot()
    }
}

fn plan_error(e: crate::scheduler::GraphError) -> Error {
    RunError::Unsupported {
        what: format!("the plan's task graph: {e}"),
    }
    .into()
}

impl SessionInner {
    /// Preparation step 1–2: the live preparation (eager: window open), or
    /// a new one. `needed`: a requirement the caller waits for, whose
    /// producer must still be able to run in the returned submission.
    fn preparation(
        &self,
        streaming: bool,
        needed: Option<RequirementId>,
        holder: Holder<'_>,
    ) -> Arc<Preparation> {
        self.preparation.with(|slot| {
            let p = self.choose_preparation(slot, streaming, needed);
            match holder {
                Holder::Eager => p.register(true),
                Holder::Run(held) => held.with(|held| {
                    if !held.as_ref().is_some_and(|h| Arc::ptr_eq(h, &p)) {
                        if let Some(old) = held.replace(p.clone()) {
                            old.release(false, false);
                        }
                        p.register(false);
                    }
                }),
            }
            p
        })
    }

    /// Interest step 2 for `p` (see [`Preparation::release`]).
    fn release(&self, p: &Preparation, eager: bool, cancelled: bool) {
        self.preparation.with(|_| p.release(eager, cancelled));
    }

    /// Preparation steps 1–2, under the preparation lock.
    fn choose_preparation(
        &self,
        slot: &mut Option<Arc<Preparation>>,
        streaming: bool,
        needed: Option<RequirementId>,
    ) -> Arc<Preparation> {
        {
            if let Some(p) = slot.as_ref() {
                let stale = p.submission.is_done()
                    || p.submission.cancel_token().is_cancelled()
                    || needed.is_some_and(|r| {
                        let publisher = self.publisher[r.0 as usize];
                        p.submission.is_claimed(publisher)
                            && !p.submission.is_suspended(publisher)
                            && !self.state.store().snapshot(r.0 as usize).is_in_flight()
                    });
                if !stale {
                    if !streaming && p.streaming {
                        p.submission.advance(u32::MAX - 1);
                    }
                    return p.clone();
                }
                if p.submission.is_done() || p.submission.cancel_token().is_cancelled() {
                    // Its prepacks that did not run never will; a handle
                    // may keep it alive, but not its sources.
                    p.runner.tasks.release_held();
                }
            }
            let runner = Arc::new(PreparationRunner {
                tasks: self.state.shared_session_tasks(),
                ids: self.session_ids.clone(),
                trace: self.trace.clone(),
            });
            let options = SubmitOptions {
                look_ahead: streaming.then(|| self.options.look_ahead.clone()),
                ..SubmitOptions::default()
            };
            let submission = self
                .pool
                .submit_with(self.session_graph.clone(), runner.clone(), options)
                .expect("the session's pool has CPU and I/O workers");
            let p = Arc::new(Preparation {
                submission,
                streaming,
                runner,
                interest: Lock::default(),
            });
            *slot = Some(p.clone());
            p
        }
    }

    /// Run step 2's check: one compare when nothing changed since every
    /// object was last seen resident.
    fn is_hot(&self) -> bool {
        let store = self.state.store();
        let epoch = store.readiness_epoch();
        if self.ready_epoch.load(Ordering::Acquire) == epoch {
            return true;
        }
        if self.state.all_resident() && store.readiness_epoch() == epoch {
            self.ready_epoch.store(epoch, Ordering::Release);
            return true;
        }
        false
    }
}

/// What a run carries between its suspensions.
struct RunSlot {
    ctx: Option<RuntimeContext>,
    started: bool,
    error: Option<Error>,
    /// The run's number (trace).
    id: u64,
}

/// The run continuation (protocol "run"): one scheduler task per inference.
/// Holds its session weakly: the session keeps finished continuations for
/// reuse, and a strong reference back would keep both alive forever. A run
/// in flight is kept alive by its handle.
struct RunContinuation {
    session: std::sync::Weak<SessionInner>,
    slot: Lock<RunSlot>,
    /// The preparation this run registered interest on (protocol
    /// "interest"), until the run ends or is cancelled.
    interest: Lock<Option<Arc<Preparation>>>,
    /// The continuation a suspended run registered on the store (run step
    /// 3). It owns the run's resume handle, hence the submission, this
    /// continuation and the context: a cancelled run takes it back
    /// ([`RunContinuation::deregister`]) so that all of it is freed without
    /// waiting for the object's completion.
    waiting: Lock<Option<Registration>>,
}

impl TaskRunner for RunContinuation {
    fn run(&self, _task: TaskId, tctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let result = self.slot.with(|slot| match self.step(slot, tctx) {
            Ok(finished) => Ok(finished),
            Err(e) => {
                let message = e.to_string();
                slot.error = Some(e);
                Err(TaskFailure::new(message))
            }
        });
        if !matches!(result, Ok(false)) {
            self.release_interest(false);
        }
        result.map(|_| ())
    }
}

impl RunContinuation {
    /// Drops the continuation the run registered on the store, if it was
    /// not called yet (idempotent). Called when the run is cancelled and
    /// once its submission is terminal: no run is executing then, so no
    /// registration can follow.
    fn deregister(&self) {
        if let Some(registration) = self.waiting.with(Option::take)
            && let Some(session) = self.session.upgrade()
        {
            session.state.store().deregister(registration);
        }
    }

    /// Interest step 2 for this run (idempotent).
    fn release_interest(&self, cancelled: bool) {
        if let Some(p) = self.interest.with(Option::take)
            && let Some(session) = self.session.upgrade()
        {
            session.release(&p, false, cancelled);
        }
    }

    /// One step of the continuation: `Ok(true)` when the run finished,
    /// `Ok(false)` when it suspended.
    fn step(&self, slot: &mut RunSlot, tctx: &TaskContext<'_>) -> Result<bool, Error> {
        let session = self.session.upgrade().ok_or(RunError::Cancelled)?;
        let session = &*session;
        let state = &*session.state;
        let RunSlot {
            ctx, started, id, ..
        } = slot;
        let id = *id;
        let ctx = ctx
            .as_mut()
            .expect("the context stays in the slot until wait");
        let par = match session.options.intra_op_threads {
            Some(n) => tctx.parallel().at_most(n),
            None => tctx.parallel(),
        };
        if !*started {
            *started = true;
            ctx.order()?;
            state.begin_run_ordered(&mut ctx.invocation, &ctx.inputs, &ctx.order)?;
            if session.is_hot() {
                let start = session.trace.as_ref().map(|_| Instant::now());
                if state.run_hot(&mut ctx.invocation, &par)? {
                    if let (Some(trace), Some(start)) = (&session.trace, start) {
                        trace.record(TraceLane::Inference, "run (hot)", start, Instant::now(), id);
                    }
                    ctx.finish_outputs(state)?;
                    return Ok(true);
                }
                // Evicted since the check: reload and take the cold path.
                state.begin_run_ordered(&mut ctx.invocation, &ctx.inputs, &ctx.order)?;
            }
        }
        let steps = state.plan().steps();
        // Cold path: each finished step moves the preparation's look-ahead
        // frontier (run step 3), so reads and prepacks keep ahead of the
        // inference instead of starting only when it stalls.
        let preparation = session.preparation.with(|p| p.clone());
        let on_step = |step: usize, start: Instant, end: Instant| {
            if let Some(trace) = &session.trace {
                trace.record(TraceLane::Inference, &steps[step].scope, start, end, id);
            }
            if let Some(p) = &preparation {
                p.submission.advance(step as u32 + 1);
            }
        };
        match state.resume_run(&mut ctx.invocation, &par, Some(&on_step))? {
            Progress::Done => {
                ctx.finish_outputs(state)?;
                Ok(true)
            }
            Progress::Waiting { step, requirement } => {
                let index = requirement.0 as usize;
                let snapshot = state.store().snapshot(index);
                let generation = snapshot.generation().0;
                if snapshot.residency() == Residency::Failed {
                    // Its latest generation failed: this run fails with it
                    // (an explicit `prepare` retries the object; waiting for
                    // a retry nobody schedules would never end).
                    return Err(self.failure(step, requirement));
                }
                let preparation =
                    session.preparation(true, Some(requirement), Holder::Run(&self.interest));
                let sub = &preparation.submission;
                sub.advance(step as u32);
                sub.promote(session.publisher[index]);
                sub.stalled();
                // The generation to wait for: the one in flight, else
                // the next one a producer will claim.
                let target = if snapshot.is_in_flight() || snapshot.is_resident() {
                    generation
                } else {
                    generation + 1
                };
                let handle = tctx.suspend();
                let registration = state
                    .store()
                    .waiter(index, crate::store::Generation(target))
                    .on_complete(move |_outcome: Outcome| handle.resume());
                // The previous registration (if any) was called: it resumed
                // this run.
                self.waiting.with(|w| *w = registration);
                Ok(false)
            }
        }
    }

    /// The error of a run whose object's production failed, naming the
    /// failing preparation task when the preparation has finished.
    fn failure(&self, step: usize, requirement: RequirementId) -> Error {
        let Some(session) = self.session.upgrade() else {
            return RunError::Cancelled.into();
        };
        let plan = session.state.plan();
        let cause = session
            .state
            .failure_cause(requirement)
            .unwrap_or_else(|| "its producer failed".to_owned());
        RunError::PreparationFailed {
            step: plan.steps()[step].scope.clone(),
            requirement: plan.resolved().requirements()[requirement.0 as usize]
                .name
                .clone(),
            cause,
        }
        .into()
    }
}

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
