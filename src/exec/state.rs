//! `PreparedExecutionState`: the session's mutable state over an immutable
//! [`PreparedExecutionPlan`] — the prepared-object store and the arenas —
//! and sequential execution through completion events (cold path for
//! session tasks, hot path for step replay).
//!
//! Session tasks run on demand: before an invocation step replays its
//! actions, every requirement in its bitset is made resident — pinned if it
//! already is, waited for if another producer holds its generation, or
//! produced here (its read and prepack tasks) under a [`LoadClaim`]
//! otherwise. So the first layer executes before later layers are read. The
//! parallel scheduler replaces "produce here" with submitting the producer
//! chain at critical priority; the step protocol stays the same.
//!
//! They also run one at a time by id, from any thread, as session tasks
//! (`tasks.rs`). Both paths produce through the state's `Producer`
//! (`preparation.rs`: claim, read, build, admit, publish, failure cause);
//! they differ only in where decoded sources wait for their prepacks (a
//! per-call map here, per-task inboxes there).
//!
//! [`LoadClaim`]: crate::store::LoadClaim

use std::collections::HashSet;
use std::sync::Arc;

use onnx_prepared_kernels::{ParallelFor, Sequential, Tensor};

use crate::prepare::{PrepareError, PreparedObject};
use crate::prepare::gate::BudgetGate;
use super::lowering::{CeilingGate, Lowered, Objects, check_input, lower_all, order_inputs};
use crate::prepare::residency::{StepProtection, UnpersistedEviction};
use crate::prepare::preparation::{Held, Producer, ResidentObject};
use super::RunError;
use crate::arena::{Domain, MemoryBudget, Reservation};

use crate::model::{ChecksumPolicy, PayloadSource};
use crate::plan::{PreparedExecutionPlan, RequirementId};
use crate::store::{Pin, PreparedObjectStore, ReadGuard};
use crate::sync::Lock;

/// The session state: the producer of its prepared objects (plan, store,
/// arenas, payload source) and the budget gate of its session tasks.
#[derive(Debug)]
pub struct PreparedExecutionState {
    pub(super) producer: Producer,
    /// The budget gate every runner of this state's session tasks shares
    /// (`None` under an unlimited budget).
    pub(super) gate: Option<Arc<BudgetGate>>,
    /// Most threads one prepack task splits a large packing across (the
    /// caller's thread included; `None`: every idle CPU worker).
    pub(super) pack_threads: Option<usize>,
}

/// One caller's invocation state: its lowering, shape-operand inputs, and
/// the execution-domain bytes its activation buffers hold.
#[derive(Debug, Default)]
pub struct InvocationState {
    lowered: Option<Lowered>,
    value_inputs: HashSet<usize>,
    execution: Option<Reservation>,
    /// The same bytes charged to the process's allocation ceiling.
    ceiling: Option<Reservation>,
    /// The next step a suspendable run replays.
    next_step: usize,
    /// While the run waits: its step's needs, protected from eviction.
    waiting: Option<StepProtection>,
}

/// Where a suspendable run stands after [`PreparedExecutionState::resume_run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunProgress {
    /// Every step ran; the outputs are ready.
    Done,
    /// Step `step` needs `requirement`, which is not resident.
    Waiting {
        /// The step index (the look-ahead frontier).
        step: usize,
        /// The missing requirement.
        requirement: RequirementId,
    },
}

/// Objects read through one epoch guard (the hot path's run-level pin).
struct GuardObjects<'a>(ReadGuard<'a, ResidentObject>);

impl Objects for GuardObjects<'_> {
    fn object(&self, r: u32) -> Option<&PreparedObject> {
        self.0.get(r as usize).map(|o| &o.object)
    }
}

/// Pins taken by one run, by requirement.
struct RunPins<'a> {
    pins: Vec<Option<Pin<'a, ResidentObject>>>,
}

impl Objects for RunPins<'_> {
    fn object(&self, r: u32) -> Option<&PreparedObject> {
        self.pins.get(r as usize)?.as_ref().map(|p| &p.object)
    }
}

