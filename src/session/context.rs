//! [`RuntimeContext`]: one run's inputs, outputs and per-inference state.

use std::sync::Arc;

use onnx_prepared_kernels::Tensor;

use super::RuntimeSession;
use crate::Error;
use crate::arena::{Domain, Reservation};
use crate::exec::RunError;
use crate::exec::{InvocationState, PreparedExecutionState};
use crate::sync::{AtomicBool, Ordering};

/// Inputs, outputs and per-inference state of one run; moved into
/// [`RuntimeSession::run_async`] and handed back by
/// [`ExecutionHandle::wait`](super::ExecutionHandle::wait), so a submission owns everything its task
/// touches. Reusing a context for the next run reuses its lowering and
/// activation buffers.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
/// # use onnx_prepared::plan::PreparedExecutionPlan;
/// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
/// use onnx_prepared_kernels::Tensor;
/// # let dir = onnx_prepared_fixtures::default_dir();
/// # onnx_prepared_fixtures::ensure_all(&dir)?;
/// # let model = Model::open(dir.join("gemm-chain.onnx"))?;
/// # let plan = PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?;
/// let session = RuntimeSession::new(plan, SessionOptions::default())?;
/// let mut ctx = RuntimeContext::new(&session)
///     .with_input("A", Tensor::from_f32(vec![1, 256], vec![0.5; 256])?)?;
/// for step in 0..3 {
///     ctx = session.run(ctx)?; // hot after the first run: no allocation but the outputs
///     assert_eq!(ctx.output("Y").expect("graph output").shape(), &[1, 256]);
///     ctx.set_input("A", Tensor::from_f32(vec![1, 256], vec![step as f32; 256])?)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct RuntimeContext {
    pub(super) inputs: Vec<(String, Tensor)>,
    outputs: Vec<(String, Tensor)>,
    pub(super) invocation: InvocationState,
    declared: Vec<String>,
    /// The graph's output names.
    declared_outputs: Vec<String>,
    /// `order[i]`: position in `inputs` of declared input `i` (empty until
    /// every input is set, recomputed when a new name arrives).
    pub(super) order: Vec<u32>,
    /// Caller-owned cache bindings: after a successful run, output `.0`
    /// moves into input `.1` (a KV cache's presents become the next pasts).
    cache: Vec<(String, String)>,
    /// The outputs' bytes, charged to the session's I/O domain while the
    /// context holds them.
    io: Option<Reservation>,
    /// Ends this context's runs between kernels once set.
    pub(super) interrupt: Option<Arc<RunInterrupt>>,
}

/// A flag that ends the runs of the contexts holding it
/// ([`RuntimeContext::set_interrupt`]) between two kernels, from any
/// thread or a signal handler (setting it is one atomic store): the run
/// fails with [`RunError::Cancelled`] and its context comes back, ready to
/// run again once the flag is cleared. What a handle's
/// [`cancel`](super::ExecutionHandle::cancel) does for one submission,
/// this does for whatever runs the context, a synchronous
/// [`RuntimeSession::run`] included — a Ctrl-C during a long prefill.
/// A run blocked on a weight that is still being read sees the flag once
/// that read completes, at its next kernel boundary.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = onnx_prepared_fixtures::default_dir();
/// # onnx_prepared_fixtures::ensure_all(&dir)?;
/// use std::sync::Arc;
/// use onnx_prepared::session::{RunInterrupt, RuntimeContext};
/// use onnx_prepared::{ErrorKind, RuntimeSession, SessionOptions, Tensor};
///
/// let session = RuntimeSession::open(dir.join("gemm-chain.onnx"), SessionOptions::default())?;
/// let interrupt = Arc::new(RunInterrupt::new());
/// let mut ctx = RuntimeContext::new(&session);
/// ctx.set_interrupt(Some(interrupt.clone()));
/// ctx.set_input("A", Tensor::from_f32(vec![1, 256], vec![0.5; 256])?)?;
/// interrupt.interrupt(); // say, from a SIGINT handler
/// let e = session.run(ctx).unwrap_err();
/// assert_eq!(e.error.kind(), ErrorKind::Cancelled);
/// interrupt.clear();
/// let ctx = session.run(*e.context.expect("the context comes back"))?;
/// assert_eq!(ctx.output("Y")?.shape(), &[1, 256]);
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct RunInterrupt(AtomicBool);

