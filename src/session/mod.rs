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

pub mod report;
mod resident;
mod trace;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

pub use trace::{Trace, TraceEvent, TraceLane};

use resident::prepare_error;

use onnx_prepared_kernels::Tensor;

use crate::Error;
use crate::arena::{BudgetLimits, Domain, MemoryBudget, Reservation};
use crate::error::RunError;
use crate::model::{ChecksumPolicy, FileSource, PayloadSource};
use crate::plan::{Csr, PreparedExecutionPlan, Priority, RequirementId, ResourceClass, TaskId};
use crate::scheduler::{
    LookAheadOptions, PoolConfig, RunOutcome, Submission, SubmitOptions, TaskContext, TaskFailure,
    TaskGraph, TaskRunner, WorkerPool,
};
use crate::state::{InvocationState, PreparedExecutionState, Progress, SessionTasks};
use crate::store::{Outcome, Registration, Residency};
use crate::sync::{AtomicBool, AtomicU64, Lock, Ordering};

/// How a session runs: its workers, memory limits and look-ahead.
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
/// use onnx_prepared::arena::{BudgetLimits, Domain};
/// use onnx_prepared::session::{RuntimeSession, SessionOptions};
///
/// let options = SessionOptions {
///     cpu_threads: 1,
///     io_workers: 1,
///     // At most 1 MiB of sources being read at a time: reads wait for room.
///     budget: BudgetLimits::unlimited().with_domain(Domain::Preparation, 1 << 20),
///     ..SessionOptions::default()
/// };
/// let session = RuntimeSession::new(plan("gemm-chain")?, options)?;
/// session.prepare()?;
/// assert!(session.is_hot());
/// assert!(session.state().budget().peak(Domain::Preparation) <= 1 << 20);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// CPU workers of the session's own pool (kernels and prepacks).
    pub cpu_threads: usize,
    /// I/O workers of the session's own pool (reads).
    pub io_workers: usize,
    /// Pin CPU workers to cores.
    pub pin_threads: bool,
    /// Per-arena and global memory limits.
    pub budget: BudgetLimits,
    /// The streaming preparation's look-ahead window.
    pub look_ahead: LookAheadOptions,
    /// Run on this pool (shared with other sessions) instead of one of the
    /// session's own.
    pub pool: Option<Arc<WorkerPool>>,
    /// Record reads, prepacks and steps in a [`Trace`].
    pub trace: bool,
    /// Most threads one kernel's parallel region uses, the thread running
    /// the inference included (`None`: that thread plus every CPU worker).
    /// `Some(1)` runs kernels sequentially.
    pub intra_op_threads: Option<usize>,
    /// Whether each weight's declared `sha256:` digest is verified before
    /// its first use (default [`ChecksumPolicy::Strict`]: a mismatch fails
    /// the run with an error naming the tensor).
    pub checksums: ChecksumPolicy,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            cpu_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            io_workers: 2,
            pin_threads: false,
            budget: BudgetLimits::unlimited(),
            look_ahead: LookAheadOptions::default(),
            pool: None,
            trace: false,
            intra_op_threads: None,
            checksums: ChecksumPolicy::Strict,
        }
    }
}

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
        let pool = match &options.pool {
            Some(pool) => pool.clone(),
            None => Arc::new(WorkerPool::try_new(PoolConfig {
                cpu_workers: options.cpu_threads.max(1),
                io_workers: options.io_workers.max(1),
                devices: 0,
                pin_cpu_workers: options.pin_threads,
            })?),
        };
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

