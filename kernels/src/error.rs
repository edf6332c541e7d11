//! Kernel errors (cold path: raised at resolution or on bad runtime shapes).

use crate::ElementType;

/// What a kernel or operator constructor reports.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// The operator is not implemented.
    #[error("operator {domain}::{op_type} (opset {opset}) is not supported")]
    UnsupportedOp {
        /// Operator domain (`""` for the default).
        domain: String,
        /// Operator type.
        op_type: String,
        /// Imported opset version of the domain.
        opset: i64,
    },
    /// An attribute value (or combination) is not supported or is invalid.
    #[error("{op}: attribute `{name}`: {detail}")]
    Attribute {
        /// Operator type.
        op: &'static str,
        /// Attribute name.
        name: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// An attribute is present with another type than the operator reads
    /// (a `FLOAT` where an `INT` is expected...): never read as a default.
    /// (The node and its operator are named by whoever reports it.)
    #[error("attribute `{name}` must be {expected}, but the node stores {found}")]
    AttributeType {
        /// Attribute name.
        name: String,
        /// The type the operator reads (`INT`, `FLOAT`...).
        expected: &'static str,
        /// What the node stores: a type name, `no value` or `an unknown type`.
        found: &'static str,
    },
    /// An attribute declares no type (`UNDEFINED`, the protobuf default) or
    /// a type number ONNX does not define: ONNX Runtime refuses the node,
    /// so its value is never typed by the field it sets.
    #[error(
        "attribute `{name}` declares type {declared}, not an attribute type (its value sets {holds})"
    )]
    UndeclaredAttributeType {
        /// Attribute name.
        name: String,
        /// `UNDEFINED`, or `an unknown number` for a number ONNX lacks.
        declared: &'static str,
        /// The type of the field the value sets (`INT`...) or `no value`.
        holds: &'static str,
    },
    /// A node names the same attribute twice.
    #[error("attribute `{name}` appears more than once")]
    DuplicateAttribute {
        /// Attribute name.
        name: String,
    },
    /// A size computed from the model's numbers (attributes, dims, constant
    /// shape operands) does not fit in memory's address space.
    #[error("{op}: {what} overflows")]
    Overflow {
        /// Operator type.
        op: &'static str,
        /// What was being computed.
        what: String,
    },
    /// The system refused a kernel's temporary memory (a transposed operand,
    /// packed panels, a reference product).
    #[error("{op}: the system refused {bytes} bytes of temporary memory")]
    Allocation {
        /// Operator type.
        op: &'static str,
        /// Bytes requested.
        bytes: usize,
    },
    /// An input or output has an element type the operator does not handle.
    #[error("{op}: element type {dtype} is not supported")]
    UnsupportedType {
        /// Operator type.
        op: &'static str,
        /// The type.
        dtype: ElementType,
    },
    /// Input count, shapes or values are inconsistent.
    #[error("shape error: {0}")]
    Shape(String),
    /// An input whose value decides output shapes is not known at resolution.
    #[error("{op}: input {input} must be a constant (an initializer or Constant node)")]
    NeedsConstant {
        /// Operator type.
        op: &'static str,
        /// Input position.
        input: usize,
    },
    /// An output's shape follows the values of the inputs (NonZero, Unique,
    /// NonMaxSuppression, Compress): it is known only while the model runs.
    /// Shape inference returns this when those values are unknown; given
    /// every input value it returns the exact shape.
    #[error("{op}: output shape follows input values; it is evaluated at run time")]
    ValueDependent {
        /// Operator type.
        op: &'static str,
    },
    /// Anything else a kernel rejects at run time (an index out of range...).
    #[error("{op}: {detail}")]
    Invalid {
        /// Operator type.
        op: &'static str,
        /// What is wrong.
        detail: String,
    },
}
