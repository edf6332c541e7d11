//! `onnx_prepared._onnx_prepared`: the Python extension module over the
//! `onnx-prepared` runtime. The pure-Python package around it
//! (`python/onnx_prepared/`) adds the onnxruntime-style `NodeArg` lists, the
//! `SessionOptions` class and the `await` glue of run handles.
//!
//! * `session.rs`: `InferenceSession` (open, `run`, `run_async`, `prepare`,
//!   `generate`, `stats`); the GIL is released while the runtime works.
//! * `handle.rs`: `RunHandle`, the caller's side of a `run_async` or
//!   `prepare_async` (wait, cancel, result).
//! * `convert.rs`: NumPy arrays to tensors and back, without copies where
//!   the layout allows (hot path).
//! * `value.rs`: `_Value`, the tensor behind an `OrtValue` (runs use it in
//!   place and hand their outputs over in one).
//! * `run_options.rs`: `RunOptions`, whose `terminate` cancels runs.
//! * `options.rs`: session options read from a Python options object.
//! * `meta.rs`: declared input and output types and shapes, onnxruntime's
//!   spelling.
//! * `errors.rs`: runtime errors as `onnx_prepared.errors` exceptions.
//! * `genai.rs`: model folders, tokenizers and step-wise generators for
//!   `onnx_prepared.genai` (onnxruntime-genai's API).

mod convert;
mod errors;
mod genai;
mod handle;
mod meta;
mod options;
mod run_options;
mod session;
mod value;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _onnx_prepared(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<session::InferenceSession>()?;
    m.add_class::<handle::RunHandle>()?;
    m.add_class::<run_options::RunOptions>()?;
    m.add_class::<value::Value>()?;
    m.add_class::<genai::GenaiModel>()?;
    m.add_class::<genai::GenaiTokenizerStream>()?;
    m.add_class::<genai::GenaiGenerator>()?;
    m.add(
        "MAX_NEW_TOKENS",
        onnx_prepared::limits::MAX_NEW_TOKENS as u64,
    )?;
    Ok(())
}
