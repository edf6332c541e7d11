//! `PreparedExecutionPlan::build` (cold path): tasks, requirements and
//! steps from a resolved model, validated before anything runs.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bitvec::vec::BitVec;

use super::{
    Csr, PreparedExecutionPlan, Priority, Recipe, RequirementId, RequirementTable, ResourceClass,
    Step, TaskId, TaskKind, TaskScope, TaskTable,
};
use crate::cache::{CacheError, PreparedCache, PreparedModelPolicy};
use crate::model::{Requirement, ResolvedModel, WeightId};

/// The plan cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// No recipe can materialize a requirement.
    #[error("requirement `{requirement}` has no eligible recipe")]
    NoRecipe {
        /// The requirement's name.
        requirement: String,
    },
    /// A recipe would read an external entry outside the payload manifest.
    #[error(
        "requirement `{requirement}` would read `{weight}`, which is not in the payload manifest"
    )]
    ReadOutsideManifest {
        /// The requirement's name.
        requirement: String,
        /// The weight.
        weight: String,
    },
    /// The tables are inconsistent (a bug in the builder).
    #[error("invalid plan: {0}")]
    Invalid(String),
    /// The prepared cache cannot serve the plan (incomplete under
    /// `RequireComplete`, or unreadable).
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// Packed entries available from a prepared cache.
pub trait PackedEntries {
    /// Bytes of a compatible packed entry for `requirement` of `resolved`,
    /// or why there is none.
    fn packed_bytes(
        &self,
        resolved: &ResolvedModel,
        requirement: &Requirement,
    ) -> Result<u64, String>;

    /// Whether a requirement without an entry fails the build.
    fn require_complete(&self) -> bool {
        false
    }
}

/// No prepared cache.
impl PackedEntries for () {
    fn packed_bytes(&self, _: &ResolvedModel, _: &Requirement) -> Result<u64, String> {
        Err("no prepared cache".into())
    }
}

/// The prepared cache's generation (hits and misses are counted).
impl PackedEntries for PreparedCache {
    fn packed_bytes(&self, resolved: &ResolvedModel, r: &Requirement) -> Result<u64, String> {
        let found = self
            .lookup(resolved.model(), r)
            .map(|e| e.length)
            .map_err(|miss| miss.to_string());
        self.count_planned(found.is_ok());
        found
    }

    fn require_complete(&self) -> bool {
        self.policy() == PreparedModelPolicy::RequireComplete
    }
}

/// Columns being filled.
#[derive(Default)]
struct Builder {
    name: Vec<String>,
    scope: Vec<TaskScope>,
    kind: Vec<TaskKind>,
    resource: Vec<ResourceClass>,
    priority: Vec<Priority>,
    deps: Vec<Vec<TaskId>>,
    requirements: Vec<Vec<RequirementId>>,
    publishes: Vec<Option<RequirementId>>,
    reads: Vec<Option<WeightId>>,
    input_bytes: Vec<u64>,
    output_bytes: Vec<u64>,
    temp_bytes: Vec<u64>,
    actions: Vec<Option<std::ops::Range<u32>>>,
}

/// One task's fields.
struct TaskSpec {
    name: String,
    scope: TaskScope,
    kind: TaskKind,
    resource: ResourceClass,
    priority: Priority,
    deps: Vec<TaskId>,
    requirements: Vec<RequirementId>,
    publishes: Option<RequirementId>,
    reads: Option<WeightId>,
    bytes: (u64, u64, u64),
    actions: Option<std::ops::Range<u32>>,
}

impl Builder {
    fn push(&mut self, t: TaskSpec) -> TaskId {
        self.name.push(t.name);
        self.scope.push(t.scope);
        self.kind.push(t.kind);
        self.resource.push(t.resource);
        self.priority.push(t.priority);
        self.deps.push(t.deps);
        self.requirements.push(t.requirements);
        self.publishes.push(t.publishes);
        self.reads.push(t.reads);
        self.input_bytes.push(t.bytes.0);
        self.output_bytes.push(t.bytes.1);
        self.temp_bytes.push(t.bytes.2);
        self.actions.push(t.actions);
        TaskId((self.name.len() - 1) as u32)
    }

