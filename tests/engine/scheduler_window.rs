//! The look-ahead window on a real `WorkerPool`: gated tasks are released
//! by graph distance as the invocation advances, the window grows on
//! stalls and shrinks near the residency limit, bytes in flight stay
//! bounded, and promotion bypasses it. Progress is observed through the
//! runner's own counters (polled with a generous deadline), never timed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use onnx_prepared::arena::{BudgetLimits, Domain, MemoryBudget};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    LookAheadOptions, SubmitOptions, TaskContext, TaskFailure, TaskGraph, TaskRunner, UNGATED,
    WindowState, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicUsize, Ordering};

struct Counter {
    runs: Vec<AtomicUsize>,
    total: AtomicUsize,
    running: AtomicUsize,
    max_running: AtomicUsize,
    /// How long each run lasts (lets runs overlap).
    hold: Duration,
    /// Each run waits (up to 10 s) until this many run at once (0: no wait).
    meet: usize,
}

impl Counter {
    fn new(n: usize, hold: Duration) -> Arc<Self> {
        Arc::new(Self {
            runs: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            total: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            hold,
            meet: 0,
        })
    }

    /// A counter whose runs each wait until `meet` of them run at once.
    fn meeting(n: usize, meet: usize) -> Arc<Self> {
        let mut counter = Arc::into_inner(Self::new(n, Duration::ZERO)).unwrap();
        counter.meet = meet;
        Arc::new(counter)
    }

    fn ran(&self, t: usize) -> bool {
        self.runs[t].load(Ordering::SeqCst) > 0
    }

    /// Waits (up to 10 s) until `n` runs finished; then lets a few
    /// milliseconds pass so a wrongly released task would show up too.
    fn settle_at(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.total.load(Ordering::SeqCst) < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} ran",
                self.total.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            self.total.load(Ordering::SeqCst),
            n,
            "more tasks ran than released"
        );
    }
}

impl TaskRunner for Counter {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.max_running.load(Ordering::SeqCst) < self.meet && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(100));
        }
        if !self.hold.is_zero() {
            std::thread::sleep(self.hold);
        }
        self.runs[task.0 as usize].fetch_add(1, Ordering::SeqCst);
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.total.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn reads(n: usize, distances: &[u32], bytes: u64) -> TaskGraph {
    TaskGraph::new(
        &vec![ResourceClass::Io; n],
        &vec![Priority::Prefetch; n],
        &Csr::from_rows(&vec![Vec::<TaskId>::new(); n]),
    )
    .unwrap()
    .with_estimates(&vec![Domain::Preparation; n], &vec![bytes; n])
    .unwrap()
    .with_distances(distances)
    .unwrap()
}

fn pool(io_workers: usize) -> WorkerPool {
    WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 1,
        io_workers,
        pin_cpu_workers: false,
    })
}

fn window(initial: u32, max: u32) -> SubmitOptions {
    SubmitOptions {
        look_ahead: Some(LookAheadOptions {
            initial_distance: initial,
            max_distance: max,
            ..LookAheadOptions::default()
        }),
        ..SubmitOptions::default()
    }
}

#[test]
fn releases_by_distance_as_the_frontier_advances_and_grows_on_stalls() {
    // Tasks 0..12 at distances 0..12, plus one ungated task.
    let mut distances: Vec<u32> = (0..12).collect();
    distances.push(UNGATED);
    let counter = Counter::new(13, Duration::ZERO);
    let workers = pool(1);
    let run = workers
        .submit_with(reads(13, &distances, 10), counter.clone(), window(2, 8))
        .unwrap();
    // Frontier 0, window 2: distances 0..=2 and the ungated task.
    counter.settle_at(4);
    assert!((0..3).all(|t| counter.ran(t)) && counter.ran(12));
    assert_eq!(
        run.window(),
        Some(WindowState {
            frontier: 0,
            distance: 2,
            bytes_in_flight: 0
        })
    );
    run.advance(4); // up to 6
    counter.settle_at(8);
    assert!(counter.ran(6) && !counter.ran(7));
    run.advance(3); // never back
    assert_eq!(run.window().unwrap().frontier, 4);
    run.stalled(); // window 4: up to 8
    counter.settle_at(10);
    assert_eq!(run.window().unwrap().distance, 4);
    run.stalled(); // 8: up to 12
    run.stalled(); // capped at 8
    assert_eq!(run.window().unwrap().distance, 8);
    let outcome = run.wait();
    assert!(outcome.is_success());
    assert!(counter.runs.iter().all(|r| r.load(Ordering::SeqCst) == 1));
    assert_eq!(run.window().unwrap().bytes_in_flight, 0);
}

