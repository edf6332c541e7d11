//! [`SessionOptions`]: how a session runs (and how
//! [`RuntimeSession::open`](super::RuntimeSession::open) resolves its
//! model), and the worker pool it makes when it is not given one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::Error;
use crate::arena::BudgetLimits;
use crate::cache::PreparedModelPolicy;
use crate::model::{ChecksumPolicy, ResolveOptions};
use crate::prepare::UnpersistedEviction;
use crate::scheduler::{LookAheadOptions, WorkerPool, WorkerPoolOptions};

/// How a session runs: its threads, memory limits, prepared cache and
/// look-ahead. Built with `with_*` methods from [`SessionOptions::default`];
/// each setting reads back through the method of its name.
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
/// use onnx_prepared::{BudgetLimits, Domain, RuntimeSession, SessionOptions};
///
/// let options = SessionOptions::default()
///     .with_threads(2) // this thread and one CPU worker
///     .with_io_workers(1)
///     // At most 1 MiB of sources being read at a time: reads wait for room.
///     .with_budget(BudgetLimits::unlimited().with_domain(Domain::Preparation, 1 << 20));
/// let session = RuntimeSession::new(plan("gemm-chain")?, options)?;
/// session.prepare()?;
/// assert!(session.is_hot());
/// assert!(session.memory().domain(Domain::Preparation).peak <= 1 << 20);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// CPU workers of the session's own pool (kernels and prepacks).
    pub(crate) cpu_workers: usize,
    /// I/O workers of the session's own pool (reads).
    pub(crate) io_workers: usize,
    /// Pin CPU workers to cores.
    pub(crate) pin_threads: bool,
    /// Per-arena and global memory limits.
    pub(crate) budget: BudgetLimits,
    /// The streaming preparation's look-ahead window.
    pub(crate) look_ahead: LookAheadOptions,
    /// Run on this pool (shared with other sessions) instead of one of the
    /// session's own.
    pub(crate) pool: Option<Arc<WorkerPool>>,
    /// Record reads, prepacks and steps in a [`Trace`](super::Trace).
    pub(crate) trace: bool,
    /// Most threads one kernel's parallel region uses, the thread running
    /// the inference included (`None`: that thread plus every CPU worker).
    /// `Some(1)` runs kernels sequentially.
    pub(crate) intra_op_threads: Option<usize>,
    /// Whether each weight's declared `sha256:` digest is verified before
    /// its first use (default [`ChecksumPolicy::Strict`]: a mismatch fails
    /// the run with an error naming the tensor).
    pub(crate) checksums: ChecksumPolicy,
    /// How [`RuntimeSession::open`](super::RuntimeSession::open) resolves
    /// the model: kernels and layouts for which CPU features, sizes of
    /// symbolic dims while probing. A session made from a plan
    /// ([`RuntimeSession::new`](super::RuntimeSession::new)) ignores it: the
    /// plan was resolved already.
    pub(crate) resolve: ResolveOptions,
    /// The prepared cache's directory (`None`: no cache). Used by
    /// [`RuntimeSession::open`](super::RuntimeSession::open); a session made
    /// from a plan uses the cache the plan was built against
    /// ([`PreparedExecutionPlan::build_cached`](crate::plan::PreparedExecutionPlan::build_cached)).
    pub(crate) cache_dir: Option<PathBuf>,
    /// What the session does with the prepared cache (default
    /// [`PreparedModelPolicy::Disabled`]).
    pub(crate) cache_policy: PreparedModelPolicy,
    /// Copy each prepared-cache payload into memory when it is read
    /// instead of mapping it (default `false`: mapped and used in place,
    /// no copy). Every payload is checked before use either way (file
    /// identity, checksum, the packing's validation), and one truncated or
    /// rewritten before it is read is a miss, never a crash. The one
    /// hazard of the default: another program truncating a payload file
    /// *while this session holds it mapped* faults the process (SIGBUS)
    /// when a kernel touches a lost page — a private mapping would not
    /// prevent it. The runtime itself never writes a payload in place.
    /// Set this for cache folders other programs write or clean; it costs
    /// one read of each payload and the memory of the copy.
    pub(crate) cache_copy_in: bool,
    /// Share prepared objects through the process-wide prepared store
    /// (default `false`): a sharing session whose model needs an object
    /// another live sharing session published (same sources, layout and
    /// device) uses it at once, with no read, prepack or extra memory (the
    /// bytes stay charged to the session that built them). Off by default
    /// so that a session's reads, faults, evictions and memory accounting
    /// are its own unless asked. Ignored under a prepared-domain or global
    /// limit (eviction needs the session's objects charged to it).
    pub(crate) share_prepared: bool,
    /// Map the model's external data files read-only and use suitably
    /// aligned weights in place, with no read buffer, copy or decode
    /// (default `false`: weights are read with positioned reads and
    /// decoded). Used by [`RuntimeSession::new`](super::RuntimeSession::new)
    /// (and so [`RuntimeSession::open`](super::RuntimeSession::open)) to
    /// pick [`MmapSource`](crate::model::MmapSource) instead of
    /// [`FileSource`](crate::model::FileSource); checksums are verified on
    /// the mapped bytes as on read ones. Weights whose type or alignment
    /// does not allow it (bool, 4-bit, a misaligned offset) are read and
    /// decoded as usual. Hazard: a data file truncated by another program
    /// while it is mapped faults the process (SIGBUS) when the lost pages
    /// are touched, where a read would give an error.
    pub(crate) map_weights: bool,
    /// Keep a table that only row gathers read (an embedding) resident
    /// (read whole and held: no I/O during a run; default `false`). By
    /// default a table of at least
    /// [`ROW_TABLE_MIN_BYTES`](crate::limits::ROW_TABLE_MIN_BYTES) from its
    /// source, row by row, instead of reading it whole and holding it: a run reads the rows it picks with positioned
    /// reads (one per run of consecutive rows, served from the page cache
    /// once read) straight into its output, so the table never counts in
    /// the process's memory and the first step does not wait for it. Its
    /// declared digest is still checked before first use, reading the
    /// table in small pieces. Applies where the table is not used in place
    /// from a mapping ([`map_weights`](Self::map_weights): a mapped table
    /// faults in only the rows read) and no prepared cache is in use (the
    /// cache persists the table, and a later process maps its entry and
    /// faults in only the rows read). Under a prepared-domain limit, a
    /// table larger than the limit is served row by row either way. The
    /// same knob as the CLI's `--resident-tables`, Python's
    /// `resident_tables` and C's `onnxp_options_set_resident_tables`.
    pub(crate) resident_tables: bool,
    /// Under a prepared-domain (or global) limit, what eviction does with a
    /// resident object the prepared cache has no entry for: write it first
    /// (the default), drop it and rebuild it from its sources when needed,
    /// or keep it. Objects with an entry are evicted first, least recently
    /// used first, and restored from the cache.
    pub(crate) unpersisted_eviction: UnpersistedEviction,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            cpu_workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            io_workers: 2,
            pin_threads: false,
            budget: BudgetLimits::unlimited(),
            look_ahead: LookAheadOptions::default(),
            pool: None,
            trace: false,
            intra_op_threads: None,
            checksums: ChecksumPolicy::Strict,
            resolve: ResolveOptions::default(),
            cache_dir: None,
            cache_policy: PreparedModelPolicy::Disabled,
            cache_copy_in: false,
            share_prepared: false,
            map_weights: false,
            resident_tables: false,
            unpersisted_eviction: UnpersistedEviction::default(),
        }
    }
}
impl SessionOptions {
    /// The pool to run on: [`SessionOptions::pool`], or a new one with the
    /// options' CPU and I/O workers (at least one of each).
    ///
    /// # Errors
    /// The pool's threads cannot be started.
    pub fn worker_pool(&self) -> Result<Arc<WorkerPool>, Error> {
        Ok(match &self.pool {
            Some(pool) => pool.clone(),
            None => Arc::new(WorkerPool::try_new(WorkerPoolOptions {
                cpu_workers: self.cpu_workers.max(1),
                io_workers: self.io_workers.max(1),
                pin_cpu_workers: self.pin_threads,
            })?),
        })
    }
}

