//! Errors of model loading, external-data validation and payload reading
//! (cold path). Every variant names the file or tensor a person has to fix.

use std::path::PathBuf;

use onnx_prepared_kernels::{ElementType, KernelError};

use super::fold::KernelFailure;
use crate::arena::ArenaError;

/// The model file cannot be read or does not describe a usable model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The `.onnx` file could not be read.
    #[error("cannot read model file {path}: {source}")]
    Io {
        /// The model file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The `.onnx` file is larger than a protobuf message may be.
    #[error(
        "model file {path} is {size} bytes, over the {limit}-byte protobuf limit; \
         store large weights as external data"
    )]
    TooLarge {
        /// The model file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit ([`crate::limits::MAX_MODEL_FILE_BYTES`]).
        limit: u64,
    },
    /// Decoding the file would allocate more than a limit allows: too many
    /// nodes ([`crate::limits::MAX_GRAPH_NODES`]), or too many elements for
    /// the default allocation ceiling.
    #[error("model file {path} holds {count} {what}, over the limit of {limit}")]
    TooComplex {
        /// The model file.
        path: PathBuf,
        /// What was counted (`nodes`, `estimated decoded bytes`).
        what: &'static str,
        /// How many.
        count: u64,
        /// The limit.
        limit: u64,
    },
    /// The file is not a valid ONNX `ModelProto`.
    #[error("model file {path} is not a valid ONNX protobuf: {source}")]
    Decode {
        /// The model file.
        path: PathBuf,
        /// What the decoder found.
        source: prost::DecodeError,
    },
    /// The model has no graph.
    #[error("model file {path} has no graph")]
    MissingGraph {
        /// The model file.
        path: PathBuf,
    },
    /// The model imports one operator-set domain twice (`""` and `ai.onnx`
    /// are the same domain): which version applies would be ambiguous.
    #[error(
        "model file {path} imports operator set domain `{domain}` twice (versions {first} and {second}); \
         keep one opset_import entry per domain"
    )]
    DuplicateOpsetImport {
        /// The model file.
        path: PathBuf,
        /// The domain (`ai.onnx` for the default domain).
        domain: String,
        /// The first imported version.
        first: i64,
        /// The repeated import's version.
        second: i64,
    },
    /// An initializer has no name.
    #[error("initializer #{index} has no name; every initializer must be named")]
    UnnamedInitializer {
        /// Its position in `graph.initializer`.
        index: usize,
    },
    /// Two initializers share a name.
    #[error("initializer `{tensor}` is defined twice")]
    DuplicateInitializer {
        /// The repeated name.
        tensor: String,
    },
    /// The runtime cannot store this element type.
    #[error(
        "tensor `{tensor}` has element type {element_type}, which onnx-prepared does not support"
    )]
    UnsupportedElementType {
        /// The tensor.
        tensor: String,
        /// The ONNX name of its type.
        element_type: String,
    },
    /// A dimension is negative.
    #[error("tensor `{tensor}` has negative dimension {dim} in {dims:?}")]
    NegativeDim {
        /// The tensor.
        tensor: String,
        /// The offending dimension.
        dim: i64,
        /// All dimensions.
        dims: Vec<i64>,
    },
    /// The element count or byte size of the dimensions overflows 64 bits.
    #[error("tensor `{tensor}` has dimensions {dims:?} whose size overflows 64 bits")]
    DimsOverflow {
        /// The tensor.
        tensor: String,
        /// All dimensions.
        dims: Vec<i64>,
    },
    /// An embedded tensor holds a different number of bytes or values than its
    /// type and dimensions require.
    #[error(
        "embedded tensor `{tensor}` holds {found} {unit} but its type and dims need {expected}"
    )]
    EmbeddedSizeMismatch {
        /// The tensor.
        tensor: String,
        /// What type × dims require.
        expected: u64,
        /// What the file holds.
        found: u64,
        /// `bytes` (raw data) or `values` (typed fields).
        unit: &'static str,
    },
    /// A storage form the runtime does not read.
    #[error("tensor `{tensor}` uses {feature}, which onnx-prepared does not support")]
    UnsupportedStorage {
        /// The tensor.
        tensor: String,
        /// What it uses (sparse initializer, segments).
        feature: &'static str,
    },
}

