//! Runtime errors as Python exceptions (cold path). Every
//! [`ErrorKind`] has its class in the pure-Python module
//! `onnx_prepared.errors`, a subclass of `onnx_prepared.errors.Error`
//! whose `kind` attribute names the kind; a run's or a preparation's error
//! also carries the failing task and its message.

use onnx_prepared::{Error, ErrorKind, ExecutionError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The exception class of `kind` in `onnx_prepared.errors`.
fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Model => "ModelError",
        ErrorKind::ExternalData => "ExternalDataError",
        ErrorKind::Payload => "PayloadError",
        ErrorKind::Resolve => "ResolveError",
        ErrorKind::Input => "InputError",
        ErrorKind::Kernel => "KernelError",
        ErrorKind::Budget => "BudgetError",
        ErrorKind::Preparation => "PreparationError",
        ErrorKind::Cancelled => "Cancelled",
        ErrorKind::System => "SystemResourceError",
        ErrorKind::Cache => "CacheError",
        _ => "Error",
    }
}

/// An instance of `onnx_prepared.errors.<class>` as a `PyErr` (the import
/// error itself when the module cannot be imported).
fn exception(
    py: Python<'_>,
    class: &str,
    message: String,
    failed_task: Option<&(String, String)>,
) -> PyErr {
    let make = || -> PyResult<PyErr> {
        let module =
            MODULE.get_or_try_init(py, || py.import("onnx_prepared.errors").map(Bound::unbind))?;
        let cls = module.bind(py).getattr(class)?;
        let kwargs = PyDict::new(py);
        if let Some((task, failure)) = failed_task {
            kwargs.set_item("failed_task", task)?;
            kwargs.set_item("failure", failure)?;
        }
        Ok(PyErr::from_value(cls.call((message,), Some(&kwargs))?))
    };
    make().unwrap_or_else(|e| e)
}

/// A runtime error (opening, generating, stats) as its kind's exception.
pub fn from_error(py: Python<'_>, e: &Error) -> PyErr {
    exception(py, class_name(e.kind()), e.to_string(), None)
}

/// A run's or a preparation's error, with the failing task.
pub fn from_execution(py: Python<'_>, e: &ExecutionError) -> PyErr {
    exception(
        py,
        class_name(e.error.kind()),
        e.to_string(),
        e.diagnostics.failed_task.as_ref(),
    )
}

/// Bad inputs found before the runtime saw them (`InputError`).
pub fn input(py: Python<'_>, message: String) -> PyErr {
    exception(py, "InputError", message, None)
}

/// A run ended by `RunOptions.terminate` (`Terminated`: onnxruntime's
/// `Fail`, and a `RuntimeError`), with onnxruntime's message.
pub fn terminated(py: Python<'_>) -> PyErr {
    exception(
        py,
        "Terminated",
        "Exiting due to terminate flag being set to true.".to_owned(),
        None,
    )
}
