//! What the scheduler knows of a task: its id, the workers that run it and
//! its priority. Plans number their tasks with these ids.

/// Index of a task in its graph (a plan's task table, or a scheduler `TaskGraph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

/// Which workers run a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResourceClass {
    /// Blocking reads and writes.
    Io,
    /// CPU computation.
    Cpu,
    /// Cheap enough to run wherever its dependency finished.
    Inline,
}

impl ResourceClass {
    /// The stable name used by dumps.
    pub fn name(self) -> String {
        match self {
            ResourceClass::Io => "io".into(),
            ResourceClass::Cpu => "cpu".into(),
            ResourceClass::Inline => "inline".into(),
        }
    }
}

/// Scheduling priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Needed by a running inference.
    Critical,
    /// Speculative preparation ahead of need.
    Prefetch,
    /// Nothing waits for it (cache writes).
    Background,
}

