//! The runtime scheduler (foundation): runs a DAG of tasks, known only by
//! [`TaskId`](crate::plan::TaskId), on persistent CPU and I/O workers. It
//! never knows ONNX; a [`TaskRunner`] does the work of each task.
//!
//! Owns: the ready queues ([`ReadyQueues`], one bounded lock-free FIFO per
//! lane × priority), one packed state word per task ([`TaskState`]), the
//! worker threads ([`WorkerPool`]) and their parking words.
//!
//! Hot path: worker loop → `ReadyQueues::pop` (own lane, then inline;
//! critical before prefetch before background) → `TaskState::try_claim`
//! (one CAS) → `TaskRunner::run` → `TaskState::complete` → one `fetch_sub`
//! per dependent → push of each fired dependent + a wake-up only if a worker
//! of its lane sleeps. Nothing on it allocates or takes a lock.
//!
//! # Protocols
//!
//! **Post-ready** (a task becomes runnable):
//! 1. At pool start every task with no dependency is pushed before any
//!    worker exists.
//! 2. A finishing task calls `dependency_done` on each dependent; the
//!    `AcqRel` decrement that takes the count to zero returns `Fired`, and
//!    exactly that caller pushes the task to its lane's queue at its
//!    priority. Queues are sized to the graph, so the push cannot fail.
//! 3. The poster then runs sleep/wake step 2 for the task's lane.
//!
//! **Claim** (a task runs exactly once):
//! 1. A worker pops an id and CASes `CLAIMED` into its state word; only the
//!    winner runs it. Losers (`AlreadyClaimed`, `Cancelled`, `NotReady`)
//!    drop the entry, so duplicate queue entries are harmless.
//! 2. The `Acquire` claim synchronizes with the release sequence of
//!    dependency decrements, so every dependency's effects are visible.
//! 3. After `run`, the winner sets `DONE`, runs post-ready step 2 for each
//!    dependent and counts the task finished; the last one opens the
//!    completion latch ([`WorkerPool::wait`]).
//!
//! **Sleep/wake** (no busy spinning when idle, no lost wake-up):
//! 1. Worker: after `SCHEDULER_SPIN_POLLS` empty polls (spinning is cheaper
//!    than the 5–13 µs futex wake while work arrives back to back), it does
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
//! * **Admission** (`AdmissionPermit`, byte budgets, reserved critical CPU
//!   worker and I/O slot) and the admission deadlock test.
//! * **Priority inheritance / promotion**: re-pushing a producer chain into
//!   the critical queue. The claim already tolerates the duplicate entries
//!   and early entries (`NotReady`) this needs.
//! * **Look-ahead window** for session tasks (graph distance, bytes in flight).
//! * **Kernel parallelism lease**: `parallel_for` on these workers.
//! * **Cancellation propagation and failure**: `TaskState::cancel` exists,
//!   but no cancel token per submission, no failed-suppressed dependents; a
//!   panicking run is only counted and its dependents still run.
//! * **Several submissions per pool / sessions sharing a pool**: a pool runs
//!   the one graph it was created with; device lanes are rejected.
//! * Benchmarks, the random-DAG stress test, the park/unpark and admission
//!   loom models.

mod graph;
mod pool;
mod queue;
mod task_state;

pub use graph::{GraphError, TaskGraph};
pub use pool::{PoolConfig, TaskRunner, WorkerPool};
pub use queue::{Full, Lane, PRIORITIES, ReadyQueues};
pub use task_state::{Cancel, Claim, DependencyDone, MAX_DEPENDENCIES, Snapshot, TaskState};