impl PreparedExecutionState {
    /// State for `plan`, reading payloads through `source`, accounting
    /// memory against `budget`.
    pub fn new(
        plan: Arc<PreparedExecutionPlan>,
        source: Arc<dyn PayloadSource>,
        budget: MemoryBudget,
    ) -> Self {
        Self {
            gate: BudgetGate::new(&plan, &budget).map(Arc::new),
            producer: Producer::new(plan, source, budget, ChecksumPolicy::Strict),
            pack_threads: None,
        }
    }

    /// Caps the threads one prepack task splits a large packing across
    /// (a session passes its `intra_op_threads`; default: every idle CPU
    /// worker).
    pub fn with_pack_threads(mut self, threads: Option<usize>) -> Self {
        self.pack_threads = threads;
        self
    }

    /// Sets whether reads verify declared weight digests (default
    /// [`ChecksumPolicy::Strict`]).
    pub fn with_checksums(mut self, checksums: ChecksumPolicy) -> Self {
        self.producer.set_checksums(checksums);
        self
    }

    /// Serves large tables that only row gathers read (an embedding) row
    /// by row from their source instead of holding them (default off; see
    /// [`SessionOptions::with_resident_tables`](crate::session::SessionOptions::with_resident_tables)).
    pub fn with_tables_from_source(mut self, on: bool) -> Self {
        self.producer.set_tables_from_source(on);
        self
    }

    /// Sends the prepared cache's persist jobs to `sink` instead of running
    /// them on the producing thread.
    pub fn with_persist_sink(mut self, sink: Arc<dyn crate::cache::PersistSink>) -> Self {
        self.producer.set_persist_sink(sink);
        self
    }

    /// Shares prepared objects with every other sharing state of the
    /// process: an object published under the same key is reused, not
    /// read and packed again (the process-wide prepared store).
    pub fn with_shared_objects(mut self) -> Self {
        self.producer.share_objects();
        self
    }

    /// Objects packed from their sources so far (cache hits pack nothing).
    pub fn prepacks(&self) -> u64 {
        self.producer.prepacks()
    }

    /// Bytes of source weights read so far.
    pub fn source_bytes_read(&self) -> u64 {
        self.producer.source_bytes_read()
    }

    /// Source bytes read again after evictions (per weight, beyond its size).
    pub fn source_bytes_reread(&self) -> u64 {
        self.producer.source_bytes_reread()
    }

    /// Objects evicted to make room in the prepared arena so far.
    pub fn evictions(&self) -> u64 {
        let c = self.producer.residency_counters();
        c.evictions.load(crate::sync::Ordering::Relaxed)
    }

    /// Objects produced again after an eviction so far (from the cache or
    /// their sources).
    pub fn restores(&self) -> u64 {
        let c = self.producer.residency_counters();
        c.restores.load(crate::sync::Ordering::Relaxed)
    }

    /// Sets what eviction does with objects the prepared cache has no entry
    /// for (default [`UnpersistedEviction::Persist`]).
    pub fn with_unpersisted_eviction(mut self, unpersisted: UnpersistedEviction) -> Self {
        self.producer.set_unpersisted(unpersisted);
        self
    }

    /// The plan.
    pub fn plan(&self) -> &Arc<PreparedExecutionPlan> {
        self.producer.plan()
    }

    /// The prepared-object store.
    pub fn store(&self) -> &PreparedObjectStore<ResidentObject> {
        self.producer.store()
    }

    /// The memory budget.
    pub fn budget(&self) -> &MemoryBudget {
        self.producer.budget()
    }

    /// Why requirement `r`'s latest failed generation failed, if recorded.
    pub fn failure_cause(&self, r: RequirementId) -> Option<String> {
        self.producer.failure_cause(r)
    }

    /// Makes every requirement resident (eager preparation), requirement by
    /// requirement, producing each one's chain on demand.
    pub fn prepare(&self) -> Result<(), RunError> {
        let mut held = Held::default();
        for r in 0..self.plan().requirements().len() {
            self.producer.ensure(RequirementId(r as u32), &mut held)?;
        }
        Ok(())
    }

    /// Makes requirements resident one at a time, in plan order, calling
    /// `after` with each requirement once it is resident (while sources
    /// shared with later requirements are still held).
    pub fn prepare_each(&self, mut after: impl FnMut(RequirementId)) -> Result<(), RunError> {
        let mut held = Held::default();
        for r in 0..self.plan().requirements().len() {
            let r = RequirementId(r as u32);
            self.producer.ensure(r, &mut held)?;
            after(r);
        }
        Ok(())
    }

