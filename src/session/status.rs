//! What a submission's handle reports: [`Status`], [`Diagnostics`] and
//! [`ExecutionError`].

use super::{RuntimeContext, SessionInner};
use crate::Error;
use crate::exec::RunError;
use crate::plan::TaskId;
use crate::scheduler::SubmissionOutcome;

/// Where a submission stands ([`ExecutionHandle::status`](super::ExecutionHandle::status)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Tasks are still running or waiting.
    Running,
    /// Every task completed.
    Succeeded,
    /// A task failed; see the diagnostics.
    Failed(Diagnostics),
    /// Cancelled before every task ran.
    Cancelled,
}

/// What failed, and what did not run because of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// The first failed task (its plan name) and why.
    pub failed_task: Option<(String, String)>,
    /// Tasks that never ran because a dependency failed (plan names).
    pub suppressed: Vec<String>,
}

/// The failure of a submission: the first error, its diagnostics, and —
/// for a run — the context, handed back.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct ExecutionError {
    /// The first error.
    #[source]
    pub error: Error,
    /// Failing and suppressed tasks.
    pub diagnostics: Box<Diagnostics>,
    /// The run's context (inputs, reusable state), when the submission was
    /// a run.
    pub context: Option<Box<RuntimeContext>>,
}

/// How the tasks of a submission are named in its [`Diagnostics`].
#[derive(Clone, Copy)]
pub(super) enum Naming {
    /// A preparation: session-graph tasks, named by their plan task.
    SessionTasks,
    /// A run: its one task is "run".
    Run,
}

/// The status of a terminal submission whose outcome is `outcome`.
pub(super) fn status_of(
    session: &SessionInner,
    naming: Naming,
    outcome: &SubmissionOutcome,
) -> Status {
    if outcome.is_success() {
        return Status::Succeeded;
    }
    let plan = session.state.plan();
    let name = |t: TaskId| match naming {
        Naming::SessionTasks => {
            plan.tasks().name[session.session_ids[t.0 as usize].0 as usize].clone()
        }
        Naming::Run => "run".to_owned(),
    };
    if let Some((task, failure)) = &outcome.failed {
        return Status::Failed(Diagnostics {
            failed_task: Some((name(*task), failure.message().to_owned())),
            suppressed: outcome.suppressed.iter().map(|&t| name(t)).collect(),
        });
    }
    Status::Cancelled
}

/// The error of a preparation that was cancelled or failed.
pub(super) fn prepare_error(status: Status) -> ExecutionError {
    match status {
        Status::Failed(diagnostics) => ExecutionError {
            error: RunError::Unsupported {
                what: format!(
                    "preparation failed: {}",
                    diagnostics
                        .failed_task
                        .as_ref()
                        .map_or("", |(_, why)| why.as_str())
                ),
            }
            .into(),
            diagnostics: Box::new(diagnostics),
            context: None,
        },
        _ => ExecutionError {
            error: RunError::Cancelled.into(),
            diagnostics: Box::default(),
            context: None,
        },
    }
}

/// A count of a session's resident prepared objects
/// ([`super::RuntimeSession::residency`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResidencyReport {
    /// Prepared objects resident now.
    pub resident: usize,
    /// Prepared objects the plan has.
    pub total: usize,
    /// Bytes of the resident objects.
    pub resident_bytes: usize,
}

impl ResidencyReport {
    /// Whether every prepared object is resident.
    pub fn all_resident(&self) -> bool {
        self.resident == self.total
    }
}

/// Keeps the first error of a failed submission (its diagnostics and
/// context are dropped: match on [`ExecutionError`] to keep them).
impl From<ExecutionError> for Error {
    fn from(e: ExecutionError) -> Self {
        e.error
    }
}
