//! `SessionTasks`: runs one session task of the plan by id, from any thread
//! (cold path) — the runner a parallel scheduler calls for read and prepack
//! tasks, and what [`PreparedExecutionState::prepare_sequential`] replays on
//! one thread.
//!
//! A read task hands its decoded source to the prepacks that consume it
//! through per-task *inboxes*: one share (`Arc<Source>`) per consuming
//! prepack. The source's preparation-domain bytes return to the budget when
//! the last share is dropped, i.e. once every consuming prepack has run (or
//! when the `SessionTasks` is dropped, for a prepack that never ran because
//! another of its reads failed).
//!
//! # Protocols
//!
//! 1. **Read** task `t` of weight `w`:
//!    (a) if `t` publishes requirement `r` (the source used as is), claim `r`
//!    (store protocol 1; resident or in flight means someone else produces
//!    it: no claim, no wait);
//!    (b) the *consumers* are the prepack dependents whose requirement is
//!    neither resident nor in flight now, nor held by another session of
//!    the process (the prepack then publishes that session's object);
//!    (c) with no claim and no consumer, return: nothing is read;
//!    (d) read and decode `w` through the preparation arena;
//!    (e) with a claim, the read is `r`'s production: publish `r` (an error
//!    records `r`'s cause, then drops the claim: `r`'s generation fails and
//!    its waiters wake);
//!    (f) put one share of the source into each consumer's inbox;
//!    (g) if the read fails, claim and drop each consumer's requirement (a
//!    failed generation): waiters of those objects wake with the failure.
//! 2. **Prepack** task `p` publishing `q`:
//!    (a) take every share from `p`'s inbox (so they are released however
//!    `p` ends);
//!    (b) claim `q`: resident or in flight (an on-demand run produces it)
//!    means done;
//!    (c) collect the sources in dependency order, from the shares, or read
//!    now where a share is missing (the read saw `q` resident at 1(b) and it
//!    was evicted since, or the read was not executed);
//!    (d) build, admit and publish `q` under the claim (an error drops it).
//!
//! 3. **Budget gate** (only under a limited global or preparation budget):
//!    a read of `s` bytes starts only if `2s` (its buffer and the decoded
//!    source, briefly both live) fits the preparation domain next to the
//!    live bytes and the `2s` of every read running, and `2s` plus
//!    the estimated bytes of every other object not yet resident fits the
//!    global limit — so sources read ahead can never take the room the prepacks
//!    consuming them will need. A read no run waits for yet (not critical,
//!    not promoted) sees each limit less the critical reserve
//!    ([`SCHEDULER_CRITICAL_RESERVE_PERCENT`]): a speculative read never
//!    takes the room a critical one needs. A read that does not fit suspends
//!    ([`TaskContext::suspend`]) under the gate's lock; every session task
//!    that ends (its bytes released before it takes the lock) resumes all
//!    suspended reads, which check again. A prepack whose inbox lacks
//!    some of its reads' shares (dropped, see below) reads those sources
//!    itself and is gated the same way, for `2s` per missing share. When a
//!    task does not fit and no other session task runs, waiting could
//!    never end (only held shares could release bytes): the task takes out
//!    the shares held for every prepack that is not its own consumer —
//!    groups read ahead partly never block the group that must finish;
//!    their prepacks read those sources again — and then starts whether
//!    or not it fits, so that an impossible budget fails with the arena's
//!    typed error instead of hanging. The need is worked out and shares
//!    are taken out under the gate's lock, and nothing is taken out while
//!    a task runs, so an admitted prepack finds the shares it was counted
//!    with. While another task runs, a task that does not fit waits for
//!    it: admitting it at once could only fail its allocation.
//!    Shares never wait for a
//!    prepack that will not run: a failed read drops its consumers' shares
//!    (and marks them, so a sibling's later share is dropped too), and the
//!    session releases what a finished or cancelled preparation still
//!    holds ([`SessionTasks::release_held`]).
//! 4. **Read packed** task publishing `q`: claim `q` (resident or in
//!    flight means done), then read the payload from the prepared cache,
//!    check it, and publish it under the claim.
//!
//! Why the skip in 1(b)–(c) is safe: deciding "no consumer" only saves the
//! read; a prepack that finds its requirement absent after all falls back to
//! reading in 2(c), so correctness never depends on the order tasks run in,
//! only the avoidance of duplicate reads does. A task executed twice is
//! harmless (the second finds its requirement resident; a share that does
//! not fit an inbox is dropped).

