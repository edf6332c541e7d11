//! The last step of `prepare` (cold path): its `Ok` means every prepared
//! object is resident.
//!
//! Protocol "prepared" (after the eager preparation's submission succeeded
//! without every object resident):
//! 1. Settle each object: wait for a generation in flight (produced by
//!    another submission, e.g. a run's on-demand preparation), then read
//!    its state again.
//! 2. All resident → `Ok`. Otherwise (evicted since, or its production
//!    failed in another submission) a new eager preparation produces what
//!    is missing (a failed generation is retried once by its producer) and
//!    step 1 runs again — at most [`PREPARE_ATTEMPTS`] times, so objects
//!    evicted as fast as they are produced end in a typed error instead of
//!    a loop.

use super::preparation::Holder;
use super::status::{Naming, prepare_error, status_of};
use super::{ExecutionError, SessionInner, Status};
use crate::exec::RunError;
use crate::plan::RequirementId;
use crate::store::Residency;

/// Renewed preparations `prepare` starts for objects that went missing
/// (protocol "prepared", step 2).
pub(super) const PREPARE_ATTEMPTS: usize = 3;

impl SessionInner {
    /// Protocol "prepared": `Ok` once every object was seen resident.
    pub(super) fn ensure_resident(&self) -> Result<(), ExecutionError> {
        let mut attempt = 0;
        loop {
            let Some((missing, residency)) = self.settle() else {
                return Ok(());
            };
            if attempt == PREPARE_ATTEMPTS {
                return Err(self.missing_error(missing, residency));
            }
            attempt += 1;
            let p = self.preparation(false, Some(missing), Holder::Eager);
            let outcome = p.submission.wait();
            self.release(&p, true, false);
            match status_of(self, Naming::SessionTasks, &outcome) {
                Status::Succeeded | Status::Running => {}
                status => return Err(prepare_error(status)),
            }
        }
    }

    /// Step 1: the first object not resident once settled, with its state.
    fn settle(&self) -> Option<(RequirementId, Residency)> {
        let store = self.state.store();
        (0..self.publisher.len()).find_map(|r| {
            let mut snapshot = store.snapshot(r);
            if snapshot.is_in_flight() {
                store.waiter(r, snapshot.generation()).wait();
                snapshot = store.snapshot(r);
            }
            (!snapshot.is_resident()).then(|| (RequirementId(r as u32), snapshot.residency()))
        })
    }

    /// The error of an object still missing after the renewed preparations.
    fn missing_error(&self, r: RequirementId, residency: Residency) -> ExecutionError {
        let requirement = self.state.plan().resolved().requirements()[r.0 as usize]
            .name
            .clone();
        let error = if residency == Residency::Failed {
            RunError::PreparationFailed {
                step: "prepare".to_owned(),
                requirement,
                cause: self
                    .state
                    .failure_cause(r)
                    .unwrap_or_else(|| "its producer failed".to_owned()),
            }
        } else {
            RunError::NotResident {
                node: "prepare".to_owned(),
                requirement,
            }
        };
        ExecutionError {
            error: error.into(),
            diagnostics: Box::default(),
            context: None,
        }
    }
}
