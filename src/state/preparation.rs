//! `Producer`: the one producer of each prepared object (cold path) —
//! claim (store protocol 1, retrying a failed generation once) → read the
//! sources (verified, decoded, charged to the preparation domain) → build →
//! admit in the prepared arena → publish under the claim.
//!
//! Two callers share it: on-demand sequential production
//! ([`PreparedExecutionState`](super::PreparedExecutionState)'s `prepare`,
//! `prepare_each` and `run`, through `ensure` in `prepared.rs`) and session
//! tasks run one at a time by id (`tasks.rs`). They differ only in where
//! decoded sources wait for their prepacks (a per-call map, per-task
//! inboxes) and in what a producer does when another holds the claim (wait,
//! or leave it to that producer).

use std::sync::Arc;

use onnx_prepared_kernels::Tensor;

use super::PreparedObject;
use super::object::{prepare, source_tensor};
use crate::Error;
use crate::arena::{
    Domain, MemoryBudget, PreparationArena, PreparedAllocation, PreparedArena, Reservation,
};
use crate::error::RunError;
use crate::model::{ChecksumPolicy, PayloadSource, read_verified};
use crate::plan::{PreparedExecutionPlan, RequirementId, TaskId, TaskKind};
use crate::store::{ClaimLoad, LoadClaim, PreparedObjectStore, Waiter};
use crate::sync::Lock;

/// A resident prepared object and the prepared-arena bytes it holds.
#[derive(Debug)]
pub struct ResidentObject {
    /// The object.
    pub object: PreparedObject,
    _allocation: PreparedAllocation,
}

/// A read task's decoded source and the preparation-domain bytes it holds;
/// dropping it returns them to the budget.
#[derive(Debug)]
pub(super) struct Source {
    /// The decoded tensor (shared with a published `Source` object).
    pub(super) tensor: Arc<Tensor>,
    _charge: Reservation,
}

/// How a producer of a requirement proceeds: the claim policy shared by the
/// on-demand path (`ensure`) and the per-task path (`tasks.rs`).
pub(super) enum Role<'a> {
    /// Produce the object and publish it through the claim (dropping the
    /// claim instead fails the generation and wakes its waiters).
    Produce(LoadClaim<'a, ResidentObject>),
    /// Another producer's generation is in flight.
    InFlight(Waiter<'a>),
    /// Already resident.
    Resident,
}

/// Whether [`Producer::claim`] may retry a failed generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Retry a failed generation once (then [`Retry::Never`]).
    Once,
    /// A failed generation is an error.
    Never,
}

/// Produces the prepared objects of one plan: its store, arenas, payload
/// source and checksum policy.
#[derive(Debug)]
pub(super) struct Producer {
    plan: Arc<PreparedExecutionPlan>,
    store: PreparedObjectStore<ResidentObject>,
    /// The task publishing each requirement, indexed by `RequirementId`.
    publisher: Box<[TaskId]>,
    budget: MemoryBudget,
    preparation: PreparationArena,
    prepared: PreparedArena,
    source: Arc<dyn PayloadSource>,
    /// Whether reads verify declared digests.
    checksums: ChecksumPolicy,
    /// Per requirement, why its latest failed generation failed (cold).
    failures: Box<[Lock<Option<String>>]>,
}

impl Producer {
    /// The producer of `plan`'s objects, reading payloads through `source`
    /// (verified under `checksums`), accounting memory against `budget`.
    pub(super) fn new(
        plan: Arc<PreparedExecutionPlan>,
        source: Arc<dyn PayloadSource>,
        budget: MemoryBudget,
        checksums: ChecksumPolicy,
    ) -> Self {
        let tasks = plan.tasks();
        let mut publisher = vec![TaskId(u32::MAX); plan.requirements().len()];
        for (t, publishes) in tasks.publishes.iter().enumerate() {
            if let Some(r) = publishes {
                publisher[r.0 as usize] = TaskId(t as u32);
            }
        }
        Self {
            store: PreparedObjectStore::new(plan.requirements().len()),
            failures: (0..plan.requirements().len())
                .map(|_| Lock::new(None))
                .collect(),
            publisher: publisher.into_boxed_slice(),
            preparation: PreparationArena::new(&budget),
            prepared: PreparedArena::new(&budget),
            budget,
            plan,
            source,
            checksums,
        }
    }

    /// Sets whether reads verify declared weight digests.
    pub(super) fn set_checksums(&mut self, checksums: ChecksumPolicy) {
        self.checksums = checksums;
    }

