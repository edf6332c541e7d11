//! The run continuation (protocol "run" in the module docs): one
//! suspendable scheduler task per inference, and how a run starts.

use std::sync::Arc;
use std::time::Instant;

use super::preparation::{Holder, Preparation};
use super::trace::StepMemory;
use super::{RuntimeContext, SessionInner, TraceLane};
use crate::Error;
use crate::arena::Domain;
use crate::exec::RunError;
use crate::exec::RunProgress;
use crate::plan::{RequirementId, TaskId};
use crate::scheduler::{Submission, TaskContext, TaskFailure, TaskRunner};
use crate::store::{GenerationOutcome, Registration, Residency};
use crate::sync::{Latch, Lock, Ordering};

/// What a run carries between its suspensions.
pub(super) struct RunSlot {
    pub(super) ctx: Option<RuntimeContext>,
    started: bool,
    pub(super) error: Option<Error>,
    /// The run's number (trace).
    id: u64,
}

/// The run continuation (protocol "run"): one scheduler task per inference.
/// Holds its session weakly: the session keeps finished continuations for
/// reuse, and a strong reference back would keep both alive forever. A run
/// in flight is kept alive by its handle.
pub(super) struct RunContinuation {
    session: std::sync::Weak<SessionInner>,
    pub(super) slot: Lock<RunSlot>,
    /// The preparation this run registered interest on (protocol
    /// "interest"), until the run ends or is cancelled.
    interest: Lock<Option<Arc<Preparation>>>,
    /// The continuation a suspended run registered on the store (run step
    /// 3). It owns the run's resume handle, hence the submission, this
    /// continuation and the context: a cancelled run takes it back
    /// ([`RunContinuation::deregister`]) so that all of it is freed without
    /// waiting for the object's completion.
    waiting: Lock<Option<Registration>>,
    /// Opened by the object a run blocked on in its caller's thread, or by
    /// a cancel (run step 3, caller's thread).
    blocked: Lock<Option<Arc<Latch>>>,
}

impl TaskRunner for RunContinuation {
    fn run(&self, _task: TaskId, tctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let result = self.slot.with(|slot| match self.step(slot, tctx) {
            Ok(finished) => Ok(finished),
            Err(e) => {
                let message = e.to_string();
                slot.error = Some(e);
                Err(TaskFailure::new(message))
            }
        });
        if !matches!(result, Ok(false)) {
            self.release_interest(false);
        }
        result.map(|_| ())
    }
}

impl RunContinuation {
    /// Drops the continuation the run registered on the store, if it was
    /// not called yet (idempotent). Called when the run is cancelled and
    /// once its submission is terminal: no run is executing then, so no
    /// registration can follow.
    pub(super) fn deregister(&self) {
        if let Some(registration) = self.waiting.with(Option::take)
            && let Some(session) = self.session.upgrade()
        {
            session.state.store().deregister(registration);
        }
    }

    /// Wakes a run blocked on an object in its caller's thread (a cancel
    /// calls it after setting the cancel flag, which the run checks).
    pub(super) fn unblock(&self) {
        if let Some(latch) = self.blocked.with(|b| b.clone()) {
            latch.open();
        }
    }

    /// Run step 3 on the caller's thread: blocks until generation `target`
    /// of object `index` completes or the run is cancelled; `false` when
    /// cancelled.
    /// Meanwhile it runs the preparation's critical CPU tasks (the chain
    /// the run promoted) that no worker took yet.
    fn block_on(
        &self,
        state: &crate::exec::PreparedExecutionState,
        (index, target): (usize, u64),
        preparation: &Submission,
        tctx: &TaskContext<'_>,
    ) -> bool {
        let latch = Arc::new(Latch::new());
        self.blocked.with(|b| *b = Some(latch.clone()));
        let opener = latch.clone();
        let registration = state
            .store()
            .waiter(index, crate::store::Generation(target))
            .on_complete(move |_outcome: GenerationOutcome| opener.open());
        // A cancel that ran before `blocked` was set set the flag first.
        while !latch.is_open() && !tctx.is_cancelled() {
            if !preparation.help_critical() {
                latch.wait();
            }
        }
        self.blocked.with(|b| *b = None);
        if let Some(registration) = registration {
            state.store().deregister(registration);
        }
        !tctx.is_cancelled()
    }

    /// Interest step 2 for this run (idempotent).
    pub(super) fn release_interest(&self, cancelled: bool) {
        if let Some(p) = self.interest.with(Option::take)
            && let Some(session) = self.session.upgrade()
        {
            session.release(&p, false, cancelled);
        }
    }

