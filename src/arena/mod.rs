//! Allocation domains and their budgets: every byte the runtime allocates for
//! preparation, residency, execution and I/O is charged to one [`Domain`] of
//! one [`MemoryBudget`], before it is allocated (cold path: a hot run
//! charges nothing new).
//!
//! # Domains
//!
//! | Domain | Arena | Holds | Charged by | Returned when |
//! |---|---|---|---|---|
//! | [`Domain::Preparation`] | [`PreparationArena`] | source bytes read from the model, packing/hashing/persist scratch | a read or prepack task, one [`PreparationBuffer`] per buffer | the buffer is dropped: when the producing task completes, or earlier once no later task needs the source |
//! | [`Domain::Prepared`] | [`PreparedArena`] | resident packed weights of the session | publishing a prepared object: a [`PreparedAllocation`] held by the store next to the object | the store evicts the object (the allocation is dropped) |
//! | [`Domain::Execution`] | the activation plan of a lowering | activation buffers of one input-shape set (laid out once, reused by every run of those shapes) and room for the largest kernel temporary | lowering a new input-shape set, checked before any buffer is allocated | the context lowers other shapes or is dropped |
//! | [`Domain::Io`] | a context's outputs | final outputs that cross the runtime boundary | the end of a run, before the outputs are written | the caller takes the outputs or drops the context |
//!
//! Allocations sized by a model, an input or a flag also charge the one
//! process-wide [`Ceiling`] (see its protocol), shared by every budget,
//! session and call of the process.
//!
//! The mutable KV-cache is caller-owned and outside every domain; disk
//! persistence is a cache tier, not an arena.
//!
//! Each domain reports its *live* bytes (charged now, limited) and the
//! *peak* of its live bytes. [`MemoryBudget::report`] renders them.
//!
//! # Limits
//!
//! A budget has one global limit over the live bytes of all domains and one
//! limit per domain, so speculative preparation (limited by its domain)
//! cannot take the memory an active invocation needs. Every charge is a
//! [`Reservation`] (RAII: dropping it returns the bytes); the arenas' handles
//! ([`PreparationBuffer`], [`PreparedAllocation`]) each hold one.
//!
//! # Reservation protocol
//!
//! Lock-free, two counters per request (`Shared::reserve`):
//!
//! 1. CAS the domain's live counter from `d` to `d + n`, only while
//!    `d + n ≤ domain limit` (checked, no overflow). Otherwise refuse:
//!    nothing changed.
//! 2. CAS the global live counter from `g` to `g + n`, only while
//!    `g + n ≤ global limit`. Otherwise subtract `n` from the domain counter
//!    (undoing step 1) and refuse.
//! 3. On success, raise the domain's and the global peak to the values the
//!    CASes stored.
//! 4. Release (drop, shrink, reset) subtracts `n` from the global counter,
//!    then from the domain counter.
//! 5. A watched budget ([`MemoryBudget::watch_releases`]) then bumps its
//!    release epoch (SeqCst) and tells each live [`ReleaseWatcher`]: a
//!    waiter that deferred itself and re-read the epoch afterwards either
//!    sees the bump or is found by the watcher (the scheduler's admission).
//!
//! Why this order and these guarantees:
//!
//! * Each counter only grows by a CAS that checked its limit, so neither ever
//!   exceeds its limit, and peaks never exceed limits.
//! * The domain step comes first so a request refused by its own domain's
//!   limit never touches the global counter shared with the other domains.
//! * A refusal changes nothing once it returns. Between steps 1 and 2 the
//!   domain counter briefly holds bytes that may be undone, so a concurrent
//!   request in the same domain can be refused by bytes that never become
//!   live: refusals are conservative, never over-admitting. Callers treat a
//!   refusal as "retry when bytes are returned".

mod budget;
mod ceiling;
mod domain;
mod error;
mod preparation;
mod prepared;

pub use budget::{
    BudgetLimits, BudgetReport, DomainReport, MemoryBudget, ReleaseWatcher, Reservation, UNLIMITED,
};
pub use ceiling::Ceiling;
pub use domain::Domain;
pub use error::ArenaError;
pub use preparation::{PREPARATION_ALIGN, PreparationArena, PreparationBuffer};
pub use prepared::{PreparedAllocation, PreparedArena};
