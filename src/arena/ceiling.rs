//! `Ceiling`: the one process-wide budget that every allocation sized by a
//! model, an input or a flag charges before it is made (cold path: one
//! charge per preparation buffer, lowering, or set of generated or decoded
//! inputs).
//!
//! # Protocol
//!
//! 1. The first use reads the limit once
//!    ([`crate::limits::default_allocation_ceiling`]: half of the least of
//!    physical memory, the cgroup's limit and `RLIMIT_AS`).
//! 2. A request of more bytes than the limit is refused at once
//!    ([`ArenaError::AboveCeiling`]): it could never be served.
//! 3. Otherwise it reserves its bytes from the shared budget (the reservation
//!    protocol of [`crate::arena`], one global counter): refused with
//!    [`ArenaError::CeilingHeld`] while other requests hold too much of it.
//! 4. The [`Reservation`] is held as long as the memory lives (the
//!    preparation buffer, the lowering, the call that builds inputs) and
//!    returns its bytes when dropped.
//!
//! So N concurrent runs share one ceiling instead of each getting nearly
//! all of it.

use super::{ArenaError, BudgetLimits, Domain, MemoryBudget, Reservation};

/// A byte ceiling shared by every request charged to it. Cloning gives
/// another handle to the same counters.
#[derive(Debug, Clone)]
pub struct Ceiling {
    budget: MemoryBudget,
}

impl Ceiling {
    /// A ceiling of `limit` bytes of its own (tests; the runtime uses
    /// [`Ceiling::process`]).
    pub fn new(limit: usize) -> Self {
        Self {
            budget: MemoryBudget::new(BudgetLimits::unlimited().with_global(limit)),
        }
    }

    /// The process's ceiling, read from the system on first use and shared
    /// by every session, context and call of the process.
    #[cfg(not(loom))]
    pub fn process() -> Self {
        static PROCESS: crate::sync::OnceLock<Ceiling> = crate::sync::OnceLock::new();
        PROCESS
            .get_or_init(|| Ceiling::new(crate::limits::default_allocation_ceiling()))
            .clone()
    }

    /// The process's ceiling (under loom: a fresh one per call, since loom's
    /// atomics live inside one model run).
    #[cfg(loom)]
    pub fn process() -> Self {
        Ceiling::new(crate::limits::default_allocation_ceiling())
    }

    /// The ceiling in bytes.
    pub fn limit(&self) -> usize {
        self.budget.global_limit()
    }

    /// Bytes charged now by every holder.
    pub fn live(&self) -> usize {
        self.budget.total_live()
    }

    /// Charges `bytes` for `domain`, on behalf of `what` (named in the
    /// error). The bytes return when the reservation is dropped.
    pub fn charge(
        &self,
        domain: Domain,
        what: impl FnOnce() -> String,
        bytes: usize,
    ) -> Result<Reservation, ArenaError> {
        if bytes > self.limit() {
            return Err(self.above(domain, what(), bytes));
        }
        self.budget
            .reserve(domain, bytes)
            .map_err(|e| self.held(domain, what(), bytes, e))
    }

    /// Resizes a reservation made by [`charge`](Self::charge) to `bytes`
    /// in all (a refused grow changes nothing).
    pub fn resize(
        &self,
        reservation: &mut Reservation,
        what: impl FnOnce() -> String,
        bytes: usize,
    ) -> Result<(), ArenaError> {
        let domain = reservation.domain();
        if bytes > self.limit() {
            return Err(self.above(domain, what(), bytes));
        }
        reservation
            .resize(bytes)
            .map_err(|e| self.held(domain, what(), bytes, e))
    }

    /// Step 2's refusal: a request above the whole ceiling.
    fn above(&self, domain: Domain, what: String, bytes: usize) -> ArenaError {
        ArenaError::AboveCeiling {
            domain,
            what,
            requested: bytes,
            limit: self.limit(),
        }
    }

    /// Step 3's refusal, in the ceiling's words.
    fn held(&self, domain: Domain, what: String, bytes: usize, e: ArenaError) -> ArenaError {
        match e {
            ArenaError::OverBudget { global_live, .. } => ArenaError::CeilingHeld {
                domain,
                what,
                requested: bytes,
                live: global_live,
                limit: self.limit(),
            },
            other => other,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_request_above_the_ceiling_is_refused_outright() {
        let ceiling = Ceiling::new(100);
        let e = ceiling
            .charge(Domain::Io, || "an input".into(), 101)
            .unwrap_err();
        assert!(matches!(
            e,
            ArenaError::AboveCeiling {
                requested: 101,
                limit: 100,
                ..
            }
        ));
        assert!(e.to_string().contains("an input"), "{e}");
        assert_eq!(ceiling.live(), 0);
    }

    #[test]
    fn concurrent_charges_share_the_ceiling() {
        let ceiling = Ceiling::new(100);
        let other = ceiling.clone();
        let first = crate::sync::thread::spawn(move || {
            other
                .charge(Domain::Execution, || "first".into(), 80)
                .unwrap()
        })
        .join()
        .unwrap();
        let second = ceiling.charge(Domain::Preparation, || "second".into(), 30);
        let e = second.unwrap_err();
        assert!(
            matches!(
                e,
                ArenaError::CeilingHeld {
                    requested: 30,
                    live: 80,
                    limit: 100,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("ceiling"), "{e}");
        drop(first);
        let second = ceiling
            .charge(Domain::Preparation, || "second".into(), 30)
            .unwrap();
        assert_eq!(ceiling.live(), 30);
        drop(second);
        assert_eq!(ceiling.live(), 0);
    }

    #[test]
    fn resizing_is_charged_and_refusals_change_nothing() {
        let ceiling = Ceiling::new(100);
        let mut a = ceiling.charge(Domain::Execution, || "a".into(), 10).unwrap();
        let _b = ceiling.charge(Domain::Io, || "b".into(), 50).unwrap();
        ceiling.resize(&mut a, || "a".into(), 50).unwrap();
        assert!(matches!(
            ceiling.resize(&mut a, || "a".into(), 51),
            Err(ArenaError::CeilingHeld { .. })
        ));
        assert!(matches!(
            ceiling.resize(&mut a, || "a".into(), 101),
            Err(ArenaError::AboveCeiling { .. })
        ));
        assert_eq!(ceiling.live(), 100);
        ceiling.resize(&mut a, || "a".into(), 0).unwrap();
        assert_eq!(ceiling.live(), 50);
    }

    #[test]
    fn the_process_ceiling_is_one_budget() {
        let a = Ceiling::process();
        let b = Ceiling::process();
        assert_eq!(a.limit(), b.limit());
        assert!(a.limit() > 0);
        let before = b.live();
        let r = a.charge(Domain::Io, || "probe".into(), 1).unwrap();
        // Other tests of this binary may charge it at the same time.
        assert!(b.live() >= 1 || before > 0);
        drop(r);
    }
}
