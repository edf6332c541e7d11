//! `BudgetGate`: the admission state of protocol 3 (see `tasks.rs`) —
//! session tasks running, source shares held, bytes admitted to running
//! reads and the reads suspended until bytes are released (cold path).

use std::fmt;

use crate::arena::{Domain, MemoryBudget, UNLIMITED};
use crate::plan::PreparedExecutionPlan;
use crate::scheduler::ResumeHandle;
use crate::sync::Lock;

/// Protocol 3's state, one per session state, shared by every runner of
/// its session tasks.
pub(crate) struct BudgetGate {
    /// Estimated prepared bytes of each requirement (its publisher's
    /// estimated output).
    pub(crate) permanent: Box<[u64]>,
    /// Session tasks running now, and reads suspended until bytes free up.
    pub(crate) inner: Lock<GateInner>,
}

#[derive(Default)]
pub(crate) struct GateInner {
    pub(crate) running: usize,
    /// Source shares waiting in the inboxes of every runner.
    pub(crate) held: usize,
    /// `2s` of each running read: bytes it may still allocate.
    pub(crate) admitted: u64,
    pub(crate) suspended: Vec<ResumeHandle>,
}

/// A session task counted as running by the gate; dropped when it ended
/// (returned or panicked), after its bytes were released (or kept, for a
/// source held by prepacks): the suspended reads check again.
pub(crate) struct Running<'g>(pub(crate) &'g BudgetGate, pub(crate) u64);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let resumed = self.0.inner.with(|g| {
            g.running -= 1;
            g.admitted -= self.1;
            std::mem::take(&mut g.suspended)
        });
        drop(resumed);
    }
}

impl fmt::Debug for BudgetGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (running, held, suspended) =
            self.inner.with(|g| (g.running, g.held, g.suspended.len()));
        f.debug_struct("BudgetGate")
            .field("running", &running)
            .field("held", &held)
            .field("suspended", &suspended)
            .finish_non_exhaustive()
    }
}

impl BudgetGate {
    /// The gate of a state over `plan` and `budget`, when the budget
    /// limits preparation.
    pub(crate) fn new(plan: &PreparedExecutionPlan, budget: &MemoryBudget) -> Option<Self> {
        if budget.global_limit() == UNLIMITED && budget.limit(Domain::Preparation) == UNLIMITED {
            return None;
        }
        Some(Self::over(plan))
    }

    fn over(plan: &PreparedExecutionPlan) -> Self {
        let estimated = &plan.tasks().estimated_output_bytes;
        let permanent: Vec<_> = plan
            .requirements()
            .publisher
            .iter()
            .map(|t| estimated[t.0 as usize])
            .collect();
        BudgetGate {
            permanent: permanent.into_boxed_slice(),
            inner: Lock::new(GateInner::default()),
        }
    }

    /// `shares` more (or, negative, fewer) source shares wait in inboxes;
    /// fewer resumes the suspended reads.
    pub(crate) fn held(&self, shares: isize) {
        let resumed = self.inner.with(|g| {
            g.held = g.held.saturating_add_signed(shares);
            if shares < 0 {
                std::mem::take(&mut g.suspended)
            } else {
                Vec::new()
            }
        });
        drop(resumed);
    }
}
