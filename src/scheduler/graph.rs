//! `TaskGraph`: the immutable input of a [`super::WorkerPool`] — each task's
//! lane and priority, its initial dependency count and its dependents as CSR
//! (cold path to build, hot path to read) — and, optionally, each task's
//! estimated bytes and their [`Domain`] for admission.

use crate::arena::Domain;
use super::csr::Csr;
use super::task::{Priority, ResourceClass, TaskId};

use super::queue::Lane;
use super::task_state::MAX_DEPENDENCIES;

/// Why a graph was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// The per-task columns have different lengths.
    #[error(
        "graph columns disagree: {resources} resources, {priorities} priorities, {deps} dependency rows"
    )]
    LengthMismatch {
        /// Entries in the resource column.
        resources: usize,
        /// Entries in the priority column.
        priorities: usize,
        /// Rows of the dependency CSR.
        deps: usize,
    },
    /// More tasks than [`crate::limits::MAX_SCHEDULER_TASKS`].
    #[error("graph has {0} tasks, more than the scheduler's limit")]
    TooManyTasks(usize),
    /// A dependency names a task that does not exist.
    #[error("task {task:?} depends on {dependency:?}, which is out of range")]
    DependencyOutOfRange {
        /// The dependent task.
        task: TaskId,
        /// The missing dependency.
        dependency: TaskId,
    },
    /// An estimate column has a different length than the graph.
    #[error("estimate columns have {domains} domains and {bytes} byte counts for {tasks} tasks")]
    EstimateMismatch {
        /// Tasks in the graph.
        tasks: usize,
        /// Entries in the domain column.
        domains: usize,
        /// Entries in the byte column.
        bytes: usize,
    },
    /// The distance column has a different length than the graph.
    #[error("{distances} look-ahead distances for {tasks} tasks")]
    DistanceMismatch {
        /// Tasks in the graph.
        tasks: usize,
        /// Entries in the distance column.
        distances: usize,
    },
    /// The dependencies contain a cycle, so some task could never fire.
    #[error("the dependencies contain a cycle")]
    Cycle,
}

/// Tasks as the scheduler sees them: ids, lanes, priorities and edges only.
#[derive(Debug, Clone)]
pub struct TaskGraph {
    lanes: Vec<Lane>,
    /// Tasks per lane, by dense [`Lane::index`].
    lane_tasks: Vec<usize>,
    priorities: Vec<Priority>,
    dependency_counts: Vec<u32>,
    dependents: Csr<TaskId>,
    /// Each task's dependencies (walked by protocol "promote").
    dependencies: Csr<TaskId>,
    /// Admission domain of each task (default [`Domain::Execution`]).
    domains: Vec<Domain>,
    /// Estimated bytes each task holds while it runs (default 0).
    estimated_bytes: Vec<usize>,
    /// Per task, the inference step that first needs it (look-ahead
    /// window), [`UNGATED`] for tasks the window never holds.
    distances: Vec<u32>,
    /// Every task is critical, on the CPU lane, and every dependency has a
    /// smaller id than its dependent: id order is a valid sequential
    /// schedule with nothing to reorder (protocol "own").
    sequential: bool,
}

/// The distance of a task the look-ahead window never holds.
pub const UNGATED: u32 = u32::MAX;

impl TaskGraph {
    /// A graph where task `i` runs on `resources[i]` at `priorities[i]` after
    /// every task of `deps.row(i)` (duplicates count once per occurrence).
    pub fn new(
        resources: &[ResourceClass],
        priorities: &[Priority],
        deps: &Csr<TaskId>,
    ) -> Result<Self, GraphError> {
        let n = resources.len();
        if priorities.len() != n || deps.rows() != n {
            return Err(GraphError::LengthMismatch {
                resources: n,
                priorities: priorities.len(),
                deps: deps.rows(),
            });
        }
        if n > crate::limits::MAX_SCHEDULER_TASKS {
            return Err(GraphError::TooManyTasks(n));
        }
        let lanes: Vec<Lane> = resources.iter().map(|&r| Lane::of(r)).collect();
        let mut lane_tasks = vec![0usize; Lane::ALL.len()];
        for lane in &lanes {
            lane_tasks[lane.index()] += 1;
        }
        let mut rows: Vec<Vec<TaskId>> = vec![Vec::new(); n];
        let mut dependency_counts = Vec::with_capacity(n);
        for i in 0..n {
            let row = deps.row(i);
            for &d in row {
                if d.0 as usize >= n {
                    return Err(GraphError::DependencyOutOfRange {
                        task: TaskId(i as u32),
                        dependency: d,
                    });
                }
                rows[d.0 as usize].push(TaskId(i as u32));
            }
            // n <= MAX_SCHEDULER_TASKS, but a row may repeat a dependency.
            if row.len() > MAX_DEPENDENCIES as usize {
                return Err(GraphError::TooManyTasks(row.len()));
            }
            dependency_counts.push(row.len() as u32);
        }
        let sequential = lanes.iter().all(|&l| l == Lane::Cpu)
            && priorities.iter().all(|&p| p == Priority::Critical)
            && (0..n).all(|i| deps.row(i).iter().all(|d| (d.0 as usize) < i));
        let graph = Self {
            sequential,
            lanes,
            lane_tasks,
            priorities: priorities.to_vec(),
            dependency_counts,
            dependents: Csr::from_rows(&rows),
            dependencies: deps.clone(),
            domains: vec![Domain::Execution; n],
            estimated_bytes: vec![0; n],
            distances: vec![UNGATED; n],
        };
        graph.check_acyclic()?;
        Ok(graph)
    }