/// Inputs, outputs and per-inference state of one run; moved into
/// [`RuntimeSession::run_async`] and handed back by
/// [`ExecutionHandle::wait`], so a submission owns everything its task
/// touches. Reusing a context for the next run reuses its lowering and
/// activation buffers.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
/// # use onnx_prepared::plan::PreparedExecutionPlan;
/// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
/// use onnx_prepared_kernels::Tensor;
/// # let dir = onnx_prepared_fixtures::default_dir();
/// # onnx_prepared_fixtures::ensure_all(&dir)?;
/// # let model = Model::open(dir.join("gemm-chain.onnx"))?;
/// # let plan = PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?;
/// let session = RuntimeSession::new(plan, SessionOptions::default())?;
/// let mut ctx = RuntimeContext::new(&session)
///     .with_input("A", Tensor::from_f32(vec![1, 256], vec![0.5; 256])?)?;
/// for step in 0..3 {
///     ctx = session.run(ctx)?; // hot after the first run: no allocation but the outputs
///     assert_eq!(ctx.output("Y").expect("graph output").shape(), &[1, 256]);
///     ctx.set_input("A", Tensor::from_f32(vec![1, 256], vec![step as f32; 256])?)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct RuntimeContext {
    inputs: Vec<(String, Tensor)>,
    outputs: Vec<(String, Tensor)>,
    invocation: InvocationState,
    declared: Vec<String>,
    /// The graph's output names.
    declared_outputs: Vec<String>,
    /// `order[i]`: position in `inputs` of declared input `i` (empty until
    /// every input is set, recomputed when a new name arrives).
    order: Vec<u32>,
    /// Caller-owned cache bindings: after a successful run, output `.0`
    /// moves into input `.1` (a KV cache's presents become the next pasts).
    cache: Vec<(String, String)>,
    /// The outputs' bytes, charged to the session's I/O domain while the
    /// context holds them.
    io: Option<Reservation>,
}

impl RuntimeContext {
    /// An empty context for `session`'s graph inputs.
    pub fn new(session: &RuntimeSession) -> Self {
        let resolved = session.inner.state.plan().resolved();
        Self {
            declared: resolved.inputs().iter().map(|i| i.name.clone()).collect(),
            declared_outputs: resolved.outputs().iter().map(|(n, _)| n.clone()).collect(),
            ..Self::default()
        }
    }

    /// Binds output `output` to input `input`: after every successful run
    /// the output's tensor moves (no copy) into the input, for the next run
    /// — the caller-owned cache of a model with past/present state. The
    /// moved output is left empty in [`RuntimeContext::outputs`].
    ///
    /// # Errors
    /// `output` is not a graph output or `input` not a graph input.
    pub fn bind_cache(&mut self, output: &str, input: &str) -> Result<(), Error> {
        if !self.declared_outputs.iter().any(|o| o == output) {
            return Err(RunError::Unsupported {
                what: format!("binding `{output}`, which is not a graph output"),
            }
            .into());
        }
        if !self.declared.iter().any(|i| i == input) {
            return Err(RunError::UnknownInput {
                input: input.to_owned(),
            }
            .into());
        }
        self.cache.retain(|(_, i)| i != input);
        self.cache.push((output.to_owned(), input.to_owned()));
        Ok(())
    }

