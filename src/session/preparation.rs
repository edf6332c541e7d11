//! The session's preparation: at most one live submission of the session
//! tasks (protocol "preparation" in the module docs), who holds interest in
//! it (protocol "interest") and the runner of its tasks.

use std::sync::Arc;
use std::time::Instant;

use super::{SessionInner, Trace, TraceLane};
use crate::exec::SessionTasks;
use crate::plan::{RequirementId, TaskId};
use crate::scheduler::{Submission, SubmitOptions, TaskContext, TaskFailure, TaskRunner};
use crate::sync::{AtomicBool, Lock, Ordering};

/// The live preparation submission and what its tasks hold.
pub(super) struct Preparation {
    pub(super) submission: Submission,
    streaming: bool,
    runner: Arc<PreparationRunner>,
    /// Who still needs it (protocol "interest").
    interest: Lock<Interest>,
}

/// Who registers interest in the preparation it gets.
pub(super) enum Holder<'a> {
    /// An eager prepare handle.
    Eager,
    /// A run, holding the preparation it registered on.
    Run(&'a Lock<Option<Arc<Preparation>>>),
}

/// Live eager prepare handles and runs registered on a preparation.
#[derive(Default)]
struct Interest {
    eager: usize,
    runs: usize,
}

impl Preparation {
    /// Interest step 1 (under the session's preparation lock): one more
    /// eager handle or run needs this preparation.
    fn register(&self, eager: bool) {
        self.interest.with(|i| {
            if eager {
                i.eager += 1;
            } else {
                i.runs += 1;
            }
        });
    }

    /// Interest step 2 (under the session's preparation lock, like step
    /// 1, so a preparation is never cancelled between being chosen and
    /// registered on): an eager handle or run no longer needs it. With
    /// `cancelled` (the handle was cancelled) and nobody else interested,
    /// the preparation is cancelled: its tasks not yet started never run,
    /// running ones are joined; a later run starts a new preparation that
    /// produces only what is still missing.
    fn release(&self, eager: bool, cancelled: bool) {
        let last = self.interest.with(|i| {
            let count = if eager { &mut i.eager } else { &mut i.runs };
            *count = count.saturating_sub(1);
            i.eager == 0 && i.runs == 0
        });
        if !last || self.submission.is_done() {
            return;
        }
        if cancelled {
            self.stop();
        } else if self.streaming {
            // Its last run ended (done or failed): nothing advances the
            // window any more, so the rest completes in the background.
            self.submission.advance(u32::MAX - 1);
        }
    }
}

impl Preparation {
    /// Cancels what has not started, resumes reads the budget gate
    /// suspended (into the cancelled submission: they end) and drops the
    /// sources waiting for prepacks that will not run.
    fn stop(&self) {
        if !self.submission.is_done() {
            self.submission.cancel_token().cancel();
        }
        self.runner.tasks.resume_suspended();
        self.runner.tasks.release_held();
    }
}

impl Drop for Preparation {
    /// Nobody holds the preparation any more (no handle, no run, not the
    /// session's current one): what never started never will. Reads the
    /// budget gate suspended hold the submission through their resume
    /// handles, inside the runner the submission holds, so they are
    /// resumed (into the cancelled submission) to break that cycle.
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the preparation's tasks (a session-graph id is mapped to its plan
/// task), tracing each one when the session traces.
struct PreparationRunner {
    tasks: SessionTasks<'static>,
    ids: Box<[TaskId]>,
    trace: Option<Arc<Trace>>,
    /// Per session-graph task: its run returned without suspending.
    finished: Box<[AtomicBool]>,
}

impl PreparationRunner {
    /// Whether `task`'s run returned without suspending.
    fn finished(&self, task: TaskId) -> bool {
        self.finished[task.0 as usize].load(Ordering::Acquire)
    }
}

impl TaskRunner for PreparationRunner {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let result = self.run_traced(task, ctx);
        if !ctx.is_suspending() {
            self.finished[task.0 as usize].store(true, Ordering::Release);
        }
        result
    }
}