    /// One step of the continuation: `Ok(true)` when the run finished,
    /// `Ok(false)` when it suspended.
    fn step(&self, slot: &mut RunSlot, tctx: &TaskContext<'_>) -> Result<bool, Error> {
        let session = self.session.upgrade().ok_or(RunError::Cancelled)?;
        let session = &*session;
        let state = &*session.state;
        let RunSlot {
            ctx, started, id, ..
        } = slot;
        let id = *id;
        let ctx = ctx
            .as_mut()
            .expect("the context stays in the slot until wait");
        let par = match session.options.intra_op_threads {
            Some(n) => tctx.parallel().at_most(n),
            None => tctx.parallel(),
        };
        // A handle's `cancel` or the context's interrupt: between kernels.
        let interrupt = ctx.interrupt.clone();
        let stop = || tctx.is_cancelled() || interrupt.as_ref().is_some_and(|i| i.is_set());
        if !*started {
            *started = true;
            ctx.order()?;
            if session.is_hot() {
                let start = session.trace.as_ref().map(|_| Instant::now());
                // Inputs read in place: the hot run ends within this step.
                if ctx.run_hot(state, &par, &stop)? {
                    if let (Some(trace), Some(start)) = (&session.trace, start) {
                        trace.record(TraceLane::Inference, "run (hot)", start, Instant::now(), id);
                    }
                    ctx.finish_outputs(state)?;
                    return Ok(true);
                }
                // Evicted since the check: take the cold path.
            }
            // A cold run may suspend: its inputs are copied into buffers.
            state.begin_run_ordered(&mut ctx.invocation, &ctx.inputs, &ctx.order)?;
        }
        let steps = state.plan().steps();
        // Cold path: each finished step moves the preparation's look-ahead
        // frontier (run step 3), so reads and prepacks keep ahead of the
        // inference instead of starting only when it stalls.
        let preparation = session.preparation.with(|p| p.clone());
        let on_step = |step: usize, start: Instant, end: Instant| {
            if let Some(trace) = &session.trace {
                let budget = state.budget();
                let memory = StepMemory {
                    live: Domain::ALL.map(|d| budget.live(d)),
                    evictions: state.evictions(),
                    restores: state.restores(),
                };
                trace.record_with(
                    TraceLane::Inference,
                    &steps[step].scope,
                    (start, end),
                    id,
                    Some(memory),
                );
            }
            if let Some(p) = &preparation {
                p.submission.advance(step as u32 + 1);
            }
        };
        loop {
            match state.resume_run(&mut ctx.invocation, &par, Some(&on_step), &stop)? {
                RunProgress::Done => {
                    ctx.finish_outputs(state)?;
                    return Ok(true);
                }
                RunProgress::Waiting { step, requirement } => {
                    let index = requirement.0 as usize;
                    let snapshot = state.store().snapshot(index);
                    let generation = snapshot.generation().0;
                    if snapshot.residency() == Residency::Failed {
                        // Its latest generation failed: this run fails with it
                        // (an explicit `prepare` retries the object; waiting for
                        // a retry nobody schedules would never end).
                        return Err(self.failure(step, requirement));
                    }
                    let preparation =
                        session.preparation(true, Some(requirement), Holder::Run(&self.interest));
                    let sub = &preparation.submission;
                    sub.advance(step as u32);
                    sub.promote(session.publisher[index]);
                    sub.stalled();
                    // The generation to wait for: the one in flight, else
                    // the next one a producer will claim.
                    let target = if snapshot.is_in_flight() || snapshot.is_resident() {
                        generation
                    } else {
                        generation + 1
                    };
                    // The caller's own thread, waiting for this run: it
                    // blocks here and goes on itself, rather than suspend
                    // (the run would resume on a CPU worker, leaving this
                    // thread idle and the run's kernels and the prepacks
                    // sharing that one worker).
                    if !tctx.on_worker() && self.block_on(state, (index, target), sub, tctx) {
                        continue;
                    }
                    // On a worker, or cancelled while blocked: suspend (a
                    // cancelled run's suspension ends it cancelled, suspend
                    // step 5).
                    let handle = tctx.suspend();
                    let registration = state
                        .store()
                        .waiter(index, crate::store::Generation(target))
                        .on_complete(move |_outcome: GenerationOutcome| handle.resume());
                    // The previous registration (if any) was called: it resumed
                    // this run.
                    self.waiting.with(|w| *w = registration);
                    return Ok(false);
                }
            }
        }
    }

    /// The error of a run whose object's production failed, naming the
    /// failing preparation task when the preparation has finished.
    fn failure(&self, step: usize, requirement: RequirementId) -> Error {
        let Some(session) = self.session.upgrade() else {
            return RunError::Cancelled.into();
        };
        let plan = session.state.plan();
        let cause = session
            .state
            .failure_cause(requirement)
            .unwrap_or_else(|| "its producer failed".to_owned());
        RunError::PreparationFailed {
            step: plan.steps()[step].scope.clone(),
            requirement: plan.resolved().requirements()[requirement.0 as usize]
                .name
                .clone(),
            cause,
        }
        .into()
    }
}

/// Run step 1: the run's continuation in a submission of the session's
/// pool (a finished one reused when the session kept one). `wake == false`
/// when the caller waits at once and runs the continuation itself.
pub(super) fn start(
    session: &Arc<SessionInner>,
    ctx: RuntimeContext,
    wake: bool,
) -> (Arc<RunContinuation>, Submission) {
    let id = session.runs.fetch_add(1, Ordering::Relaxed) + 1;
    let slot = RunSlot {
        ctx: Some(ctx),
        started: false,
        error: None,
        id,
    };
    match session.free_runs.with(Vec::pop) {
        Some((runner, done)) => {
            runner.slot.with(|s| *s = slot);
            let submission = session
                .pool
                .resubmit_with(done, wake)
                .unwrap_or_else(|_| unreachable!("kept only once finished"));
            (runner, submission)
        }
        None => {
            let runner = Arc::new(RunContinuation {
                session: Arc::downgrade(session),
                slot: Lock::new(slot),
                interest: Lock::default(),
                waiting: Lock::default(),
                blocked: Lock::default(),
            });
            let submission = session
                .pool
                .submit(session.run_graph.clone(), runner.clone())
                .expect("the session's pool has CPU workers");
            (runner, submission)
        }
    }
}