/// An initializer's `external_data` entry is malformed or points somewhere it
/// must not. Checked by [`super::Model::open`] before any payload is read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExternalDataError {
    /// `data_location` and `external_data` disagree.
    #[error(
        "tensor `{tensor}`: data_location is {data_location} but it has {entries} external_data \
         entries; set data_location to EXTERNAL with a `location` entry, or embed the data"
    )]
    DataLocationMismatch {
        /// The tensor.
        tensor: String,
        /// `DEFAULT` or `EXTERNAL`.
        data_location: &'static str,
        /// Number of `external_data` entries.
        entries: usize,
    },
    /// No `location` key.
    #[error("tensor `{tensor}`: external_data has no `location` entry")]
    MissingLocation {
        /// The tensor.
        tensor: String,
    },
    /// `location` is the empty string.
    #[error("tensor `{tensor}`: external data `location` is empty")]
    EmptyLocation {
        /// The tensor.
        tensor: String,
    },
    /// `location` is an absolute path.
    #[error(
        "tensor `{tensor}`: external data location `{location}` is absolute; \
         it must be relative to the model's folder"
    )]
    AbsoluteLocation {
        /// The tensor.
        tensor: String,
        /// The location as written.
        location: String,
    },
    /// `location` has a `..` component.
    #[error(
        "tensor `{tensor}`: external data location `{location}` leaves the model's folder \
         through `..`; keep data files inside the model's folder"
    )]
    ParentComponent {
        /// The tensor.
        tensor: String,
        /// The location as written.
        location: String,
    },
    /// `location` resolves, through a symbolic link, outside both allowed folders.
    #[error(
        "tensor `{tensor}`: external data location `{location}` resolves to {target}, outside \
         the model's folder and outside the folder of the model file's real path"
    )]
    SymlinkEscape {
        /// The tensor.
        tensor: String,
        /// The location as written.
        location: String,
        /// Where it resolves.
        target: PathBuf,
    },
    /// A key other than location/offset/length/checksum.
    #[error(
        "tensor `{tensor}`: unknown external_data key `{key}`; \
         allowed keys are location, offset, length and checksum"
    )]
    UnknownKey {
        /// The tensor.
        tensor: String,
        /// The key.
        key: String,
    },
    /// A key given twice.
    #[error("tensor `{tensor}`: external_data key `{key}` appears twice")]
    DuplicateKey {
        /// The tensor.
        tensor: String,
        /// The key.
        key: String,
    },
    /// The file does not exist or cannot be resolved.
    #[error("tensor `{tensor}`: external data file {path} cannot be opened: {source}")]
    FileNotFound {
        /// The tensor.
        tensor: String,
        /// The path tried.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The location names a folder, device, pipe or socket.
    #[error("tensor `{tensor}`: external data location {path} is not a regular file")]
    NotRegularFile {
        /// The tensor.
        tensor: String,
        /// The path.
        path: PathBuf,
    },
    /// `offset` is negative or not a decimal number.
    #[error(
        "tensor `{tensor}`: external data offset `{value}` is not a non-negative decimal integer"
    )]
    InvalidOffset {
        /// The tensor.
        tensor: String,
        /// The value as written.
        value: String,
    },
    /// `length` is negative or not a decimal number.
    #[error(
        "tensor `{tensor}`: external data length `{value}` is not a non-negative decimal integer"
    )]
    InvalidLength {
        /// The tensor.
        tensor: String,
        /// The value as written.
        value: String,
    },
    /// `offset + length` overflows or lies beyond the end of the file.
    #[error(
        "tensor `{tensor}`: external data range offset {offset} + length {length} lies beyond \
         the end of {path} ({file_size} bytes); the data file is short or the offsets are wrong"
    )]
    OutOfBounds {
        /// The tensor.
        tensor: String,
        /// The data file.
        path: PathBuf,
        /// Declared offset.
        offset: u64,
        /// Declared or derived length.
        length: u64,
        /// Size of the file.
        file_size: u64,
    },
    /// `length` differs from element type × dims.
    #[error(
        "tensor `{tensor}`: external data length {declared} differs from the {expected} bytes \
         its element type and dims require"
    )]
    LengthMismatch {
        /// The tensor.
        tensor: String,
        /// The `length` entry.
        declared: u64,
        /// Type × dims.
        expected: u64,
    },
    /// A `checksum` entry that is neither `sha256:` and 64 hex digits nor an
    /// unprefixed hex digest.
    #[error(
        "tensor `{tensor}`: checksum `{value}` is neither `sha256:` followed by 64 hex digits \
         nor a hex digest of the whole file"
    )]
    InvalidChecksum {
        /// The tensor.
        tensor: String,
        /// The value as written.
        value: String,
    },
}

