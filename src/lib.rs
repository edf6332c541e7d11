//! onnx-prepared: an ONNX runtime whose first inference starts before the
//! model has finished loading, whose fully loaded model runs with no
//! scheduling overhead, and whose prepared weights a later process can reuse.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = onnx_prepared_fixtures::default_dir();
//! # onnx_prepared_fixtures::ensure_all(&dir)?; // writes the fixture models if missing
//! use onnx_prepared::{RuntimeContext, RuntimeSession, SessionOptions, Tensor};
//!
//! // Reads the model's metadata only: weights are read, verified and packed
//! // by the runs that need them (or by `prepare`).
//! let session = RuntimeSession::open(dir.join("gemm-chain.onnx"), SessionOptions::default())?;
//! let ctx = RuntimeContext::new(&session)
//!     .with_input("A", Tensor::from_f32(vec![1, 256], vec![0.5; 256])?)?;
//!
//! // The first run streams: each step starts once its own weights are in.
//! let run = session.run_async(ctx);
//! let ctx = run.wait()?;
//! let y = ctx.output("Y").expect("a graph output");
//! assert_eq!(y.shape(), &[1, 256]);
//! assert!(session.residency().all_resident()); // later runs take the hot path
//! # Ok(()) }
//! ```
//!
//! # Modules
//!
//! Data flows from top to bottom; each module uses only those above it.
//!
//! * [`error`], [`limits`]: the error type and every capacity.
//! * [`model`]: ONNX protobuf, metadata-only loading, external-data
//!   validation, payload reading, and resolution of nodes to kernels
//!   ([`ResolvedModel`]).
//! * [`cache`]: the prepared cache — a companion ONNX model holding packed
//!   weights for the next process, with its policies.
//! * [`plan`]: the scoped plan (tasks, requirements, steps) built once per
//!   resolved model.
//! * [`session`]: the asynchronous session ([`RuntimeSession`],
//!   [`RuntimeContext`], [`ExecutionHandle`]).
//! * [`decoder`]: decoder conventions (KV caches, generated inputs,
//!   `generate`); [`npz`]: `.npy`/`.npz` input and output files.
//!
//! The engine underneath (the scheduler, the prepared-object store, the
//! memory arenas, the executors and `sync`, the seam where loom replaces
//! atomics and threads) is internal. The `internals` cargo feature makes it
//! public, unstable and undocumented, for this crate's tests, benchmarks and
//! loom models; nothing else should enable it.

#![warn(missing_docs)]

/// Declares the engine's modules: `pub` (hidden) with the `internals`
/// feature, crate-private without it.
macro_rules! internal {
    ($($m:ident),* $(,)?) => {$(
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        #[allow(missing_docs)]
        pub mod $m;
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports, unreachable_pub)]
        pub(crate) mod $m;
    )*};
}

internal!(arena, exec, prepare, scheduler, store, sync);

pub mod cache;
pub mod decoder;
pub mod durable;
pub mod error;
pub mod limits;
pub mod model;
pub mod npz;
pub mod plan;
pub mod session;

pub use arena::{ArenaError, BudgetLimits, BudgetReport, Domain, DomainReport, UNLIMITED};
pub use cache::{PreparedCache, PreparedModelPolicy};
pub use error::{Error, ErrorKind, RunError};
pub use model::{ChecksumPolicy, Model, ResolveOptions, ResolvedModel};
pub use onnx_prepared_kernels::{CpuFeatures, ElementType, Tensor};
pub use plan::PreparedExecutionPlan;
pub use scheduler::{LookAheadOptions, SpawnError, WorkerPool, WorkerPoolOptions};
pub use session::{
    Diagnostics, ExecutionError, ExecutionHandle, PreparationStats, ResidencyReport,
    RuntimeContext, RuntimeSession, SessionOptions, Status, Trace, UnpersistedEviction,
};
