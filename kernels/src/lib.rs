//! CPU kernels and the packed layouts they consume (hot path).
//!
//! A kernel exposes `prepare(source bytes) -> packed bytes` for a named layout
//! ([`Prepack`]) and `execute(packed, inputs, outputs, parallel)`
//! ([`Operator`]); it knows nothing about tasks, scheduling or ONNX files.
//! The runtime's `plan` module glues kernels to the graph.
//!
//! Modules: [`tensor`] (element types, dense tensors), [`op`] (the operator
//! interface), [`par`] (the `ParallelFor` executor interface), [`registry`]
//! (lookup by op type), `ops` (the operators, each with a scalar reference
//! implementation that is the test oracle for its fast kernels).

#[macro_use]
mod dispatch;
mod dtype;
mod error;
pub mod op;
pub mod ops;
pub mod packed;
pub mod par;
pub mod registry;
mod scratch;
mod sync;
pub mod tensor;
mod vector;

pub use dtype::ElementType;
pub use error::KernelError;
pub use op::{
    Attributes, CpuFeatures, InputInfo, KernelOptions, NodeSpec, Operator, OutputInfo, Prepack,
    RowPacking, validate_common,
};
pub use ops::check_packed;
pub use packed::{PackedPart, PackedWeight};

/// A hash of this crate's sources, fixed at build time: two builds with
/// other kernel or packer sources have other values (a prepared object
/// packed by one is never used by the other).
pub const SOURCE_HASH: &str = env!("ONNX_PREPARED_KERNELS_SOURCE_HASH");
pub use par::{ParallelFor, Sequential, for_each_chunk_mut};
pub use tensor::{DataMut, DataRef, SharedBytes, Tensor, TensorData, ZeroedBlock, element_count};
