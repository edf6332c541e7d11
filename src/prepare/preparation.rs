//! `Producer`: the one producer of each prepared object (cold path) —
//! claim (store protocol 1, retrying a failed generation once) → obtain the
//! object by its recipe → admit in the prepared arena → publish under the
//! claim → (after a build from sources, under the cache's
//! build-if-missing) hand a persist job to the session's background writer.
//!
//! Recipes: read the sources (verified, decoded, charged to the
//! preparation domain) and build; or, for a large weight whose packing
//! takes rows, read and pack it a piece at a time (`pieces.rs`); or serve
//! a table row by row from its source; or read the packed payload from the
//! prepared cache (a damaged one falls back to the sources); or, for a
//! state that shares objects, take the one another session of the process
//! published under the same key (`shared.rs`).
//!
//! Two callers share it: on-demand sequential production
//! (`PreparedExecutionState`'s `prepare`,
//! `prepare_each` and `run`, through [`Producer::ensure`] with a per-call
//! [`Held`] map) and session tasks run one at a time by id (`tasks.rs`,
//! through [`Producer::produce`] with the shares delivered to a prepack's
//! inbox). They differ only in where decoded sources come from and wait
//! for their prepacks ([`Inputs`]) and in what a producer does when another
//! holds the claim (wait, or leave it to that producer). Either way the
//! failure cause of a requirement is recorded before its claim is dropped,
//! so a waiter woken by the failure finds it.

use std::collections::HashMap;
use std::sync::Arc;

use onnx_prepared_kernels::{ParallelFor, Sequential, Tensor};

use super::object::PreparedObject;
use super::residency::{Protection, ResidencyCounters, UnpersistedEviction};
use super::object::{RowTable, prepare, source_tensor};
use super::pieces::{PiecePlan, PieceSource, piece_plans};
use super::shared::{self, SharedKey, SharedObject};
use super::error::PrepareError;
use crate::model::ResolveError;
use crate::cache::{Decoded, PersistSink, PreparedModelPolicy, PreparedCache};
use crate::arena::{Domain, MemoryBudget, PreparationArena, PreparedArena, Reservation};

use crate::limits::{ROW_TABLE_CHECK_PIECE_BYTES, ROW_TABLE_MIN_BYTES};
use crate::model::{
    ChecksumPolicy, Operand, PayloadSource, RequirementIndex, WeightDescriptor, WeightId,
    read_verified, verify, verify_in_pieces,
};
use crate::plan::{PreparedExecutionPlan, RequirementId, TaskId, TaskKind};
use crate::store::{LoadAttempt, LoadClaim, GenerationOutcome, PreparedObjectStore, Waiter};
use crate::sync::{AtomicBool, AtomicU64, Lock, Ordering};

/// A resident prepared object, shared with every session of the process
/// that publishes the same key (the bytes are charged once, see
/// `shared.rs`).
#[derive(Debug)]
pub struct ResidentObject {
    /// The object.
    pub object: PreparedObject,
    _shared: Arc<SharedObject>,
}

impl ResidentObject {
    fn new(shared: Arc<SharedObject>) -> Self {
        Self {
            object: shared.object.clone(),
            _shared: shared,
        }
    }
}

/// A read task's decoded source and the preparation-domain bytes it holds;
/// dropping it returns them to the budget.
#[derive(Debug)]
pub(crate) struct Source {
    /// The decoded tensor (shared with a published `Source` object).
    pub(crate) tensor: Arc<Tensor>,
    /// The preparation-domain charge of a decoded tensor; none for one used
    /// in place from the source's shared bytes.
    _charge: Option<Reservation>,
}

/// Where a production's inputs come from: the one thing on-demand
/// production and session tasks differ in.
pub(crate) trait Inputs {
    /// The decoded source of read task `t`: held, delivered, or read now
    /// through [`Producer::read`].
    fn source(&mut self, p: &Producer, t: TaskId) -> Result<Arc<Tensor>, PrepareError>;

    /// Threads a large prepack may be split across: a session task's
    /// lease of the pool's CPU workers (protocol "lease": the pool runs one
    /// parallel region at a time, so while a packing holds it a kernel
    /// region started elsewhere runs on its own thread; idle workers help
    /// the region before taking queued tasks). On-demand production packs
    /// on its caller.
    fn parallel(&self) -> &dyn ParallelFor {
        &Sequential
    }

