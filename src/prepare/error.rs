//! The preparation layer's error: a prepared object could not be produced.

use crate::arena::ArenaError;
use crate::cache::CacheError;
use crate::model::{KernelFailure, PayloadError, ResolveError};

/// A prepared object could not be produced: its source could not be read or
/// verified, its prepack failed, the prepared cache or a memory budget
/// refused it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrepareError {
    /// Reading or verifying a weight's payload failed.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The prepared cache is corrupt, incomplete or cannot be read.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A memory budget or arena limit refused the object.
    #[error(transparent)]
    Arena(#[from] ArenaError),
    /// A weight's element type has no compute representation.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// A prepack kernel failed or panicked.
    #[error(transparent)]
    Kernel(#[from] KernelFailure),
    /// A node's prepared object is not resident when the node runs.
    #[error("node `{node}` needs `{requirement}`, which is not resident")]
    NotResident {
        /// The node.
        node: String,
        /// The requirement.
        requirement: String,
    },
    /// The runtime cannot do this yet.
    #[error("not supported: {what}")]
    Unsupported {
        /// What was asked.
        what: String,
    },
}

impl PrepareError {
    /// A prepack kernel of `node` (or of a requirement) returned `source`.
    pub(crate) fn kernel(node: impl Into<String>, source: onnx_prepared_kernels::KernelError) -> Self {
        PrepareError::Kernel(KernelFailure::Failed {
            node: node.into(),
            source,
        })
    }
}
