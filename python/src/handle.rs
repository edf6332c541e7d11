//! `RunHandle`: the caller's side of a `run_async` or `prepare_async`.
//!
//! `wait` blocks (GIL released) until the submission is terminal while
//! `done` and `cancel` stay callable from any thread: each takes a shared
//! reference to the [`ExecutionHandle`] under a short lock and acts on it
//! with no lock held, so nothing waits behind a blocked `wait`. `result`
//! waits, then the first caller takes the handle and converts its outcome
//! once; every later call returns the same outputs or raises the same
//! exception. The Python package's wrapper makes the handle awaitable.

use std::sync::{Arc, Mutex, Weak};

use onnx_prepared::{ExecutionError, ExecutionHandle, RuntimeContext};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::errors;
use crate::run_options::{Cancel, Terminate};
use crate::session::{InferenceSession, Selection};

/// A submission in flight.
#[derive(Debug)]
pub enum Pending {
    /// A run, with the outputs to return.
    Run {
        handle: ExecutionHandle<RuntimeContext>,
        selection: Selection,
    },
    /// An eager preparation.
    Prepare(ExecutionHandle<()>),
}

impl Pending {
    fn is_ready(&self) -> bool {
        match self {
            Pending::Run { handle, .. } => handle.is_ready(),
            Pending::Prepare(h) => h.is_ready(),
        }
    }

    fn wait_ready(&self) {
        match self {
            Pending::Run { handle, .. } => handle.wait_ready(),
            Pending::Prepare(h) => h.wait_ready(),
        }
    }

    pub(crate) fn cancel(&self) {
        match self {
            Pending::Run { handle, .. } => handle.cancel(),
            Pending::Prepare(h) => h.cancel(),
        }
    }
}

/// A terminal submission's outcome, before conversion.
enum Finished {
    Run(Result<Box<RuntimeContext>, ExecutionError>, Selection),
    Prepare(Result<(), ExecutionError>),
}

/// A run or preparation in flight: `done()`, `wait()`, `cancel()`,
/// `result()` (the outputs; `None` for a preparation).
#[pyclass(module = "onnx_prepared._onnx_prepared", name = "RunHandle", frozen)]
pub struct RunHandle {
    session: Py<InferenceSession>,
    /// The submission until `result` took it (shared with calls acting on
    /// it meanwhile; the lock is held only to clone or take it).
    pending: Mutex<Option<Arc<Pending>>>,
    /// The converted outcome, once taken.
    settled: PyOnceLock<Result<Py<PyAny>, PyErr>>,
}

impl std::fmt::Debug for RunHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHandle").finish_non_exhaustive()
    }
}

impl RunHandle {
    pub fn new(session: Py<InferenceSession>, pending: Pending) -> Self {
        Self {
            session,
            pending: Mutex::new(Some(Arc::new(pending))),
            settled: PyOnceLock::new(),
        }
    }

    /// Lets `terminate` (a `RunOptions` flag) cancel the submission.
    pub fn cancel_with(&self, terminate: &Terminate) {
        if let Some(p) = self.shared() {
            let weak: Weak<dyn Cancel> = Arc::downgrade(&p) as Weak<dyn Cancel>;
            terminate.register(weak);
        }
    }

    /// The submission, shared, while `result` has not taken it.
    fn shared(&self) -> Option<Arc<Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes the submission (terminal: `result` waited first) and converts
    /// its outcome (once).
    fn settle(&self, py: Python<'_>) -> Result<Py<PyAny>, PyErr> {
        let taken = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let finished = py.detach(|| {
            taken.map(|mut shared| {
                // Other references are held only by calls acting on a
                // terminal submission: each returns at once.
                let p = loop {
                    match Arc::try_unwrap(shared) {
                        Ok(p) => break p,
                        Err(again) => {
                            shared = again;
                            std::thread::yield_now();
                        }
                    }
                };
                match p {
                    Pending::Run { handle, selection } => {
                        Finished::Run(handle.wait().map(Box::new), selection)
                    }
                    Pending::Prepare(h) => Finished::Prepare(h.wait()),
                }
            })
        });
        match finished {
            Some(Finished::Run(Ok(ctx), selection)) => Ok(self
                .session
                .get()
                .outputs_to_python(py, *ctx, &selection)?
                .into_any()
                .unbind()),
            Some(Finished::Run(Err(e), _) | Finished::Prepare(Err(e))) => {
                Err(errors::from_execution(py, &e))
            }
            Some(Finished::Prepare(Ok(()))) => Ok(py.None()),
            None => Err(errors::input(
                py,
                "the handle's result was taken already".to_owned(),
            )),
        }
    }
}

#[pymethods]
impl RunHandle {
    /// Whether the submission reached its terminal state (`result` would
    /// not block).
    fn done(&self, py: Python<'_>) -> bool {
        if self.settled.get(py).is_some() {
            return true;
        }
        self.shared().is_none_or(|p| p.is_ready())
    }

    /// Blocks (the GIL released) until the submission is terminal.
    fn wait(&self, py: Python<'_>) {
        if let Some(p) = self.shared() {
            py.detach(|| p.wait_ready());
        }
    }

    /// Cooperative cancellation: a run that has not finished ends with
    /// `onnx_prepared.Cancelled` (a run already finished keeps its
    /// outputs). The session's preparation goes on for other runs.
    fn cancel(&self) {
        if let Some(p) = self.shared() {
            p.cancel();
        }
    }

    /// Waits, then returns the run's outputs (a list of arrays, as
    /// `InferenceSession.run`; `None` for a preparation) or raises its
    /// error.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.wait(py);
        match self.settled.get_or_init(py, || self.settle(py)) {
            Ok(v) => Ok(v.clone_ref(py)),
            Err(e) => Err(e.clone_ref(py)),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "<RunHandle {}>",
            if self.done(py) { "done" } else { "running" }
        )
    }
}

/// A handle dropped while its submission runs waits for it (the runtime's
/// handles never detach) with the GIL released, so that other Python
/// threads go on meanwhile.
impl Drop for RunHandle {
    fn drop(&mut self) {
        let pending = self
            .pending
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(p) = pending
            && !p.is_ready()
        {
            Python::attach(|py| py.detach(move || drop(p)));
        }
    }
}
