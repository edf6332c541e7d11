//! The runtime scheduler: runs DAGs of tasks, known only by
//! [`TaskId`], on one persistent [`WorkerPool`] of
//! pinned CPU workers and I/O workers, shared by every submission (and
//! every session that passes the same pool). It never knows ONNX; a
//! [`TaskRunner`] does the work of each task.
//!
//! Owns: per submission ([`Submission`]) one packed state word per task
//! ([`TaskState`]), the ready queues ([`ReadyQueues`], one bounded lock-free
//! FIFO per lane × priority), terminal accounting and an optional look-ahead
//! window; per pool the worker threads, their parking words, the registry
//! of live submissions and the kernels' [`JobBoard`](crate::sync::JobBoard)
//! (protocol "lease").
//!
//! Hot path (worker loop): pop the worker's local buffer (its continuation,
//! claimed when it fired) → else help a kernel region (CPU workers) → else
//! pop the shared queues of the registry's submissions (critical before
//! prefetch before background; own lane, then inline) → (admission when
//! enabled) → claim (one CAS; skipped for a continuation) → `TaskRunner::run`
//! → one RMW per dependent (the first critical one this worker can run is
//! claimed in the same CAS and kept) → terminal counts batched in the
//! worker. Nothing on it allocates or takes a lock; submit, retire,
//! deferral, the window and the failure and cancel paths (cold) do.
//! Measured (`benches/scheduler.rs`, `BENCHMARKS.md`): a 1000-task chain
//! costs ~14 ns per task on two workers against ~5 ns for a Kahn replay. A
//! worker alone on the CPU lane runs a sequential graph in id order instead
//! (protocol "own"): ~8 ns per task, no dependency counting.
//!
//! # Protocols
//!
//! **Submit** ([`WorkerPool::submit_with`]):
//! 1. Every task's lane must have a worker ([`SubmitError::NoWorkers`]).
//! 2. The submission's words and queues are built; every task without
//!    dependencies is pushed (through the window when gated).
//! 3. It joins the registry (lock), `version += 1` (SeqCst), SeqCst fence,
//!    then every parked worker of each lane that got a task is woken. A
//!    worker refreshes its copy of the registry when `version` changed, and
//!    its sleep re-check compares `version` (sleep/wake step 1), so none
//!    sleeps through a submission.
//!
//! **Post-ready** (a task becomes runnable):
//! 1. A finishing task decrements each dependent's count (`AcqRel`). For
//!    the first dependent that is critical, ungated, of a lane this worker
//!    serves, with room in its buffer (and no admission), it uses
//!    `dependency_done_claiming`: the decrement that reaches zero also sets
//!    `CLAIMED`, and the task becomes this worker's continuation (run next,
//!    no queue, no wake-up). A worker alone on its lane claims every such
//!    dependent this way.
//! 2. Other fired dependents of that kind are kept unclaimed in the local
//!    buffer unless a peer of the lane is searching (the work-sharing hint);
//!    popping the buffer while a peer searches posts its unclaimed entries.
//! 3. Everything else is posted: gated tasks through the window (protocol
//!    "window"), then pushed to its lane's queue at its priority (critical
//!    when its word shows the promoted mark, promote step 3), then sleep/wake
//!    step 2. Queues hold two entries per task (promote step 4), so the push
//!    cannot fail.
//!
//! **Claim** (a task runs exactly once):
//! 1. A worker pops an id; if a snapshot of its state word already shows it
//!    claimed, cancelled or not ready, it drops the entry. Otherwise it runs
//!    the admit protocol (when the submission has an [`Admission`]), then
//!    CASes `CLAIMED` into the word; only the winner runs it. Losers drop the
//!    entry (and their permit, admit step 4), so duplicate entries are
//!    harmless. A continuation was claimed when it fired; if the submission
//!    was cancelled since, its claimer records it cancelled instead of
//!    running it.
//! 2. The `Acquire` claim synchronizes with the release sequence of
//!    dependency decrements, so every dependency's effects are visible.
//! 3. After `run` (a panic is caught and becomes a [`TaskFailure`]), the
//!    winner drops its permit (admit step 4); on `Ok` it runs post-ready for
//!    each dependent, on `Err` the failure protocol. Then it records the
//!    task's terminal code.
//! 4. **Terminal accounting**: every task reaches exactly one terminal state
//!    — completed or failed (its claimer), suppressed or cancelled (the one
//!    caller whose `TaskState::cancel` got `Cancelled`). Each stores its code
//!    in the task's outcome word. Claimers count in a worker-local batch and
//!    publish it when the local buffer runs dry — one AcqRel `fetch_add` on
//!    a padded word holding the terminal count (low half) and the finished
//!    runs (high half); cancellers publish at once. The addition that reaches the task count
//!    opens the completion latch (so [`Submission::wait`] returns after every
//!    outcome is published) and retires the submission.
//!
//! **Failure** (a failed task's dependents never run; other work is joined):
//! 1. A claimed run fails when it returns `Err`, panics, or can never be
//!    admitted ([`Refusal::Never`]). Its dependents are *not* decremented,
//!    so none of them can ever be claimed.
//! 2. The first failure (CAS on `first_failed`) keeps its [`TaskFailure`]
//!    for [`SubmissionOutcome::failed`]; every failure is listed in `failed_tasks`.
//! 3. Before counting the failed task, its claimer walks its transitive
//!    dependents calling `TaskState::cancel`: `Cancelled` → record it
//!    suppressed and walk on; `AlreadyCancelled` → skip (its canceller walks
//!    on); `TooLate` cannot happen (step 1).
//! 4. Independent tasks are untouched; `wait` returns only when all are
//!    terminal.
//!
//! **Cancel** ([`CancelToken`]; does not keep the submission alive):
//! 1. `cancel` stores `cancel_requested` (SeqCst).
//! 2. It calls `TaskState::cancel` on every task and records each one it
//!    cancelled. When it returns, every task is claimed or cancelled, so no
//!    task that had not started ever starts (the cancel-vs-claim race has one
//!    winner; a claimed-on-fire continuation, and every claim of an owned
//!    run, checks step 1's flag before it runs). Running tasks finish and
//!    are counted by their claimers.
//! 3. Several cancellers, or a cancel racing a failure walk, are harmless:
//!    each task's cancel bit has exactly one setter, who records it.
//!
//! **Admit** ([`Admission`] over a [`crate::arena::MemoryBudget`], possibly
//! shared by several submissions; policy in its docs):
//! 0. A worker takes a non-critical task of its CPU or I/O lane from a
//!    queue only while the controller shows a free slot of that lane (a
//!    racy hint, [`Admission::has_free_slot`]): a task it could not start
//!    keeps its place in the FIFO, in look-ahead order, instead of going
//!    to the deferred list and back to the queue's end behind later work.
//! 1. The worker reads the release epoch (SeqCst), then `try_admit` takes,
//!    in one fixed order, a lane slot (non-critical CPU/I/O only), the
//!    non-critical share of the task's domain and of the global limit, and a
//!    budget reservation of the task's estimated bytes. Any refusal undoes
//!    what this attempt took and returns `Busy`; an estimate larger than the
//!    priority may ever hold returns `Never` (the task fails).
//! 2. Granted: the [`AdmissionPermit`] (RAII) is held across claim and run.
//! 3. `Busy`: the task (with its submission) joins the controller's deferred
//!    list, SeqCst fence, re-read the epoch; if it changed, run step 4's
//!    drain itself. Either the releaser's drain sees the deferred task or
//!    this re-read sees its bump, so no refused task waits for a release
//!    that already happened.
//! 4. Dropping a granted permit returns its bytes and slot and bumps the
//!    epoch (SeqCst); the worker then posts every deferred task again, on
//!    its own submission's pool, where it retries from step 1; a permit
//!    that held a slot also wakes a sleeper of its lane (sleep/wake step 2:
//!    one that step 0 sent to sleep beside work it could not start; the
//!    drain's SeqCst fence orders the slot's return before the sleeper
//!    check). Any other
//!    release of the budget's bytes (an arena, an output lease, another
//!    controller's permit) does the same on the releasing thread: the
//!    controller watches its budget, whose release epoch is part of the
//!    admission epoch (arena reservation protocol step 5).
//!
//! **Sleep/wake** (no busy spinning when idle, no lost wake-up):
//! 1. Worker: after `SCHEDULER_SPIN_POLLS` empty polls
//!    (`SCHEDULER_JOB_SPIN_POLLS` after a kernel region, which come in
//!    bursts) and a short `yield_now` phase (under oversubscription the
//!    poster gets the core), it does `sleepers += 1` (SeqCst), reads its
//!    lane's `wake` word (SeqCst), a SeqCst fence, then re-checks `version`,
//!    the queues it serves in every cached submission (a queue of tasks it
//!    may not start, admit step 0, counts as empty), the job board (CPU
//!    workers) and `shutdown`; only if nothing changed does it futex-wait on
//!    `wake` while it still holds the value read. Then `sleepers -= 1`.
//! 2. Poster: push, SeqCst fence, read the lane's `sleepers`; if non-zero,
//!    `wake += 1` and `wake_one` (targeted: an I/O task wakes an I/O worker,
//!    an inline task a CPU worker). Submit, retire and a kernel region
//!    publish, then wake all sleepers of the lanes concerned.
//! 3. Why both checks: the two SeqCst sequences (increment `sleepers`, then
//!    read the queue / push, then read `sleepers`) cannot both miss each
//!    other. Either the re-check sees the task, or the poster sees the
//!    sleeper and bumps `wake`, which either precedes the worker's read of
//!    `wake` (then the re-check sees the push) or changes it before the wait
//!    (the futex returns at once) or wakes the waiter.
//!
//! **Promote** ([`Submission::promote`], [`TaskContext::promote`]; priority
//! inheritance: a needed task's producer chain jumps the queue):
//! 1. The promoter walks depth-first from the task through its dependencies,
//!    calling `TaskState::promote` (one `fetch_or` of `PROMOTED`, returning
//!    the word as it was) on each task it reaches.
//! 2. Mark already set → skip (its promoter walks on from it; a second
//!    promoter may so return before the first finished); claimed or
//!    cancelled → skip; not ready → walk on into its dependencies. Each
//!    task's dependencies are walked at most once per submission.
//! 3. Ready but unclaimed → push it into its lane's critical queue (bypassing
//!    the window) and run sleep/wake step 2. A poster reads the word after
//!    its own decrement and posts a marked task at critical priority;
//!    admission admits it as critical. Mark and count share one word, so a
//!    promoted task is never left only in a lower queue.
//! 4. The promoter's entry is a duplicate; the claim runs the task once. At
//!    most two entries per task circulate (one from firing — moved, never
//!    copied, by deferral, the window or work sharing — and one from the
//!    single promoter that set the mark), so every queue holds twice its
//!    lane's tasks.
//!
//! **Window** (look-ahead for gated session tasks; numbered in
//! `window.rs`): released by distance from the invocation's frontier and by
//! bytes in flight; [`Submission::advance`] moves the frontier,
//! [`Submission::stalled`] grows the window, residency near its limit
//! shrinks it.
//!
//! **Lease** (kernel parallelism on the CPU workers, [`WorkerPool::lease`],
//! [`TaskContext::parallel`]; numbered in `sync/fork_join.rs`): the caller
//! publishes a region on the pool's job board and runs its share; idle CPU
//! workers help between tasks. A region started inside a region runs inline;
//! there is no second pool.
//!
//! **Suspend** ([`TaskContext::suspend`], [`ResumeHandle`]; numbered in
//! `submission/suspend.rs`): a run parks its task, still claimed, without
//! holding a worker; a resume queues it again as a claimed critical entry,
//! and a cancel buries it.
//!
//! **Retire**: the completion latch's opener removes finished submissions
//! from the registry and bumps `version`; workers drop their copies (and
//! with them the runner) at their next refresh — a parked worker when it
//! next wakes (retiring wakes nobody: the hot path must not pay a futex
//! wake per run).
//!
//! **Help** ([`Submission::wait_helping`]): a caller about to block on its
//! submission first claims and runs its ready CPU and inline tasks itself
//! (the claim protocol makes it one more participant); it keeps no local
//! work and leases every CPU worker for kernels. A synchronous inference
//! so runs on the caller's thread with no handoff.
//!
//! **Own** (one CPU worker: no dependency counting at all). A graph whose
//! tasks are all critical CPU tasks with every dependency at a smaller id
//! ([`TaskGraph::is_sequential`]) has id order as a valid schedule with
//! nothing to reorder; a worker alone on the CPU lane runs it that way.
//! 1. Each submission has a mode word: `NORMAL` until someone takes it.
//!    The exclusive CPU worker, popping an unclaimed entry of a sequential
//!    submission without admission or window, CASes `NORMAL → OWNED`. Any
//!    other participant (a peer's normal claim, a helping waiter) CASes
//!    `NORMAL → SHARED` before its first claim. An entry it pops from an
//!    `OWNED` submission goes back to the queue (posted again), and a
//!    helping waiter stops helping: the owner skips the entry, or counting
//!    runs it should ownership end (step 4). So an owned submission had no
//!    task claimed before, no one but its owner claims in it, and no entry
//!    is lost.
//! 2. The owner walks ids in order: claim with one CAS that ignores the
//!    (stale) dependency count (`TaskState::try_claim_in_order`, `Acquire`
//!    load and CAS), then read `cancel_requested`; set → record the task
//!    cancelled (its claimer owns the accounting, as for a continuation),
//!    else run it. Failed or panicked → failure steps 2–3 on this thread,
//!    before the next claim, so every dependent is cancelled by then.
//!    Terminal counts are batched as usual.
//! 3. A task runs only after its dependencies: each one has a smaller id,
//!    so it was claimed earlier by the owner — it ran (same thread), failed
//!    (its dependents suppressed, claims fail), or was cancelled. A
//!    dependency can only be cancelled by a canceller that stored
//!    `cancel_requested` before its sweep; the owner's `Acquire` claim
//!    attempt that saw the cancelled word makes that store visible, so the
//!    step-2 check records the dependent cancelled instead of running it.
//! 4. A run that suspends ends ownership: mode → `SHARED` (SeqCst); the
//!    queue entry the owner consumed to take the submission is posted
//!    again if its task comes after the suspended one (entries are never
//!    lost: helpers put theirs back, step 1); then for every later task the
//!    owner subtracts, in one RMW, the
//!    dependencies it completed (claimed, earlier than the suspended task,
//!    outcome unrecorded); the subtraction that reaches zero posts the task.
//!    The resumed task completes and fires its dependents by the normal
//!    protocol; decrements commute, so every count reaches zero exactly
//!    once whichever comes first. A task resumed before its run returned,
//!    but cancelled meanwhile, is recorded cancelled instead of run again.
//!
//! Measured: 7.8 ns per task on a 10,000-node random DAG (1.2 for a plain
//! loop over the same empty tasks, 16 for a single-thread Kahn replay).
//!
//! **Resubmit** ([`WorkerPool::resubmit`]): a finished submission is
//! rearmed in place (words, queues, counts, latch) and registered again, so
//! a stream of identical submissions allocates nothing.
//!
//! **Shutdown** (`Drop for WorkerPool`):
//! 1. Cancel every registered submission (cancel protocol), so their
//!    `wait`s return.
//! 2. Store `shutdown = true` (SeqCst); bump and `wake_all` every lane.
//! 3. Workers return once their local work is done and their queues look
//!    empty; running tasks finish.
//! 4. Join every worker thread.

mod admission;
mod csr;
mod graph;
mod lanes;
mod local;
mod outcome;
mod pool;
mod queue;
mod submission;
mod task;
mod task_state;
mod window;

pub use admission::{Admission, AdmissionPermit, Refusal};
pub use csr::Csr;
pub use graph::{GraphError, TaskGraph, UNGATED};
pub use outcome::{SubmissionOutcome, TaskFailure};
pub use lanes::{Lease, WorkerPoolOptions};
pub use pool::{SpawnError, WorkerPool};
pub use queue::{Full, Lane, PRIORITIES, ReadyQueues};
pub use submission::{
    CancelToken, Remapped, ResumeHandle, Submission, SubmitError, SubmitOptions, TaskContext,
    TaskRunner, WindowState,
};
pub use task_state::{
    Cancel, TaskClaim, DependencyDone, FireClaim, MAX_DEPENDENCIES, TaskSnapshot, TaskState,
};
pub use task::{Priority, ResourceClass, TaskId};
pub use window::LookAheadOptions;
