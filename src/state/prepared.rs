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
//! [`LoadClaim`]: crate::store::LoadClaim

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use onnx_prepared_kernels::{Sequential, Tensor};

use super::PreparedObject;
use super::lowering::{Lowered, Objects, lower_all, order_inputs};
use super::object::{prepare, source_tensor};
use crate::Error;
use crate::arena::{
    Domain, MemoryBudget, PreparationArena, PreparedAllocation, PreparedArena, Reservation,
};
use crate::error::RunError;
use crate::model::PayloadSource;
use crate::plan::{PreparedExecutionPlan, RequirementId, TaskId, TaskKind};
use crate::store::{ClaimLoad, Outcome, Pin, PreparedObjectStore};

/// A resident prepared object and the prepared-arena bytes it holds.
#[derive(Debug)]
pub struct ResidentObject {
    /// The object.
    pub object: PreparedObject,
    _allocation: PreparedAllocation,
}

/// The session state: plan, store, arenas, payload source.
#[derive(Debug)]
pub struct PreparedExecutionState {
    plan: Arc<PreparedExecutionPlan>,
    store: PreparedObjectStore<ResidentObject>,
    budget: MemoryBudget,
    preparation: PreparationArena,
    prepared: PreparedArena,
    source: Arc<dyn PayloadSource>,
}

/// One caller's invocation state: its lowering, shape-operand inputs, and
/// the execution-domain bytes its activation buffers hold.
#[derive(Debug, Default)]
pub struct InvocationState {
    lowered: Option<Lowered>,
    value_inputs: HashSet<usize>,
    execution: Option<Reservation>,
}

