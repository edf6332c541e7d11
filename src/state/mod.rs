//! Mutable execution state. Today: [`DirectReplay`], the eager baseline
//! (load and prepack everything, then replay a compact action list).

mod direct;
mod parallel;

pub(crate) use direct::graph_input;
pub use direct::{Dim, DirectReplay, DirectReplayOptions, GraphInput};
pub use parallel::ThreadPool;
