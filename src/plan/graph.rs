//! The scheduler's views of a plan: [`TaskGraph`]s with estimates and
//! look-ahead distances, built from the task table (the scheduler itself
//! knows task ids, not plans).

use crate::arena::Domain;
use crate::scheduler::{Csr, GraphError, Priority, ResourceClass, TaskGraph, TaskId, UNGATED};

use super::{PreparedExecutionPlan, TaskKind, TaskScope};

impl PreparedExecutionPlan {
    /// The scheduler's view of a plan's task table. Estimates: output plus
    /// peak temporary bytes; reads, prepacks and persists charge
    /// [`Domain::Preparation`], executions [`Domain::Execution`].
    pub fn task_graph(&self) -> Result<TaskGraph, GraphError> {
        let tasks = self.tasks();
        let domains: Vec<Domain> = tasks
            .kind
            .iter()
            .map(|k| match k {
                TaskKind::ReadSource
                | TaskKind::Prepack
                | TaskKind::ReadPacked
                | TaskKind::Persist => Domain::Preparation,
                TaskKind::Execute => Domain::Execution,
            })
            .collect();
        let bytes: Vec<u64> = tasks
            .estimated_output_bytes
            .iter()
            .zip(&tasks.peak_temporary_bytes)
            .map(|(o, t)| o.saturating_add(*t))
            .collect();
        TaskGraph::new(&tasks.resource, &tasks.priority, &tasks.deps)?
            .with_estimates(&domains, &bytes)
    }

    /// [`PreparedExecutionPlan::task_graph`] with look-ahead distances: a session task
    /// that publishes a requirement is gated at that requirement's prefetch
    /// distance (the first step that needs it); a read feeding prepacks at
    /// the nearest of theirs. Invocation tasks are ungated.
    pub fn task_graph_with_distances(&self) -> Result<TaskGraph, GraphError> {
        let tasks = self.tasks();
        let distance_of = self.requirements().prefetch_distance.as_slice();
        let mut distances = vec![UNGATED; tasks.len()];
        // Dependents have larger ids: walk backwards so a read sees its
        // prepacks' distances.
        for t in (0..tasks.len()).rev() {
            if tasks.scope[t] != TaskScope::Session {
                continue;
            }
            let own = tasks.publishes[t].map_or(UNGATED, |r| distance_of[r.0 as usize]);
            let via = tasks
                .dependents
                .row(t)
                .iter()
                .map(|d| distances[d.0 as usize])
                .min()
                .unwrap_or(UNGATED);
            distances[t] = own.min(via);
        }
        self.task_graph()?.with_distances(&distances)
    }

    /// The session tasks of `plan` alone (reads, prepacks: what eager or
    /// streaming preparation runs), renumbered densely in plan order, with
    /// estimates and look-ahead distances; `ids[i]` is the plan task of
    /// graph task `i`. Session tasks never depend on invocation tasks.
    pub fn session_graph(&self) -> Result<(TaskGraph, Box<[TaskId]>), GraphError> {
        let full = self.task_graph_with_distances()?;
        let tasks = self.tasks();
        let ids: Box<[TaskId]> = (0..tasks.len())
            .filter(|&t| tasks.scope[t] == TaskScope::Session)
            .map(|t| TaskId(t as u32))
            .collect();
        let mut local = vec![u32::MAX; tasks.len()];
        for (i, t) in ids.iter().enumerate() {
            local[t.0 as usize] = i as u32;
        }
        let rows: Vec<Vec<TaskId>> = ids
            .iter()
            .map(|t| {
                tasks
                    .deps
                    .row(t.0 as usize)
                    .iter()
                    .map(|d| TaskId(local[d.0 as usize]))
                    .collect()
            })
            .collect();
        let resources: Vec<ResourceClass> =
            ids.iter().map(|&t| tasks.resource[t.0 as usize]).collect();
        let priorities: Vec<Priority> = ids.iter().map(|&t| tasks.priority[t.0 as usize]).collect();
        let domains: Vec<Domain> = ids.iter().map(|&t| full.domain(t)).collect();
        let bytes: Vec<u64> = ids
            .iter()
            .map(|&t| full.estimated_bytes(t) as u64)
            .collect();
        let distances: Vec<u32> = ids
            .iter()
            .map(|&t| full.distance(t).unwrap_or(UNGATED))
            .collect();
        let graph = TaskGraph::new(&resources, &priorities, &Csr::from_rows(&rows))?
            .with_estimates(&domains, &bytes)?
            .with_distances(&distances)?;
        Ok((graph, ids))
    }
}