use std::fmt;
use std::sync::Arc;

use onnx_prepared_kernels::{ParallelFor, Sequential, Tensor};

use crate::prepare::gate::{BudgetGate, Running};
use crate::prepare::PrepareError;
use crate::prepare::preparation::{Inputs, Producer, Retry, Role, Source};
use super::state::PreparedExecutionState;
use super::RunError;
use crate::arena::{Domain, UNLIMITED};

use crate::limits::SCHEDULER_CRITICAL_RESERVE_PERCENT;
use crate::plan::{Priority, RequirementId, TaskId, TaskKind, TaskScope};
use crate::scheduler::{TaskContext, TaskFailure, TaskRunner};
use crate::sync::{AtomicBool, Ordering, FreeList};

/// Runs the plan's session tasks one at a time by id; `Sync`, so a worker
/// pool may call [`execute`](Self::execute) from any thread (see module
/// docs for the protocols). Created by
/// [`PreparedExecutionState::session_tasks`]; dropping it releases every
/// source still waiting for a prepack.
pub struct SessionTasks<'a> {
    state: StateRef<'a>,
    /// Indexed by task id: sources delivered to a prepack by its reads, with
    /// the read task that delivered each. Capacity: the prepack's
    /// dependency count (0 for every other task).
    inbox: Box<[FreeList<Share>]>,
    /// Prepacks a failed read suppressed: they never run, so shares for
    /// them are dropped, not held (protocol 1(g)).
    dead: Box<[AtomicBool]>,
    /// Protocol 3; `None` under an unlimited budget. Shared by every
    /// runner of the state, so two preparations of one session never
    /// admit past each other.
    gate: Option<Arc<BudgetGate>>,
}

/// One consumer's share of a read task's source, tagged with the read.
type Share = (TaskId, Arc<Source>);

/// What the budget gate decided for a task (protocol 3).
enum Verdict {
    /// Counted as running with these bytes: start now.
    Admit(u64),
    /// Suspended until bytes are released.
    Suspend,
    /// Stuck (nothing running) behind shares held for other prepacks:
    /// those were taken out; drop them, then decide again.
    Preempt,
}

/// The state a [`SessionTasks`] acts on: borrowed, or shared (so the runner
/// can be handed to a scheduler as a `'static` [`TaskRunner`]).
enum StateRef<'a> {
    Borrowed(&'a PreparedExecutionState),
    Shared(Arc<PreparedExecutionState>),
}

impl std::ops::Deref for StateRef<'_> {
    type Target = PreparedExecutionState;

    fn deref(&self) -> &PreparedExecutionState {
        match self {
            StateRef::Borrowed(s) => s,
            StateRef::Shared(s) => s,
        }
    }
}

/// A scheduler runs session tasks through [`SessionTasks::execute`]; the
/// typed error becomes the task's failure message.
impl TaskRunner for SessionTasks<'static> {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let lease = match self.state.pack_threads {
            Some(n) => ctx.parallel().at_most(n),
            None => ctx.parallel(),
        };
        let Some(gate) = &self.gate else {
            return self
                .execute_on(task, &lease)
                .map_err(|e| TaskFailure::new(e.to_string()));
        };
        let Some(need) = self.admit(gate, task, ctx) else {
            return Ok(()); // Suspended: runs again once bytes were released.
        };
        let _running = Running(gate, need);
        self.execute_on(task, &lease)
            .map_err(|e| TaskFailure::new(e.to_string()))
    }
}