impl RunInterrupt {
    /// A flag not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the flag: runs holding it end at their next kernel boundary.
    /// Async-signal-safe (one atomic store).
    pub fn interrupt(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Clears the flag: the next runs go to their end.
    pub fn clear(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Whether the flag is set.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl RuntimeContext {
    /// An empty context for `session`'s graph inputs.
    pub fn new(session: &RuntimeSession) -> Self {
        let resolved = session.inner.state.plan().resolved();
        Self {
            declared: resolved.inputs().iter().map(|i| i.name.clone()).collect(),
            declared_outputs: resolved.outputs().iter().map(|(n, _)| n.clone()).collect(),
            ..Self::default()
        }
    }

    /// Ends this context's runs between kernels while `interrupt` is set
    /// (`None`: no interrupt). See [`RunInterrupt`].
    pub fn set_interrupt(&mut self, interrupt: Option<Arc<RunInterrupt>>) {
        self.interrupt = interrupt;
    }

    /// Binds output `output` to input `input`: after every successful run
    /// the output's tensor moves (no copy) into the input, for the next run
    /// — the caller-owned cache of a model with past/present state. The
    /// moved output is left empty in [`RuntimeContext::outputs`].
    ///
    /// # Errors
    /// `output` is not a graph output or `input` not a graph input.
    pub fn bind_cache(&mut self, output: &str, input: &str) -> Result<(), Error> {
        if !self.declared_outputs.iter().any(|o| o == output) {
            return Err(RunError::Unsupported {
                what: format!("binding `{output}`, which is not a graph output"),
            }
            .into());
        }
        if !self.declared.iter().any(|i| i == input) {
            return Err(RunError::UnknownInput {
                input: input.to_owned(),
            }
            .into());
        }
        self.cache.retain(|(_, i)| i != input);
        self.cache.push((output.to_owned(), input.to_owned()));
        Ok(())
    }

    /// Binds every KV-cache output to the input it becomes on the next
    /// step, whatever the exporter's convention: `present_key_0` →
    /// `past_key_0` (same suffix), `present.0.key` →
    /// `past_key_values.0.key` (same layer and kind; torch, optimum and the
    /// ONNX Runtime GenAI builder); returns how many pairs it bound. See
    /// [`crate::model::kv_cache_pairs`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
    /// # use onnx_prepared::plan::PreparedExecutionPlan;
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// # let plan = |name: &str| -> Result<PreparedExecutionPlan, Box<dyn std::error::Error>> {
    /// #     let model = Model::open(dir.join(format!("{name}.onnx")))?;
    /// #     Ok(PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?)
    /// # };
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
    /// use onnx_prepared_kernels::Tensor;
    ///
    /// let session = RuntimeSession::new(plan("tiny-llm")?, SessionOptions::default())?;
    /// let mut ctx = RuntimeContext::new(&session);
    /// assert_eq!(ctx.bind_kv_cache(), 8); // present_{key,value}_{0..3} -> past_*
    /// for layer in 0..4 {
    ///     for kv in ["key", "value"] {
    ///         let empty = Tensor::from_f32(vec![1, 8, 0, 64], vec![])?; // P = 0
    ///         ctx.set_input(&format!("past_{kv}_{layer}"), empty)?;
    ///     }
    /// }
    /// for (step, token) in [7i64, 42, 3].into_iter().enumerate() {
    ///     ctx.set_input("input_ids", Tensor::from_i64(vec![1, 1], vec![token])?)?;
    ///     let bias = Tensor::from_f32(vec![1, 1, 1, step + 1], vec![0.0; step + 1])?;
    ///     ctx.set_input("attn_bias", bias)?;
    ///     ctx = session.run(ctx)?;
    ///     // The presents became the next step's pasts.
    ///     let past = ctx.inputs().iter().find(|(n, _)| n == "past_key_0").unwrap();
    ///     assert_eq!(past.1.shape(), &[1, 8, step + 1, 64]);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn bind_kv_cache(&mut self) -> usize {
        let pairs = crate::model::kv_cache_pairs(&self.declared, &self.declared_outputs);
        for (o, i) in &pairs {
            self.cache.retain(|(_, bound)| bound != i);
            self.cache.push((o.clone(), i.clone()));
        }
        pairs.len()
    }

    /// The cache bindings, as (output, input) pairs.
    pub fn cache_bindings(&self) -> &[(String, String)] {
        &self.cache
    }

    /// Run end: the outputs written into the context's output tensors
    /// (reused when types and sizes match the previous run's: a hot run
    /// allocates nothing for them), bound outputs moved into their inputs,
    /// and the bytes left charged to the I/O domain.
    pub(super) fn finish_outputs(&mut self, state: &PreparedExecutionState) -> Result<(), Error> {
        // Charge first: refused, the context keeps its previous outputs and
        // cache state, and the run fails.
        let bytes = state.output_bytes(&self.invocation);
        match &mut self.io {
            Some(io) => io.resize(bytes)?,
            None => self.io = Some(state.budget().reserve(Domain::Io, bytes)?),
        }
        self.recycle_cache_inputs(state);
        state.outputs_into(&mut self.invocation, &mut self.outputs);
        self.apply_cache();
        // Outputs moved into inputs are the caller's cache, not outputs.
        let kept = self
            .outputs
            .iter()
            .map(|(_, t)| t.byte_len())
            .fold(0, usize::saturating_add);
        if let Some(io) = &mut self.io {
            io.shrink(io.bytes() - kept.min(io.bytes()));
        }
        Ok(())
    }

    /// Bytes of the outputs the context holds, charged to the session's
    /// I/O domain (0 once taken).
    pub fn output_bytes(&self) -> usize {
        self.io.as_ref().map_or(0, Reservation::bytes)
    }

    /// Before the outputs are taken: each bound input the run read (the
    /// last past) goes into its output's empty slot, so that an output in
    /// a buffer of its own trades places with it — the next run writes its
    /// present into the old past's memory (a shared-buffer KV cache of
    /// fixed size allocates and copies nothing per step). A slot whose
    /// size does not match (a growing cache) is replaced as before.
    fn recycle_cache_inputs(&mut self, state: &PreparedExecutionState) {
        for (output, input) in &self.cache {
            let Some(at) = self.outputs.iter().position(|(n, _)| n == output) else {
                continue;
            };
            if self.outputs[at].1.byte_len() != 0 || !state.output_has_buffer(&self.invocation, at)
            {
                continue;
            }
            // Only memory of its own: a past over a caller's buffer (shared
            // storage) is never written.
            if let Some((_, past)) = self.inputs.iter_mut().find(|(n, _)| n == input)
                && !past.is_shared()
            {
                self.outputs[at].1 = std::mem::take(past);
            }
        }
    }

    /// The hot path over this context's inputs, read in place
    /// ([`PreparedExecutionState::run_hot_in_place`]); a bound past is
    /// given up to the run, as its present replaces it afterwards.
    /// `Ok(false)`: an object was evicted since the check, take the cold
    /// path.
    pub(super) fn run_hot(
        &mut self,
        state: &PreparedExecutionState,
        par: &dyn onnx_prepared_kernels::ParallelFor,
        stop: &dyn Fn() -> bool,
    ) -> Result<bool, Error> {
        let cache = &self.cache;
        let gives_up = |name: &str| cache.iter().any(|(_, input)| input == name);
        Ok(state.run_hot_in_place(
            &mut self.invocation,
            &mut self.inputs,
            &self.order,
            &gives_up,
            par,
            stop,
        )?)
    }

    /// Moves bound outputs into their inputs (after a successful run).
    fn apply_cache(&mut self) {
        for (output, input) in &self.cache {
            let Some(at) = self.outputs.iter().position(|(n, _)| n == output) else {
                continue;
            };
            let value = std::mem::take(&mut self.outputs[at].1);
            match self.inputs.iter_mut().find(|(n, _)| n == input) {
                Some((_, slot)) => *slot = value,
                None => {
                    self.inputs.push((input.clone(), value));
                    self.order.clear();
                }
            }
        }
    }

    /// This context with input `name` set to `value`.
    ///
    /// # Errors
    /// `name` is not a graph input (types and shapes are checked when the
    /// run starts).
    pub fn with_input(mut self, name: &str, value: Tensor) -> Result<Self, Error> {
        self.set_input(name, value)?;
        Ok(self)
    }

    /// Sets input `name` (replacing an earlier value).
    ///
    /// # Errors
    /// `name` is not a graph input.
    pub fn set_input(&mut self, name: &str, value: Tensor) -> Result<(), Error> {
        if !self.declared.iter().any(|d| d == name) {
            return Err(RunError::UnknownInput {
                input: name.to_owned(),
            }
            .into());
        }
        match self.inputs.iter_mut().find(|(n, _)| n == name) {
            Some((_, slot)) => *slot = value,
            None => {
                self.inputs.push((name.to_owned(), value));
                self.order.clear();
            }
        }
        Ok(())
    }

    /// The declared-order positions of the inputs (computed once per set of
    /// names).
    pub(super) fn order(&mut self) -> Result<&[u32], Error> {
        if self.order.len() != self.declared.len() {
            self.order.clear();
            for d in &self.declared {
                let at = self
                    .inputs
                    .iter()
                    .position(|(n, _)| n == d)
                    .ok_or_else(|| RunError::MissingInput { input: d.clone() })?;
                self.order.push(at as u32);
            }
        }
        Ok(&self.order)
    }

    /// The inputs set so far.
    pub fn inputs(&self) -> &[(String, Tensor)] {
        &self.inputs
    }

    /// The outputs of the last run, by name, in graph order.
    pub fn outputs(&self) -> &[(String, Tensor)] {
        &self.outputs
    }

    /// Output `name` of the last run; an error naming the outputs there
    /// are when the last run produced no output `name`.
    pub fn output(&self, name: &str) -> Result<&Tensor, Error> {
        self.outputs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| {
                RunError::UnknownOutput {
                    output: name.to_owned(),
                    outputs: self.outputs.iter().map(|(n, _)| n.clone()).collect(),
                }
                .into()
            })
    }

    /// Takes output `name` of the last run: it leaves the context (and its
    /// I/O-domain charge) with no copy, an empty tensor in its place in
    /// [`RuntimeContext::outputs`]; the next run allocates a new one. `None`
    /// when the last run produced no output `name`.
    pub fn take_output(&mut self, name: &str) -> Option<Tensor> {
        let slot = &mut self.outputs.iter_mut().find(|(n, _)| n == name)?.1;
        let value = std::mem::take(slot);
        if let Some(io) = &mut self.io {
            io.shrink(value.byte_len().min(io.bytes()));
        }
        Some(value)
    }

    /// Takes the outputs of the last run: they leave the context (and its
    /// I/O-domain charge); the next run allocates new ones.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
    /// # use onnx_prepared::plan::PreparedExecutionPlan;
    /// # let dir = onnx_prepared_fixtures::default_dir();
    /// # onnx_prepared_fixtures::ensure_all(&dir)?;
    /// # let plan = |name: &str| -> Result<PreparedExecutionPlan, Box<dyn std::error::Error>> {
    /// #     let model = Model::open(dir.join(format!("{name}.onnx")))?;
    /// #     Ok(PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default())?)?)
    /// # };
    /// use onnx_prepared::Domain;
    /// use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
    /// use onnx_prepared_kernels::Tensor;
    ///
    /// let session = RuntimeSession::new(plan("gemm-chain")?, SessionOptions::default())?;
    /// let a = Tensor::from_f32(vec![1, 256], vec![0.5; 256])?;
    /// let mut ctx = session.run(RuntimeContext::new(&session).with_input("A", a)?)?;
    /// assert_eq!(ctx.output_bytes(), 256 * 4); // charged to the I/O domain
    /// assert_eq!(session.memory().domain(Domain::Io).live, 256 * 4);
    /// let outputs = ctx.take_outputs(); // now the caller's
    /// assert_eq!(outputs[0].0, "Y");
    /// assert_eq!(session.memory().domain(Domain::Io).live, 0);
    /// # Ok(()) }
    /// ```
    pub fn take_outputs(&mut self) -> Vec<(String, Tensor)> {
        if let Some(io) = &mut self.io {
            io.shrink(io.bytes());
        }
        std::mem::take(&mut self.outputs)
    }
}