impl PreparationRunner {
    fn run_traced(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let t = self.ids[task.0 as usize];
        let Some(trace) = &self.trace else {
            return self.tasks.run(t, ctx);
        };
        let start = Instant::now();
        let result = self.tasks.run(t, ctx);
        let plan = self.tasks.state().plan();
        let lane = match plan.tasks().kind[t.0 as usize] {
            crate::plan::TaskKind::ReadSource => TraceLane::Io,
            _ => TraceLane::Prepack,
        };
        trace.record(
            lane,
            &plan.tasks().name[t.0 as usize],
            start,
            Instant::now(),
            0,
        );
        result
    }
}

impl SessionInner {
    /// Preparation step 1–2: the live preparation (eager: window open), or
    /// a new one. `needed`: a requirement the caller waits for, whose
    /// producer must still be able to run in the returned submission.
    pub(super) fn preparation(
        &self,
        streaming: bool,
        needed: Option<RequirementId>,
        holder: Holder<'_>,
    ) -> Arc<Preparation> {
        self.preparation.with(|slot| {
            let p = self.choose_preparation(slot, streaming, needed);
            match holder {
                Holder::Eager => p.register(true),
                Holder::Run(held) => held.with(|held| {
                    if !held.as_ref().is_some_and(|h| Arc::ptr_eq(h, &p)) {
                        if let Some(old) = held.replace(p.clone()) {
                            old.release(false, false);
                        }
                        p.register(false);
                    }
                }),
            }
            p
        })
    }

    /// Interest step 2 for `p` (see [`Preparation::release`]).
    pub(super) fn release(&self, p: &Preparation, eager: bool, cancelled: bool) {
        self.preparation.with(|_| p.release(eager, cancelled));
    }

    /// Preparation steps 1–2, under the preparation lock.
    fn choose_preparation(
        &self,
        slot: &mut Option<Arc<Preparation>>,
        streaming: bool,
        needed: Option<RequirementId>,
    ) -> Arc<Preparation> {
        {
            if let Some(p) = slot.as_ref() {
                let stale = p.submission.is_done()
                    || p.submission.cancel_token().is_cancelled()
                    || needed.is_some_and(|r| {
                        let publisher = self.publisher[r.0 as usize];
                        // Without a limit nothing evicts: a publisher that
                        // started will produce the object (or find it in
                        // flight), so only one that finished is stale.
                        // Under a limit the object may be evicted between
                        // its check and its end: one that started is.
                        let ran = if self.evicts() {
                            p.submission.is_claimed(publisher)
                                && !p.submission.is_suspended(publisher)
                        } else {
                            p.runner.finished(publisher)
                        };
                        ran && !self.state.store().snapshot(r.0 as usize).is_in_flight()
                    });
                if !stale {
                    if !streaming && p.streaming {
                        p.submission.advance(u32::MAX - 1);
                    }
                    return p.clone();
                }
                if p.submission.is_done() || p.submission.cancel_token().is_cancelled() {
                    // Its prepacks that did not run never will; a handle
                    // may keep it alive, but not its sources.
                    p.runner.tasks.release_held();
                }
            }
            let runner = Arc::new(PreparationRunner {
                tasks: self.state.shared_session_tasks(),
                ids: self.session_ids.clone(),
                trace: self.trace.clone(),
                finished: self
                    .session_ids
                    .iter()
                    .map(|_| AtomicBool::new(false))
                    .collect(),
            });
            let options = SubmitOptions {
                look_ahead: streaming.then(|| self.options.look_ahead.clone()),
                admission: Some(self.admission.clone()),
            };
            let submission = self
                .pool
                .submit_with(self.session_graph.clone(), runner.clone(), options)
                .expect("the session's pool has CPU and I/O workers");
            let p = Arc::new(Preparation {
                submission,
                streaming,
                runner,
                interest: Lock::default(),
            });
            *slot = Some(p.clone());
            p
        }
    }
}
