//! Every capacity and threshold of the runtime, in one place (cold path).

/// Largest `.onnx` file [`crate::model::Model::open`] accepts: protobuf
/// messages are limited to 2 GiB, and large weights belong in external data.
pub const MAX_MODEL_FILE_BYTES: u64 = (1 << 31) - 1;

/// Alignment of each tensor in an external data file written by this project
/// (fixtures and, later, the prepared cache).
pub const EXTERNAL_DATA_ALIGNMENT: u64 = 64;

/// Embedded initializers up to this size are decoded at resolution and used
/// as inline constants; larger ones become prepared requirements like
/// external weights.
pub const MAX_INLINE_CONSTANT_BYTES: u64 = 64 * 1024;
