//! Tests of the `onnx-prepared` binary: bench, cache, generate, inspect, hostile arguments,
//! memory limits.

#[path = "../support/mod.rs"]
mod support;

mod bench;
mod cache;
mod generate;
mod hostile;
mod inspect;
mod memory;
