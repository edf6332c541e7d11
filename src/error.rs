//! The public error type (cold path): one enum over the errors of each layer
//! (model, plan, cache, arena, scheduler, preparation, execution), with a
//! coarse [`ErrorKind`] for callers that only branch on the category. Each
//! layer returns its own typed error; `From` conversions flatten them here,
//! so `?` works across the public API with this one type.

use onnx_prepared_kernels::KernelError;

pub use crate::exec::RunError;
pub use crate::model::{
    ExternalDataError, KernelFailure, LoadError, ModelError, PayloadError, ResolveError,
    UnsupportedOperator,
};
pub use crate::plan::PlanError;
pub use crate::prepare::PrepareError;

/// Every error the runtime returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The model file could not be read or does not describe a usable model.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// An initializer's `external_data` entry is malformed or points somewhere
    /// it must not.
    #[error(transparent)]
    ExternalData(#[from] ExternalDataError),
    /// Reading a weight's payload failed.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The graph cannot be resolved to kernels.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// A run was given bad inputs, or a kernel failed. (Never holds the
    /// variants that wrap another layer's error: those convert to the
    /// matching variant of this enum.)
    #[error(transparent)]
    Run(RunError),
    /// A tensor could not be built (its shape and data disagree, or its
    /// size overflows).
    #[error(transparent)]
    Tensor(#[from] KernelError),
    /// The plan cannot be built.
    #[error(transparent)]
    Plan(PlanError),
    /// A memory budget or arena limit refused an allocation.
    #[error(transparent)]
    Arena(#[from] crate::arena::ArenaError),
    /// The worker threads could not be started.
    #[error(transparent)]
    Threads(#[from] crate::scheduler::SpawnError),
    /// The prepared cache is corrupt, incomplete under `RequireComplete`,
    /// or cannot be read or written.
    #[error(transparent)]
    Cache(#[from] crate::cache::CacheError),
}

/// The category of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// See [`Error::Model`].
    Model,
    /// See [`Error::ExternalData`].
    ExternalData,
    /// See [`Error::Payload`].
    Payload,
    /// See [`Error::Resolve`].
    Resolve,
    /// Bad inputs to a run.
    Input,
    /// A kernel failed while running.
    Kernel,
    /// A memory budget refused an allocation.
    Budget,
    /// A prepared object the run needed could not be produced.
    Preparation,
    /// The run was cancelled.
    Cancelled,
    /// The system refused a resource other than memory (a thread).
    System,
    /// See [`Error::Cache`].
    Cache,
}

impl Error {
    /// The category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Model(_) => ErrorKind::Model,
            Error::ExternalData(_) => ErrorKind::ExternalData,
            Error::Payload(_) => ErrorKind::Payload,
            Error::Resolve(ResolveError::Folding(_)) => ErrorKind::Kernel,
            Error::Resolve(_) | Error::Plan(_) => ErrorKind::Resolve,
            Error::Run(RunError::Kernel { .. } | RunError::KernelPanic { .. }) => ErrorKind::Kernel,
            Error::Run(RunError::PreparationFailed { .. }) => ErrorKind::Preparation,
            Error::Run(RunError::Cancelled) => ErrorKind::Cancelled,
            Error::Run(_) | Error::Tensor(_) => ErrorKind::Input,
            Error::Arena(_) => ErrorKind::Budget,
            Error::Threads(_) => ErrorKind::System,
            Error::Cache(_) => ErrorKind::Cache,
        }
    }
}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Self {
        match e {
            LoadError::Model(e) => Error::Model(e),
            LoadError::ExternalData(e) => Error::ExternalData(e),
            LoadError::Payload(e) => Error::Payload(e),
            LoadError::Resolve(e) => Error::Resolve(e),
            LoadError::Arena(e) => Error::Arena(e),
        }
    }
}

impl From<PlanError> for Error {
    fn from(e: PlanError) -> Self {
        match e {
            PlanError::Cache(e) => Error::Cache(e),
            e => Error::Plan(e),
        }
    }
}

impl From<KernelFailure> for Error {
    fn from(e: KernelFailure) -> Self {
        Error::Run(e.into())
    }
}

impl From<PrepareError> for Error {
    fn from(e: PrepareError) -> Self {
        match e {
            PrepareError::Payload(e) => Error::Payload(e),
            PrepareError::Cache(e) => Error::Cache(e),
            PrepareError::Arena(e) => Error::Arena(e),
            PrepareError::Resolve(e) => Error::Resolve(e),
            PrepareError::Kernel(e) => e.into(),
            PrepareError::NotResident { node, requirement } => {
                Error::Run(RunError::NotResident { node, requirement })
            }
            PrepareError::Unsupported { what } => Error::Run(RunError::Unsupported { what }),
        }
    }
}

impl From<RunError> for Error {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Lowering(e) => Error::Resolve(e),
            RunError::Prepare(e) => e.into(),
            RunError::Arena(e) => Error::Arena(e),
            RunError::Load(e) => e.into(),
            RunError::Plan(e) => e.into(),
            RunError::Threads(e) => Error::Threads(e),
            e => Error::Run(e),
        }
    }
}