impl SessionTasks<'_> {
    /// Protocol 3: `Some(bytes admitted)` when `task` may start now
    /// (counted as running), `None` when it was suspended.
    fn admit(&self, gate: &BudgetGate, task: TaskId, ctx: &TaskContext<'_>) -> Option<u64> {
        let tasks = self.state.plan().tasks();
        let t = task.0 as usize;
        // Reads nobody waits for yet keep the critical reserve free.
        let critical = ctx.priority() == Priority::Critical;
        let mut preempted = false;
        loop {
            let mut dropped = Vec::new();
            let verdict = gate.inner.with(|g| {
                // Worked out under the gate's lock, like a preemption's
                // drops: a prepack's missing shares stay as counted until
                // it runs (nothing is preempted while a task runs).
                let need = self.need(task);
                let fits =
                    need == 0 || self.fits(gate, g.admitted + need, tasks.publishes[t], critical);
                // Nothing running can release bytes: only held shares could.
                let stuck = !fits && g.running == 0;
                if stuck && !preempted && g.held > 0 {
                    dropped = self.take_other_shares(t);
                    g.held = g.held.saturating_sub(dropped.len());
                    Verdict::Preempt
                } else if fits || stuck {
                    g.running += 1;
                    g.admitted += need;
                    Verdict::Admit(need)
                } else {
                    g.suspended.push(ctx.suspend());
                    Verdict::Suspend
                }
            });
            match verdict {
                Verdict::Admit(need) => return Some(need),
                Verdict::Suspend => return None,
                Verdict::Preempt => {
                    // Their bytes go now, outside the gate's lock; then
                    // the task checks again.
                    drop(dropped);
                    preempted = true;
                }
            }
        }
    }

    /// The preparation bytes `task` may allocate (protocol 3): `2s` for a
    /// read of `s` bytes (none for a read whose consumers all pack from
    /// pieces: it reads nothing); for a prepack, one piece of each source
    /// when it packs from pieces, else `2s` for each of its reads whose
    /// share is missing (dropped: it reads that source itself), unless its
    /// object is resident or in flight (it does nothing); else 0.
    fn need(&self, task: TaskId) -> u64 {
        let state = &*self.state;
        let tasks = state.plan().tasks();
        let weights = state.plan().resolved().model().weights();
        let read_bytes =
            |r: TaskId| tasks.reads[r.0 as usize].map_or(0, |w| weights[w.index()].byte_len());
        let t = task.0 as usize;
        let in_pieces = |d: &TaskId| {
            tasks.kind[d.0 as usize] == TaskKind::Prepack
                && tasks.publishes[d.0 as usize].is_some_and(|q| state.producer.pieces(q).is_some())
        };
        match tasks.kind[t] {
            // Its consumers read their pieces themselves: it reads nothing.
            TaskKind::ReadSource
                if tasks.publishes[t].is_none() && tasks.dependents.row(t).iter().all(in_pieces) =>
            {
                0
            }
            TaskKind::ReadSource => 2 * read_bytes(task),
            TaskKind::Prepack => {
                let done = tasks.publishes[t].is_some_and(|q| {
                    let now = state.store().snapshot(q.0 as usize);
                    now.is_resident() || now.is_in_flight()
                });
                if done {
                    return 0;
                }
                // From pieces unless it restores from the cache (whose
                // damaged entry falls back to whole sources).
                if let Some(pieces) = tasks.publishes[t]
                    .filter(|&q| !state.producer.restorable(q))
                    .and_then(|q| state.producer.pieces(q))
                {
                    return pieces.bytes();
                }
                tasks
                    .deps
                    .row(t)
                    .iter()
                    .filter(|&&r| {
                        tasks.kind[r.0 as usize] == TaskKind::ReadSource
                            && !self.inbox[t].any(|(from, _)| *from == r)
                    })
                    .map(|&r| 2 * read_bytes(r))
                    .sum()
            }
            _ => 0,
        }
    }

    /// Protocol 3's way out of a stuck gate: takes out the shares held for
    /// every prepack but task `t` and its own consumers, so a task stuck
    /// behind them (nothing running could release bytes) can start. Their
    /// prepacks read those sources again when they run. Called under the
    /// gate's lock; the caller drops the shares after it.
    fn take_other_shares(&self, t: usize) -> Vec<Share> {
        let tasks = self.state.plan().tasks();
        let own = |d: usize| d == t || tasks.dependents.row(t).iter().any(|c| c.0 as usize == d);
        (0..self.inbox.len())
            .filter(|&d| !own(d))
            .flat_map(|d| self.inbox[d].drain())
            .collect()
    }

    /// Whether `need` more preparation bytes fit both limits (protocol 3);
    /// `own` is the object the read publishes as is (its bytes are part of
    /// `need`, not pending). A read that is not `critical` sees each limit
    /// less the critical reserve ([`SCHEDULER_CRITICAL_RESERVE_PERCENT`]).
    fn fits(
        &self,
        gate: &BudgetGate,
        need: u64,
        own: Option<RequirementId>,
        critical: bool,
    ) -> bool {
        let budget = self.state.budget();
        let need = usize::try_from(need).unwrap_or(usize::MAX);
        let usable = |limit: usize| {
            if critical || limit == UNLIMITED {
                limit
            } else {
                limit - limit / 100 * SCHEDULER_CRITICAL_RESERVE_PERCENT
            }
        };
        let prep_limit = usable(budget.limit(Domain::Preparation));
        if prep_limit != UNLIMITED
            && budget.live(Domain::Preparation).saturating_add(need) > prep_limit
        {
            return false;
        }
        let global = usable(budget.global_limit());
        if global == UNLIMITED {
            return true;
        }
        let store = self.state.store();
        let pending: u64 = gate
            .permanent
            .iter()
            .enumerate()
            .filter(|&(r, _)| {
                own.is_none_or(|own| own.0 as usize != r) && !store.snapshot(r).is_resident()
            })
            .map(|(_, &bytes)| bytes)
            .sum();
        let pending = usize::try_from(pending).unwrap_or(usize::MAX);
        budget
            .total_live()
            .saturating_add(need)
            .saturating_add(pending)
            <= global
    }

    /// Drops every share still waiting in an inbox (prepacks of a finished
    /// or cancelled preparation that will never run) and lets suspended
    /// reads check again.
    pub fn release_held(&self) {
        for d in 0..self.inbox.len() {
            self.drop_shares(d);
        }
    }

    /// Drops prepack `d`'s shares (their bytes first), then tells the gate.
    fn drop_shares(&self, d: usize) {
        let n = self.inbox[d].drain().len();
        if n > 0
            && let Some(gate) = &self.gate
        {
            gate.held(-(n as isize));
        }
    }

    /// Resumes every read suspended by the budget gate (they check again;
    /// a cancelled submission ignores them). Breaks the cycle a suspended
    /// read's handle would otherwise keep between a dropped preparation
    /// and its runner.
    pub fn resume_suspended(&self) {
        if let Some(gate) = &self.gate {
            drop(gate.inner.with(|g| std::mem::take(&mut g.suspended)));
        }
    }
}

