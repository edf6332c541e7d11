//! Admission on a real `WorkerPool`: the deadlock scenario (background work
//! fills every byte it may take and blocks; a critical task that needs
//! memory still runs), re-queueing of refused tasks, and tasks that can
//! never be admitted.
#![allow(clippy::disallowed_types)] // test bookkeeping

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use onnx_prepared::arena::{BudgetLimits, Domain, MemoryBudget};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    Admission, Lane, Refusal, SubmitOptions, TaskContext, TaskFailure, TaskGraph, TaskRunner,
    WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::Latch;

const GLOBAL: usize = 1000;
const BIG: u64 = 250;

fn config(cpu: usize, io: usize) -> WorkerPoolOptions {
    WorkerPoolOptions {
        cpu_workers: cpu,
        io_workers: io,
        pin_cpu_workers: false,
    }
}

/// Background I/O tasks 0..5 each hold 250 bytes and block on `gate`; task 5
/// (background CPU, no bytes) waits until three of them run, i.e. until the
/// non-critical share of the budget (750 of 1000) is full; task 6, critical
/// CPU needing 250 bytes, runs after it and opens the gate.
struct Scenario {
    budget: MemoryBudget,
    started: AtomicUsize,
    filled: Latch,
    gate: Latch,
    max_live: AtomicUsize,
    critical_saw_live: AtomicUsize,
    runs: Vec<AtomicUsize>,
}

impl TaskRunner for Scenario {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.runs[task.0 as usize].fetch_add(1, Ordering::SeqCst);
        self.max_live
            .fetch_max(self.budget.total_live(), Ordering::SeqCst);
        match task.0 {
            0..=4 => {
                if self.started.fetch_add(1, Ordering::SeqCst) + 1 == 3 {
                    self.filled.open();
                }
                self.gate.wait();
            }
            5 => self.filled.wait(),
            6 => {
                self.critical_saw_live
                    .store(self.budget.total_live(), Ordering::SeqCst);
                self.gate.open();
            }
            _ => unreachable!(),
        }
        Ok(())
    }
}

#[test]
fn critical_task_runs_while_background_work_fills_the_budget() {
    let mut resources = vec![ResourceClass::Io; 5];
    resources.extend([ResourceClass::Cpu, ResourceClass::Cpu]);
    let mut priorities = vec![Priority::Background; 6];
    priorities.push(Priority::Critical);
    let mut deps: Vec<Vec<TaskId>> = vec![Vec::new(); 6];
    deps.push(vec![TaskId(5)]);
    let mut domains = vec![Domain::Preparation; 5];
    domains.extend([Domain::Execution, Domain::Execution]);
    let bytes = [BIG, BIG, BIG, BIG, BIG, 0, BIG];
    for round in 0..20 {
        let graph = TaskGraph::new(&resources, &priorities, &Csr::from_rows(&deps))
            .unwrap()
            .with_estimates(&domains, &bytes)
            .unwrap();
        let budget = MemoryBudget::new(BudgetLimits::unlimited().with_global(GLOBAL));
        let admission = Admission::with_reserve_percent(budget.clone(), 25);
        let runner = Arc::new(Scenario {
            budget: budget.clone(),
            started: AtomicUsize::new(0),
            filled: Latch::new(),
            gate: Latch::new(),
            max_live: AtomicUsize::new(0),
            critical_saw_live: AtomicUsize::new(0),
            runs: (0..7).map(|_| AtomicUsize::new(0)).collect(),
        });
        // 4 I/O workers: 3 non-critical I/O slots; 2 CPU workers: 1.
        let workers = WorkerPool::new(config(2, 4));
        let pool = workers
            .submit_with(
                graph,
                runner.clone(),
                SubmitOptions {
                    admission: Some(Arc::new(admission)),
                    ..SubmitOptions::default()
                },
            )
            .unwrap();
        let outcome = pool.wait();
        assert!(outcome.is_success(), "round {round}: {outcome:?}");
        assert!(runner.runs.iter().all(|r| r.load(Ordering::SeqCst) == 1));
        // The critical task ran while three background reservations (750)
        // were held, and took the reserved last quarter.
        assert_eq!(runner.critical_saw_live.load(Ordering::SeqCst), GLOBAL);
        assert!(runner.max_live.load(Ordering::SeqCst) <= GLOBAL);
        let admission = pool.admission().unwrap();
        assert_eq!(admission.noncritical_running(Lane::Io), 0);
        drop(pool);
        drop(workers);
        assert_eq!(budget.total_live(), 0, "every permit returned its bytes");
    }
}