    /// `r` was published from the sources of `reads`: release what only it
    /// needed.
    fn settled(&mut self, _p: &Producer, _r: RequirementId, _reads: &[TaskId]) {}
}

/// Decoded sources of read tasks still needed by a pending prepack, for one
/// on-demand call (`run`, `prepare`, `prepare_each`).
#[derive(Default)]
pub(crate) struct Held {
    held: HashMap<TaskId, Source>,
}

impl Inputs for Held {
    /// Held, or read now and held.
    fn source(&mut self, p: &Producer, t: TaskId) -> Result<Arc<Tensor>, PrepareError> {
        if let Some(held) = self.held.get(&t) {
            return Ok(held.tensor.clone());
        }
        let held = p.read(t)?;
        let tensor = held.tensor.clone();
        self.held.insert(t, held);
        Ok(tensor)
    }

    /// Releases the sources in `reads` that no prepack of an unpublished
    /// requirement other than `r` needs.
    fn settled(&mut self, p: &Producer, r: RequirementId, reads: &[TaskId]) {
        let tasks = p.plan().tasks();
        for &t in reads {
            let pending = tasks.dependents.row(t.0 as usize).iter().any(|d| {
                tasks.kind[d.0 as usize] == TaskKind::Prepack
                    && tasks.publishes[d.0 as usize]
                        .is_some_and(|q| q != r && !p.store().snapshot(q.0 as usize).is_resident())
            });
            if !pending {
                self.held.remove(&t);
            }
        }
    }
}

/// How a producer of a requirement proceeds: the claim policy shared by the
/// on-demand path (`ensure`) and the per-task path (`tasks.rs`).
pub(crate) enum Role<'a> {
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
pub(crate) enum Retry {
    /// Retry a failed generation once (then [`Retry::Never`]).
    Once,
    /// A failed generation is an error.
    Never,
}

/// Produces the prepared objects of one plan: its store, arenas, payload
/// source and checksum policy.
#[derive(Debug)]
pub(crate) struct Producer {
    plan: Arc<PreparedExecutionPlan>,
    store: PreparedObjectStore<ResidentObject>,
    budget: MemoryBudget,
    preparation: PreparationArena,
    prepared: PreparedArena,
    source: Arc<dyn PayloadSource>,
    /// Whether reads verify declared digests.
    checksums: ChecksumPolicy,
    /// Whether large tables only row gathers read are served from their
    /// source (see [`Self::row_table`]).
    tables_from_source: bool,
    /// Per requirement, how it is packed from pieces of its sources
    /// (`pieces.rs`); `None`: from whole sources.
    pieces: Box<[Option<PiecePlan>]>,
    /// Per requirement, why its latest failed generation failed (cold).
    failures: Box<[Lock<Option<String>>]>,
    /// The plan's prepared cache.
    cache: Option<Arc<PreparedCache>>,
    /// Where persist jobs go (`None`: they run on the producing thread).
    sink: Option<Arc<dyn PersistSink>>,
    /// Objects packed from their sources.
    prepacks: AtomicU64,
    /// Per requirement, its key in the process-wide store (`None`: the
    /// state neither looks objects up there nor registers them).
    shared: Option<Box<[SharedKey]>>,
    /// Requirements waiting runs protect from eviction (`evict.rs`).
    protection: Arc<Protection>,
    /// What eviction does with objects the cache has no entry for.
    unpersisted: UnpersistedEviction,
    counters: ResidencyCounters,
    /// Per requirement: a cache entry was found (see [`Self::has_entry`]).
    entry_found: Box<[AtomicBool]>,
    /// Per requirement: 1 + the cache's write count when a lookup missed
    /// (0: never looked up).
    entry_missed: Box<[AtomicU64]>,
}

