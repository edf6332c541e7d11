//! `InferenceSession`: an onnxruntime-compatible session over a
//! [`RuntimeSession`]. `run` is the hot path: inputs become tensors over
//! the arrays' buffers, the run goes on with the GIL released (on the
//! calling thread, helped by the session's CPU workers), outputs move into
//! NumPy arrays. A finished run's context (its lowering and activation
//! buffers) is kept for the next run.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use onnx_prepared::decoder::{self, KvCache};
use onnx_prepared::limits::MAX_NEW_TOKENS;
use onnx_prepared::{
    Domain, ElementType, ErrorKind, RuntimeContext, RuntimeSession, Tensor, UNLIMITED,
};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString};

use crate::convert::{tensor_from_numpy, tensor_to_numpy};
use crate::errors;
use crate::handle::{Pending, RunHandle};
use crate::meta::ValueMeta;
use crate::options::session_options;
use crate::run_options::{Cancel, RunOptions};
use crate::value::Value;

/// Finished contexts kept per session for the next runs.
const KEPT_CONTEXTS: usize = 4;

/// An inference session (`onnx_prepared.InferenceSession` subclasses it
/// with `get_inputs`, `get_outputs` and the awaitable `run_async`).
#[pyclass(
    module = "onnx_prepared._onnx_prepared",
    name = "InferenceSession",
    subclass,
    frozen
)]
pub struct InferenceSession {
    session: RuntimeSession,
    path: PathBuf,
    /// Declared inputs (initializers excluded), in graph order.
    inputs: Vec<ValueMeta>,
    /// Per declared input, the element type the runtime expects.
    input_types: Vec<ElementType>,
    /// Graph outputs, in graph order (the order of a context's outputs).
    outputs: Vec<ValueMeta>,
    /// Finished contexts for reuse.
    contexts: Mutex<Vec<RuntimeContext>>,
}

impl std::fmt::Debug for InferenceSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InferenceSession")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Which outputs a run returns: every one (`None`) or these, by position.
pub type Selection = Option<Vec<usize>>;

impl InferenceSession {
    /// A context for a run: a finished one kept from an earlier run, or new.
    fn context(&self) -> RuntimeContext {
        let kept = self.contexts.lock().ok().and_then(|mut c| c.pop());
        kept.unwrap_or_else(|| RuntimeContext::new(&self.session))
    }

    /// Takes back a finished context: its inputs are dropped (the arrays
    /// are the caller's again) and it is kept for the next run.
    pub(crate) fn recycle(&self, mut ctx: RuntimeContext) {
        for m in &self.inputs {
            // Every declared name is accepted, so this cannot fail.
            let _ = ctx.set_input(&m.name, Tensor::default());
        }
        if let Ok(mut kept) = self.contexts.lock()
            && kept.len() < KEPT_CONTEXTS
        {
            kept.push(ctx);
        }
    }

    /// The positions of `names` among the outputs (`None`: every output).
    fn selection(&self, py: Python<'_>, names: Option<Vec<String>>) -> PyResult<Selection> {
        // `None` or empty: every output, as onnxruntime.
        let Some(names) = names.filter(|n| !n.is_empty()) else {
            return Ok(None);
        };
        names
            .iter()
            .map(|n| {
                self.outputs
                    .iter()
                    .position(|o| &o.name == n)
                    .ok_or_else(|| {
                        errors::input(
                            py,
                            format!(
                                "`{n}` is not a graph output (outputs: {})",
                                self.output_names().join(", ")
                            ),
                        )
                    })
            })
            .collect::<PyResult<Vec<_>>>()
            .map(Some)
    }

    fn output_names(&self) -> Vec<&str> {
        self.outputs.iter().map(|o| o.name.as_str()).collect()
    }

    /// A context holding `feeds`; with `owned`, every input is copied out
    /// of its array (an asynchronous run outlives the call, and Python may
    /// write or resize the array meanwhile).
    fn feed(
        &self,
        py: Python<'_>,
        feeds: &Bound<'_, PyDict>,
        owned: bool,
    ) -> PyResult<RuntimeContext> {
        self.feed_with(py, feeds, |name, declared, value| {
            let tensor = tensor_from_numpy(py, name, value, Some(declared))?;
            Ok(if owned {
                tensor.to_owned_elements()
            } else {
                tensor
            })
        })
    }

