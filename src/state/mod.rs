//! Mutable execution state: [`DirectReplay`], the eager baseline (load and
//! prepack everything, then replay a compact action list), built on the
//! shared lowering and replay of [`lowering`].

mod direct;
mod lowering;
mod object;
mod parallel;
mod prepared;

pub(crate) use direct::graph_input;
pub use direct::{Dim, DirectReplay, DirectReplayOptions, GraphInput};
pub use object::PreparedObject;
pub use parallel::ThreadPool;
pub use prepared::{InvocationState, PreparedExecutionState, ResidentObject};