    /// Binds every KV-cache output to the input it becomes on the next
    /// step, whatever the exporter's convention: `present_key_0` →
    /// `past_key_0` (same suffix), `present.0.key` →
    /// `past_key_values.0.key` (same layer and kind; torch, optimum and the
    /// ONNX Runtime GenAI builder); returns how many pairs it bound. See
    /// [`crate::decoder::kv_cache_pairs`].
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
    /// let session = RuntimeSession::new(plan("tiny-llm")?, SessionOptions::default())?;
    /// let mut ctx = RuntimeContext::new(&session);
    /// assert_eq!(ctx.bind_kv_cache(), 8); // present_{key,value}_{0..3} -> past_*
    /// for layer in 0..4 {
    ///     for kv in ["key", "value"] {
    ///         let empty = Tensor::from_f32(vec![1, 8, 0, 64], vec![])?; // P = 0
    ///         ctx.set_input(&format!("past_{kv}_{layer}"), empty)?;
    ///     }
    /// }
    /// for (step, token) in [7i64, 42, 3].into_iter().enumerate() {
    ///     ctx.set_input("input_ids", Tensor::from_i64(vec![1, 1], vec![token])?)?;
    ///     let bias = Tensor::from_f32(vec![1, 1, 1, step + 1], vec![0.0; step + 1])?;
    ///     ctx.set_input("attn_bias", bias)?;
    ///     ctx = session.run(ctx)?;
    ///     // The presents became the next step's pasts.
    ///     let past = ctx.inputs().iter().find(|(n, _)| n == "past_key_0").unwrap();
    ///     assert_eq!(past.1.shape(), &[1, 8, step + 1, 64]);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn bind_kv_cache(&mut self) -> usize {
        let pairs = crate::decoder::kv_cache_pairs(&self.declared, &self.declared_outputs);
        for (o, i) in &pairs {
            self.cache.retain(|(_, bound)| bound != i);
            self.cache.push((o.clone(), i.clone()));
        }
        pairs.len()
    }

    /// The cache bindings, as (output, input) pairs.
    pub fn cache_bindings(&self) -> &[(String, String)] {
        &self.cache
    }

    /// Run end: the outputs written into the context's output tensors
    /// (reused when types and sizes match the previous run's: a hot run
    /// allocates nothing for them), bound outputs moved into their inputs,
    /// and the bytes left charged to the I/O domain.
    fn finish_outputs(&mut self, state: &PreparedExecutionState) -> Result<(), Error> {
        // Charge first: refused, the context keeps its previous outputs and
        // cache state, and the run fails.
        let bytes = state.output_bytes(&self.invocation);
        match &mut self.io {
            Some(io) => io.resize(bytes)?,
            None => self.io = Some(state.budget().reserve(Domain::Io, bytes)?),
        }
        state.outputs_into(&mut self.invocation, &mut self.outputs);
        self.apply_cache();
        // Outputs moved into inputs are the caller's cache, not outputs.
        let kept = self
            .outputs
            .iter()
            .map(|(_, t)| t.byte_len())
            .fold(0, usize::saturating_add);
        if let Some(io) = &mut self.io {
            io.shrink(io.bytes() - kept.min(io.bytes()));
        }
        Ok(())
    }

    /// Bytes of the outputs the context holds, charged to the session's
    /// I/O domain (0 once taken).
    pub fn output_bytes(&self) -> usize {
        self.io.as_ref().map_or(0, Reservation::bytes)
    }

    /// Moves bound outputs into their inputs (after a successful run).
    fn apply_cache(&mut self) {
        for (output, input) in &self.cache {
            let Some(at) = self.outputs.iter().position(|(n, _)| n == output) else {
                continue;
            };
            let value = std::mem::take(&mut self.outputs[at].1);
            match self.inputs.iter_mut().find(|(n, _)| n == input) {
                Some((_, slot)) => *slot = value,
                None => {
                    self.inputs.push((input.clone(), value));
                    self.order.clear();
                }
            }
        }
    }

    /// This context with input `name` set to `value`.
    ///
    /// # Errors
    /// `name` is not a graph input (types and shapes are checked when the
    /// run starts).
    pub fn with_input(mut self, name: &str, value: Tensor) -> Result<Self, Error> {
        self.set_input(name, value)?;
        Ok(self)
    }

    /// Sets input `name` (replacing an earlier value).
    ///
    /// # Errors
    /// `name` is not a graph input.
    pub fn set_input(&mut self, name: &str, value: Tensor) -> Result<(), Error> {
        if !self.declared.iter().any(|d| d == name) {
            return Err(RunError::UnknownInput {
                input: name.to_owned(),
            }
            .into());
        }
        match self.inputs.iter_mut().find(|(n, _)| n == name) {
            Some((_, slot)) => *slot = value,
            None => {
                self.inputs.push((name.to_owned(), value));
                self.order.clear();
            }
        }
        Ok(())
    }

    /// The declared-order positions of the inputs (computed once per set of
    /// names).
    fn order(&mut self) -> Result<&[u32], Error> {
        if self.order.len() != self.declared.len() {
            self.order.clear();
            for d in &self.declared {
                let at = self
                    .inputs
                    .iter()
                    .position(|(n, _)| n == d)
                    .ok_or_else(|| RunError::MissingInput { input: d.clone() })?;
                self.order.push(at as u32);
            }
        }
        Ok(&self.order)
    }

    /// The inputs set so far.
    pub fn inputs(&self) -> &[(String, Tensor)] {
        &self.inputs
    }

    /// The outputs of the last run, by name, in graph order.
    pub fn outputs(&self) -> &[(String, Tensor)] {
        &self.outputs
    }

    /// Output `name` of the last run.
    pub fn output(&self, name: &str) -> Option<&Tensor> {
        self.outputs.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    /// Takes the outputs of the last run: they leave the context (and its
    /// I/O-domain charge); the next run allocates new ones.
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
    /// use onnx_prepared::arena::Domain;
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
    /// use onnx_prepared_kernels::Tensor;
    ///
    /// let session = RuntimeSession::new(plan("gemm-chain")?, SessionOptions::default())?;
    /// let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256])?;
    /// let mut ctx = session.run(RuntimeContext::new(&session).with_input("A", a)?)?;
    /// assert_eq!(ctx.output_bytes(), 256 * 4); // charged to the I/O domain
    /// assert_eq!(session.state().budget().live(Domain::Io), 256 * 4);
    /// let outputs = ctx.take_outputs(); // now the caller's
    /// assert_eq!(outputs[0].0, "Y");
    /// assert_eq!(session.state().budget().live(Domain::Io), 0);
    /// # Ok(()) }
    /// ```
    pub fn take_outputs(&mut self) -> Vec<(String, Tensor)> {
        if let Some(io) = &mut self.io {
            io.shrink(io.bytes());
        }
        std::mem::take(&mut self.outputs)
    }
}