    /// A context holding every declared input, each made from its value in
    /// `feeds` by `tensor(name, declared type, value)`; a name that is not
    /// a declared input, or a missing one, is an `InputError`.
    fn feed_with(
        &self,
        py: Python<'_>,
        feeds: &Bound<'_, PyDict>,
        mut tensor: impl FnMut(&str, ElementType, &Bound<'_, PyAny>) -> PyResult<Tensor>,
    ) -> PyResult<RuntimeContext> {
        let mut ctx = self.context();
        let mut set = |ctx: &mut RuntimeContext| -> PyResult<()> {
            for (key, value) in feeds.iter() {
                let key = key.cast::<PyString>().map_err(|_| {
                    PyTypeError::new_err("input_feed: keys must be input names (str)")
                })?;
                let name = key.to_str()?;
                let Some(at) = self.inputs.iter().position(|m| m.name == name) else {
                    return Err(errors::input(
                        py,
                        format!(
                            "`{name}` is not a graph input (inputs: {})",
                            self.input_names().join(", ")
                        ),
                    ));
                };
                let t = tensor(name, self.input_types[at], &value)?;
                ctx.set_input(name, t)
                    .map_err(|e| errors::from_error(py, &e))?;
            }
            // Keys are unique and each one is declared: as many keys as
            // declared inputs means every input is set.
            if feeds.len() != self.inputs.len() {
                let missing: Vec<&str> = self
                    .inputs
                    .iter()
                    .filter(|m| !feeds.contains(m.name.as_str()).unwrap_or(false))
                    .map(|m| m.name.as_str())
                    .collect();
                return Err(errors::input(
                    py,
                    format!("input_feed lacks input(s) {}", missing.join(", ")),
                ));
            }
            Ok(())
        };
        match set(&mut ctx) {
            Ok(()) => Ok(ctx),
            Err(e) => {
                self.recycle(ctx);
                Err(e)
            }
        }
    }

    /// Runs `ctx` to its end on the calling thread with the GIL released.
    /// With `run_options`, its `terminate` flag cancels the run from any
    /// thread (onnxruntime's `RunOptions.terminate`).
    fn run_context(
        &self,
        py: Python<'_>,
        ctx: RuntimeContext,
        run_options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<RuntimeContext> {
        let session = &self.session;
        let Some(options) = run_options.filter(|o| !o.is_none()) else {
            // The context is dropped on error with the GIL held.
            return py
                .detach(move || session.run(ctx))
                .map_err(|e| errors::from_execution(py, &e));
        };
        let terminate = RunOptions::terminate_of(options)?;
        if terminate.is_set() {
            self.recycle(ctx);
            return Err(errors::terminated(py));
        }
        let handle = Arc::new(session.run_async(ctx));
        let weak: Weak<dyn Cancel> = Arc::downgrade(&handle) as Weak<dyn Cancel>;
        terminate.register(weak);
        let result = py.detach(move || {
            handle.wait_ready();
            // `terminate` holds the run only weakly, and only while it
            // cancels it: the handle is ours again at once.
            let mut handle = handle;
            loop {
                match Arc::try_unwrap(handle) {
                    Ok(h) => break h.wait(),
                    Err(again) => {
                        handle = again;
                        std::thread::yield_now();
                    }
                }
            }
        });
        result.map_err(|e| {
            if e.error.kind() == ErrorKind::Cancelled && terminate.is_set() {
                errors::terminated(py)
            } else {
                errors::from_execution(py, &e)
            }
        })
    }

    /// A finished run's outputs as values (the selected ones, in the
    /// selection's order; no copy); the context is recycled.
    fn outputs_to_values(&self, mut ctx: RuntimeContext, selection: &Selection) -> Vec<Value> {
        let outputs: Vec<Tensor> = ctx
            .take_outputs()
            .into_iter()
            .map(|(_, t)| t.into_shared())
            .collect();
        self.recycle(ctx);
        match selection {
            None => outputs.into_iter().map(Value::from_output).collect(),
            Some(picks) => picks
                .iter()
                .filter_map(|&i| outputs.get(i).cloned().map(Value::from_output))
                .collect(),
        }
    }

    fn input_names(&self) -> Vec<&str> {
        self.inputs.iter().map(|i| i.name.as_str()).collect()
    }

    /// A finished run's outputs as a list of arrays (the selected ones, in
    /// the selection's order); the context is recycled.
    pub(crate) fn outputs_to_python<'py>(
        &self,
        py: Python<'py>,
        mut ctx: RuntimeContext,
        selection: &Selection,
    ) -> PyResult<Bound<'py, PyList>> {
        let outputs = ctx.take_outputs();
        self.recycle(ctx);
        match selection {
            None => {
                let list = PyList::empty(py);
                for (name, t) in outputs {
                    list.append(tensor_to_numpy(py, &name, t)?)?;
                }
                Ok(list)
            }
            Some(picks) => {
                let mut slots: Vec<Option<(String, Tensor)>> =
                    outputs.into_iter().map(Some).collect();
                let mut made: Vec<Option<Bound<'py, PyAny>>> = vec![None; slots.len()];
                let list = PyList::empty(py);
                for &i in picks {
                    let array = match (
                        slots.get_mut(i).and_then(Option::take),
                        made.get(i).and_then(Option::as_ref),
                    ) {
                        (Some((name, t)), _) => {
                            let a = tensor_to_numpy(py, &name, t)?;
                            made[i] = Some(a.clone());
                            a
                        }
                        // The same output asked for twice: a copy.
                        (None, Some(a)) => a.call_method0("copy")?,
                        (None, None) => {
                            return Err(errors::input(
                                py,
                                format!("output {i} is missing from the run's outputs"),
                            ));
                        }
                    };
                    list.append(array)?;
                }
                Ok(list)
            }
        }
    }
}

