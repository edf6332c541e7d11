//! Checks of the documentation as a user of the library builds it: this
//! crate depends on `onnx-prepared` without its default features (no CLI)
//! and without `internals`, so the README's Rust quick start
//! (`examples/quickstart.rs`, compared byte for byte by
//! `tests/readme.rs`) compiles against the public API alone.
