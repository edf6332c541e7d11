//! The public error type (cold path): one enum over the module errors, with a
//! coarse [`ErrorKind`] for callers that only branch on the category.

use onnx_prepared_kernels::{ElementType, KernelError};

use crate::model::{ExternalDataError, ModelError, PayloadError};

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
    /// A run was given bad inputs, or a kernel failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The plan cannot be built.
    #[error(transparent)]
    Plan(#[from] crate::plan::PlanError),
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

/// The graph cannot be resolved: a node has no kernel, a value is undefined,
/// shapes do not agree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The kernel registry rejected the node, or shape inference failed.
    #[error("node `{node}`: {source}")]
    Kernel {
        /// The node.
        node: String,
        /// What the kernel reported.
        source: KernelError,
    },
    /// A node reads a value nothing defines before it (or the graph is not
    /// topologically sorted).
    #[error(
        "node `{node}` reads `{value}`, which no graph input, initializer or earlier node defines"
    )]
    UndefinedValue {
        /// The node (or `graph output`).
        node: String,
        /// The value.
        value: String,
    },
    /// A value is defined twice.
    #[error("node `{node}` defines `{value}`, which is already defined")]
    Redefined {
        /// The node.
        node: String,
        /// The value.
        value: String,
    },
    /// A node's domain has no opset import.
    #[error("node `{node}` uses domain `{domain}`, which the model does not import")]
    MissingOpset {
        /// The node.
        node: String,
        /// The domain.
        domain: String,
    },
    /// A node has more operands than the hot path supports.
    #[error("node `{node}` has more than {limit} inputs or outputs")]
    TooManyOperands {
        /// The node.
        node: String,
        /// The limit.
        limit: usize,
    },
    /// A graph input is not a tensor.
    #[error("graph input `{input}` is not a tensor")]
    InputNotTensor {
        /// The input.
        input: String,
    },
    /// A graph input has an element type the runtime cannot compute with.
    #[error("graph input `{input}` has element type {dtype}, which onnx-prepared does not support")]
    InputType {
        /// The input.
        input: String,
        /// Its ONNX type name.
        dtype: String,
    },
    /// A node's output shape depends on input data that is not small
    /// enough to key a lowering by (or on a value computed at run time).
    #[error(
        "node `{node}`: its output shape depends on input data, which is not supported (input {input} of {op} is computed from {source_desc})"
    )]
    DataDependentShape {
        /// The node.
        node: String,
        /// Its operator type.
        op: &'static str,
        /// The input position whose value decides the shape.
        input: usize,
        /// Where that value comes from.
        source_desc: String,
    },
    /// The model uses operators without a kernel: every one is listed, with
    /// how many nodes use it.
    #[error("{}", unsupported_message(.0))]
    UnsupportedOperators(Vec<UnsupportedOperator>),
    /// A weight's element type has no compute representation (4-bit types
    /// are only read by kernels that consume them packed).
    #[error("weight `{weight}` has element type {dtype}, which no kernel reads directly")]
    WeightType {
        /// The weight.
        weight: String,
        /// Its type.
        dtype: ElementType,
    },
}

/// One operator without a kernel, as [`ResolveError::UnsupportedOperators`]
/// lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedOperator {
    /// Domain (`ai.onnx` for the default domain).
    pub domain: String,
    /// Operator type.
    pub op_type: String,
    /// The opset version the model imports for the domain.
    pub opset: i64,
    /// Nodes that use it.
    pub nodes: usize,
    /// The first such node.
    pub first_node: String,
}

fn unsupported_message(ops: &[UnsupportedOperator]) -> String {
    let nodes: usize = ops.iter().map(|o| o.nodes).sum();
    let list: Vec<String> = ops
        .iter()
        .map(|o| {
            format!(
                "{}::{} (opset {}): {} node{}, first `{}`",
                o.domain,
                o.op_type,
                o.opset,
                o.nodes,
                if o.nodes == 1 { "" } else { "s" },
                o.first_node
            )
        })
        .collect();
    format!(
        "{} operator{} used by {} node{} {} not supported: {}",
        ops.len(),
        if ops.len() == 1 { "" } else { "s" },
        nodes,
        if nodes == 1 { "" } else { "s" },
        if ops.len() == 1 { "is" } else { "are" },
        list.join("; ")
    )
}

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
    /// A kernel panicked; the panic was caught at the node boundary.
    #[error("node `{node}` panicked: {detail}")]
    KernelPanic {
        /// The node.
        node: String,
        /// The panic message.
        detail: String,
    },
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
            Error::Resolve(_) | Error::Plan(_) => ErrorKind::Resolve,
            Error::Run(RunError::Kernel { .. } | RunError::KernelPanic { .. }) => ErrorKind::Kernel,
            Error::Run(RunError::PreparationFailed { .. }) => ErrorKind::Preparation,
            Error::Run(RunError::Cancelled) => ErrorKind::Cancelled,
            Error::Run(_) => ErrorKind::Input,
            Error::Arena(_) => ErrorKind::Budget,
            Error::Threads(_) => ErrorKind::System,
            Error::Cache(_) => ErrorKind::Cache,
        }
    }
}