    fn finish(self) -> Result<TaskTable, PlanError> {
        let n = self.name.len();
        let lens = [
            self.scope.len(),
            self.kind.len(),
            self.resource.len(),
            self.priority.len(),
            self.deps.len(),
            self.requirements.len(),
            self.publishes.len(),
            self.reads.len(),
            self.input_bytes.len(),
            self.output_bytes.len(),
            self.temp_bytes.len(),
            self.actions.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            return Err(PlanError::Invalid(format!(
                "column lengths {lens:?} differ from {n} tasks"
            )));
        }
        let mut dependents = vec![Vec::new(); n];
        for (t, deps) in self.deps.iter().enumerate() {
            for d in deps {
                // Ids are assigned in a topological order: a dependency always
                // has a smaller id, which also proves the graph acyclic.
                if d.0 as usize >= t {
                    return Err(PlanError::Invalid(format!(
                        "task {} `{}` depends on task {} which is not earlier",
                        t, self.name[t], d.0
                    )));
                }
                dependents[d.0 as usize].push(TaskId(t as u32));
            }
        }
        Ok(TaskTable {
            name: self.name,
            scope: self.scope,
            kind: self.kind,
            resource: self.resource,
            priority: self.priority,
            deps: Csr::from_rows(&self.deps),
            dependents: Csr::from_rows(&dependents),
            requirements: Csr::from_rows(&self.requirements),
            publishes: self.publishes,
            reads: self.reads,
            estimated_input_bytes: self.input_bytes,
            estimated_output_bytes: self.output_bytes,
            peak_temporary_bytes: self.temp_bytes,
            actions: self.actions,
        })
    }
}

/// Consecutive nodes of one scope form a step; a step whose scope is a
/// parent of the next step's scope (`layer0` before `layer0.attn`) joins it.
fn group_steps(resolved: &ResolvedModel) -> Vec<(String, std::ops::Range<u32>)> {
    let mut groups: Vec<(String, std::ops::Range<u32>)> = Vec::new();
    for (i, node) in resolved.nodes().iter().enumerate() {
        let i = i as u32;
        match groups.last_mut() {
            Some((scope, range)) if *scope == node.scope => range.end = i + 1,
            _ => groups.push((node.scope.clone(), i..i + 1)),
        }
    }
    let mut merged: Vec<(String, std::ops::Range<u32>)> = Vec::with_capacity(groups.len());
    let mut carry: Option<u32> = None;
    for (k, (scope, range)) in groups.iter().enumerate() {
        let start = carry.take().unwrap_or(range.start);
        let parent_of_next = groups.get(k + 1).is_some_and(|(next, _)| {
            next.len() > scope.len()
                && next.starts_with(scope.as_str())
                && next[scope.len()..].starts_with(['.', '/'])
        });
        if parent_of_next {
            carry = Some(start);
        } else {
            merged.push((scope.clone(), start..range.end));
        }
    }
    merged
}

impl PreparedExecutionPlan {
    /// Builds the plan with no prepared cache.
    pub fn build(resolved: ResolvedModel) -> Result<Self, PlanError> {
        Self::build_with(resolved, &())
    }

    /// Builds the plan against the prepared cache `cache`: requirements
    /// with a compatible entry are read packed; the plan keeps `cache` (one
    /// generation for the plan and the sessions that run it).
    ///
    /// # Errors
    /// Under [`PreparedModelPolicy::RequireComplete`], any requirement
    /// without a compatible entry ([`CacheError::Incomplete`] names each).
    pub fn build_cached(
        resolved: ResolvedModel,
        cache: Arc<PreparedCache>,
    ) -> Result<Self, PlanError> {
        let mut plan = Self::build_with(resolved, &*cache)?;
        plan.cache = Some(cache);
        Ok(plan)
    }

