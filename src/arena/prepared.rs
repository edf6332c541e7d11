//! `PreparedArena`: accounting for resident prepared (packed) objects, one
//! `PreparedAllocation` per object (cold path: once per publish and eviction).

use std::fmt;

use super::{ArenaError, Domain, MemoryBudget, Reservation};

/// Charges resident prepared objects to [`Domain::Prepared`]. The store keeps
/// each object's [`PreparedAllocation`] next to the object and drops it on
/// eviction. Cloning gives another handle to the same budget.
#[derive(Debug, Clone)]
pub struct PreparedArena {
    budget: MemoryBudget,
}

impl PreparedArena {
    /// An arena charging `budget`.
    pub fn new(budget: &MemoryBudget) -> Self {
        Self {
            budget: budget.clone(),
        }
    }

    /// Charges an object of `bytes` bytes until the returned allocation is
    /// dropped. Refused (changing nothing) when the prepared domain's limit or
    /// the global limit would be exceeded: the caller evicts and retries, or
    /// falls back to the source form.
    pub fn admit(&self, bytes: usize) -> Result<PreparedAllocation, ArenaError> {
        Ok(PreparedAllocation {
            reservation: self.budget.reserve(Domain::Prepared, bytes)?,
        })
    }

    /// Bytes resident in the prepared domain now (all arenas of the budget).
    pub fn live_bytes(&self) -> usize {
        self.budget.live(Domain::Prepared)
    }

    /// The prepared domain's limit.
    pub fn limit(&self) -> usize {
        self.budget.limit(Domain::Prepared)
    }

    /// The budget this arena charges.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }
}

/// The charge for one resident prepared object; dropping it returns the
/// bytes to [`Domain::Prepared`].
#[must_use = "dropping a prepared allocation uncharges the object at once"]
pub struct PreparedAllocation {
    reservation: Reservation,
}

impl PreparedAllocation {
    /// The bytes charged.
    pub fn bytes(&self) -> usize {
        self.reservation.bytes()
    }

    /// Charges `bytes` instead (an object charged before it was built, at
    /// its built size). Growing is refused, changing nothing, when a limit
    /// would be exceeded.
    pub fn resize(&mut self, bytes: usize) -> Result<(), ArenaError> {
        self.reservation.resize(bytes)
    }
}

impl fmt::Debug for PreparedAllocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedAllocation")
            .field("bytes", &self.bytes())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::arena::BudgetLimits;

    #[test]
    fn admit_charges_until_eviction() {
        let budget = MemoryBudget::new(BudgetLimits::unlimited().with_domain(Domain::Prepared, 10));
        let arena = PreparedArena::new(&budget);
        let first = arena.admit(6).unwrap();
        assert!(arena.admit(5).unwrap_err().is_over_budget());
        let second = arena.admit(4).unwrap();
        assert_eq!(
            (first.bytes(), second.bytes(), arena.live_bytes()),
            (6, 4, 10)
        );
        drop(first);
        assert_eq!(arena.live_bytes(), 4);
        assert_eq!(budget.peak(Domain::Prepared), 10);
    }
}