impl Producer {
    /// The producer of `plan`'s objects, reading payloads through `source`
    /// (verified under `checksums`), accounting memory against `budget`.
    pub(crate) fn new(
        plan: Arc<PreparedExecutionPlan>,
        source: Arc<dyn PayloadSource>,
        budget: MemoryBudget,
        checksums: ChecksumPolicy,
    ) -> Self {
        Self {
            cache: plan.cache().cloned(),
            sink: None,
            shared: None,
            prepacks: AtomicU64::new(0),
            protection: Protection::new(plan.requirements().len()),
            unpersisted: UnpersistedEviction::default(),
            counters: ResidencyCounters::default(),
            entry_found: (0..plan.requirements().len())
                .map(|_| AtomicBool::new(false))
                .collect(),
            entry_missed: (0..plan.requirements().len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            store: PreparedObjectStore::new(plan.requirements().len()),
            failures: (0..plan.requirements().len())
                .map(|_| Lock::new(None))
                .collect(),
            preparation: PreparationArena::new(&budget),
            prepared: PreparedArena::new(&budget),
            pieces: piece_plans(&plan, &*source),
            budget,
            plan,
            source,
            checksums,
            tables_from_source: false,
        }
    }

    /// How requirement `r` is packed from pieces of its sources, if it is;
    /// then its sources' read tasks read nothing.
    pub(crate) fn pieces(&self, r: RequirementId) -> Option<&PiecePlan> {
        self.pieces[r.0 as usize].as_ref()
    }

    /// Sets whether large tables only row gathers read are served row by
    /// row from their source (off by default).
    pub(crate) fn set_tables_from_source(&mut self, on: bool) {
        self.tables_from_source = on;
    }

    /// Sets whether reads verify declared weight digests.
    pub(crate) fn set_checksums(&mut self, checksums: ChecksumPolicy) {
        self.checksums = checksums;
    }

    /// Sets what eviction does with objects the cache has no entry for.
    pub(crate) fn set_unpersisted(&mut self, unpersisted: UnpersistedEviction) {
        self.unpersisted = unpersisted;
    }

    /// What eviction does with objects the cache has no entry for.
    pub(crate) fn unpersisted(&self) -> UnpersistedEviction {
        self.unpersisted
    }

    /// Requirements waiting runs protect from eviction.
    pub(crate) fn protection(&self) -> &Arc<Protection> {
        &self.protection
    }

    /// Evictions and restores so far.
    pub(crate) fn residency_counters(&self) -> &ResidencyCounters {
        &self.counters
    }

    /// The plan's prepared cache.
    pub(crate) fn cache(&self) -> Option<&Arc<PreparedCache>> {
        self.cache.as_ref()
    }

    /// The prepared arena objects are admitted to.
    pub(crate) fn prepared_arena(&self) -> &PreparedArena {
        &self.prepared
    }

    /// Bytes live in the prepared domain (resident objects, objects
    /// admitted and not yet published, evicted ones not yet destroyed).
    pub(crate) fn prepared_live(&self) -> usize {
        self.budget.live(Domain::Prepared)
    }

    /// Source bytes read more than once (after evictions): per weight, the
    /// bytes delivered beyond its size.
    pub(crate) fn source_bytes_reread(&self) -> u64 {
        let counters = self.source.counters();
        self.plan
            .resolved()
            .model()
            .weights()
            .iter()
            .map(|w| counters.bytes_read(w.id()).saturating_sub(w.byte_len()))
            .sum()
    }

    /// Sends persist jobs to `sink` (a session's background writer).
    pub(crate) fn set_persist_sink(&mut self, sink: Arc<dyn PersistSink>) {
        self.sink = Some(sink);
    }

    /// Shares objects with other states of the process (see `shared.rs`).
    pub(crate) fn share_objects(&mut self) {
        let resolved = self.plan.resolved();
        self.shared = Some(
            resolved
                .requirements()
                .iter()
                .map(|r| SharedKey::new(resolved.model(), r))
                .collect(),
        );
    }

    /// Whether another session of the process holds `r`'s object now (so
    /// producing `r` needs no source).
    pub(crate) fn shared_elsewhere(&self, r: RequirementId) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|keys| shared::find(&keys[r.0 as usize]).is_some())
    }

    /// Objects packed from their sources so far.
    pub(crate) fn prepacks(&self) -> u64 {
        self.prepacks.load(Ordering::Relaxed)
    }

    /// Source bytes read through the payload source so far.
    pub(crate) fn source_bytes_read(&self) -> u64 {
        self.source.counters().total()
    }

    /// The plan.
    pub(crate) fn plan(&self) -> &Arc<PreparedExecutionPlan> {
        &self.plan
    }

    /// The prepared-object store.
    pub(crate) fn store(&self) -> &PreparedObjectStore<ResidentObject> {
        &self.store
    }

    /// The memory budget.
    pub(crate) fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// Claims the production of `r` (store protocol 1). A failed generation
    /// is retried while `retry` is [`Retry::Once`] (which the retry spends);
    /// a failure that is not retried is an error.
    pub(crate) fn claim(&self, r: RequirementId, retry: &mut Retry) -> Result<Role<'_>, PrepareError> {
        let index = r.0 as usize;
        let found = match self.store.try_claim_load(index) {
            LoadAttempt::Failed(generation) if *retry == Retry::Once => {
                *retry = Retry::Never;
                self.store.retry_load(index, generation)
            }
            found => found,
        };
        match found {
            LoadAttempt::Claimed(claim) => Ok(Role::Produce(claim)),
            LoadAttempt::InFlight(waiter) => Ok(Role::InFlight(waiter)),
            LoadAttempt::Resident(_) => Ok(Role::Resident),
            LoadAttempt::Failed(_) => Err(self.not_resident(r)),
        }
    }

    pub(crate) fn not_resident(&self, r: RequirementId) -> PrepareError {
        PrepareError::NotResident {
            node: "session".into(),
            requirement: self.plan.resolved().requirements()[r.0 as usize]
                .name
                .clone(),
        }
    }

    /// The read tasks whose sources `r`'s object is built from, in source
    /// order: the publisher itself for a source used as is, the prepack's
    /// dependencies otherwise.
    pub(crate) fn reads_of(&self, r: RequirementId) -> Result<&[TaskId], PrepareError> {
        let tasks = self.plan.tasks();
        let publisher = &self.plan.requirements().publisher[r.0 as usize];
        match tasks.kind[publisher.0 as usize] {
            TaskKind::ReadSource => Ok(std::slice::from_ref(publisher)),
            TaskKind::Prepack => Ok(tasks.deps.row(publisher.0 as usize)),
            TaskKind::ReadPacked => Ok(&[]),
            other => Err(PrepareError::Unsupported {
                what: format!("producing an object with a {} task", other.name()),
            }),
        }
    }

    /// Reads (verified under the state's checksum policy) and decodes read
    /// task `t`'s weight through the preparation arena; the result holds the
    /// decoded bytes in the preparation domain.
    pub(crate) fn read(&self, t: TaskId) -> Result<Source, PrepareError> {
        let w = self.plan.tasks().reads[t.0 as usize].expect("read tasks name their weight");
        self.read_weight(w)
    }

    /// [`read`](Self::read) of weight `w`. When the prepared cache writes
    /// and knows no digest of `w`, the read computes and records one.
    fn read_weight(&self, w: WeightId) -> Result<Source, PrepareError> {
        let weight = &self.plan.resolved().model().weights()[w.index()];
        if let Some(tensor) = self.read_in_place(weight)? {
            return Ok(Source {
                tensor: Arc::new(tensor),
                _charge: None,
            });
        }
        let len = weight.byte_len() as usize;
        let mut buffer = self.preparation.alloc_zeroed(len)?;
        read_verified(&*self.source, weight, &mut buffer, self.checksums)?;
        self.record_digest(weight, &buffer)?;
        let dtype = weight.element_type();
        if dtype.compute() == dtype && Tensor::views_in_place(dtype) {
            // Stored as computed: the tensor views the read buffer itself
            // (aligned, of the weight's length), no decoded copy.
            let dims: Vec<usize> = weight.dims().iter().map(|&x| x as usize).collect();
            let (bytes, charge) = buffer.into_shared();
            let tensor = Tensor::shared(dims, dtype, bytes, 0).ok_or_else(|| -> PrepareError {
                ResolveError::WeightType {
                    weight: weight.name().to_owned(),
                    dtype,
                }
                .into()
            })?;
            return Ok(Source {
                tensor: Arc::new(tensor),
                _charge: Some(charge),
            });
        }
        let tensor = Arc::new(source_tensor(self.plan.resolved(), w, &buffer)?);
        // The decoded tensor replaces the read buffer in the preparation domain.
        let reservation = self.budget.reserve(Domain::Preparation, len)?;
        drop(buffer);
        Ok(Source {
            tensor,
            _charge: Some(reservation),
        })
    }

    /// When the prepared cache writes and knows no digest of `weight`,
    /// computes one from the bytes just read and records it; when it
    /// trusts a digest an earlier read recorded, checks the bytes against
    /// it.
    fn record_digest(&self, weight: &WeightDescriptor, bytes: &[u8]) -> Result<(), PrepareError> {
        if let Some(cache) = &self.cache
            && cache.wants_digest(weight)
        {
            use sha2::Digest;
            cache.record_digest(weight, sha2::Sha256::digest(bytes).into())?;
        }
        Ok(())
    }

    /// `weight` used in place from the source's shared bytes (a read-only
    /// mapping), verified and counted like a read: no buffer, no copy, no
    /// decode. `None` when the source offers no shared bytes or the tensor
    /// cannot be used in place (its type, say a 4-bit or bool one, or its
    /// alignment); the caller then reads and decodes.
    fn read_in_place(&self, weight: &WeightDescriptor) -> Result<Option<Tensor>, PrepareError> {
        let Some((bytes, offset)) = self.source.shared(weight.id()) else {
            return Ok(None);
        };
        let len = weight.byte_len() as usize;
        let dims: Vec<usize> = weight.dims().iter().map(|&x| x as usize).collect();
        let dtype = weight.element_type();
        let Some(tensor) = Tensor::shared(dims, dtype, bytes.clone(), offset)
            .filter(|t| t.byte_len() == len && dtype.compute() == dtype)
        else {
            return Ok(None);
        };
        let Some(raw) = offset
            .checked_add(len)
            .and_then(|end| bytes.bytes().get(offset..end))
        else {
            return Ok(None);
        };
        verify(weight, raw, self.checksums)?;
        self.source.check_unchanged(weight.id())?;
        self.record_digest(weight, raw)?;
        self.source.counters().add(weight.id(), len as u64);
        Ok(Some(tensor))
    }

    /// Produces `r` under `claim` (store protocol 1): collects its sources
    /// from `inputs` (in [`reads_of`] order), builds the object, admits it
    /// in the prepared arena and publishes it through the claim; then tells
    /// `inputs` that `r` settled. On error the cause is recorded first, then
    /// the claim is dropped: the generation fails and its waiters wake
    /// with the cause already readable.
    ///
    /// [`reads_of`]: Self::reads_of
    pub(crate) fn produce(
        &self,
        claim: LoadClaim<'_, ResidentObject>,
        r: RequirementId,
        inputs: &mut impl Inputs,
    ) -> Result<(), PrepareError> {
        match self.build(&claim, r, inputs) {
            Ok((object, bytes, packed_here)) => {
                let job = packed_here
                    .then(|| object.object.to_persist())
                    .flatten()
                    .zip(self.cache.as_ref())
                    .and_then(|(object, cache)| {
                        cache.persist_job(
                            self.plan.resolved().model(),
                            &self.plan.resolved().requirements()[r.0 as usize],
                            object,
                        )
                    });
                // A background write is submitted before the object is
                // published: whoever sees the object (a run that then
                // finishes, and a flush of the cache after it) sees the
                // write pending. It runs off the critical path either way.
                let job = match (job, &self.sink) {
                    (Some(job), Some(sink)) => {
                        sink.submit(job);
                        None
                    }
                    (job, _) => job,
                };
                claim.publish(ResidentObject::new(object), bytes);
                if let Ok(reads) = self.reads_of(r) {
                    inputs.settled(self, r, reads);
                }
                // Without a sink the write runs here, after the publish
                // (reported in the cache's diagnostics).
                if let Some(job) = job {
                    drop(job.run());
                }
                Ok(())
            }
            Err(e) => {
                let publisher = self.plan.requirements().publisher[r.0 as usize].0 as usize;
                let name = &self.plan.tasks().name[publisher];
                self.record_failure(r, &format!("task `{name}` failed: {e}"));
                drop(claim);
                Err(e)
            }
        }
    }

    /// [`produce`](Self::produce) up to the publication: the object (with
    /// its prepared-arena charge), its bytes, and whether it was built from
    /// its sources (so the cache may persist it). An object another session
    /// of the process published under the same key is reused as is.
    fn build(
        &self,
        claim: &LoadClaim<'_, ResidentObject>,
        r: RequirementId,
        inputs: &mut impl Inputs,
    ) -> Result<(Arc<SharedObject>, usize, bool), PrepareError> {
        let key = self.shared.as_ref().map(|keys| &keys[r.0 as usize]);
        if let Some(found) = key.and_then(shared::find) {
            let bytes = found.object.byte_len();
            return Ok((found, bytes, false));
        }
        let publisher = self.plan.requirements().publisher[r.0 as usize];
        // Published before: this generation restores an evicted object,
        // from the cache when an entry was written meanwhile.
        let restore = self.store.bytes(r.0 as usize) > 0;
        let (object, packed_here, early) = if let Some(table) = self.row_table(r) {
            // Served row by row: the source is read once, piece by piece,
            // when its digest is checked (under the checksum policy) or
            // recorded; never held whole.
            claim.set_preparing();
            let w = self.plan.resolved().requirements()[r.0 as usize].sources[0];
            let weight = &self.plan.resolved().model().weights()[w.index()];
            let wanted = self.cache.as_ref().filter(|c| c.wants_digest(weight));
            let piece_len = weight.byte_len().min(ROW_TABLE_CHECK_PIECE_BYTES as u64) as usize;
            let mut piece = self.preparation.alloc_zeroed(piece_len.max(1))?;
            let digest = verify_in_pieces(
                &*self.source,
                weight,
                &mut piece,
                self.checksums,
                wanted.is_some(),
            )?;
            if let (Some(cache), Some(digest)) = (wanted, digest) {
                cache.record_digest(weight, digest)?;
            }
            // Checked: its pages leave the process (rows fault back in).
            self.source.release(w);
            (PreparedObject::Rows(Arc::new(table)), false, None)
        } else if self.plan.tasks().kind[publisher.0 as usize] == TaskKind::ReadPacked
            || self.restorable(r)
        {
            claim.set_preparing();
            let (object, packed_here) = self.read_packed(r)?;
            (object, packed_here, None)
        } else {
            let requirement = &self.plan.resolved().requirements()[r.0 as usize];
            let pieces = self.pieces(r);
            // Packed from pieces: read by the packing itself; else the
            // decoded sources come from `inputs`.
            let mut sources = Vec::new();
            if pieces.is_none() {
                for &t in self.reads_of(r)? {
                    sources.push(inputs.source(self, t)?);
                }
            }
            claim.set_preparing();
            let weights = self.plan.resolved().model().weights();
            let descriptors: Vec<&WeightDescriptor> = requirement
                .sources
                .iter()
                .map(|w| &weights[w.index()])
                .collect();
            let shapes: Vec<Vec<usize>> = match pieces {
                Some(_) => descriptors
                    .iter()
                    .map(|w| w.dims().iter().map(|&d| d as usize).collect())
                    .collect(),
                None => sources.iter().map(|t| t.shape().to_vec()).collect(),
            };
            // Charged before packing when the recipe knows the size (room
            // is made first, so the packed bytes are never over the limit).
            let early = match self.packed_size(r, &shapes) {
                Some(bytes) => Some(self.admit_evicting(r, bytes)?),
                None => None,
            };
            let par = inputs.parallel();
            let object = match pieces {
                Some(pieces) => {
                    let job = PieceSource {
                        source: &*self.source,
                        preparation: &self.preparation,
                        checksums: self.checksums,
                        cache: self.cache.as_ref(),
                    };
                    let object = job.pack(requirement, &descriptors, pieces, par)?;
                    self.prepacks.fetch_add(1, Ordering::Relaxed);
                    object
                }
                None => self.prepare_counted(r, &sources, par)?,
            };
            // The sources' mapped pages were touched (hashed, copied,
            // packed): they leave the process's memory; an object used in
            // place faults back only what its runs read.
            for &w in &requirement.sources {
                self.source.release(w);
            }
            (object, true, early)
        };
        let bytes = object.byte_len();
        let allocation = match early {
            Some(mut a) => match a.resize(bytes) {
                Ok(()) => a,
                Err(_) => {
                    drop(a);
                    self.admit_evicting(r, bytes)?
                }
            },
            None => self.admit_evicting(r, bytes)?,
        };
        let object = SharedObject::new(object, allocation);
        if restore {
            self.counters.restores.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(key) = key {
            shared::register(key.clone(), &object);
        }
        Ok((object, bytes, packed_here))
    }

    /// A row table for `r` (served from its source, see
    /// [`PreparedObject::Rows`]) when `r` is a source used as is that only
    /// operators gathering whole rows read (never a graph output), the
    /// source reads ranges, and either the table is larger than the
    /// prepared domain's limit, or tables are served from their source,
    /// no prepared cache is attached, and this one has at least
    /// [`ROW_TABLE_MIN_BYTES`] and is not offered in place (a mapped table
    /// faults in only the rows a run reads anyway); else `None`.
    fn row_table(&self, r: RequirementId) -> Option<RowTable> {
        let resolved = self.plan.resolved();
        let requirement = &resolved.requirements()[r.0 as usize];
        let [w] = requirement.sources[..] else {
            return None;
        };
        if requirement.prepack.is_some() || !self.source.reads_ranges() {
            return None;
        }
        let d = &resolved.model().weights()[w.index()];
        let bytes = d.element_type().compute().byte_len(d.element_count())?;
        let over_limit = bytes > self.prepared.limit() as u64;
        // With a prepared cache the table is persisted instead: a later
        // process maps its entry and faults in only the rows it reads.
        let served = self.tables_from_source
            && self.cache.is_none()
            && bytes >= ROW_TABLE_MIN_BYTES
            && self.source.shared(w).is_none();
        if !over_limit && !served {
            return None;
        }
        let me = Operand::Prepared(RequirementIndex(r.0));
        let read_by_rows = resolved.nodes().iter().all(|n| {
            n.inputs
                .iter()
                .enumerate()
                .all(|(k, i)| *i != Some(me) || (k == 0 && n.op.gathers_rows()))
        });
        let an_output = resolved.outputs().iter().any(|(_, o)| *o == me);
        if !read_by_rows || an_output {
            return None;
        }
        RowTable::new(resolved, self.source.clone(), w)
    }

    /// Whether producing `r` now restores an evicted object from an entry
    /// the cache gained since the plan was built (so its sources need no
    /// read).
    pub(crate) fn restorable(&self, r: RequirementId) -> bool {
        self.store.bytes(r.0 as usize) > 0 && self.has_entry(r)
    }

    /// Whether the cache has a valid entry for `r` now. Entries are never
    /// removed while a process uses them (pruning takes only what no
    /// current manifest names), so a found entry is remembered.
    pub(crate) fn has_entry(&self, r: RequirementId) -> bool {
        let Some(cache) = &self.cache else {
            return false;
        };
        let known = &self.entry_found[r.0 as usize];
        if known.load(Ordering::Relaxed) {
            return true;
        }
        // A miss stands until this process writes another payload.
        let missed = &self.entry_missed[r.0 as usize];
        let writes = cache.writes() + 1;
        if missed.load(Ordering::Relaxed) == writes {
            return false;
        }
        let resolved = self.plan.resolved();
        let found = cache
            .lookup(resolved.model(), &resolved.requirements()[r.0 as usize])
            .is_ok();
        if found {
            known.store(true, Ordering::Relaxed);
        } else {
            missed.store(writes, Ordering::Relaxed);
        }
        found
    }

    /// Bytes of the object `r`'s prepack makes from sources of these
    /// shapes, when its recipe knows them before packing.
    fn packed_size(&self, r: RequirementId, shapes: &[Vec<usize>]) -> Option<usize> {
        let prepack = self.plan.resolved().requirements()[r.0 as usize]
            .prepack
            .as_ref()?;
        let shapes: Vec<&[usize]> = shapes.iter().map(|s| &s[..]).collect();
        prepack.packed_bytes(&shapes)
    }

    /// Builds `r`'s object from decoded sources, counting prepacks.
    fn prepare_counted(
        &self,
        r: RequirementId,
        sources: &[Arc<Tensor>],
        par: &dyn ParallelFor,
    ) -> Result<PreparedObject, PrepareError> {
        let requirement = &self.plan.resolved().requirements()[r.0 as usize];
        let object = prepare(requirement, sources, par)?;
        if requirement.prepack.is_some() {
            self.prepacks.fetch_add(1, Ordering::Relaxed);
        }
        Ok(object)
    }

    /// The read-packed recipe: `r`'s payload from the prepared cache,
    /// charged to the preparation domain while it is decoded. A damaged
    /// payload is reported and the object is built from its sources
    /// instead (`true`: persist it again), except under
    /// `RequireComplete`, where it is an error.
    fn read_packed(&self, r: RequirementId) -> Result<(PreparedObject, bool), PrepareError> {
        let requirement = &self.plan.resolved().requirements()[r.0 as usize];
        let model = self.plan.resolved().model();
        let cache = self.cache.as_ref().ok_or_else(|| -> PrepareError {
            PrepareError::Unsupported {
                what: "a read-packed task in a plan built without a prepared cache".into(),
            }
        })?;
        let bytes = self.plan.tasks().estimated_input_bytes
            [self.plan.requirements().publisher[r.0 as usize].0 as usize];
        let charge = self.budget.reserve(Domain::Preparation, bytes as usize)?;
        match cache.read(model, requirement) {
            Ok(decoded) => {
                drop(charge);
                Ok((
                    match decoded {
                        Decoded::Tensor(t) => PreparedObject::Source(Arc::new(t)),
                        Decoded::Packed(p) => PreparedObject::Packed(Arc::new(p)),
                    },
                    false,
                ))
            }
            Err(e) if cache.policy() == PreparedModelPolicy::RequireComplete => Err(e.into()),
            Err(e) => {
                drop(charge);
                cache.report_damaged(&e);
                let mut held = Vec::with_capacity(requirement.sources.len());
                for &w in &requirement.sources {
                    held.push(self.read_weight(w)?);
                }
                let sources: Vec<Arc<Tensor>> = held.iter().map(|s| s.tensor.clone()).collect();
                Ok((self.prepare_counted(r, &sources, &Sequential)?, true))
            }
        }
    }

    /// Makes requirement `r` resident on the calling thread (on-demand
    /// production): already resident, produced by someone else (wait for
    /// its event; its failure is an error), or produced here from `inputs`.
    pub(crate) fn ensure(&self, r: RequirementId, inputs: &mut impl Inputs) -> Result<(), PrepareError> {
        let mut retry = Retry::Once;
        loop {
            match self.claim(r, &mut retry)? {
                Role::Resident => return Ok(()),
                Role::InFlight(waiter) => {
                    if let GenerationOutcome::Failed(_) = waiter.wait() {
                        return Err(self.not_resident(r));
                    }
                }
                Role::Produce(claim) => return self.produce(claim, r, inputs),
            }
        }
    }

    /// An input of `r`'s producer could not be produced (`cause`): records
    /// the cause, then fails `r`'s next generation (claimed, with one retry
    /// of a failed one, and dropped) so its waiters wake. Nothing happens
    /// to a generation another producer holds or that is resident.
    pub(crate) fn fail(&self, r: RequirementId, cause: &str) {
        self.record_failure(r, cause);
        if let Ok(Role::Produce(claim)) = self.claim(r, &mut Retry::Once) {
            drop(claim);
        }
    }

    /// Records why requirement `r`'s latest generation failed (before the
    /// claim is dropped, so a woken waiter finds it).
    pub(crate) fn record_failure(&self, r: RequirementId, cause: &str) {
        self.failures[r.0 as usize].with(|f| *f = Some(cause.to_owned()));
    }

    /// Why requirement `r`'s latest failed generation failed, if recorded.
    pub(crate) fn failure_cause(&self, r: RequirementId) -> Option<String> {
        self.failures[r.0 as usize].with(|f| f.clone())
    }
}
