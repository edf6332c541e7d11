//! Stress: thousands of random DAGs, four at a time on one shared
//! `WorkerPool`, with random lanes and priorities, random failures and
//! panics, cancellations (from outside and from inside a task), promotions
//! (from outside and from inside a task) and a shared admission budget.
//! Every task runs at most once and only after its dependencies completed,
//! every submission reaches exactly one terminal state whose summary
//! matches what ran, and nothing the runs allocated is left behind
//! (counting allocator). The only test of this binary, so the global
//! allocation counter sees no other test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::sync::Arc;

use onnx_prepared::arena::{BudgetLimits, Domain, MemoryBudget};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    Admission, SubmissionOutcome, SubmitOptions, TaskContext, TaskFailure, TaskGraph, TaskRunner,
    WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicBool, AtomicUsize, Ordering};

/// Counts live allocations of the whole process.
struct CountingAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a plain atomic, touched without allocating.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// SplitMix64: a seeded, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    Complete,
    Fail,
    Panic,
    /// Cancels its own submission, then completes.
    CancelRun,
    /// Promotes a random later task, then completes.
    Promote(u32),
}

/// One random submission: its graph, what each task does, and what ran.
struct Case {
    deps: Vec<Vec<TaskId>>,
    actions: Vec<Action>,
    runs: Vec<AtomicUsize>,
    /// A dependency had not completed when the task started.
    early: AtomicBool,
}

impl TaskRunner for Case {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let t = task.0 as usize;
        self.runs[t].fetch_add(1, Ordering::SeqCst);
        if self.deps[t]
            .iter()
            .any(|d| self.runs[d.0 as usize].load(Ordering::SeqCst) != 1)
        {
            self.early.store(true, Ordering::SeqCst);
        }
        match self.actions[t] {
            Action::Complete => Ok(()),
            Action::Fail => Err(TaskFailure::new(format!("task {t} fails on purpose"))),
            Action::Panic => panic!("task {t} panics on purpose"),
            Action::CancelRun => {
                ctx.cancel_token().cancel();
                Ok(())
            }
            Action::Promote(target) => {
                ctx.promote(TaskId(target));
                Ok(())
            }
        }
    }
}

/// A random submission; `sequential`: every task a critical CPU task, so a
/// pool with one CPU worker may run it in id order (protocol "own").
fn random_case(rng: &mut Rng, sequential: bool) -> (Case, TaskGraph) {
    let n = 1 + rng.below(48) as usize;
    let mut deps = Vec::with_capacity(n);
    let mut resources = Vec::with_capacity(n);
    let mut priorities = Vec::with_capacity(n);
    let mut actions = Vec::with_capacity(n);
    for i in 0..n {
        let mut row = Vec::new();
        if i > 0 {
            for _ in 0..rng.below(4) {
                let d = TaskId(rng.below(i as u64) as u32);
                if !row.contains(&d) {
                    row.push(d);
                }
            }
        }
        deps.push(row);
        resources.push(match rng.below(3) {
            _ if sequential => ResourceClass::Cpu,
            0 => ResourceClass::Io,
            1 => ResourceClass::Cpu,
            _ => ResourceClass::Inline,
        });
        priorities.push(match rng.below(3) {
            _ if sequential => Priority::Critical,
            0 => Priority::Critical,
            1 => Priority::Prefetch,
            _ => Priority::Background,
        });
        actions.push(match rng.below(100) {
            0..=3 => Action::Fail,
            4..=5 => Action::Panic,
            6 => Action::CancelRun,
            7..=11 if i + 1 < n => {
                Action::Promote((i + 1 + rng.below((n - i - 1) as u64) as usize) as u32)
            }
            _ => Action::Complete,
        });
    }
    let graph = TaskGraph::new(&resources, &priorities, &Csr::from_rows(&deps)).unwrap();
    let graph = graph
        .with_estimates(
            &vec![Domain::Preparation; n],
            &(0..n).map(|_| rng.below(400)).collect::<Vec<u64>>(),
        )
        .unwrap();
    let case = Case {
        runs: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        deps,
        actions,
        early: AtomicBool::new(false),
    };
    (case, graph)
}

