//! Execution over prepared objects: lowering per input-shape set and the
//! replay of its action list (the hot path), [`PreparedExecutionState`] (the
//! session's store, arenas and producer, and on-demand sequential runs),
//! [`SessionTasks`] (one session task by id, from any thread), and
//! [`DirectReplay`], the eager baseline (load and prepack everything, then
//! replay a compact action list). See `docs/design.md`, "Plan template and
//! inference submissions".

mod direct;
mod error;
mod lowering;
mod state;
mod tasks;

pub use crate::model::{Dim, GraphInput};
pub use direct::{DirectReplay, DirectReplayOptions};
pub use error::RunError;
pub use state::{InvocationState, PreparedExecutionState, RunProgress};
pub use tasks::SessionTasks;