impl Drop for SessionTasks<'_> {
    /// Releases the shares still in the inboxes (prepacks that never ran)
    /// and lets suspended reads check again.
    fn drop(&mut self) {
        self.release_held();
    }
}

impl fmt::Debug for SessionTasks<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionTasks")
            .field("tasks", &self.inbox.len())
            .field("held_shares", &self.held_shares())
            .finish()
    }
}

impl PreparedExecutionState {
    /// Runs every session task of the plan on the calling thread, in task-id
    /// order (a topological order), through
    /// [`SessionTasks::execute`]; stops at the
    /// first error. The sequential baseline of a pooled preparation.
    pub fn prepare_sequential(&self) -> Result<(), RunError> {
        let tasks = self.session_tasks();
        for t in self.plan().session_tasks() {
            tasks.execute(t)?;
        }
        Ok(())
    }

    /// A runner of this state's session tasks by id.
    pub fn session_tasks(&self) -> SessionTasks<'_> {
        SessionTasks::over(StateRef::Borrowed(self))
    }

    /// A runner of the session tasks of a shared state: `'static`, so it
    /// is a [`TaskRunner`] a [`crate::scheduler::WorkerPool`] can run.
    pub fn shared_session_tasks(self: &Arc<Self>) -> SessionTasks<'static> {
        SessionTasks::over(StateRef::Shared(self.clone()))
    }
}

impl<'a> SessionTasks<'a> {
    /// A runner over `state`, with empty inboxes, sharing the state's gate.
    fn over(state: StateRef<'a>) -> Self {
        let tasks = state.plan().tasks();
        let inbox = (0..tasks.len())
            .map(|t| {
                let capacity = match tasks.kind[t] {
                    TaskKind::Prepack => tasks.deps.row(t).len(),
                    _ => 0,
                };
                FreeList::new(capacity)
            })
            .collect();
        SessionTasks {
            dead: (0..tasks.len()).map(|_| AtomicBool::new(false)).collect(),
            inbox,
            gate: state.gate.clone(),
            state,
        }
    }

