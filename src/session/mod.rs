//! The asynchronous session API: [`RuntimeSession`] owns the plan, the
//! mutable state and a lease of a [`WorkerPool`]; [`prepare_async`] and
//! [`run_async`] return an [`ExecutionHandle`] at once; `prepare` and `run`
//! are exactly the async call followed by [`ExecutionHandle::wait`].
//!
//! # Protocols
//!
//! **Preparation** (session tasks: every read and prepack of the plan):
//! 1. The session keeps at most one live preparation submission
//!    (`PreparedExecutionPlan::session_graph`, run by
//!    `SessionTasks`). A streaming
//!    one (started by the first `run_async`) holds its tasks behind the
//!    look-ahead window; an eager one ([`RuntimeSession::prepare_async`])
//!    releases everything. Asking for eager preparation while a streaming
//!    one is live opens its window fully instead of starting a second.
//! 2. A preparation that finished (or whose producer of a needed object
//!    already ran, the object having been evicted since) is replaced by a
//!    new one: tasks whose objects are resident skip at once, so only the
//!    missing generations are produced again. "Already ran": the
//!    producer's run returned; under a prepared or global limit (where the
//!    evictor may take the object between the producer's check and its
//!    end) already when it started.
//!
//! **Run** (one suspendable continuation per inference, not a task per
//! node):
//! 1. `run_async` moves the [`RuntimeContext`] into a one-task submission
//!    on the CPU lane; it never blocks and never waits for preparation. A
//!    CPU worker is woken to run it; a handle's `wait` that finds it still
//!    queued runs it on the waiting thread (protocol "help"), as `run`
//!    always does.
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
//!    On the thread of a caller waiting for it (`run`, a helping `wait`)
//!    it blocks there instead until that completion or a cancel (which
//!    wakes it), then goes on on that thread: a suspended run would resume
//!    on a CPU worker, leaving the caller's thread idle and the kernels and
//!    the prepacks sharing that worker.
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
//! # Files
//!
//! This file holds [`RuntimeSession`] and `SessionInner`, the state every
//! other file works on. `options.rs`: [`SessionOptions`]. `context.rs`:
//! [`RuntimeContext`]. `status.rs`: [`Status`], [`Diagnostics`],
//! [`ExecutionError`]. `preparation.rs`: protocols "preparation" and
//! "interest". `resident.rs`: "prepared". `run.rs`: "run". `handle.rs`:
//! "handles" ([`ExecutionHandle`]). `trace.rs`: [`Trace`]. `persist.rs`: the
//! prepared cache's background writer. The files use one another only in
//! the order trace, options, context, status, preparation, resident, run,
//! handle (never back: no import cycle; `persist.rs` uses none of them); any of
//! them may use this one.
//!
//! [`prepare_async`]: RuntimeSession::prepare_async
//! [`run_async`]: RuntimeSession::run_async

mod context;
mod handle;
mod options;
mod persist;
mod preparation;
mod resident;
mod run;
mod status;
mod trace;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use onnx_prepared_kernels::Tensor;

pub use crate::prepare::UnpersistedEviction;
pub use context::{RunInterrupt, RuntimeContext};
pub use handle::ExecutionHandle;
pub use options::SessionOptions;
pub use status::{Diagnostics, ExecutionError, ResidencyReport, Status};
pub use trace::{StepMemory, Trace, TraceEvent, TraceLane};

use persist::BackgroundWriter;
use preparation::{Holder, Preparation};
use run::RunContinuation;

use crate::Error;
use crate::arena::{BudgetLimits, BudgetReport, Domain, MemoryBudget};
use crate::cache::{CacheStats, PreparedCache, PreparedModelPolicy};
use crate::exec::PreparedExecutionState;
use crate::exec::RunError;
use crate::model::{FileSource, MmapSource, Model, PayloadSource, ResolvedModel};
use crate::plan::{Csr, PreparedExecutionPlan, Priority, ResourceClass, TaskId};
use crate::scheduler::{Admission, Submission, TaskGraph, WorkerPool};
use crate::sync::{AtomicU64, Lock, Ordering};

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
    /// The prepared cache's background writes (with a cache).
    writer: Option<Arc<BackgroundWriter>>,
    /// Admission of preparation tasks (protocol "admit"): prefetch and
    /// background tasks hold at most `workers − 1` of each lane's workers,
    /// so one CPU and one I/O worker stay free for what a run waits for.
    /// Its budget is its own and unlimited: the session's bytes are
    /// charged by the tasks themselves, before they allocate, and held
    /// back from speculative reads by the budget gate (`state::tasks`,
    /// protocol 3).
    admission: Arc<Admission>,
}