#[pymethods]
impl InferenceSession {
    /// Opens the model at `path_or_bytes` (a path: weights are read by the
    /// first run or by `prepare`). `sess_options`: an
    /// `onnx_prepared.SessionOptions` (or any object with some of its
    /// attributes). `providers` and `provider_options` are accepted for
    /// onnxruntime compatibility; the runtime runs on the CPU.
    #[new]
    #[pyo3(signature = (path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs))]
    fn new(
        py: Python<'_>,
        path_or_bytes: &Bound<'_, PyAny>,
        sess_options: Option<&Bound<'_, PyAny>>,
        providers: Option<&Bound<'_, PyAny>>,
        provider_options: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let _ = (providers, provider_options, kwargs);
        if path_or_bytes.is_instance_of::<PyBytes>()
            || path_or_bytes.is_instance_of::<PyByteArray>()
        {
            // `onnx_prepared.InferenceSession` writes serialized models to
            // a file of their own first.
            return Err(PyTypeError::new_err(
                "the native session opens models from a file path (external data and the \
                 prepared cache live beside it)",
            ));
        }
        let path: PathBuf = path_or_bytes.extract()?;
        let options = session_options(sess_options)?;
        let open = path.clone();
        let session = py
            .detach(move || RuntimeSession::open(open, options))
            .map_err(|e| errors::from_error(py, &e))?;
        let resolved = session.plan().resolved();
        let graph = resolved.model().graph();
        let inputs: Vec<ValueMeta> = resolved
            .inputs()
            .iter()
            .map(|i| ValueMeta::of(&i.name, &graph.input))
            .collect();
        let input_types = resolved.inputs().iter().map(|i| i.dtype).collect();
        let outputs = resolved
            .outputs()
            .iter()
            .map(|(n, _)| ValueMeta::of(n, &graph.output))
            .collect();
        Ok(Self {
            session,
            path,
            inputs,
            input_types,
            outputs,
            contexts: Mutex::new(Vec::new()),
        })
    }

    /// `(name, type, shape)` of each graph input (initializers excluded).
    fn _declared_inputs<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(String, String, Bound<'py, PyList>)>> {
        self.inputs.iter().map(|m| m.to_python(py)).collect()
    }

    /// `(name, type, shape)` of each graph output.
    fn _declared_outputs<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Vec<(String, String, Bound<'py, PyList>)>> {
        self.outputs.iter().map(|m| m.to_python(py)).collect()
    }

