//! Plan dumps (cold path): the task table of `docs/design.md` ("Scoped plan") as text, and a stable
//! JSON form for scripts (`onnx-prepared plan MODEL --json`).

use std::fmt::Write;

use serde::Serialize;

use super::{PreparedExecutionPlan, TaskScope};

/// One task.
#[derive(Debug, Clone, Serialize)]
pub struct TaskDump {
    /// Its id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// `session` or `invocation`.
    pub scope: &'static str,
    /// `read_source`, `prepack`, `read_packed`, `persist` or `execute`.
    pub kind: &'static str,
    /// `io`, `cpu`, `deviceN` or `inline`.
    pub resource: String,
    /// `critical`, `prefetch` or `background`.
    pub priority: &'static str,
    /// Ids of the tasks it waits for.
    pub deps: Vec<u32>,
    /// Requirement it publishes.
    pub publishes: Option<u32>,
    /// Requirements it needs resident (invocation tasks).
    pub requires: Vec<u32>,
    /// Node range it executes (invocation tasks).
    pub nodes: Option<[u32; 2]>,
}

/// A requirement's key.
#[derive(Debug, Clone, Serialize)]
pub struct KeyDump {
    /// Lineage digest, hex.
    pub lineage: String,
    /// Layout key.
    pub layout: String,
    /// Device index.
    pub device: u16,
}

/// One requirement.
#[derive(Debug, Clone, Serialize)]
pub struct RequirementDump {
    /// Its id.
    pub id: u32,
    /// Readable name.
    pub name: String,
    /// Its key.
    pub key: KeyDump,
    /// Its bit in step bitsets.
    pub bit: u32,
    /// Eligible recipes, cheapest first.
    pub recipes: Vec<&'static str>,
    /// Source bytes.
    pub bytes: u64,
    /// Source weights.
    pub sources: Vec<String>,
}

/// One invocation step.
#[derive(Debug, Clone, Serialize)]
pub struct StepDump {
    /// Its task.
    pub task: u32,
    /// Its scope.
    pub scope: String,
    /// Node range.
    pub nodes: [u32; 2],
    /// Requirement bits it needs.
    pub requires: Vec<u32>,
}

/// One node of the resolved graph, as its step runs it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeDump {
    /// Its index (the steps' node ranges count these).
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its operator, with the nodes it runs fused
    /// (`Conv+BatchNormalization+Relu`).
    pub op: String,
}

/// The whole plan, as `onnx-prepared plan --json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct PlanDump {
    /// Every task.
    pub tasks: Vec<TaskDump>,
    /// Every requirement.
    pub requirements: Vec<RequirementDump>,
    /// Invocation steps in order.
    pub steps: Vec<StepDump>,
    /// The nodes the steps run.
    pub nodes: Vec<NodeDump>,
}

impl PlanDump {
    /// Dumps `plan`.
    pub fn new(plan: &PreparedExecutionPlan) -> Self {
        let t = plan.tasks();
        let tasks = (0..t.len())
            .map(|i| TaskDump {
                id: i as u32,
                name: t.name[i].clone(),
                scope: match t.scope[i] {
                    TaskScope::Session => "session",
                    TaskScope::Invocation => "invocation",
                },
                kind: t.kind[i].name(),
                resource: t.resource[i].name(),
                priority: match t.priority[i] {
                    super::Priority::Critical => "critical",
                    super::Priority::Prefetch => "prefetch",
                    super::Priority::Background => "background",
                },
                deps: t.deps.row(i).iter().map(|d| d.0).collect(),
                publishes: t.publishes[i].map(|r| r.0),
                requires: t.requirements.row(i).iter().map(|r| r.0).collect(),
                nodes: t.actions[i].as_ref().map(|r| [r.start, r.end]),
            })
            .collect();
        let r = plan.requirements();
        let resolved = plan.resolved();
        let requirements = (0..r.len())
            .map(|i| RequirementDump {
                id: i as u32,
                name: resolved.requirements()[i].name.clone(),
                key: KeyDump {
                    lineage: r.key[i]
                        .lineage
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect(),
                    layout: r.key[i].layout.clone(),
                    device: r.key[i].device,
                },
                bit: r.bit[i],
                recipes: r.recipes[i].iter().map(|x| x.name()).collect(),
                bytes: r.source_bytes[i],
                sources: resolved.requirements()[i]
                    .sources
                    .iter()
                    .map(|w| resolved.model().weights()[w.index()].name().to_owned())
                    .collect(),
            })
            .collect();
        let steps = plan
            .steps()
            .iter()
            .map(|s| StepDump {
                task: s.task.0,
                scope: s.scope.clone(),
                nodes: [s.nodes.start, s.nodes.end],
                requires: s.needs.iter_ones().map(|b| b as u32).collect(),
            })
            .collect();
        let nodes = resolved
            .nodes()
            .iter()
            .enumerate()
            .map(|(i, n)| NodeDump {
                index: i as u32,
                name: n.name.clone(),
                op: n.op.describe(),
            })
            .collect();
        Self {
            tasks,
            requirements,
            steps,
            nodes,
        }
    }

    /// The task table of `docs/design.md`: task, scope, resource, dependencies, result.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<5} {:<48} {:<10} {:<8} {:<9} {:<18} result",
            "id", "task", "scope", "resource", "priority", "deps"
        );
        for t in &self.tasks {
            let deps = t
                .deps
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let result = match (t.publishes, &t.nodes) {
                (Some(r), _) => format!("P{r} {}", self.requirements[r as usize].key.layout),
                (None, Some([a, b])) => format!("nodes {a}..{b}"),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "{:<5} {:<48} {:<10} {:<8} {:<9} {:<18} {result}",
                t.id, t.name, t.scope, t.resource, t.priority, deps
            );
        }
        let _ = writeln!(
            s,
            "\n{:<5} {:<44} {:<44} {:>10}  recipes",
            "bit", "requirement", "layout", "bytes"
        );
        for r in &self.requirements {
            let _ = writeln!(
                s,
                "{:<5} {:<44} {:<44} {:>10}  {}",
                r.bit,
                r.name,
                r.key.layout,
                r.bytes,
                r.recipes.join(" > ")
            );
        }
        let _ = writeln!(s, "\n{:<5} {:<24} {:<12} requires", "task", "step", "nodes");
        for st in &self.steps {
            let req = st
                .requires
                .iter()
                .map(|b| format!("P{b}"))
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(
                s,
                "{:<5} {:<24} {:<12} {req}",
                st.task,
                st.scope,
                format!("{}..{}", st.nodes[0], st.nodes[1])
            );
        }
        let _ = writeln!(s, "\n{:<5} {:<48} operator", "node", "name");
        for n in &self.nodes {
            let _ = writeln!(s, "{:<5} {:<48} {}", n.index, n.name, n.op);
        }
        s
    }
}