/// Decoded sources of read tasks still needed by a pending prepack, with the
/// preparation bytes they hold.
#[derive(Default)]
struct Sources {
    held: HashMap<TaskId, (Arc<Tensor>, Reservation)>,
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
            store: PreparedObjectStore::new(plan.requirements().len()),
            preparation: PreparationArena::new(&budget),
            prepared: PreparedArena::new(&budget),
            budget,
            plan,
            source,
        }
    }

    /// The plan.
    pub fn plan(&self) -> &Arc<PreparedExecutionPlan> {
        &self.plan
    }

    /// The prepared-object store.
    pub fn store(&self) -> &PreparedObjectStore<ResidentObject> {
        &self.store
    }

    /// The memory budget.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Makes every requirement resident (eager preparation).
    pub fn prepare(&self) -> Result<(), Error> {
        let mut sources = Sources::default();
        for r in 0..self.plan.requirements().len() {
            self.ensure(RequirementId(r as u32), &mut sources)?;
        }
        Ok(())
    }

    /// Makes requirements resident one at a time, in plan order, calling
    /// `after` with each requirement once it is resident (while sources
    /// shared with later requirements are still held).
    pub fn prepare_each(&self, mut after: impl FnMut(RequirementId)) -> Result<(), Error> {
        let mut sources = Sources::default();
        for r in 0..self.plan.requirements().len() {
            let r = RequirementId(r as u32);
            self.ensure(r, &mut sources)?;
            after(r);
        }
        Ok(())
    }

    /// Makes requirement `r` resident: already resident, produced by
    /// someone else (wait for its event), or produced here.
    fn ensure(&self, r: RequirementId, sources: &mut Sources) -> Result<(), Error> {
        let mut retried = false;
        loop {
            match self.store.try_claim_load(r.0 as usize) {
                ClaimLoad::Resident(_) => return Ok(()),
                ClaimLoad::InFlight(waiter) => {
                    if let Outcome::Failed(_) = waiter.wait() {
                        return Err(self.not_resident(r));
                    }
                }
                ClaimLoad::Failed(generation) if !retried => {
                    retried = true;
                    if let ClaimLoad::Claimed(claim) =
                        self.store.retry_load(r.0 as usize, generation)
                    {
                        let object = self.produce(r, sources)?;
                        claim.publish(object.0, object.1);
                        return Ok(());
                    }
                }
                ClaimLoad::Failed(_) => return Err(self.not_resident(r)),
                ClaimLoad::Claimed(claim) => {
                    // Dropping the claim on error fails the generation and wakes waiters.
                    let (object, bytes) = self.produce(r, sources)?;
                    claim.publish(object, bytes);
                    return Ok(());
                }
            }
        }
    }

    fn not_resident(&self, r: RequirementId) -> Error {
        RunError::NotResident {
            node: "session".into(),
            requirement: self.plan.resolved().requirements()[r.0 as usize]
                .name
                .clone(),
        }
        .into()
    }

    /// Runs the producer chain of `r` (its read tasks, then its prepack).
    fn produce(
        &self,
        r: RequirementId,
        sources: &mut Sources,
    ) -> Result<(ResidentObject, usize), Error> {
        let tasks = self.plan.tasks();
        let publisher = (0..tasks.len())
            .find(|&t| tasks.publishes[t] == Some(r))
            .map(|t| TaskId(t as u32))
            .expect("validated: one publisher per requirement");
        let requirement = &self.plan.resolved().requirements()[r.0 as usize];
        let reads: Vec<TaskId> = match tasks.kind[publisher.0 as usize] {
            TaskKind::ReadSource => vec![publisher],
            TaskKind::Prepack => tasks.deps.row(publisher.0 as usize).to_vec(),
            other => {
                return Err(RunError::Unsupported {
                    what: format!("executing a {} task without a prepared cache", other.name()),
                }
                .into());
            }
        };
        let mut inputs = Vec::with_capacity(reads.len());
        for &t in &reads {
            inputs.push(self.read(t, sources)?);
        }
        let object = prepare(requirement, &inputs)?;
        drop(inputs);
        // A read's source is released once no unpublished prepack needs it.
        for t in reads {
            let pending = tasks.dependents.row(t.0 as usize).iter().any(|d| {
                tasks.publishes[d.0 as usize]
                    .is_some_and(|q| q != r && !self.store.snapshot(q.0 as usize).is_resident())
            });
            if !pending {
                sources.held.remove(&t);
            }
        }
        let bytes = object.byte_len();
        let allocation = self.prepared.admit(bytes)?;
        Ok((
            ResidentObject {
                object,
                _allocation: allocation,
            },
            bytes,
        ))
    }

    /// Runs read task `t` (or reuses its held result).
    fn read(&self, t: TaskId, sources: &mut Sources) -> Result<Arc<Tensor>, Error> {
        if let Some((tensor, _)) = sources.held.get(&t) {
            return Ok(tensor.clone());
        }
        let w = self.plan.tasks().reads[t.0 as usize].expect("read tasks name their weight");
        let len = self.plan.resolved().model().weights()[w.index()].byte_len() as usize;
        let mut buffer = self.preparation.alloc_zeroed(len)?;
        self.source.read(w, &mut buffer)?;
        let tensor = Arc::new(source_tensor(self.plan.resolved(), w, &buffer)?);
        // The decoded tensor replaces the read buffer in the preparation domain.
        let held = self.budget.reserve(Domain::Preparation, len)?;
        drop(buffer);
        sources.held.insert(t, (tensor.clone(), held));
        Ok(tensor)
    }

    /// Runs one inference sequentially: each step waits for exactly the
    /// requirements in its bitset, then replays its actions.
    pub fn run(
        &self,
        invocation: &mut InvocationState,
        inputs: &[(&str, &Tensor)],
    ) -> Result<Vec<(String, Tensor)>, Error> {
        let resolved = self.plan.resolved();
        let ordered = order_inputs(resolved.inputs(), inputs)?;
        if !invocation
            .lowered
            .as_ref()
            .is_some_and(|l| l.matches(&ordered, &invocation.value_inputs))
        {
            invocation.lowered = None;
            invocation.execution = None;
            let lowered = lower_all(resolved, &ordered, &mut invocation.value_inputs)?;
            // Activation buffers live in the execution domain for as long as
            // this lowering is kept; over the limit, the run is refused.
            invocation.execution = Some(
                self.budget
                    .reserve(Domain::Execution, lowered.buffer_bytes())?,
            );
            invocation.lowered = Some(lowered);
        }
        let lowered = invocation.lowered.as_mut().expect("lowered above");
        lowered.load_inputs(&ordered)?;
        let mut pins = RunPins {
            pins: (0..self.plan.requirements().len()).map(|_| None).collect(),
        };
        let mut sources = Sources::default();
        for step in self.plan.steps() {
            for bit in step.needs.iter_ones() {
                if pins.pins[bit].is_some() {
                    continue;
                }
                let r = RequirementId(bit as u32);
                // Resident between `ensure` and `pin` unless evicted meanwhile: retry.
                loop {
                    self.ensure(r, &mut sources)?;
                    if let Some(pin) = self.store.pin(bit) {
                        pins.pins[bit] = Some(pin);
                        break;
                    }
                }
            }
            let actions = lowered.actions_of(step.nodes.clone());
            lowered.replay(resolved, &pins, actions, &Sequential)?;
        }
        Ok(lowered.outputs(resolved, &pins))
    }
}
