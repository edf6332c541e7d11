//! CPU kernels and the packed layouts they consume (hot path).
//!
//! A kernel exposes `prepare(source bytes) -> packed bytes` for a named layout
//! and `execute(packed, inputs, outputs, scratch)`; it knows nothing about
//! tasks, scheduling or ONNX files. The runtime's `plan` module glues kernels
//! to the graph.