    /// Builds the plan; `cache` makes `ReadPackedPayload` eligible for the
    /// requirements it has entries for.
    pub fn build_with(
        resolved: ResolvedModel,
        cache: &dyn PackedEntries,
    ) -> Result<Self, PlanError> {
        let resolved = Arc::new(resolved);
        let reqs = resolved.requirements();
        let recipes = recipes(&resolved, cache)?;
        let needs = StepNeeds::of(&resolved);
        let mut order: Vec<usize> = (0..reqs.len()).collect();
        order.sort_by_key(|&r| (needs.first_use[r], r));
        let mut b = Builder::default();
        let publisher = session_tasks(&mut b, &resolved, &recipes, &order, &needs.first_use)?;
        let StepNeeds {
            groups,
            step_needs,
            first_use,
            last_use,
        } = needs;
        let steps = invocation_tasks(&mut b, groups, step_needs, &publisher)?;
        let tasks = b.finish()?;
        let mut requirements = RequirementTable {
            publisher: vec![TaskId(u32::MAX); reqs.len()],
            key: reqs.iter().map(|r| r.key.clone()).collect(),
            bit: (0..reqs.len() as u32).collect(),
            recipes,
            source_bytes: reqs.iter().map(|r| r.source_bytes).collect(),
            prefetch_distance: first_use
                .iter()
                .map(|&f| if f == u32::MAX { 0 } else { f })
                .collect(),
            last_use_step: last_use,
        };
        let value_last_use = value_last_use(&resolved, &steps);
        for (t, publishes) in tasks.publishes.iter().enumerate() {
            if let Some(r) = publishes
                && let Some(slot) = requirements.publisher.get_mut(r.0 as usize)
            {
                *slot = TaskId(t as u32);
            }
        }
        let plan = Self {
            resolved,
            cache: None,
            tasks,
            requirements,
            steps,
            value_last_use,
        };
        plan.validate()?;
        Ok(plan)
    }

    /// Checks ids are in range and every requirement has exactly one publisher.
    fn validate(&self) -> Result<(), PlanError> {
        let n = self.tasks.len() as u32;
        let r = self.requirements.len() as u32;
        for t in 0..self.tasks.len() {
            if self.tasks.deps.row(t).iter().any(|d| d.0 >= n) {
                return Err(PlanError::Invalid(format!(
                    "task {t} has a dependency out of range"
                )));
            }
            if self.tasks.requirements.row(t).iter().any(|q| q.0 >= r) {
                return Err(PlanError::Invalid(format!(
                    "task {t} needs a requirement out of range"
                )));
            }
        }
        let mut publishers = vec![0u32; r as usize];
        for p in self.tasks.publishes.iter().flatten() {
            publishers[p.0 as usize] += 1;
        }
        if let Some(q) = publishers.iter().position(|&c| c != 1) {
            return Err(PlanError::Invalid(format!(
                "requirement {q} has {} publishers",
                publishers[q]
            )));
        }
        Ok(())
    }
}

/// Every requirement's recipes, cheapest first; under `RequireComplete`,
/// an error naming every requirement the cache cannot serve.
fn recipes(
    resolved: &Arc<ResolvedModel>,
    cache: &dyn PackedEntries,
) -> Result<Vec<Vec<Recipe>>, PlanError> {
    let weights = resolved.model().weights();
    let manifest = resolved.manifest();
    let reqs = resolved.requirements();
    let mut recipes = Vec::with_capacity(reqs.len());
    let mut missing = Vec::new();
    for r in reqs {
        for &w in &r.sources {
            let d = &weights[w.index()];
            if d.is_external() && !manifest.contains(w) {
                return Err(PlanError::ReadOutsideManifest {
                    requirement: r.name.clone(),
                    weight: d.name().to_owned(),
                });
            }
        }
        let mut list = Vec::new();
        if !r.sources.is_empty() {
            match cache.packed_bytes(resolved, r) {
                Ok(bytes) => list.push(Recipe::ReadPackedPayload { bytes }),
                Err(why) if cache.require_complete() => {
                    missing.push(format!("`{}` ({}): {why}", r.name, r.key));
                }
                Err(_) => {}
            }
        }
        if !r.sources.is_empty() {
            list.push(Recipe::ReadSourceAndPrepack);
            if r.prepack.is_some() {
                list.push(Recipe::PortableFallback);
            }
        }
        if list.is_empty() {
            return Err(PlanError::NoRecipe {
                requirement: r.name.clone(),
            });
        }
        recipes.push(list);
    }
    if cache.require_complete() && !missing.is_empty() {
        return Err(CacheError::Incomplete { missing }.into());
    }
    Ok(recipes)
}