/// Where a submission stands ([`ExecutionHandle::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Tasks are still running or waiting.
    Running,
    /// Every task completed.
    Succeeded,
    /// A task failed; see the diagnostics.
    Failed(Diagnostics),
    /// Cancelled before every task ran.
    Cancelled,
}

/// What failed, and what did not run because of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// The first failed task (its plan name) and why.
    pub failed_task: Option<(String, String)>,
    /// Tasks that never ran because a dependency failed (plan names).
    pub suppressed: Vec<String>,
}

/// The failure of a submission: the first error, its diagnostics, and —
/// for a run — the context, handed back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ExecutionError {
    /// The first error.
    #[source]
    pub error: Error,
    /// Failing and suppressed tasks.
    pub diagnostics: Box<Diagnostics>,
    /// The run's context (inputs, reusable state), when the submission was
    /// a run.
    pub context: Option<Box<RuntimeContext>>,
}

enum Kind {
    Prepare(Arc<Preparation>),
    Run {
        submission: Submission,
        runner: Arc<RunContinuation>,
    },
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
            &self.inner().kind,
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
                match status_of(&session, &inner.kind, &outcome) {
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
                let status = status_of(&session, &inner.kind, &outcome);
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

fn status_of(session: &SessionInner, kind: &Kind, outcome: &RunOutcome) -> Status {
    if outcome.is_success() {
        return Status::Succeeded;
    }
    let plan = session.state.plan();
    let name = |t: TaskId| match kind {
        Kind::Prepare(_) => plan.tasks().name[session.session_ids[t.0 as usize].0 as usize].clone(),
        Kind::Run { .. } => "run".to_owned(),
    };
    if let Some((task, failure)) = &outcome.failed {
        return Status::Failed(Diagnostics {
            failed_task: Some((name(*task), failure.message().to_owned())),
            suppressed: outcome.suppressed.iter().map(|&t| name(t)).collect(),
        });
    }
    Status::Cancelled
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
