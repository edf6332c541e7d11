//! The immutable scoped plan (cold path to build; its tables are read on the
//! hot path): one graph holding the session work (read, prepack, publish)
//! and the invocation work (execute node ranges), as struct-of-arrays tables
//! indexed by [`TaskId`] and [`RequirementId`].
//!
//! Built by [`PreparedExecutionPlan::build`] from a [`ResolvedModel`]:
//! identical session requests share one task (same source weight → one read
//! task; same (lineage, layout, device) → one prepack; different layouts of
//! one source → one read feeding several prepacks). Invocation steps group
//! consecutive nodes of one name scope (see [`crate::model::scope_of`]).

mod build;
mod dump;
mod graph;

use std::ops::Range;
use std::sync::Arc;

use bitvec::vec::BitVec;

pub use build::{PackedEntries, PlanError};
pub use dump::PlanDump;

pub use crate::scheduler::{Csr, Priority, ResourceClass, TaskId};

use crate::cache::PreparedCache;
pub use crate::model::PreparedKey;
use crate::model::{ResolvedModel, WeightId};

/// Index of a requirement in [`RequirementTable`]; also its bit in step bitsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequirementId(pub u32);

/// Lifetime of a task's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskScope {
    /// Produces a prepared object shared by every inference of the session.
    Session,
    /// Runs once per inference, on that inference's inputs.
    Invocation,
}

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// Read one source weight from the model's data (publishes it when a
    /// kernel uses the source as is).
    ReadSource,
    /// Pack source bytes into a layout and publish the object.
    Prepack,
    /// Read already-packed bytes from the prepared cache and publish them.
    ReadPacked,
    /// Write a packed object to the prepared cache (background). Never a
    /// plan task: a session submits one per object a prepack built under
    /// `BuildIfMissing`, at background priority.
    Persist,
    /// Execute a range of nodes.
    Execute,
}

impl TaskKind {
    /// The stable name used by dumps and `--json`.
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::ReadSource => "read_source",
            TaskKind::Prepack => "prepack",
            TaskKind::ReadPacked => "read_packed",
            TaskKind::Persist => "persist",
            TaskKind::Execute => "execute",
        }
    }
}

/// How a requirement is materialized. Every recipe publishes the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipe {
    /// A compatible packed entry exists in the prepared cache: read it.
    ReadPackedPayload {
        /// Bytes of the packed entry.
        bytes: u64,
    },
    /// Read the source weights and pack them (or publish the single source
    /// as is when the layout is `source`).
    ReadSourceAndPrepack,
    /// Dormant: read the sources and run the node's portable kernel on them
    /// unpacked. Listed last for packed requirements so a packed layout that
    /// cannot run (an entry for another CPU) still leaves a way to compute.
    /// Never executed yet (a prepared-cache entry that is incompatible is
    /// a miss, built by [`Recipe::ReadSourceAndPrepack`]): kept for a cold
    /// start that runs before its prepacks.
    PortableFallback,
}

impl Recipe {
    /// The stable name used by dumps.
    pub fn name(&self) -> &'static str {
        match self {
            Recipe::ReadPackedPayload { .. } => "read_packed_payload",
            Recipe::ReadSourceAndPrepack => "read_source_and_prepack",
            Recipe::PortableFallback => "portable_fallback",
        }
    }
}