    /// This graph with admission estimates: task `i` holds `bytes[i]`
    /// bytes of `domains[i]` while it runs.
    pub fn with_estimates(mut self, domains: &[Domain], bytes: &[u64]) -> Result<Self, GraphError> {
        if domains.len() != self.len() || bytes.len() != self.len() {
            return Err(GraphError::EstimateMismatch {
                tasks: self.len(),
                domains: domains.len(),
                bytes: bytes.len(),
            });
        }
        self.domains = domains.to_vec();
        self.estimated_bytes = bytes
            .iter()
            .map(|&b| usize::try_from(b).unwrap_or(usize::MAX))
            .collect();
        Ok(self)
    }

    /// This graph with look-ahead distances: task `i` is first needed at
    /// inference step `distances[i]` ([`UNGATED`]: never held by a window).
    pub fn with_distances(mut self, distances: &[u32]) -> Result<Self, GraphError> {
        if distances.len() != self.len() {
            return Err(GraphError::DistanceMismatch {
                tasks: self.len(),
                distances: distances.len(),
            });
        }
        self.distances = distances.to_vec();
        Ok(self)
    }

    /// The step at which `task` is first needed, if a window gates it.
    pub fn distance(&self, task: TaskId) -> Option<u32> {
        let d = self.distances[task.0 as usize];
        (d != UNGATED).then_some(d)
    }

    fn check_acyclic(&self) -> Result<(), GraphError> {
        let mut remaining = self.dependency_counts.clone();
        let mut ready: Vec<usize> = (0..self.len()).filter(|&i| remaining[i] == 0).collect();
        let mut seen = 0;
        while let Some(t) = ready.pop() {
            seen += 1;
            for &d in self.dependents(TaskId(t as u32)) {
                let r = &mut remaining[d.0 as usize];
                *r -= 1;
                if *r == 0 {
                    ready.push(d.0 as usize);
                }
            }
        }
        if seen == self.len() {
            Ok(())
        } else {
            Err(GraphError::Cycle)
        }
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// Whether there are no tasks.
    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    /// The lane that runs `task`.
    pub fn lane(&self, task: TaskId) -> Lane {
        self.lanes[task.0 as usize]
    }

    /// How many tasks run on each lane, by dense [`Lane::index`].
    pub fn lane_tasks(&self) -> &[usize] {
        &self.lane_tasks
    }

    /// The priority `task` is queued at.
    pub fn priority(&self, task: TaskId) -> Priority {
        self.priorities[task.0 as usize]
    }

    /// How many dependencies `task` waits for initially.
    pub fn dependency_count(&self, task: TaskId) -> u32 {
        self.dependency_counts[task.0 as usize]
    }

    /// The tasks without dependencies, in id order.
    pub fn roots(&self) -> impl Iterator<Item = TaskId> + '_ {
        (0..self.len() as u32)
            .map(TaskId)
            .filter(|&t| self.dependency_count(t) == 0)
    }

    /// The domain `task`'s estimated bytes are admitted in.
    pub fn domain(&self, task: TaskId) -> Domain {
        self.domains[task.0 as usize]
    }

    /// The bytes `task` is estimated to hold while it runs.
    pub fn estimated_bytes(&self, task: TaskId) -> usize {
        self.estimated_bytes[task.0 as usize]
    }

    /// Whether every task is critical, on the CPU lane, and ids are a
    /// topological order (protocol "own" may run the graph in id order).
    pub fn is_sequential(&self) -> bool {
        self.sequential
    }

    /// The tasks `task` waits for (a repeated dependency appears repeatedly).
    pub fn dependencies(&self, task: TaskId) -> &[TaskId] {
        self.dependencies.row(task.0 as usize)
    }

    /// The tasks that wait for `task`.
    pub fn dependents(&self, task: TaskId) -> &[TaskId] {
        self.dependents.row(task.0 as usize)
    }
}