    /// The plan.
    pub(super) fn plan(&self) -> &Arc<PreparedExecutionPlan> {
        &self.plan
    }

    /// The prepared-object store.
    pub(super) fn store(&self) -> &PreparedObjectStore<ResidentObject> {
        &self.store
    }

    /// The memory budget.
    pub(super) fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Claims the production of `r` (store protocol 1). A failed generation
    /// is retried while `retry` is [`Retry::Once`] (which the retry spends);
    /// a failure that is not retried is an error.
    pub(super) fn claim(&self, r: RequirementId, retry: &mut Retry) -> Result<Role<'_>, Error> {
        let index = r.0 as usize;
        let found = match self.store.try_claim_load(index) {
            ClaimLoad::Failed(generation) if *retry == Retry::Once => {
                *retry = Retry::Never;
                self.store.retry_load(index, generation)
            }
            found => found,
        };
        match found {
            ClaimLoad::Claimed(claim) => Ok(Role::Produce(claim)),
            ClaimLoad::InFlight(waiter) => Ok(Role::InFlight(waiter)),
            ClaimLoad::Resident(_) => Ok(Role::Resident),
            ClaimLoad::Failed(_) => Err(self.not_resident(r)),
        }
    }

    pub(super) fn not_resident(&self, r: RequirementId) -> Error {
        RunError::NotResident {
            node: "session".into(),
            requirement: self.plan.resolved().requirements()[r.0 as usize]
                .name
                .clone(),
        }
        .into()
    }

    /// The read tasks whose sources `r`'s object is built from, in source
    /// order: the publisher itself for a source used as is, the prepack's
    /// dependencies otherwise.
    pub(super) fn reads_of(&self, r: RequirementId) -> Result<&[TaskId], Error> {
        let tasks = self.plan.tasks();
        let publisher = &self.publisher[r.0 as usize];
        match tasks.kind[publisher.0 as usize] {
            TaskKind::ReadSource => Ok(std::slice::from_ref(publisher)),
            TaskKind::Prepack => Ok(tasks.deps.row(publisher.0 as usize)),
            other => Err(RunError::Unsupported {
                what: format!("executing a {} task without a prepared cache", other.name()),
            }
            .into()),
        }
    }

    /// Reads (verified under the state's checksum policy) and decodes read
    /// task `t`'s weight through the preparation arena; the result holds the
    /// decoded bytes in the preparation domain.
    pub(super) fn read(&self, t: TaskId) -> Result<Source, Error> {
        let w = self.plan.tasks().reads[t.0 as usize].expect("read tasks name their weight");
        let weight = &self.plan.resolved().model().weights()[w.index()];
        let len = weight.byte_len() as usize;
        let mut buffer = self.preparation.alloc_zeroed(len)?;
        read_verified(&*self.source, weight, &mut buffer, self.checksums)?;
        let tensor = Arc::new(source_tensor(self.plan.resolved(), w, &buffer)?);
        // The decoded tensor replaces the read buffer in the preparation domain.
        let reservation = self.budget.reserve(Domain::Preparation, len)?;
        drop(buffer);
        Ok(Source {
            tensor,
            _charge: reservation,
        })
    }

    /// Builds `r`'s object from its sources (in [`reads_of`] order),
    /// admits it in the prepared arena and publishes it through `claim`. On
    /// error the claim is dropped, failing its generation.
    ///
    /// [`reads_of`]: Self::reads_of
    pub(super) fn publish(
        &self,
        claim: LoadClaim<'_, ResidentObject>,
        r: RequirementId,
        inputs: &[Arc<Tensor>],
    ) -> Result<(), Error> {
        claim.set_preparing();
        let requirement = &self.plan.resolved().requirements()[r.0 as usize];
        let object = prepare(requirement, inputs)?;
        let bytes = object.byte_len();
        let allocation = self.prepared.admit(bytes)?;
        claim.publish(
            ResidentObject {
                object,
                _allocation: allocation,
            },
            bytes,
        );
        Ok(())
    }

    /// Records why requirement `r`'s latest generation failed (before the
    /// claim is dropped, so a woken waiter finds it).
    pub(super) fn record_failure(&self, r: RequirementId, cause: &str) {
        self.failures[r.0 as usize].with(|f| *f = Some(cause.to_owned()));
    }

    /// Why requirement `r`'s latest failed generation failed, if recorded.
    pub(super) fn failure_cause(&self, r: RequirementId) -> Option<String> {
        self.failures[r.0 as usize].with(|f| f.clone())
    }
}
