//! The runtime scheduler (foundation): runs a DAG of tasks, known only by
//! [`TaskId`](crate::plan::TaskId), on persistent CPU and I/O workers. It
//! never knows ONNX; a [`TaskRunner`] does the work of each task.
//!
//! Owns: the ready queues ([`ReadyQueues`], one bounded lock-free FIFO per
//! lane × priority), one packed state word per task ([`TaskState`]), the
//! worker threads ([`WorkerPool`]) and their parking words.
//!
//! Hot path: worker loop → `ReadyQueues::pop` (own lane, then inline;
//! critical before prefetch before background) → (`Admission::try_admit`,
//! a few CAS, when enabled) → `TaskState::try_claim`
//! (one CAS) → `TaskRunner::run` → `TaskState::complete` → one `fetch_sub`
//! per dependent → push of each fired dependent + a wake-up only if a worker
//! of its lane sleeps. Nothing on it allocates or takes a lock; the failure
//! and cancel paths (cold) do.
//!
//! # Protocols
//!
//! **Post-ready** (a task becomes runnable):
//! 1. At pool start every task with no dependency is pushed before any
//!    worker exists.
//! 2. A finishing task calls `dependency_done` on each dependent; the
//!    `AcqRel` decrement that takes the count to zero returns `Fired`, and
//!    exactly that caller pushes the task to its lane's queue at its
//!    priority (critical when its word shows the promoted mark, promote
//!    step 3). Queues hold two entries per task (promote step 4), so the
//!    push cannot fail.
//! 3. The poster then runs sleep/wake step 2 for the task's lane.
//!
//! **Claim** (a task runs exactly once):
//! 1. A worker pops an id; if a snapshot of its state word already shows it
//!    claimed, cancelled or not ready, it drops the entry. Otherwise it runs
//!    the admit protocol (when the pool has an [`Admission`]), then CASes
//!    `CLAIMED` into the state word; only the winner runs it. Losers
//!    (`AlreadyClaimed`, `Cancelled`, `NotReady`) drop the entry (and their
//!    permit, admit step 4), so duplicate queue entries are harmless.
//! 2. The `Acquire` claim synchronizes with the release sequence of
//!    dependency decrements, so every dependency's effects are visible.
//! 3. After `run` (a panic is caught and becomes a [`TaskFailure`]), the
//!    winner drops its permit (admit step 4) and sets `DONE`. On `Ok` it runs
//!    post-ready step 2 for each dependent; on `Err` it runs the failure
//!    protocol instead. Then it records the task's terminal state.
//! 4. **Terminal accounting**: every task reaches exactly one terminal
//!    state — completed or failed (recorded by its claimer), suppressed or
//!    cancelled (recorded by the one caller whose `TaskState::cancel` got
//!    `Cancelled`). Each records its code in the task's outcome word, then
//!    increments `terminal` (AcqRel); the increment that reaches the task
//!    count opens the completion latch, and [`WorkerPool::wait`] builds the
//!    [`RunOutcome`] from the outcome words after it.
//!
//! **Failure** (a failed task's dependents never run; other work is joined):
//! 1. A claimed run fails when it returns `Err`, panics, or can never be
//!    admitted (admit step 1, [`Refusal::Never`]). Its dependents are *not*
//!    decremented, so none of them can ever be claimed.
//! 2. The first failure (CAS on `first_failed`) keeps its [`TaskFailure`]
//!    for [`RunOutcome::failed`]; every failure is listed in
//!    `failed_tasks`.
//! 3. Before counting the failed task terminal, its claimer walks its
//!    transitive dependents depth-first, calling `TaskState::cancel` on each:
//!    `Cancelled` → record it suppressed and push its dependents;
//!    `AlreadyCancelled` → skip (whoever cancelled it walks on from there, or
//!    the cancel walk covers every task); `TooLate` cannot happen (step 1).
//! 4. Independent tasks are untouched: running ones finish and their
//!    dependents fire as usual; `wait` returns only when all are terminal.
//!
//! **Cancel** ([`CancelToken`], one per pool run; clones share it):
//! 1. `cancel` stores `cancel_requested` (SeqCst, read by
//!    `CancelToken::is_cancelled`).
//! 2. It calls `TaskState::cancel` on every task in id order and records
//!    each one it cancelled (`Cancelled`) as cancelled. When it returns,
//!    every task is claimed or cancelled, so no task that had not started
//!    ever starts (claim sees `CANCELLED`; the cancel-vs-claim race has one
//!    winner). Running tasks finish and are counted by their claimers, and
//!    whatever they fire is dropped at its claim.
//! 3. Several cancellers, or a cancel racing a failure walk, are harmless:
//!    each task's cancel bit has exactly one setter, who records it.
//!
//! **Admit** ([`Admission`] over a [`crate::arena::MemoryBudget`]; policy in
//! its docs: a `SCHEDULER_CRITICAL_RESERVE_PERCENT` share of every byte
//! limit and one worker per CPU/I/O lane are out of reach of non-critical
//! work):
//! 1. The worker reads the release epoch (SeqCst), then `try_admit` takes, in
//!    this fixed order, a lane slot (non-critical CPU/I/O only), the
//!    non-critical share of the task's domain and of the global limit
//!    (non-critical only), and a budget [`crate::arena::Reservation`] of the
//!    task's estimated bytes in its domain ([`TaskGraph::with_estimates`],
//!    filled by `from_plan`). Any refusal undoes what this attempt took
//!    (without bumping the epoch) and returns `Busy`; an estimate larger than
//!    the priority may ever hold returns `Never` (the task fails).
//! 2. Granted: the [`AdmissionPermit`] (RAII) is held across the claim and
//!    the run.
//! 3. `Busy`: push the task onto the `deferred` queue, SeqCst fence, re-read
//!    the epoch; if it changed, run step 4's drain itself. Either the
//!    releaser's drain sees the deferred task or this re-read sees its bump,
//!    so no refused task waits for a release that already happened. (Because
//!    resources are taken in one order, a refusal caused by another
//!    attempt's partial hold traces back to a granted permit, whose release
//!    comes later.)
//! 4. Dropping a granted permit returns its bytes and slot, then bumps the
//!    epoch (SeqCst); the worker then fences and posts every deferred task
//!    again (post-ready protocol), where it retries from step 1.
//!
//! **Sleep/wake** (no busy spinning when idle, no lost wake-up):
//! 1. Worker: after `SCHEDULER_SPIN_POLLS` empty polls (30–60 µs; a
//!    spinning worker takes a posted task in ~1 µs, a parked one in 12–59 µs,
//!    `BENCHMARKS.md`), it does
//!    `sleepers += 1` (SeqCst), reads the lane's `wake` word (SeqCst), a
//!    SeqCst fence, then re-checks its lane's queues, the inline queues and
//!    `shutdown`; only if all are empty/unset does it futex-wait on `wake`
//!    while it still holds the value read. Then `sleepers -= 1` and re-poll.
//! 2. Poster: push, SeqCst fence, read the lane's `sleepers`; if non-zero,
//!    `wake += 1` and `wake_one` on the lane's word (targeted: an I/O task
//!    wakes an I/O worker; an inline task wakes a CPU worker).
//! 3. Why both checks: the two SeqCst sequences (increment `sleepers`, then
//!    read the queue / push, then read `sleepers`) cannot both miss each
//!    other. Either the worker's re-check sees the task, or the poster sees
//!    the sleeper and bumps `wake`, which either precedes the worker's read
//!    of `wake` (then the re-check sees the push) or changes it before the
//!    wait (the futex returns at once) or wakes the waiter.
//!
//! **Promote** ([`WorkerPool::promote`]; priority inheritance: a needed
//! task's producer chain jumps the queue):
//! 1. The promoter walks depth-first from the task through its
//!    dependencies ([`TaskGraph::dependencies`]), calling
//!    `TaskState::promote` (one `fetch_or` of the `PROMOTED` bit, which
//!    returns the word as it was) on each task it reaches.
//! 2. Mark already set → skip (its promoter walks on from it); claimed or
//!    cancelled → skip (running, done or never running, and so are its
//!    producers); not ready (count > 0) → walk on into its dependencies.
//!    So each task's dependencies are walked at most once per run.
//! 3. Ready but unclaimed (count 0) → push it into its lane's critical queue
//!    and run sleep/wake step 2. A poster reads the task's word after its
//!    own decrement (post-ready step 2) and posts a marked task at critical
//!    priority; admission admits a marked task as critical. Mark and count
//!    share one word, so either the mark precedes the last decrement (the
//!    poster sees it) or follows it (the promoter sees count 0 and pushes):
//!    a promoted task is never left only in a lower queue.
//! 4. The promoter's entry is a duplicate; the claim runs the task once and
//!    drops the other entry (`AlreadyClaimed`). At most two entries per task
//!    circulate (one from firing, one from the single promoter that set the
//!    mark; deferral moves an entry, never copies it), so every ready queue
//!    and the deferred queue hold twice the graph's tasks.
//!
//! **Shutdown** (`Drop for WorkerPool`):
//! 1. Store `shutdown = true` (SeqCst); bump and `wake_all` both lanes'
//!    words (a worker between its re-check and its wait sees a changed word).
//! 2. Workers see `shutdown` after their current task and whenever their
//!    queues look empty, and return; running tasks finish, unclaimed queued
//!    tasks never run.
//! 3. Join every worker thread.
//!
//! # Not yet implemented (issue 5)
//!
//! * **Admission gaps**: a task refused only because bytes are held outside
//!   the scheduler (an arena charging the same budget) is retried only when
//!   a scheduler permit is released; the domain share reserve applies per
//!   domain only where the domain is limited; estimates are not corrected
//!   by actual use.
//! * **Promotion from inside a task**: [`WorkerPool::promote`] needs the
//!   pool, which a [`TaskRunner`] cannot hold; a runner-side handle (and the
//!   invocation that calls it when a requirement is not resident) is
//!   missing. A concurrent second promoter of the same chain may return
//!   before the first finished marking it.
//! * **Look-ahead window** for session tasks (graph distance, bytes in flight).
//! * **Kernel parallelism lease**: `parallel_for` on these workers.
//! * **Cancellation details**: a [`CancelToken`] belongs to one pool run and
//!   holds its shared state (a runner owning its own pool's token leaks it);
//!   cancelling is an O(tasks) walk by the caller.
//! * **Several submissions per pool / sessions sharing a pool**: a pool runs
//!   the one graph it was created with; device lanes are rejected.
//! * **Benchmarks**: `benches/scheduler.rs` has the wake-up latency and the
//!   1000-task chain / wide DAG against a single-thread replay (numbers in
//!   `BENCHMARKS.md`: ~54–61 ns per task on one worker, 10–11× replay,
//!   against the 20 ns target; two CPU workers racing for empty
//!   tasks are 3–6× slower than one). Missing: the tiny-llm session tasks
//!   sequential vs pooled, the 10,000-node random DAG against rayon, a
//!   breakdown of the 12–59 µs parked wake, and spinning that backs off
//!   when cores are oversubscribed (a spinning worker then waits ~57 µs).
//! * The random-DAG stress test (with random failures, cancellations and
//!   promotions, counting allocator), the park/unpark loom model and an
//!   admission model with non-critical slots.

mod admission;
mod graph;
mod outcome;
mod pool;
mod queue;
mod submission;
mod task_state;
mod window;

pub use admission::{Admission, AdmissionPermit, Refusal};
pub use graph::{GraphError, TaskGraph, UNGATED};
pub use outcome::{RunOutcome, TaskFailure};
pub use pool::{Lease, PoolConfig, WorkerPool};
pub use queue::{Full, Lane, PRIORITIES, ReadyQueues};
pub use submission::{
    CancelToken, Submission, SubmitError, SubmitOptions, TaskContext, TaskRunner, WindowState,
};
pub use task_state::{
    Cancel, Claim, DependencyDone, FireClaim, MAX_DEPENDENCIES, Snapshot, TaskState,
};
pub use window::LookAheadOptions;
