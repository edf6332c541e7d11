//! The producer of prepared objects (see `docs/design.md`, "Residency and
//! memory limits" and "Prepared model persistence"): one protocol (claim →
//! obtain bytes → admit → publish → release sources) whatever the recipe —
//! read and verify sources then prepack (whole or from pieces), read packed
//! bytes from the prepared cache, restore after eviction — with the memory
//! gate, the evictor, row-served tables and objects shared between sessions.

mod error;
pub(crate) mod evict;
pub(crate) mod gate;
mod object;
mod pieces;
pub(crate) mod preparation;
pub(crate) mod residency;
mod shared;

pub use error::PrepareError;
pub use object::PreparedObject;
pub use preparation::ResidentObject;
pub use residency::{StepProtection, UnpersistedEviction};
pub use shared::SharedObject;
