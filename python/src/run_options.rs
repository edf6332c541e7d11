//! `RunOptions`: onnxruntime's per-run options. Its `terminate` flag is a
//! real cancellation: setting it cancels every run started with these
//! options that is still in flight (from any thread), and a run started
//! while it is set fails at once; the session stays usable either way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use onnx_prepared::{ExecutionHandle, RuntimeContext};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::handle::Pending;

/// Something in flight that `terminate` cancels.
pub trait Cancel: Send + Sync {
    fn cancel(&self);
}

impl Cancel for ExecutionHandle<RuntimeContext> {
    fn cancel(&self) {
        ExecutionHandle::cancel(self);
    }
}

impl Cancel for Pending {
    fn cancel(&self) {
        Pending::cancel(self);
    }
}

/// The terminate flag and the runs it would cancel (shared by the options
/// object and the runs, so that setting it never waits for a run).
#[derive(Default)]
pub struct Terminate {
    state: Mutex<TerminateState>,
}

impl std::fmt::Debug for Terminate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminate")
            .field("set", &self.is_set())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct TerminateState {
    set: bool,
    runs: Vec<Weak<dyn Cancel>>,
}

impl Terminate {
    fn lock(&self) -> std::sync::MutexGuard<'_, TerminateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, on: bool) {
        let mut s = self.lock();
        s.set = on;
        if on {
            for run in s.runs.drain(..) {
                if let Some(run) = run.upgrade() {
                    run.cancel();
                }
            }
        }
    }

    pub fn is_set(&self) -> bool {
        self.lock().set
    }

    /// Registers a run in flight; with the flag already set it is
    /// cancelled at once.
    pub fn register(&self, run: Weak<dyn Cancel>) {
        let mut s = self.lock();
        if s.set {
            drop(s);
            if let Some(run) = run.upgrade() {
                run.cancel();
            }
            return;
        }
        s.runs.retain(|r| r.strong_count() > 0);
        s.runs.push(run);
    }
}

/// onnxruntime's `RunOptions`.
#[pyclass(module = "onnx_prepared._onnx_prepared", name = "RunOptions", subclass)]
pub struct RunOptions {
    /// Accepted, no effect (the runtime reports through errors).
    #[pyo3(get, set)]
    log_severity_level: i32,
    #[pyo3(get, set)]
    log_verbosity_level: i32,
    /// The run's tag (onnxruntime's `run_tag`).
    #[pyo3(get, set)]
    logid: String,
    /// Accepted, no effect: every run computes what the outputs need.
    #[pyo3(get, set)]
    only_execute_path_to_fetches: bool,
    config: HashMap<String, String>,
    terminate: Arc<Terminate>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("logid", &self.logid)
            .finish_non_exhaustive()
    }
}

impl RunOptions {
    /// The terminate flag `options` carries: this class's shared flag, or
    /// for any other object (onnxruntime's own options, say) a flag set
    /// as its `terminate` attribute is now.
    pub fn terminate_of(options: &Bound<'_, PyAny>) -> PyResult<Arc<Terminate>> {
        if let Ok(ours) = options.cast::<RunOptions>() {
            return Ok(ours.borrow().terminate.clone());
        }
        let flag = Terminate::default();
        if let Ok(v) = options.getattr("terminate") {
            flag.set(v.is_truthy()?);
        }
        Ok(Arc::new(flag))
    }
}

#[pymethods]
impl RunOptions {
    #[new]
    fn new() -> Self {
        Self {
            log_severity_level: -1,
            log_verbosity_level: 0,
            logid: String::new(),
            only_execute_path_to_fetches: false,
            config: HashMap::new(),
            terminate: Arc::default(),
        }
    }

    /// Set to `True` to end every run in flight with these options (they
    /// raise `onnx_prepared.Terminated`, onnxruntime's `Fail`) and to fail
    /// the runs started while it stays set; `False` to run again.
    #[getter]
    fn get_terminate(&self) -> bool {
        self.terminate.is_set()
    }

    #[setter]
    fn set_terminate(&self, on: bool) {
        self.terminate.set(on);
    }

    /// Run config entries: kept and returned, no effect.
    fn add_run_config_entry(&mut self, key: String, value: String) {
        self.config.insert(key, value);
    }

    fn get_run_config_entry(&self, key: &str) -> PyResult<String> {
        self.config.get(key).cloned().ok_or_else(|| {
            PyRuntimeError::new_err(format!(
                "RunOptions does not have configuration with key: {key}"
            ))
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "RunOptions(logid={:?}, terminate={})",
            self.logid,
            self.terminate.is_set()
        )
    }
}
