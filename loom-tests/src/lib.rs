//! Loom model checks of onnx-prepared's concurrency primitives.
//!
//! The models live in `tests/` and compile only with `RUSTFLAGS="--cfg loom"`,
//! which also switches `onnx_prepared::sync` to loom's types. See README.md.

/// Runs `f` under loom with a preemption bound of 2 (as tokio does): every
/// interleaving with at most two forced context switches. Unbounded, the
/// three-thread models take minutes for no extra coverage of protocols whose
/// race windows are one or two hand-offs.
#[cfg(loom)]
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(f);
}