/// The tasks, one column per field, indexed by [`TaskId`].
#[derive(Debug, Clone)]
pub struct TaskTable {
    /// Readable names (`S.layer0.qkv.weight.read_source`, `I.layer0.attn`).
    pub name: Vec<String>,
    /// Scope.
    pub scope: Vec<TaskScope>,
    /// Kind.
    pub kind: Vec<TaskKind>,
    /// Resource class.
    pub resource: Vec<ResourceClass>,
    /// Default priority.
    pub priority: Vec<Priority>,
    /// Tasks each task waits for.
    pub deps: Csr<TaskId>,
    /// Tasks waiting for each task.
    pub dependents: Csr<TaskId>,
    /// Requirements each (invocation) task needs resident.
    pub requirements: Csr<RequirementId>,
    /// The requirement a session task publishes.
    pub publishes: Vec<Option<RequirementId>>,
    /// The source weight a read task reads.
    pub reads: Vec<Option<WeightId>>,
    /// Estimated bytes read or consumed.
    pub estimated_input_bytes: Vec<u64>,
    /// Estimated bytes produced.
    pub estimated_output_bytes: Vec<u64>,
    /// Estimated peak temporary bytes.
    pub peak_temporary_bytes: Vec<u64>,
    /// The node range an invocation task executes.
    pub actions: Vec<Option<Range<u32>>>,
}

impl TaskTable {
    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.name.len()
    }

    /// Whether there are no tasks.
    pub fn is_empty(&self) -> bool {
        self.name.is_empty()
    }
}

/// The requirements, indexed by [`RequirementId`].
#[derive(Debug, Clone)]
pub struct RequirementTable {
    /// Identity.
    pub key: Vec<PreparedKey>,
    /// Bit in step bitsets (equal to the id).
    pub bit: Vec<u32>,
    /// Eligible recipes, cheapest first.
    pub recipes: Vec<Vec<Recipe>>,
    /// Bytes of the sources.
    pub source_bytes: Vec<u64>,
    /// Graph distance (in steps) from the first step to the first use.
    pub prefetch_distance: Vec<u32>,
    /// Last invocation step that uses the object (where a run-level pin may end).
    pub last_use_step: Vec<u32>,
    /// The one task that publishes the object (checked when the plan is
    /// built).
    pub publisher: Vec<TaskId>,
}

impl RequirementTable {
    /// Number of requirements.
    pub fn len(&self) -> usize {
        self.key.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }
}

/// One invocation step: a task executing a node range once the
/// requirements in `needs` are resident.
#[derive(Debug, Clone)]
pub struct Step {
    /// The invocation task.
    pub task: TaskId,
    /// Its name scope.
    pub scope: String,
    /// Node indices in [`ResolvedModel::nodes`].
    pub nodes: Range<u32>,
    /// Requirements this step reads, one bit per [`RequirementId`].
    pub needs: BitVec,
}

/// The immutable plan.
#[derive(Debug)]
pub struct PreparedExecutionPlan {
    resolved: Arc<ResolvedModel>,
    /// The prepared cache generation the plan was built against.
    cache: Option<Arc<PreparedCache>>,
    tasks: TaskTable,
    requirements: RequirementTable,
    steps: Vec<Step>,
    /// Last step that reads each value (by `ValueId`); `u32::MAX` for graph
    /// outputs and values no step reads.
    value_last_use: Vec<u32>,
}

impl PreparedExecutionPlan {
    /// The last step reading each activation (indexed by value id);
    /// `u32::MAX` for graph outputs and unread values.
    pub fn activation_last_use(&self) -> &[u32] {
        &self.value_last_use
    }

    /// The prepared cache the plan was built against (its sessions read and
    /// write that generation).
    pub fn cache(&self) -> Option<&Arc<PreparedCache>> {
        self.cache.as_ref()
    }

    /// The resolved model the plan was built from.
    pub fn resolved(&self) -> &Arc<ResolvedModel> {
        &self.resolved
    }

    /// The task table.
    pub fn tasks(&self) -> &TaskTable {
        &self.tasks
    }

    /// The requirement table.
    pub fn requirements(&self) -> &RequirementTable {
        &self.requirements
    }

    /// Invocation steps in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Session tasks in a valid execution order (ids are topological).
    pub fn session_tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        (0..self.tasks.len() as u32)
            .map(TaskId)
            .filter(|t| self.tasks.scope[t.0 as usize] == TaskScope::Session)
    }
}