/// Run submissions kept for reuse per session.
const FREE_RUNS: usize = 8;

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
    /// Opens the model at `path` for inference in one call: [`Model::open`]
    /// (metadata only: no weight bytes are read), [`ResolvedModel::resolve`]
    /// with [`SessionOptions::resolve`], [`PreparedExecutionPlan::build`]
    /// and [`RuntimeSession::new`]. Weights are read when a run or
    /// [`prepare`](RuntimeSession::prepare) needs them.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use onnx_prepared::model::ResolveOptions;
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
    /// use onnx_prepared_kernels::{CpuFeatures, Tensor};
    ///
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// let path = dir.join("gemm-chain.onnx");
    /// let session = RuntimeSession::open(&path, SessionOptions::default())?;
    /// let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256])?;
    /// let ctx = session.run(RuntimeContext::new(&session).with_input("A", a.clone())?)?;
    /// assert_eq!(ctx.output("Y").expect("graph output").shape(), &[1, 256]);
    ///
    /// // The portable layouts and scalar kernels instead of the CPU's SIMD ones.
    /// let portable = SessionOptions::default()
    ///     .with_resolve(ResolveOptions { cpu: CpuFeatures::portable(), ..ResolveOptions::default() });
    /// let session = RuntimeSession::open(&path, portable)?;
    /// assert_eq!(session.plan().resolved().cpu(), CpuFeatures::portable());
    /// let ctx = session.run(RuntimeContext::new(&session).with_input("A", a)?)?;
    /// assert_eq!(ctx.output("Y").expect("graph output").shape(), &[1, 256]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The model cannot be read, resolved or planned, its external data
    /// files cannot be opened, or the session's worker threads cannot be
    /// started.
    pub fn open(path: impl AsRef<Path>, options: SessionOptions) -> Result<Self, Error> {
        let model = Model::open(path)?;
        let cache = match (&options.cache_dir, options.cache_policy) {
            (Some(dir), policy) if policy != PreparedModelPolicy::Disabled => {
                Some(PreparedCache::open_with(
                    dir,
                    policy,
                    &model,
                    options.resolve.cpu,
                    options.cache_copy_in,
                )?)
            }
            _ => None,
        };
        let resolved = ResolvedModel::resolve(model, &options.resolve)?;
        let plan = match cache {
            Some(cache) => PreparedExecutionPlan::build_cached(resolved, cache)?,
            None => PreparedExecutionPlan::build(resolved)?,
        };
        Self::new(plan, options)
    }

    /// A session over `plan`, reading payloads from the model's files
    /// (mapping them when [`SessionOptions::map_weights`] is set).
    ///
    /// # Errors
    /// The model's external data files cannot be opened (or mapped).
    pub fn new(plan: PreparedExecutionPlan, options: SessionOptions) -> Result<Self, Error> {
        let source = open_source(plan.resolved().model(), &options)?;
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
        let (graph, ids) = plan.session_graph().map_err(plan_error)?;
        // The plan's publisher of each requirement, as a session-graph id
        // (`ids` lists the session tasks in plan order).
        let publisher: Vec<TaskId> = plan
            .requirements()
            .publisher
            .iter()
            .map(|t| ids.binary_search(t).map(|local| TaskId(local as u32)))
            .collect::<Result<_, _>>()
            .map_err(|_| -> Error {
                RunError::Unsupported {
                    what: "the plan's task graph: a requirement's publisher is not a session task"
                        .into(),
                }
                .into()
            })?;
        let pool = options.worker_pool()?;
        let run_graph = TaskGraph::new(
            &[ResourceClass::Cpu],
            &[Priority::Critical],
            &Csr::from_rows(&[Vec::<TaskId>::new()]),
        )
        .map_err(plan_error)?;
        let budget = MemoryBudget::new(options.budget);
        let writer = match plan.cache() {
            Some(_) => Some(Arc::new(BackgroundWriter::new(&pool).map_err(plan_error)?)),
            None => None,
        };
        // Under a limit on prepared objects, the look-ahead window shrinks
        // as they fill it: prefetch must not evict what the running step
        // needs next.
        let mut options = options;
        let limited = evicts(&options.budget);
        if limited && options.look_ahead.residency.is_none() {
            options.look_ahead.residency = Some((budget.clone(), Domain::Prepared));
        }
        let mut state = PreparedExecutionState::new(plan, source, budget)
            .with_checksums(options.checksums)
            .with_tables_from_source(!options.resident_tables)
            .with_unpersisted_eviction(options.unpersisted_eviction)
            .with_pack_threads(options.intra_op_threads);
        if let Some(w) = &writer {
            state = state.with_persist_sink(w.clone());
        }
        // Under a prepared limit a session's objects are its own: an
        // evicted shared object would stay charged to the session that
        // built it while another holds it.
        if options.share_prepared && !limited {
            state = state.with_shared_objects();
        }
        let state = Arc::new(state);
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
                writer,
                options,
                run_graph: Arc::new(run_graph),
                admission: Arc::new(Admission::new(MemoryBudget::unlimited())),
            }),
        })
    }

    /// The executor state underneath, with its store and budget
    /// transitions (unstable; for this crate's tests and benchmarks).
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn internals(&self) -> &Arc<PreparedExecutionState> {
        &self.inner.state
    }

    /// The plan this session runs (and, through it, the resolved model).
    pub fn plan(&self) -> &PreparedExecutionPlan {
        self.inner.state.plan()
    }

    /// Live and peak bytes per memory domain with their limits,
    /// as of now (a copy; `Display` renders a table).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// use onnx_prepared::Domain;
    /// use onnx_prepared::session::{RuntimeSession, SessionOptions};
    ///
    /// let session = RuntimeSession::open(dir.join("gemm-chain.onnx"), SessionOptions::default())?;
    /// assert_eq!(session.memory().domain(Domain::Prepared).live, 0);
    /// session.prepare()?;
    /// let memory = session.memory();
    /// assert!(memory.domain(Domain::Prepared).live > 0);
    /// assert!(memory.domain(Domain::Preparation).peak > 0);
    /// assert_eq!(memory.domain(Domain::Preparation).live, 0); // sources freed
    /// # Ok(()) }
    /// ```
    pub fn memory(&self) -> BudgetReport {
        self.inner.state.budget().report()
    }

    /// Lowers every peak [`memory`](Self::memory) reports to the bytes live
    /// now, so that it then reports the peaks since (e.g. of one run).
    pub fn reset_memory_peaks(&self) {
        self.inner.state.budget().reset_peaks();
    }

    /// How many of the plan's prepared objects are resident now, and their
    /// bytes.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// use onnx_prepared::session::{RuntimeSession, SessionOptions};
    ///
    /// let session = RuntimeSession::open(dir.join("gemm-chain.onnx"), SessionOptions::default())?;
    /// assert_eq!(session.residency().resident, 0);
    /// session.prepare()?;
    /// let r = session.residency();
    /// assert!(r.all_resident() && r.total > 0 && r.resident_bytes > 0);
    /// # Ok(()) }
    /// ```
    pub fn residency(&self) -> ResidencyReport {
        let store = self.inner.state.store();
        ResidencyReport {
            resident: store.resident_count(),
            total: store.len(),
            resident_bytes: store.resident_bytes(),
        }
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
        ExecutionHandle::for_preparation(self.inner.clone(), preparation)
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
        let (runner, submission) = run::start(&self.inner, ctx, true);
        // A worker is woken to run it; a `wait` that comes before the
        // worker claimed it runs it on the waiting thread instead (protocol
        // "help"), so `run_async(ctx).wait()` costs one wake-up call, not
        // two cross-thread hand-offs.
        ExecutionHandle::for_run(self.inner.clone(), submission, runner, true)
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
        let (runner, submission) = run::start(&self.inner, ctx, false);
        ExecutionHandle::for_run(self.inner.clone(), submission, runner, true).wait()
    }

    /// Runs the model once on `inputs` (graph input names and tensors) and
    /// returns the context that holds the outputs
    /// ([`RuntimeContext::output`]): `open`, `run_with` and `output` are a
    /// whole program. To run again, set new inputs on the returned context
    /// and pass it to [`RuntimeSession::run`]: its buffers are reused.
    ///
    /// ```
    /// # fn main() -> Result<(), onnx_prepared::Error> {
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    /// use onnx_prepared::{RuntimeSession, SessionOptions, Tensor};
    ///
    /// let session = RuntimeSession::open(dir.join("gemm-chain.onnx"), SessionOptions::default())?;
    /// let outputs = session.run_with([("A", Tensor::from_f32(vec![1, 256], vec![0.5; 256])?)])?;
    /// assert_eq!(outputs.output("Y")?.shape(), &[1, 256]);
    /// assert!(outputs.output("Z").is_err()); // not an output: a typed error
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// An input that is not the model's, is missing or has the wrong type
    /// or shape; anything [`RuntimeSession::run`] reports.
    pub fn run_with<'n>(
        &self,
        inputs: impl IntoIterator<Item = (&'n str, Tensor)>,
    ) -> Result<RuntimeContext, Error> {
        let mut ctx = RuntimeContext::new(self);
        for (name, tensor) in inputs {
            ctx.set_input(name, tensor)?;
        }
        Ok(self.run(ctx)?)
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

    /// The prepared cache the session reads (and, under
    /// [`PreparedModelPolicy::BuildIfMissing`], writes).
    pub fn cache(&self) -> Option<&Arc<PreparedCache>> {
        self.plan().cache()
    }

    /// Waits for every prepared-cache write submitted so far (they run in
    /// the background after the objects they write were published).
    pub fn flush_cache(&self) {
        if let Some(w) = &self.inner.writer {
            w.flush();
        }
    }

    /// What the session's preparation did so far: source bytes read,
    /// objects packed, and the prepared cache's counters.
    pub fn preparation_stats(&self) -> PreparationStats {
        let state = &self.inner.state;
        PreparationStats {
            source_bytes_read: state.source_bytes_read(),
            source_bytes_reread: state.source_bytes_reread(),
            prepacks: state.prepacks(),
            evictions: state.evictions(),
            restores: state.restores(),
            cache: self.cache().map(|c| c.stats()).unwrap_or_default(),
        }
    }
}