/// Reading a weight's payload failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The caller's buffer has the wrong size.
    #[error("tensor `{tensor}`: read buffer holds {buffer} bytes but the payload is {expected}")]
    BufferSize {
        /// The tensor.
        tensor: String,
        /// Payload size.
        expected: u64,
        /// Buffer size.
        buffer: usize,
    },
    /// No weight has this id in the model the source was opened for.
    #[error("weight id {id} does not exist in the model this payload source reads")]
    UnknownWeight {
        /// The id.
        id: u32,
    },
    /// The operating system reported an error.
    #[error("tensor `{tensor}`: reading {path} failed: {source}")]
    Io {
        /// The tensor.
        tensor: String,
        /// The data file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file ended before the payload did (it shrank after the model was opened).
    #[error(
        "tensor `{tensor}`: {path} ended after {read} of {expected} bytes; \
         the data file was truncated after the model was opened"
    )]
    ShortRead {
        /// The tensor.
        tensor: String,
        /// The data file.
        path: PathBuf,
        /// Bytes obtained.
        read: u64,
        /// Bytes wanted.
        expected: u64,
    },
    /// The bytes do not match the `sha256:` checksum of the `external_data` entry.
    #[error(
        "tensor `{tensor}`: payload sha256 {actual} does not match the declared checksum {expected}"
    )]
    ChecksumMismatch {
        /// The tensor.
        tensor: String,
        /// Declared digest (hex).
        expected: String,
        /// Digest of the bytes read (hex).
        actual: String,
    },
    /// The data file changed since it was opened and verified (written in
    /// place, truncated, touched): its bytes are no longer the ones every
    /// check and every digest refer to.
    #[error(
        "tensor `{tensor}`: data file {path} changed since it was verified ({what}); \
         open the model again to use the new file"
    )]
    DataFileChanged {
        /// The tensor.
        tensor: String,
        /// The data file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
    /// A source's bytes do not match the digest recorded when it was read
    /// before (the prepared cache keyed entries on that digest).
    #[error(
        "tensor `{tensor}`: its bytes (sha256 {actual}) differ from the digest {recorded} \
         recorded when they were read before: the data file was changed in place; \
         open the model again"
    )]
    DigestChanged {
        /// The tensor.
        tensor: String,
        /// The recorded digest (hex).
        recorded: String,
        /// The digest of the bytes read now (hex).
        actual: String,
    },
    /// A fault injected on purpose by [`super::FaultInjectingSource`].
    #[error("tensor `{tensor}`: injected read failure")]
    Injected {
        /// The tensor.
        tensor: String,
    },
}

/// Opening or resolving a model failed: the error of the model layer, one
/// variant per cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
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
    /// Values folded at resolution would exceed the allocation ceiling.
    #[error(transparent)]
    Arena(#[from] ArenaError),
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
    /// The model uses operators without a kernel: every one is listed, with
    /// how many nodes use it.
    #[error("{}", unsupported_message(.0))]
    UnsupportedOperators(Vec<UnsupportedOperator>),
    /// Evaluating a node whose inputs are all constants failed.
    #[error(transparent)]
    Folding(#[from] KernelFailure),
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