#[test]
fn bytes_in_flight_stay_within_the_bound() {
    // Eight 100-byte reads all needed at step 0, four I/O workers, 250
    // bytes in flight: at most two run at once.
    let counter = Counter::new(8, Duration::from_millis(5));
    let workers = pool(4);
    let options = SubmitOptions {
        look_ahead: Some(LookAheadOptions {
            initial_distance: 4,
            max_bytes_in_flight: 250,
            ..LookAheadOptions::default()
        }),
        ..SubmitOptions::default()
    };
    let run = workers
        .submit_with(reads(8, &[0; 8], 100), counter.clone(), options)
        .unwrap();
    assert!(run.window().unwrap().bytes_in_flight <= 250);
    assert!(run.wait().is_success());
    let max = counter.max_running.load(Ordering::SeqCst);
    assert!((1..=2).contains(&max), "{max} reads ran at once");

    // Control: without the window the same graph, on the same workers,
    // runs more than two reads at once (each read waits until three do:
    // the bound above, not the pool, is what kept it at two).
    let control = Counter::meeting(8, 3);
    let run = workers
        .submit(reads(8, &[0; 8], 100), control.clone())
        .unwrap();
    assert!(run.wait().is_success());
    let control_max = control.max_running.load(Ordering::SeqCst);
    assert!(
        control_max > max,
        "without the window {control_max} reads ran at once, with it {max}: no difference"
    );
}

#[test]
fn window_shrinks_as_residency_nears_its_limit() {
    let budget = MemoryBudget::new(BudgetLimits::unlimited().with_domain(Domain::Prepared, 1000));
    let resident = budget.reserve(Domain::Prepared, 900).unwrap();
    let counter = Counter::new(16, Duration::ZERO);
    let workers = pool(1);
    let options = SubmitOptions {
        look_ahead: Some(LookAheadOptions {
            initial_distance: 8,
            max_distance: 8,
            residency: Some((budget.clone(), Domain::Prepared)),
            shrink_at_percent: 80,
            ..LookAheadOptions::default()
        }),
        ..SubmitOptions::default()
    };
    let distances: Vec<u32> = (0..16).collect();
    let run = workers
        .submit_with(reads(16, &distances, 1), counter.clone(), options)
        .unwrap();
    // 90 % resident: every release decision halves the window, down to 1.
    assert_eq!(run.window().unwrap().distance, 1);
    counter.settle_at(2);
    assert!(counter.ran(0) && counter.ran(1) && !counter.ran(2));
    // Residency drops: stalls grow the window again and release more.
    drop(resident);
    run.stalled();
    run.stalled();
    assert_eq!(run.window().unwrap().distance, 4);
    counter.settle_at(5);
    run.advance(16);
    assert!(run.wait().is_success());
}

#[test]
fn promotion_bypasses_the_window_and_runs_once() {
    // 0 (distance 0) → 1 (distance 100); 2 at distance 50.
    let graph = TaskGraph::new(
        &[ResourceClass::Io, ResourceClass::Cpu, ResourceClass::Io],
        &[Priority::Prefetch; 3],
        &Csr::from_rows(&[vec![], vec![TaskId(0)], vec![]]),
    )
    .unwrap()
    .with_distances(&[0, 100, 50])
    .unwrap();
    let counter = Counter::new(3, Duration::ZERO);
    let workers = pool(1);
    let run = workers
        .submit_with(graph, counter.clone(), window(2, 8))
        .unwrap();
    counter.settle_at(1);
    assert!(counter.ran(0) && !counter.ran(1));
    // Task 1 fired and is held at distance 100; an invocation needs it now.
    assert_eq!(run.promote(TaskId(1)), 1);
    counter.settle_at(2);
    assert!(counter.ran(1) && !counter.ran(2));
    run.advance(100);
    assert!(run.wait().is_success());
    assert!(counter.runs.iter().all(|r| r.load(Ordering::SeqCst) == 1));
    assert_eq!(run.window().unwrap().bytes_in_flight, 0);
}

/// Records the order in which its tasks start.
#[derive(Default)]
struct StartOrder(onnx_prepared::sync::Lock<Vec<u32>>);

impl TaskRunner for StartOrder {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.0.with(|o| o.push(task.0));
        Ok(())
    }
}

#[test]
fn held_tasks_of_one_distance_are_released_in_plan_order() {
    // Tasks 0..6 at distance 3 (held by a window of 1), then task 6 at 2:
    // one advance releases them all, nearest first, then by task id.
    let mut distances = vec![3; 6];
    distances.push(2);
    let order = Arc::new(StartOrder::default());
    let workers = pool(1); // one I/O worker: start order = queue order
    let run = workers
        .submit_with(reads(7, &distances, 10), order.clone(), window(1, 1))
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        order.0.with(|o| o.is_empty()),
        "nothing is within the window"
    );
    run.advance(2);
    assert!(run.wait().is_success());
    assert_eq!(order.0.with(|o| o.clone()), [6, 0, 1, 2, 3, 4, 5]);
}