    /// The state the tasks act on.
    pub fn state(&self) -> &PreparedExecutionState {
        &self.state
    }

    /// Source shares delivered to prepacks that have not run yet.
    pub fn held_shares(&self) -> usize {
        self.inbox.iter().map(FreeList::len).sum()
    }

    /// Runs session task `task`: a `ReadSource` (protocol 1), a `Prepack`
    /// (protocol 2) or a `ReadPacked` (protocol 4). Call it at most once per task, after its dependencies
    /// returned `Ok`, for the work to be done once; any order is correct.
    ///
    /// # Errors
    /// A read's payload error (short read, checksum, injected fault), a
    /// budget refusal, a kernel's packing error, a requirement whose retry
    /// failed again; `Unsupported` for tasks that are not session reads or
    /// prepacks. The store stays consistent: a claimed requirement whose
    /// producer fails is marked failed.
    ///
    /// # Panics
    /// If `task` is not a task of the plan.
    pub fn execute(&self, task: TaskId) -> Result<(), RunError> {
        self.execute_on(task, &Sequential)
    }

    /// [`execute`](Self::execute), a large prepack split across `par`.
    fn execute_on(&self, task: TaskId, par: &dyn ParallelFor) -> Result<(), RunError> {
        let tasks = self.state.plan().tasks();
        let t = task.0 as usize;
        let result = match (tasks.scope[t], tasks.kind[t]) {
            (TaskScope::Session, TaskKind::ReadSource) => self.read(task),
            (TaskScope::Session, TaskKind::Prepack) => self.prepack(task, par),
            (TaskScope::Session, TaskKind::ReadPacked) => self.read_packed(task),
            (_, kind) => Err(RunError::Unsupported {
                what: format!(
                    "executing task {t} `{}` ({}) as a session read or prepack",
                    tasks.name[t],
                    kind.name()
                ),
            }),
        };
        if let (Err(e), Some(q)) = (&result, tasks.publishes[t]) {
            // A failed production recorded this cause already, before its
            // claim dropped; this also covers errors outside production (a
            // refused claim, an unsupported task).
            self.state
                .producer
                .record_failure(q, &format!("task `{}` failed: {e}", tasks.name[t]));
        }
        result
    }

    /// Protocol 1.
    fn read(&self, task: TaskId) -> Result<(), RunError> {
        let state = &*self.state;
        let producer = &state.producer;
        let tasks = state.plan().tasks();
        let t = task.0 as usize;
        let claim = match tasks.publishes[t] {
            Some(r) => match producer.claim(r, &mut Retry::Once)? {
                Role::Produce(claim) => Some((r, claim)),
                Role::InFlight(_) | Role::Resident => None,
            },
            None => None,
        };
        let consumers = tasks.dependents.row(t).iter().filter(|d| {
            let d = d.0 as usize;
            tasks.kind[d] == TaskKind::Prepack
                && tasks.publishes[d].is_some_and(|q| {
                    let now = state.store().snapshot(q.0 as usize);
                    !now.is_resident()
                        && !now.is_in_flight()
                        && !producer.shared_elsewhere(q)
                        && !producer.restorable(q)
                        && producer.pieces(q).is_none()
                })
        });
        if claim.is_none() && consumers.clone().next().is_none() {
            return Ok(());
        }
        // With a claim, the read is the production of `r` (an error is
        // recorded as `r`'s cause before its claim drops).
        let mut read = ReadHere(None);
        let produced = match claim {
            Some((r, claim)) => producer.produce(claim, r, &mut read),
            None => read.source(producer, task).map(drop),
        };
        let held = match (produced, read.0) {
            (Ok(()), Some(held)) => held,
            (Err(e), None) => {
                // Protocol 1(g): every consumer's generation fails with the
                // read, so whoever waits for those objects wakes and sees
                // the failure (its cause recorded first) instead of waiting
                // for a producer that will never run.
                let cause = format!("task `{}` failed: {e}", tasks.name[t]);
                for d in consumers {
                    // Suppressed with this read: siblings' shares go now.
                    self.dead[d.0 as usize].store(true, Ordering::SeqCst);
                    self.drop_shares(d.0 as usize);
                    if let Some(q) = tasks.publishes[d.0 as usize] {
                        producer.fail(q, &cause);
                    }
                }
                return Err(e.into());
            }
            // The read succeeded and building `r` failed: the consumers
            // fall back to reading themselves (protocol 2(c)).
            (Err(e), Some(_)) => return Err(e.into()),
            // Not reached: a read that returned `Ok` holds its source.
            (Ok(()), None) => return Ok(()),
        };
        for d in consumers {
            let d = d.0 as usize;
            // Full only when this read ran twice: the prepack has its share.
            if self.inbox[d].put((task, held.clone())).is_ok()
                && let Some(gate) = &self.gate
            {
                gate.held(1);
            }
            // A sibling read failed meanwhile: its drop may have run before
            // this put (the flag is set before that drop, read after this
            // put, both SeqCst), so drop again.
            if self.dead[d].load(Ordering::SeqCst) {
                self.drop_shares(d);
            }
        }
        Ok(())
    }