/// Steps (consecutive nodes of one name scope) and what each needs: the
/// bitset of requirements, and each requirement's first and last step.
struct StepNeeds {
    groups: Vec<(String, Range<u32>)>,
    step_needs: Vec<BitVec>,
    first_use: Vec<u32>,
    last_use: Vec<u32>,
}

impl StepNeeds {
    fn of(resolved: &ResolvedModel) -> Self {
        let reqs = resolved.requirements();
        // Steps and the order requirements are first needed in. Graph
        // outputs that are prepared objects (external weights returned as
        // is) are needed by the last step, which runs only once they are
        // resident: a graph without nodes gets one empty step for them.
        let mut groups = group_steps(resolved);
        let output_reqs: Vec<usize> = resolved
            .outputs()
            .iter()
            .filter_map(|(_, op)| match op {
                crate::model::Operand::Prepared(r) => Some(r.0 as usize),
                _ => None,
            })
            .collect();
        if groups.is_empty() && !output_reqs.is_empty() {
            let end = resolved.nodes().len() as u32;
            groups.push((String::new(), end..end));
        }
        let mut first_use = vec![u32::MAX; reqs.len()];
        let mut last_use = vec![0u32; reqs.len()];
        let mut step_needs = Vec::with_capacity(groups.len());
        for (s, (_, range)) in groups.iter().enumerate() {
            let mut needs = BitVec::repeat(false, reqs.len());
            for node in &resolved.nodes()[range.start as usize..range.end as usize] {
                for r in node.requirements() {
                    needs.set(r.0 as usize, true);
                    first_use[r.0 as usize] = first_use[r.0 as usize].min(s as u32);
                    last_use[r.0 as usize] = s as u32;
                }
            }
            step_needs.push(needs);
        }
        if let Some(needs) = step_needs.last_mut() {
            let s = (groups.len() - 1) as u32;
            for &r in &output_reqs {
                needs.set(r, true);
                first_use[r] = first_use[r].min(s);
                last_use[r] = s;
            }
        }
        Self {
            groups,
            step_needs,
            first_use,
            last_use,
        }
    }
}