    /// Lowers for the inputs `input(0..count)` (declared order) unless the
    /// kept lowering serves them; allocates only when it lowers.
    fn ensure_lowered<'t>(
        &self,
        invocation: &mut InvocationState,
        count: usize,
        input: impl Fn(usize) -> &'t Tensor + Copy,
    ) -> Result<(), RunError> {
        if invocation
            .lowered
            .as_ref()
            .is_some_and(|l| l.matches_by(count, input, &invocation.value_inputs))
        {
            return Ok(());
        }
        // The old lowering's buffers are offered to the new one (a decoder
        // step's shapes change every step; most of its buffers do not).
        let (mut pool, memo) = invocation
            .lowered
            .take()
            .map(Lowered::into_reuse)
            .unwrap_or_default();
        invocation.execution = None;
        invocation.ceiling = None;
        let ordered: Vec<&Tensor> = (0..count).map(input).collect();
        // Nothing is allocated before it is charged: each request of the
        // lowering (its folded constants so far, then every buffer and
        // temporary) resizes one reservation of the session's budget and
        // one of the process's ceiling, held while it allocates.
        let ceiling = CeilingGate::process();
        let held: Lock<Option<Reservation>> = Lock::new(None);
        let gate = |what: &str, bytes: usize| -> Result<(), RunError> {
            ceiling.check(what, bytes)?;
            held.with(|h| match h {
                Some(r) => r.resize(bytes),
                None => self
                    .budget()
                    .reserve(Domain::Execution, bytes)
                    .map(|r| *h = Some(r)),
            })?;
            Ok(())
        };
        let mut lowered = lower_all(
            self.plan().resolved(),
            &ordered,
            &mut invocation.value_inputs,
            &gate,
            &mut pool,
            memo.as_ref(),
        )?;
        drop(pool);
        lowered.charge_late_to(self.budget());
        // Activation buffers live in the execution domain for as long as
        // this lowering is kept; over the limit, the run is refused.
        let charge = match held.with(Option::take) {
            Some(mut r) => {
                r.resize(lowered.buffer_bytes())?;
                r
            }
            None => self
                .budget()
                .reserve(Domain::Execution, lowered.buffer_bytes())?,
        };
        invocation.ceiling = Some(ceiling.into_charge(lowered.buffer_bytes())?);
        invocation.execution = Some(charge);
        invocation.lowered = Some(lowered);
        Ok(())
    }

    /// Run step 1 of a suspendable run, over inputs held by name:
    /// `order[i]` is the position in `inputs` of declared input `i`. Checks
    /// every input, lowers if their shapes changed (the only case that
    /// allocates), copies them into their buffers and rewinds the step
    /// cursor.
    pub fn begin_run_ordered(
        &self,
        invocation: &mut InvocationState,
        inputs: &[(String, Tensor)],
        order: &[u32],
    ) -> Result<(), RunError> {
        // A run that ended while waiting (failed, cancelled) protects
        // nothing any more.
        invocation.waiting = None;
        let resolved = self.plan().resolved();
        let declared = resolved.inputs();
        debug_assert_eq!(order.len(), declared.len());
        let input = |i: usize| &inputs[order[i] as usize].1;
        for (i, decl) in declared.iter().enumerate() {
            check_input(decl, input(i))?;
        }
        self.ensure_lowered(invocation, declared.len(), input)?;
        invocation.next_step = 0;
        invocation
            .lowered
            .as_mut()
            .expect("lowered above")
            .load_inputs_by(input)
    }

    /// The hot path over inputs held by name (`order` as for
    /// [`PreparedExecutionState::begin_run_ordered`]), read in place: each
    /// input is swapped into its buffer for the run and back after it,
    /// whatever the outcome (copied instead when a graph output reads an
    /// input's buffer). Checks and lowers as `begin_run_ordered` does.
    /// `Ok(false)`: an object was not resident (see
    /// [`PreparedExecutionState::run_hot`]); the caller begins again and
    /// takes the cold path.
    ///
    /// `gives_up(name)`: the caller replaces input `name` after the run (a
    /// KV cache its present becomes), so an output computed in place over
    /// it may take its tensor: after a run that succeeded, that input's
    /// slot holds a tensor of the same size with unspecified contents.
    pub fn run_hot_in_place(
        &self,
        invocation: &mut InvocationState,
        inputs: &mut [(String, Tensor)],
        order: &[u32],
        gives_up: &dyn Fn(&str) -> bool,
        par: &dyn ParallelFor,
        stop: &dyn Fn() -> bool,
    ) -> Result<bool, RunError> {
        invocation.waiting = None;
        let declared = self.plan().resolved().inputs();
        debug_assert_eq!(order.len(), declared.len());
        {
            let held = &*inputs;
            let input = |i: usize| &held[order[i] as usize].1;
            for (i, decl) in declared.iter().enumerate() {
                check_input(decl, input(i))?;
            }
            self.ensure_lowered(invocation, declared.len(), input)?;
        }
        invocation.next_step = 0;
        let lowered = invocation.lowered.as_mut().expect("lowered above");
        let lends = lowered.lends_inputs(|i| {
            let (name, t) = &inputs[order[i] as usize];
            // Shared storage (a caller's buffer) is never written.
            !t.is_shared() && gives_up(name)
        });
        if !lends {
            lowered.load_inputs_by(|i| &inputs[order[i] as usize].1)?;
            return self.run_hot(invocation, par, stop);
        }
        lowered.swap_inputs(inputs, order);
        let ran = self.run_hot(invocation, par, stop);
        let lowered = invocation.lowered.as_mut().expect("lowered above");
        match ran {
            Ok(true) => lowered.return_inputs(inputs, order),
            // Not finished: every input goes back (one an output was being
            // computed in may hold new rows; the caller gave it up).
            _ => lowered.swap_inputs(inputs, order),
        }
        ran
    }

    /// Replays steps from the invocation's cursor while their requirements
    /// are resident (each step pins what it needs for as long as it runs);
    /// stops at the first step with a requirement that is not, without
    /// producing it (run step 2). `Done` after the last step.
    pub fn resume_run(
        &self,
        invocation: &mut InvocationState,
        par: &dyn ParallelFor,
        on_step: Option<&dyn Fn(usize, std::time::Instant, std::time::Instant)>,
        stop: &dyn Fn() -> bool,
    ) -> Result<RunProgress, RunError> {
        let resolved = self.plan().resolved();
        let lowered = invocation
            .lowered
            .as_mut()
            .expect("begin_run_ordered comes first");
        let steps = self.plan().steps();
        let mut pins = RunPins {
            pins: (0..self.plan().requirements().len())
                .map(|_| None)
                .collect(),
        };
        // Resumed: the step's needs are pinned below or protected again.
        invocation.waiting = None;
        while invocation.next_step < steps.len() {
            let step = &steps[invocation.next_step];
            for bit in step.needs.iter_ones() {
                match self.store().pin(bit) {
                    Some(pin) => pins.pins[bit] = Some(pin),
                    None => {
                        // Protected before the pins taken so far drop.
                        invocation.waiting = Some(StepProtection::new(
                            self.producer.protection(),
                            step.needs.iter_ones().map(|b| b as u32).collect(),
                        ));
                        return Ok(RunProgress::Waiting {
                            step: invocation.next_step,
                            requirement: RequirementId(bit as u32),
                        });
                    }
                }
            }
            let actions = lowered.actions_of(step.nodes.clone());
            let start = on_step.map(|_| std::time::Instant::now());
            lowered.replay(resolved, &pins, actions, par, stop)?;
            if let (Some(f), Some(start)) = (on_step, start) {
                f(invocation.next_step, start, std::time::Instant::now());
            }
            for bit in step.needs.iter_ones() {
                pins.pins[bit] = None;
            }
            invocation.next_step += 1;
        }
        Ok(RunProgress::Done)
    }

    /// The hot path (run steps 1–2 at once): every step replayed under one
    /// epoch guard, with no pin, event or queue per node. `Ok(false)` if an
    /// object turned out not to be resident (evicted since the caller's
    /// readiness check): nothing is lost, the caller reloads the inputs and
    /// takes the cold path.
    pub fn run_hot(
        &self,
        invocation: &mut InvocationState,
        par: &dyn ParallelFor,
        stop: &dyn Fn() -> bool,
    ) -> Result<bool, RunError> {
        let resolved = self.plan().resolved();
        let lowered = invocation
            .lowered
            .as_mut()
            .expect("begin_run_ordered comes first");
        let guard = GuardObjects(self.store().read_guard());
        let all = 0..lowered.len();
        match lowered.replay(resolved, &guard, all, par, stop) {
            Ok(()) => {
                invocation.next_step = self.plan().steps().len();
                Ok(true)
            }
            Err(RunError::NotResident { .. } | RunError::Prepare(PrepareError::NotResident { .. })) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// The graph outputs of a finished run, by name, in graph order (run
    /// step 3); outputs that are prepared objects are read under an epoch
    /// guard.
    pub fn outputs(&self, invocation: &InvocationState) -> Vec<(String, Tensor)> {
        let lowered = invocation
            .lowered
            .as_ref()
            .expect("begin_run_ordered comes first");
        lowered.outputs(
            self.plan().resolved(),
            &GuardObjects(self.store().read_guard()),
        )
    }

    /// The bytes of the invocation's last run's graph outputs.
    pub fn output_bytes(&self, invocation: &InvocationState) -> usize {
        let lowered = invocation
            .lowered
            .as_ref()
            .expect("begin_run_ordered comes first");
        lowered.output_bytes(&GuardObjects(self.store().read_guard()))
    }

    /// Whether graph output `i` of the invocation's lowering is written
    /// into a buffer of its own (traded with the caller's slot by
    /// [`Self::outputs_into`] when sizes match).
    pub fn output_has_buffer(&self, invocation: &InvocationState, i: usize) -> bool {
        invocation
            .lowered
            .as_ref()
            .is_some_and(|l| l.output_has_buffer(i))
    }

    /// The graph outputs of the invocation's last run written into `out`,
    /// reusing its tensors (no allocation when types and element counts
    /// match the previous run's; an output in its own buffer trades places
    /// with its slot instead of being copied).
    pub fn outputs_into(&self, invocation: &mut InvocationState, out: &mut Vec<(String, Tensor)>) {
        let lowered = invocation
            .lowered
            .as_mut()
            .expect("begin_run_ordered comes first");
        lowered.outputs_into(
            self.plan().resolved(),
            &GuardObjects(self.store().read_guard()),
            out,
        );
    }

    /// Whether every requirement is resident now.
    pub fn all_resident(&self) -> bool {
        (0..self.store().len()).all(|i| self.store().snapshot(i).is_resident())
    }

    /// Runs one inference sequentially: each step waits for exactly the
    /// requirements in its bitset, then replays its actions.
    pub fn run(
        &self,
        invocation: &mut InvocationState,
        inputs: &[(&str, &Tensor)],
    ) -> Result<Vec<(String, Tensor)>, RunError> {
        let resolved = self.plan().resolved();
        let ordered = order_inputs(resolved.inputs(), inputs)?;
        self.ensure_lowered(invocation, ordered.len(), |i| ordered[i])?;
        let lowered = invocation.lowered.as_mut().expect("lowered above");
        lowered.load_inputs(&ordered)?;
        let mut pins = RunPins {
            pins: (0..self.plan().requirements().len())
                .map(|_| None)
                .collect(),
        };
        let mut held = Held::default();
        let steps = self.plan().steps();
        for (s, step) in steps.iter().enumerate() {
            for bit in step.needs.iter_ones() {
                if pins.pins[bit].is_some() {
                    continue;
                }
                let r = RequirementId(bit as u32);
                // Resident between `ensure` and `pin` unless evicted meanwhile: retry.
                loop {
                    self.producer.ensure(r, &mut held)?;
                    if let Some(pin) = self.store().pin(bit) {
                        pins.pins[bit] = Some(pin);
                        break;
                    }
                }
            }
            let actions = lowered.actions_of(step.nodes.clone());
            lowered.replay(resolved, &pins, actions, &Sequential, &|| false)?;
            // Unpinned after their step (evictable under a limit), but for
            // the last step's: objects read as graph outputs are among them.
            if s + 1 < steps.len() {
                for bit in step.needs.iter_ones() {
                    pins.pins[bit] = None;
                }
            }
        }
        Ok(lowered.outputs(resolved, &pins))
    }
}
