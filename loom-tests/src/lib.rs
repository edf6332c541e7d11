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

/// A pool with one CPU worker and nothing else (the waiting thread is the
/// model's main thread).
#[cfg(loom)]
pub fn one_cpu_worker() -> onnx_prepared::scheduler::WorkerPool {
    onnx_prepared::scheduler::WorkerPool::new(onnx_prepared::scheduler::WorkerPoolOptions {
        cpu_workers: 1,
        io_workers: 0,
        pin_cpu_workers: false,
    })
}

/// A thread that waits for a suspended run to park its resume handle in
/// `slot(&owner)`, then resumes it (racing the run's return).
#[cfg(loom)]
pub fn spawn_resumer<T: Send + Sync + 'static>(
    owner: std::sync::Arc<T>,
    slot: fn(&T) -> &onnx_prepared::sync::Lock<Option<onnx_prepared::scheduler::ResumeHandle>>,
) -> onnx_prepared::sync::thread::JoinHandle<()> {
    onnx_prepared::sync::thread::spawn(move || {
        loop {
            if let Some(handle) = slot(&owner).with(Option::take) {
                handle.resume();
                return;
            }
            onnx_prepared::sync::thread::yield_now();
        }
    })
}