/// What a session's preparation did (see
/// [`RuntimeSession::preparation_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreparationStats {
    /// Bytes of source weights read (the rows runs read from a table
    /// served by rows included).
    pub source_bytes_read: u64,
    /// Source bytes read again (per weight, beyond its size): sources of
    /// objects rebuilt after an eviction, and the rows a table served row
    /// by row delivers after its one whole read.
    pub source_bytes_reread: u64,
    /// Objects packed from their sources.
    pub prepacks: u64,
    /// Objects evicted to make room under a prepared-domain limit.
    pub evictions: u64,
    /// Objects produced again after an eviction (from the prepared cache,
    /// else from their sources).
    pub restores: u64,
    /// The prepared cache's counters (zero without a cache).
    pub cache: CacheStats,
}

/// Dropping a session waits for its prepared-cache writes, so a process
/// that ends after dropping it leaves its cache complete.
impl Drop for RuntimeSession {
    fn drop(&mut self) {
        self.flush_cache();
    }
}

fn plan_error(e: crate::scheduler::GraphError) -> Error {
    RunError::Unsupported {
        what: format!("the plan's task graph: {e}"),
    }
    .into()
}

impl SessionInner {
    /// Whether objects may be evicted behind a running producer: under a
    /// prepared-domain or global limit, the evictor runs.
    fn evicts(&self) -> bool {
        evicts(&self.options.budget)
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

/// Whether `limits` bound the prepared objects (a prepared-domain or a
/// global limit): the evictor runs under them.
fn evicts(limits: &BudgetLimits) -> bool {
    limits.domain(Domain::Prepared) != crate::arena::UNLIMITED
        || limits.global() != crate::arena::UNLIMITED
}

/// The payload source [`RuntimeSession::new`] reads `model` through:
/// [`MmapSource`] under [`SessionOptions::map_weights`], else [`FileSource`].
pub(crate) fn open_source(
    model: &Model,
    options: &SessionOptions,
) -> Result<Arc<dyn PayloadSource>, Error> {
    Ok(if options.map_weights {
        Arc::new(MmapSource::open(model)?)
    } else {
        Arc::new(FileSource::open(model)?)
    })
}
