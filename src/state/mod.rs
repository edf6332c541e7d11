//! Mutable execution state: [`PreparedExecutionState`] (the session's store
//! and arenas, on-demand sequential runs), [`SessionTasks`] (one session task
//! by id, from any thread), and [`DirectReplay`], the eager baseline (load and
//! prepack everything, then replay a compact action list), all built on the
//! shared lowering and replay of `lowering`.

mod direct;
mod evict;
mod gate;
mod lowering;
mod object;
mod pieces;
mod preparation;
mod prepared;
mod residency;
mod shared;
mod tasks;

pub use crate::model::{Dim, GraphInput};
pub use direct::{DirectReplay, DirectReplayOptions};
pub use residency::{StepProtection, UnpersistedEviction};
pub(crate) use lowering::{execute_caught, tensor_bytes};
pub use object::PreparedObject;
pub use preparation::ResidentObject;
pub use prepared::{InvocationState, PreparedExecutionState, RunProgress};
pub use shared::SharedObject;
pub use tasks::SessionTasks;