    /// Runs the model on `input_feed` (input name to array) and returns
    /// the outputs named in `output_names` (`None`: all), as onnxruntime's
    /// `run`. The GIL is released while the model runs.
    #[pyo3(signature = (output_names, input_feed, run_options=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'py, PyDict>,
        run_options: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let selection = self.selection(py, output_names)?;
        let ctx = self.feed(py, input_feed, false)?;
        let ctx = self.run_context(py, ctx, run_options)?;
        self.outputs_to_python(py, ctx, &selection)
    }

    /// Runs the model on `feeds` (input name to `_Value`) and returns the
    /// outputs named in `output_names` (`None`: all) as `_Value`s: inputs
    /// are used in place and outputs handed over, no copy either way.
    #[pyo3(signature = (output_names, feeds, run_options=None))]
    fn _run_values(
        &self,
        py: Python<'_>,
        output_names: Option<Vec<String>>,
        feeds: &Bound<'_, PyDict>,
        run_options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Value>> {
        let selection = self.selection(py, output_names)?;
        let ctx = self.feed_with(py, feeds, |name, declared, value| {
            let value = value.cast::<Value>().map_err(|_| {
                PyTypeError::new_err(format!("input `{name}`: an OrtValue is expected"))
            })?;
            let tensor = value.get().tensor();
            if tensor.dtype() != declared {
                return Err(errors::input(
                    py,
                    format!(
                        "input `{name}`: {} elements given, the model takes {}",
                        tensor.dtype().name(),
                        declared.name()
                    ),
                ));
            }
            Ok(tensor)
        })?;
        let ctx = self.run_context(py, ctx, run_options)?;
        Ok(self.outputs_to_values(ctx, &selection))
    }

    /// Starts a run and returns at once: a `RunHandle` to wait on, cancel
    /// or take the outputs from.
    #[pyo3(signature = (output_names, input_feed, run_options=None))]
    fn run_async(
        slf: &Bound<'_, Self>,
        output_names: Option<Vec<String>>,
        input_feed: &Bound<'_, PyDict>,
        run_options: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<RunHandle> {
        let py = slf.py();
        let this = slf.get();
        let selection = this.selection(py, output_names)?;
        let terminate = run_options
            .filter(|o| !o.is_none())
            .map(RunOptions::terminate_of)
            .transpose()?;
        if terminate.as_ref().is_some_and(|t| t.is_set()) {
            return Err(errors::terminated(py));
        }
        let ctx = this.feed(py, input_feed, true)?;
        let handle = this.session.run_async(ctx);
        let run = RunHandle::new(slf.clone().unbind(), Pending::Run { handle, selection });
        if let Some(t) = terminate {
            run.cancel_with(&t);
        }
        Ok(run)
    }

    /// Reads, verifies and prepacks every weight now (with the GIL
    /// released); later runs take the hot path.
    fn prepare(&self, py: Python<'_>) -> PyResult<()> {
        let session = &self.session;
        py.detach(move || session.prepare())
            .map_err(|e| errors::from_execution(py, &e))
    }

    /// Starts `prepare` and returns at once: a `RunHandle` whose result is
    /// `None`.
    fn prepare_async(slf: &Bound<'_, Self>) -> RunHandle {
        let handle = slf.get().session.prepare_async();
        RunHandle::new(slf.clone().unbind(), Pending::Prepare(handle))
    }

    /// Greedy decoding for a decoder model with a past/present KV cache:
    /// the `max_new_tokens` token ids after `prompt_ids` (the GIL released
    /// meanwhile). A model made by the ONNX Runtime GenAI builder runs in
    /// the cache form its `genai_config.json` names.
    #[pyo3(signature = (prompt_ids, max_new_tokens=16))]
    fn generate(
        &self,
        py: Python<'_>,
        prompt_ids: Vec<i64>,
        max_new_tokens: usize,
    ) -> PyResult<Vec<i64>> {
        if max_new_tokens == 0 || max_new_tokens > MAX_NEW_TOKENS {
            return Err(errors::input(
                py,
                format!("max_new_tokens {max_new_tokens}: generate takes 1 to {MAX_NEW_TOKENS}"),
            ));
        }
        let cache = decoder::genai_kv_cache(&self.path).unwrap_or(KvCache::Growing);
        let session = &self.session;
        let prompt = &prompt_ids;
        py.detach(move || decoder::generate_with(session, prompt, max_new_tokens, cache))
            .map(|g| g.tokens)
            .map_err(|e| errors::from_error(py, &e))
    }

    /// What the session did so far: source bytes read, prepacks, prepared
    /// cache counters, evictions, and live / peak bytes per memory domain
    /// with its limit (`None`: unlimited). Keys as in `run --stats`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.session.preparation_stats();
        let memory = self.session.memory();
        let residency = self.session.residency();
        let out = PyDict::new(py);
        out.set_item("source_bytes_read", s.source_bytes_read)?;
        out.set_item("source_bytes_reread", s.source_bytes_reread)?;
        out.set_item("packed_bytes_read", s.cache.packed_bytes_read)?;
        out.set_item("packed_bytes_in_place", s.cache.bytes_in_place)?;
        out.set_item("prepacks", s.prepacks)?;
        out.set_item("cache_hits", s.cache.hits)?;
        out.set_item("cache_misses", s.cache.misses)?;
        out.set_item("cache_writes", s.cache.writes)?;
        out.set_item("evictions", s.evictions)?;
        out.set_item("restores", s.restores)?;
        out.set_item("prepared_objects", residency.total)?;
        out.set_item("resident_objects", residency.resident)?;
        out.set_item("resident_bytes", residency.resident_bytes)?;
        let limit = |bytes: usize| (bytes != UNLIMITED).then_some(bytes);
        let peaks = PyDict::new(py);
        let domains = PyDict::new(py);
        for d in Domain::ALL {
            let r = memory.domain(d);
            peaks.set_item(d.name(), r.peak)?;
            let entry = PyDict::new(py);
            entry.set_item("live", r.live)?;
            entry.set_item("peak", r.peak)?;
            entry.set_item("limit", limit(r.limit))?;
            domains.set_item(d.name(), entry)?;
        }
        let total = PyDict::new(py);
        total.set_item("live", memory.total_live)?;
        total.set_item("peak", memory.total_peak)?;
        total.set_item("limit", limit(memory.global_limit))?;
        domains.set_item("total", total)?;
        out.set_item("peak_live_bytes", peaks)?;
        out.set_item("memory", domains)?;
        Ok(out)
    }

    /// The model's metadata, as onnxruntime's `ModelMetadata` fields.
    fn _model_meta<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let model = self.session.plan().resolved().model();
        let proto = model.proto();
        let graph = model.graph();
        let out = PyDict::new(py);
        let text = |s: &Option<String>| s.clone().unwrap_or_default();
        out.set_item("producer_name", text(&proto.producer_name))?;
        out.set_item("graph_name", text(&graph.name))?;
        out.set_item("domain", text(&proto.domain))?;
        out.set_item("description", text(&proto.doc_string))?;
        out.set_item("graph_description", text(&graph.doc_string))?;
        out.set_item("version", proto.model_version.unwrap_or(0))?;
        let custom = PyDict::new(py);
        for p in &proto.metadata_props {
            custom.set_item(text(&p.key), text(&p.value))?;
        }
        out.set_item("custom_metadata_map", custom)?;
        Ok(out)
    }

    /// Writes the trace recorded so far (Chrome's trace event format) to
    /// `path`, a new file, and starts a new one; `False` when the session
    /// records none (`SessionOptions.enable_profiling` off).
    fn _end_profiling(&self, py: Python<'_>, path: PathBuf) -> PyResult<bool> {
        let Some(trace) = self.session.trace() else {
            return Ok(false);
        };
        let json = trace.to_chrome_json();
        let written = py.detach(|| {
            use std::io::Write;
            let mut f = std::fs::File::create_new(&path)?;
            f.write_all(json.as_bytes())?;
            f.sync_all()
        });
        written.map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!(
                "writing the profile {}: {e}",
                path.display()
            ))
        })?;
        trace.clear();
        Ok(true)
    }

    /// Whether every prepared object is resident (runs take the hot path).
    fn is_hot(&self) -> bool {
        self.session.is_hot()
    }

    /// Waits for the prepared-cache writes submitted so far.
    fn flush_cache(&self, py: Python<'_>) {
        let session = &self.session;
        py.detach(move || session.flush_cache());
    }

    /// The execution providers in use (onnxruntime compatibility).
    fn get_providers(&self) -> Vec<&'static str> {
        vec!["CPUExecutionProvider"]
    }

    /// Nanoseconds of each of `repeat` runs of `RuntimeSession::run` on
    /// `input_feed` in Rust (one context reused, outputs left in it): the
    /// baseline the Python `run`'s overhead is measured against.
    fn _time_rust_runs(
        &self,
        py: Python<'_>,
        input_feed: &Bound<'_, PyDict>,
        repeat: usize,
    ) -> PyResult<Vec<u64>> {
        let ctx = self.feed(py, input_feed, false)?;
        let session = &self.session;
        let timed = py.detach(move || {
            let mut ctx = session.run(ctx)?;
            // Grown as it goes: a huge `repeat` is never one allocation.
            let mut times = Vec::new();
            for _ in 0..repeat {
                let t = Instant::now();
                ctx = session.run(ctx)?;
                times.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
            }
            Ok((ctx, times))
        });
        match timed {
            Ok((ctx, times)) => {
                self.recycle(ctx);
                Ok(times)
            }
            Err(e) => Err(errors::from_execution(py, &e)),
        }
    }

    fn __repr__(&self) -> String {
        format!("InferenceSession({:?})", self.path)
    }
}