/// A `with_*` setter and a getter of the same name for each plain setting.
macro_rules! settings {
    ($($(#[$doc:meta])* $field:ident, $with:ident: $ty:ty;)*) => {
        impl SessionOptions {
            $(
                $(#[$doc])*
                pub fn $with(mut self, value: $ty) -> Self {
                    self.$field = value;
                    self
                }

                $(#[$doc])*
                pub fn $field(&self) -> $ty {
                    self.$field.clone()
                }
            )*
        }
    };
}

settings! {
    /// CPU workers of the session's own pool (kernels and prepacks; at
    /// least one is started). [`SessionOptions::with_threads`] sets them
    /// from a thread count.
    cpu_workers, with_cpu_workers: usize;
    /// I/O workers of the session's own pool (weight reads; at least one).
    io_workers, with_io_workers: usize;
    /// Pin CPU workers to cores.
    pin_threads, with_pin_threads: bool;
    /// Per-arena and global memory limits.
    budget, with_budget: BudgetLimits;
    /// The streaming preparation's look-ahead window.
    look_ahead, with_look_ahead: LookAheadOptions;
    /// Record reads, prepacks and steps in a [`Trace`](super::Trace).
    trace, with_trace: bool;
    /// Whether each weight's declared `sha256:` digest is verified before
    /// its first use (default [`ChecksumPolicy::Strict`]).
    checksums, with_checksums: ChecksumPolicy;
    /// How [`RuntimeSession::open`](super::RuntimeSession::open) resolves
    /// the model (CPU features, probe dims, int8 activations).
    resolve, with_resolve: ResolveOptions;
    /// What the session does with the prepared cache (default
    /// [`PreparedModelPolicy::Disabled`]; see
    /// [`SessionOptions::with_cache_dir`]).
    cache_policy, with_cache_policy: PreparedModelPolicy;
    /// Copy prepared-cache payloads into memory instead of mapping them
    /// (for cache folders other programs write; see the field's docs).
    cache_copy_in, with_cache_copy_in: bool;
    /// Share prepared objects with other sharing sessions of the process.
    share_prepared, with_share_prepared: bool;
    /// Map external data read-only and use aligned weights in place.
    map_weights, with_map_weights: bool;
    /// Keep tables that only row gathers read resident instead of serving
    /// their rows from the data file.
    resident_tables, with_resident_tables: bool;
    /// What eviction under a limit does with objects the prepared cache
    /// has no entry for.
    unpersisted_eviction, with_unpersisted_eviction: UnpersistedEviction;
}

impl SessionOptions {
    /// `n` threads per run in all, as the CLI's `--threads`, Python's
    /// `intra_op_num_threads` and C's `onnxp_options_set_thread_count`
    /// count them: the thread that runs the inference and `n - 1` CPU
    /// workers helping its kernels (at least one worker is started, for
    /// prepacks), and kernels use at most `n` threads.
    pub fn with_threads(self, n: usize) -> Self {
        let n = n.max(1);
        self.with_cpu_workers((n - 1).max(1))
            .with_intra_op_threads(n)
    }

    /// Most threads one kernel's parallel region uses, the thread running
    /// the inference included (default: that thread plus every CPU
    /// worker; also what 0 sets); 1 runs kernels sequentially.
    pub fn with_intra_op_threads(mut self, n: usize) -> Self {
        self.intra_op_threads = (n > 0).then_some(n);
        self
    }

    /// See [`SessionOptions::with_intra_op_threads`] (`None`: not limited).
    pub fn intra_op_threads(&self) -> Option<usize> {
        self.intra_op_threads
    }

    /// Runs on `pool` (shared with other sessions) instead of a pool of
    /// the session's own.
    pub fn with_pool(mut self, pool: Arc<WorkerPool>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The pool set by [`SessionOptions::with_pool`].
    pub fn pool(&self) -> Option<&Arc<WorkerPool>> {
        self.pool.as_ref()
    }

    /// The prepared cache's directory, used by
    /// [`RuntimeSession::open`](super::RuntimeSession::open); with the
    /// default policy ([`PreparedModelPolicy::Disabled`]) this also sets
    /// [`PreparedModelPolicy::BuildIfMissing`].
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        if self.cache_policy == PreparedModelPolicy::Disabled {
            self.cache_policy = PreparedModelPolicy::BuildIfMissing;
        }
        self
    }

    /// No prepared cache (the default).
    pub fn without_cache(mut self) -> Self {
        self.cache_dir = None;
        self.cache_policy = PreparedModelPolicy::Disabled;
        self
    }

    /// The prepared cache's directory, if any.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache_dir.as_deref()
    }
}
