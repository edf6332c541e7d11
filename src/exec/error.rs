//! The execution layer's error: a run was given bad inputs, a kernel
//! failed, or what the run needed could not be prepared or allocated.

use onnx_prepared_kernels::{ElementType, KernelError};

use crate::arena::ArenaError;
use crate::model::{KernelFailure, LoadError, ResolveError};
use crate::plan::PlanError;
use crate::prepare::PrepareError;
use crate::scheduler::SpawnError;

/// A run was given bad inputs, or a kernel failed while running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// A graph input was not provided.
    #[error("input `{input}` is missing")]
    MissingInput {
        /// The input.
        input: String,
    },
    /// A provided input is not a graph input.
    #[error("`{input}` is not an input of this model")]
    UnknownInput {
        /// The name provided.
        input: String,
    },
    /// An output was asked for that the last run did not produce.
    #[error("`{output}` is not an output of the last run (its outputs: {})", outputs.join(", "))]
    UnknownOutput {
        /// The name asked for.
        output: String,
        /// The outputs of the last run.
        outputs: Vec<String>,
    },
    /// An input was provided twice.
    #[error("input `{input}` is provided twice")]
    DuplicateInput {
        /// The input.
        input: String,
    },
    /// An input has the wrong element type.
    #[error("input `{input}` must be {expected}, not {found}")]
    InputType {
        /// The input.
        input: String,
        /// Declared type.
        expected: ElementType,
        /// Provided type.
        found: ElementType,
    },
    /// An input's shape contradicts the declared dims.
    #[error("input `{input}` has shape {found:?} but the model declares [{}]", expected.join(", "))]
    InputShape {
        /// The input.
        input: String,
        /// Declared dims (`?` for symbolic).
        expected: Vec<String>,
        /// Provided shape.
        found: Vec<usize>,
    },
    /// A kernel returned an error.
    #[error("node `{node}` failed: {source}")]
    Kernel {
        /// The node.
        node: String,
        /// What the kernel reported.
        source: KernelError,
    },
    /// A node's prepared object is not resident when the node runs.
    #[error("node `{node}` needs `{requirement}`, which is not resident")]
    NotResident {
        /// The node.
        node: String,
        /// The requirement.
        requirement: String,
    },
    /// A prepared object a step needs could not be produced: its
    /// preparation task failed (or was suppressed by a failed read).
    #[error("step `{step}` needs `{requirement}`, whose preparation failed: {cause}")]
    PreparationFailed {
        /// The invocation step (name scope) that needed it.
        step: String,
        /// The requirement.
        requirement: String,
        /// The failing preparation task and why, as far as known.
        cause: String,
    },
    /// The run was cancelled before it finished.
    #[error("the run was cancelled")]
    Cancelled,
    /// The runtime cannot do this yet.
    #[error("not supported: {what}")]
    Unsupported {
        /// What was asked.
        what: String,
    },
    /// Lowering for the given input shapes failed (a shape that depends on
    /// input data, a kernel's shape inference).
    #[error(transparent)]
    Lowering(#[from] ResolveError),
    /// A prepared object the run needed could not be produced.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// Opening or resolving the model failed (an executor that loads its
    /// own model: `DirectReplay`).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The plan cannot be built.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The worker threads could not be started.
    #[error(transparent)]
    Threads(#[from] SpawnError),
    /// The execution arena refused an allocation.
    #[error(transparent)]
    Arena(#[from] ArenaError),
    /// A kernel panicked; the panic was caught at the node boundary.
    #[error("node `{node}` panicked: {detail}")]
    KernelPanic {
        /// The node.
        node: String,
        /// The panic message.
        detail: String,
    },
}


impl From<KernelFailure> for RunError {
    fn from(e: KernelFailure) -> Self {
        match e {
            KernelFailure::Failed { node, source } => RunError::Kernel { node, source },
            KernelFailure::Panicked { node, detail } => RunError::KernelPanic { node, detail },
        }
    }
}