/// The session tasks (reads, prepacks, packed reads), in the order
/// requirements are first needed in; returns each requirement's publisher.
fn session_tasks(
    b: &mut Builder,
    resolved: &ResolvedModel,
    recipes: &[Vec<Recipe>],
    order: &[usize],
    first_use: &[u32],
) -> Result<Vec<Option<TaskId>>, PlanError> {
    let weights = resolved.model().weights();
    let reqs = resolved.requirements();
    let mut read_task: HashMap<WeightId, TaskId> = HashMap::new();
    let mut publisher: Vec<Option<TaskId>> = vec![None; reqs.len()];
    for &r in order {
        let req = &reqs[r];
        let id = RequirementId(r as u32);
        let priority = if first_use[r] == 0 {
            Priority::Critical
        } else {
            Priority::Prefetch
        };
        match &recipes[r][0] {
            Recipe::PortableFallback => {
                return Err(PlanError::Invalid(format!(
                    "{}: the portable fallback is never first",
                    req.name
                )));
            }
            Recipe::ReadPackedPayload { bytes } => {
                publisher[r] = Some(b.push(TaskSpec {
                    name: format!("S.{}.read_packed", req.name),
                    scope: TaskScope::Session,
                    kind: TaskKind::ReadPacked,
                    resource: ResourceClass::Io,
                    priority,
                    deps: vec![],
                    requirements: vec![],
                    publishes: Some(id),
                    reads: None,
                    bytes: (*bytes, *bytes, 0),
                    actions: None,
                }));
            }
            Recipe::ReadSourceAndPrepack => {
                let mut reads = Vec::with_capacity(req.sources.len());
                for &w in &req.sources {
                    let bytes = weights[w.index()].byte_len();
                    let plain = req.prepack.is_none();
                    let t = match read_task.get(&w) {
                        Some(&t) => {
                            if plain {
                                b.publishes[t.0 as usize] = Some(id);
                            }
                            t
                        }
                        None => {
                            let t = b.push(TaskSpec {
                                name: format!("S.{}.read_source", weights[w.index()].name()),
                                scope: TaskScope::Session,
                                kind: TaskKind::ReadSource,
                                resource: ResourceClass::Io,
                                priority,
                                deps: vec![],
                                requirements: vec![],
                                publishes: plain.then_some(id),
                                reads: Some(w),
                                bytes: (bytes, bytes, 0),
                                actions: None,
                            });
                            read_task.insert(w, t);
                            t
                        }
                    };
                    reads.push(t);
                }
                publisher[r] = Some(match &req.prepack {
                    None => reads[0],
                    Some(_) => b.push(TaskSpec {
                        name: format!("S.{}.prepack", req.name),
                        scope: TaskScope::Session,
                        kind: TaskKind::Prepack,
                        resource: ResourceClass::Cpu,
                        priority,
                        deps: reads,
                        requirements: vec![],
                        publishes: Some(id),
                        reads: None,
                        bytes: (req.source_bytes, req.source_bytes, req.source_bytes),
                        actions: None,
                    }),
                });
            }
        }
    }
    Ok(publisher)
}

/// The invocation tasks: one per step, chained, each depending on the
/// publishers of what it needs.
fn invocation_tasks(
    b: &mut Builder,
    groups: Vec<(String, Range<u32>)>,
    step_needs: Vec<BitVec>,
    publisher: &[Option<TaskId>],
) -> Result<Vec<Step>, PlanError> {
    let mut steps = Vec::with_capacity(groups.len());
    let mut previous: Option<TaskId> = None;
    for ((scope, range), needs) in groups.into_iter().zip(step_needs) {
        let needed: Vec<RequirementId> =
            needs.iter_ones().map(|r| RequirementId(r as u32)).collect();
        let mut deps: Vec<TaskId> = previous.into_iter().collect();
        for r in &needed {
            let p = publisher[r.0 as usize].ok_or_else(|| {
                PlanError::Invalid(format!("requirement {} has no publisher", r.0))
            })?;
            if !deps.contains(&p) {
                deps.push(p);
            }
        }
        let task = b.push(TaskSpec {
            name: format!("I.{scope}"),
            scope: TaskScope::Invocation,
            kind: TaskKind::Execute,
            resource: ResourceClass::Cpu,
            priority: Priority::Critical,
            deps,
            requirements: needed,
            publishes: None,
            reads: None,
            bytes: (0, 0, 0),
            actions: Some(range.clone()),
        });
        previous = Some(task);
        steps.push(Step {
            task,
            scope,
            nodes: range,
            needs,
        });
    }
    Ok(steps)
}

/// The last step that reads each value (`u32::MAX` for graph outputs and
/// values no step reads).
fn value_last_use(resolved: &ResolvedModel, steps: &[Step]) -> Vec<u32> {
    let mut value_last_use = vec![u32::MAX; resolved.value_count()];
    for (s, step) in steps.iter().enumerate() {
        for node in &resolved.nodes()[step.nodes.start as usize..step.nodes.end as usize] {
            for op in node.inputs.iter().flatten() {
                if let crate::model::Operand::Value(v) = op {
                    value_last_use[v.0 as usize] = s as u32;
                }
            }
        }
    }
    for (_, op) in resolved.outputs() {
        if let crate::model::Operand::Value(v) = op {
            value_last_use[v.0 as usize] = u32::MAX;
        }
    }
    value_last_use
}