#[test]
fn refused_tasks_are_requeued_until_a_permit_is_released() {
    // 40 background CPU tasks of 300 bytes under a 1000-byte budget with a
    // 25 % reserve: at most two fit at once; all must run.
    struct Track {
        budget: MemoryBudget,
        running: AtomicUsize,
        max_running: AtomicUsize,
        runs: AtomicUsize,
    }
    impl TaskRunner for Track {
        fn run(&self, _: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
            let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_running.fetch_max(now, Ordering::SeqCst);
            assert!(self.budget.total_live() <= 750);
            std::thread::yield_now();
            self.runs.fetch_add(1, Ordering::SeqCst);
            self.running.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
    }
    let n = 40;
    let graph = TaskGraph::new(
        &vec![ResourceClass::Cpu; n],
        &vec![Priority::Background; n],
        &Csr::from_rows(&vec![Vec::<TaskId>::new(); n]),
    )
    .unwrap()
    .with_estimates(&vec![Domain::Preparation; n], &vec![300; n])
    .unwrap();
    let budget = MemoryBudget::new(BudgetLimits::unlimited().with_global(GLOBAL));
    let runner = Arc::new(Track {
        budget: budget.clone(),
        running: AtomicUsize::new(0),
        max_running: AtomicUsize::new(0),
        runs: AtomicUsize::new(0),
    });
    // 3 CPU workers: 2 non-critical slots, and 2 × 300 ≤ 750 < 3 × 300.
    let workers = WorkerPool::new(config(3, 1));
    let pool = workers
        .submit_with(
            graph,
            runner.clone(),
            SubmitOptions {
                admission: Some(Arc::new(Admission::new(budget.clone()))),
                ..SubmitOptions::default()
            },
        )
        .unwrap();
    let outcome = pool.wait();
    assert_eq!(outcome.completed, n);
    assert_eq!(runner.runs.load(Ordering::SeqCst), n);
    assert!(runner.max_running.load(Ordering::SeqCst) <= 2);
    drop(pool);
    drop(workers);
    assert_eq!(budget.total_live(), 0);
}

#[test]
fn a_task_that_can_never_be_admitted_fails_and_suppresses_its_dependents() {
    struct Nop;
    impl TaskRunner for Nop {
        fn run(&self, _: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
            Ok(())
        }
    }
    // 0: background, 800 bytes > the 750 a non-critical task may hold;
    // 1 after 0; 2: critical, 800 bytes (fits the full limit).
    let graph = TaskGraph::new(
        &[ResourceClass::Cpu; 3],
        &[
            Priority::Background,
            Priority::Background,
            Priority::Critical,
        ],
        &Csr::from_rows(&[vec![], vec![TaskId(0)], vec![]]),
    )
    .unwrap()
    .with_estimates(&[Domain::Execution; 3], &[800, 0, 800])
    .unwrap();
    let budget = MemoryBudget::new(BudgetLimits::unlimited().with_global(GLOBAL));
    let workers = WorkerPool::new(config(2, 1));
    let pool = workers
        .submit_with(
            graph,
            Arc::new(Nop),
            SubmitOptions {
                admission: Some(Arc::new(Admission::new(budget))),
                ..SubmitOptions::default()
            },
        )
        .unwrap();
    let outcome = pool.wait();
    assert_eq!(outcome.completed, 1);
    assert_eq!(outcome.failed_tasks, [TaskId(0)]);
    assert!(
        outcome
            .failed
            .unwrap()
            .1
            .message()
            .starts_with("admission:")
    );
    assert_eq!(outcome.suppressed, [TaskId(1)]);
}

#[test]
fn admission_policy_caps_and_slots() {
    let budget = MemoryBudget::new(
        BudgetLimits::unlimited()
            .with_global(GLOBAL)
            .with_domain(Domain::Preparation, 400),
    );
    let admission = Admission::new(budget.clone());
    assert_eq!(admission.reserve_percent(), 25);
    // Domain cap for non-critical work: 300 of 400.
    let a = admission
        .try_admit(Lane::Inline, Priority::Prefetch, Domain::Preparation, 300)
        .unwrap();
    assert_eq!(a.bytes(), 300);
    assert_eq!(
        admission
            .try_admit(Lane::Inline, Priority::Prefetch, Domain::Preparation, 1)
            .unwrap_err(),
        Refusal::Busy
    );
    // A critical task may take the reserved rest of the domain.
    let c = admission
        .try_admit(Lane::Cpu, Priority::Critical, Domain::Preparation, 100)
        .unwrap();
    assert_eq!(budget.total_live(), 400);
    assert!(matches!(
        admission.try_admit(Lane::Cpu, Priority::Critical, Domain::Preparation, 401),
        Err(Refusal::Never(_))
    ));
    drop((a, c));
    assert_eq!(budget.total_live(), 0);
}

#[test]
fn a_prefetch_task_without_a_free_slot_keeps_its_place_in_the_queue() {
    // Two I/O workers: one non-critical I/O slot. Prefetch task 0 holds it
    // until the gate opens; prefetch tasks 1..5 wait in the queue (not on
    // the deferred list, from where they would return behind later work);
    // critical task 5 runs on the other worker meanwhile.
    struct Gated {
        gate: Latch,
        holding: Latch,
        critical_ran: Latch,
        order: onnx_prepared::sync::Lock<Vec<u32>>,
    }
    impl TaskRunner for Gated {
        fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
            self.order.with(|o| o.push(task.0));
            match task.0 {
                0 => {
                    self.holding.open();
                    self.gate.wait();
                }
                5 => self.critical_ran.open(),
                _ => {}
            }
            Ok(())
        }
    }
    let mut priorities = vec![Priority::Prefetch; 5];
    priorities.push(Priority::Critical);
    let graph = TaskGraph::new(
        &[ResourceClass::Io; 6],
        &priorities,
        &Csr::from_rows(&vec![Vec::<TaskId>::new(); 6]),
    )
    .unwrap();
    let runner = Arc::new(Gated {
        gate: Latch::new(),
        holding: Latch::new(),
        critical_ran: Latch::new(),
        order: onnx_prepared::sync::Lock::new(Vec::new()),
    });
    let budget = MemoryBudget::new(BudgetLimits::unlimited());
    let workers = WorkerPool::new(config(1, 2));
    let pool = workers
        .submit_with(
            graph,
            runner.clone(),
            SubmitOptions {
                admission: Some(Arc::new(Admission::new(budget))),
                ..SubmitOptions::default()
            },
        )
        .unwrap();
    runner.holding.wait();
    runner.critical_ran.wait();
    // Long enough for the free worker to have taken (and, refused a slot,
    // deferred) every queued prefetch task many times over.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let admission = pool.admission().unwrap();
    let running = admission.noncritical_running(Lane::Io);
    let deferred = admission.deferred_tasks();
    let mut started = runner.order.with(|o| o.clone());
    // Opened before asserting: a failed assertion must not leave task 0
    // blocking the pool's drop.
    runner.gate.open();
    assert_eq!(running, 1);
    assert_eq!(deferred, 0, "left queued, not refused and deferred");
    started.sort_unstable();
    assert_eq!(started, [0, 5]);
    let outcome = pool.wait();
    assert_eq!(outcome.completed, 6);
    assert_eq!(admission.deferred_tasks(), 0);
}