    /// Protocol 2.
    fn prepack(&self, task: TaskId, par: &dyn ParallelFor) -> Result<(), RunError> {
        let state = &*self.state;
        let tasks = state.plan().tasks();
        let p = task.0 as usize;
        let shares = self.inbox[p].drain();
        if let Some(gate) = &self.gate
            && !shares.is_empty()
        {
            gate.held(-(shares.len() as isize));
        }
        let q = tasks.publishes[p].expect("prepacks publish a requirement");
        let claim = match state.producer.claim(q, &mut Retry::Once)? {
            Role::Produce(claim) => claim,
            Role::InFlight(_) | Role::Resident => return Ok(()),
        };
        Ok(state.producer.produce(
            claim,
            q,
            &mut Delivered {
                shares,
                fresh: Vec::new(),
                par,
            },
        )?)
    }
}

impl SessionTasks<'_> {
    /// Protocol 4: claim the requirement (resident or in flight: done),
    /// then read, check and publish its packed payload.
    fn read_packed(&self, task: TaskId) -> Result<(), RunError> {
        let state = &*self.state;
        let q = state.plan().tasks().publishes[task.0 as usize]
            .expect("read-packed tasks publish a requirement");
        match state.producer.claim(q, &mut Retry::Once)? {
            Role::Produce(claim) => Ok(state.producer.produce(claim, q, &mut NoSources)?),
            Role::InFlight(_) | Role::Resident => Ok(()),
        }
    }
}

/// A read-packed task's inputs: it has no source (a damaged payload's
/// fallback reads its sources itself).
struct NoSources;

impl Inputs for NoSources {
    fn source(&mut self, p: &Producer, t: TaskId) -> Result<Arc<Tensor>, PrepareError> {
        Ok(p.read(t)?.tensor.clone())
    }
}

/// A read task's own read (protocol 1(d)): the source it reads, kept to be
/// shared with its consumers.
struct ReadHere(Option<Arc<Source>>);

impl Inputs for ReadHere {
    fn source(&mut self, p: &Producer, t: TaskId) -> Result<Arc<Tensor>, PrepareError> {
        let held = Arc::new(p.read(t)?);
        let tensor = held.tensor.clone();
        self.0 = Some(held);
        Ok(tensor)
    }
}

/// A prepack's inputs (protocol 2(c)): the shares its reads delivered, or
/// a source read now where a share is missing; sources read here stay
/// charged until the object is published.
struct Delivered<'a> {
    shares: Vec<Share>,
    fresh: Vec<Source>,
    par: &'a dyn ParallelFor,
}

impl Inputs for Delivered<'_> {
    fn source(&mut self, p: &Producer, t: TaskId) -> Result<Arc<Tensor>, PrepareError> {
        if let Some((_, held)) = self.shares.iter().find(|(from, _)| *from == t) {
            return Ok(held.tensor.clone());
        }
        let held = p.read(t)?;
        let tensor = held.tensor.clone();
        self.fresh.push(held);
        Ok(tensor)
    }

    fn parallel(&self) -> &dyn ParallelFor {
        self.par
    }
}
