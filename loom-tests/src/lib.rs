//! Loom model checks of onnx-prepared's concurrency primitives.
//!
//! The models live in `tests/` and compile only with `RUSTFLAGS="--cfg loom"`,
//! which also switches `onnx_prepared::sync` to loom's types. See README.md.