/// Checks one finished submission against what its runner saw.
fn check(case: &Case, outcome: &SubmissionOutcome, cancelled_from_outside: bool) {
    let n = case.runs.len();
    let runs: Vec<usize> = case.runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
    assert!(runs.iter().all(|&r| r <= 1), "a task ran twice: {runs:?}");
    assert!(
        !case.early.load(Ordering::SeqCst),
        "a task ran before a dependency completed"
    );
    let ran: HashSet<usize> = (0..n).filter(|&t| runs[t] == 1).collect();
    let failed: HashSet<usize> = outcome.failed_tasks.iter().map(|t| t.0 as usize).collect();
    let suppressed: HashSet<usize> = outcome.suppressed.iter().map(|t| t.0 as usize).collect();
    // One terminal state per task.
    assert_eq!(
        outcome.completed + failed.len() + suppressed.len() + outcome.cancelled,
        n
    );
    assert_eq!(outcome.completed + failed.len(), ran.len());
    for &t in &failed {
        assert!(ran.contains(&t));
        assert!(matches!(case.actions[t], Action::Fail | Action::Panic));
    }
    for &t in &ran {
        if matches!(case.actions[t], Action::Fail | Action::Panic) {
            assert!(failed.contains(&t), "task {t} failed but is not listed");
        }
    }
    for &t in &suppressed {
        assert!(!ran.contains(&t));
        assert!(
            case.deps[t]
                .iter()
                .any(|d| failed.contains(&(d.0 as usize)) || suppressed.contains(&(d.0 as usize))),
            "task {t} suppressed without a failed dependency"
        );
    }
    assert_eq!(outcome.failed.is_some(), !failed.is_empty());
    let cancelled_inside = ran.iter().any(|&t| case.actions[t] == Action::CancelRun);
    if !cancelled_from_outside && !cancelled_inside {
        assert_eq!(outcome.cancelled, 0);
        // Whatever had all dependencies completed ran.
        for t in 0..n {
            let ready = case.deps[t]
                .iter()
                .all(|d| ran.contains(&(d.0 as usize)) && !failed.contains(&(d.0 as usize)));
            if ready {
                assert!(ran.contains(&t), "task {t} was ready but never ran");
            }
        }
    }
}

fn round(
    pool: &WorkerPool,
    admission: &Arc<Admission>,
    rng: &mut Rng,
    rounds: usize,
    sequential: bool,
) -> usize {
    let mut tasks = 0;
    for _ in 0..rounds {
        let mut live = Vec::new();
        for _ in 0..4 {
            let (case, graph) = random_case(rng, sequential);
            assert!(!sequential || graph.is_sequential());
            tasks += graph.len();
            let case = Arc::new(case);
            let options = SubmitOptions {
                admission: (rng.below(3) == 0).then(|| admission.clone()),
                ..SubmitOptions::default()
            };
            let run = pool.submit_with(graph, case.clone(), options).unwrap();
            let cancel = rng.below(8) == 0;
            if rng.below(4) == 0 {
                run.promote(TaskId(rng.below(run.graph().len() as u64) as u32));
            }
            live.push((case, run, cancel));
        }
        for (_, run, cancel) in &live {
            if *cancel {
                run.cancel_token().cancel();
            }
        }
        for (case, run, cancel) in live {
            let outcome = run.wait();
            assert!(run.is_done());
            check(&case, &outcome, cancel);
            // Waiting again gives the same single terminal state.
            assert_eq!(run.wait(), outcome);
        }
    }
    tasks
}

#[test]
fn random_dags_run_each_task_at_most_once_and_leak_nothing() {
    // Silence the panics the runners raise on purpose.
    std::panic::set_hook(Box::new(|_| {}));
    let budget = MemoryBudget::new(BudgetLimits::unlimited().with_global(1000));
    let admission = Arc::new(Admission::new(budget.clone()));
    let config = WorkerPoolOptions {
        cpu_workers: 2,
        io_workers: 2,
        pin_cpu_workers: false,
    };
    let mut rng = Rng(0x5eed_0001);
    // Warm-up: first-use allocations of the runtime and std (thread-locals,
    // lazily initialized statics) happen here, outside the measured span.
    {
        let pool = WorkerPool::new(config);
        round(&pool, &admission, &mut rng, 20, false);
    }
    let before = LIVE.load(Ordering::SeqCst);
    let mut tasks = 0;
    {
        let pool = WorkerPool::new(config);
        tasks += round(&pool, &admission, &mut rng, 750, false);
    }
    // Critical CPU-only DAGs on one CPU worker: submissions without
    // admission are run in id order by their owner (protocol "own"), racing
    // cancels from outside and inside, promotions, failures and panics.
    let mut sequential = 0;
    {
        let pool = WorkerPool::new(WorkerPoolOptions {
            cpu_workers: 1,
            ..config
        });
        sequential += round(&pool, &admission, &mut rng, 500, true);
    }
    let after = LIVE.load(Ordering::SeqCst);
    let _ = std::panic::take_hook();
    assert!(tasks > 50_000, "{tasks} tasks");
    assert!(sequential > 20_000, "{sequential} sequential tasks");
    assert_eq!(
        after, before,
        "live allocations before and after 5000 submissions"
    );
    assert_eq!(budget.live(Domain::Preparation), 0);
}
