//! `WorkerPool` on real threads: exactly-once execution in dependency order,
//! lane separation, priority order and shutdown.
#![allow(clippy::disallowed_types, clippy::needless_range_loop)] // test bookkeeping

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    GraphError, Lane, SubmitError, TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool,
    WorkerPoolOptions,
};

/// Records, per task, how often it ran and at which global sequence number,
/// and on which thread.
struct Recorder {
    seq: AtomicU64,
    runs: Vec<AtomicUsize>,
    /// Sequence number + 1 of the task's run (0 = not run).
    order: Vec<AtomicU64>,
    threads: Mutex<Vec<(TaskId, ThreadId)>>,
}

impl Recorder {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            seq: AtomicU64::new(0),
            runs: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            order: (0..n).map(|_| AtomicU64::new(0)).collect(),
            threads: Mutex::new(Vec::new()),
        })
    }
}

impl TaskRunner for Recorder {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let i = task.0 as usize;
        self.runs[i].fetch_add(1, Ordering::Relaxed);
        let s = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        self.order[i].store(s, Ordering::SeqCst);
        self.threads
            .lock()
            .unwrap()
            .push((task, std::thread::current().id()));
        Ok(())
    }
}

fn config(cpu: usize, io: usize) -> WorkerPoolOptions {
    WorkerPoolOptions {
        cpu_workers: cpu,
        io_workers: io,
        pin_cpu_workers: true,
    }
}

/// A chain of diamonds: task 0 → {1, 2} → 3 → {4, 5} → 6 … plus a few
/// extra cross edges; lanes alternate so both worker kinds take part.
fn diamond_chain(n: usize) -> (Vec<ResourceClass>, Vec<Priority>, Vec<Vec<TaskId>>) {
    let mut deps: Vec<Vec<TaskId>> = vec![Vec::new(); n];
    for i in 1..n {
        let head = (i - 1) / 3 * 3; // the join node of the previous diamond
        match i % 3 {
            1 | 2 => deps[i].push(TaskId(head as u32)),
            _ => {
                deps[i].push(TaskId(i as u32 - 1));
                deps[i].push(TaskId(i as u32 - 2));
                if i >= 7 {
                    deps[i].push(TaskId(i as u32 - 7));
                }
            }
        }
    }
    let resources = (0..n)
        .map(|i| match i % 5 {
            0 => ResourceClass::Io,
            4 => ResourceClass::Inline,
            _ => ResourceClass::Cpu,
        })
        .collect();
    let priorities = (0..n)
        .map(|i| match i % 3 {
            0 => Priority::Critical,
            1 => Priority::Prefetch,
            _ => Priority::Background,
        })
        .collect();
    (resources, priorities, deps)
}

#[test]
fn every_task_runs_once_after_all_its_dependencies() {
    let n = 1000;
    let (resources, priorities, deps) = diamond_chain(n);
    let graph = TaskGraph::new(&resources, &priorities, &Csr::from_rows(&deps)).unwrap();
    let recorder = Recorder::new(n);
    let workers = WorkerPool::new(config(2, 2));
    let pool = workers.submit(graph, recorder.clone()).unwrap();
    pool.wait();
    assert_eq!(pool.finished(), n);
    assert_eq!(pool.panicked(), 0);
    for i in 0..n {
        assert_eq!(recorder.runs[i].load(Ordering::Relaxed), 1, "task {i}");
        let at = recorder.order[i].load(Ordering::SeqCst);
        for d in &deps[i] {
            assert!(
                recorder.order[d.0 as usize].load(Ordering::SeqCst) < at,
                "task {i} ran before its dependency {d:?}"
            );
        }
    }
    drop(pool);
    drop(workers);
    // Nothing runs after the pool is gone.
    assert_eq!(recorder.seq.load(Ordering::SeqCst), n as u64);
}

#[test]
fn wide_independent_graph_runs_once_per_task() {
    let n = 5000;
    let resources = vec![ResourceClass::Cpu; n];
    let priorities = vec![Priority::Prefetch; n];
    let deps: Vec<Vec<TaskId>> = vec![Vec::new(); n];
    let graph = TaskGraph::new(&resources, &priorities, &Csr::from_rows(&deps)).unwrap();
    let recorder = Recorder::new(n);
    let workers = WorkerPool::new(config(2, 1));
    let pool = workers.submit(graph, recorder.clone()).unwrap();
    pool.wait();
    assert!(recorder.runs.iter().all(|r| r.load(Ordering::Relaxed) == 1));
}

#[test]
fn io_tasks_run_only_on_io_workers() {
    let n = 400;
    let resources: Vec<_> = (0..n)
        .map(|i| {
            if i % 2 == 0 {
                ResourceClass::Io
            } else {
                ResourceClass::Cpu
            }
        })
        .collect();
    let priorities = vec![Priority::Critical; n];
    // Each CPU task depends on the I/O task before it (read, then prepack).
    let deps: Vec<Vec<TaskId>> = (0..n)
        .map(|i| {
            if i % 2 == 1 {
                vec![TaskId(i as u32 - 1)]
            } else {
                vec![]
            }
        })
        .collect();
    let graph = TaskGraph::new(&resources, &priorities, &Csr::from_rows(&deps)).unwrap();
    let recorder = Recorder::new(n);
    let workers = WorkerPool::new(config(2, 2));
    let pool = workers.submit(graph, recorder.clone()).unwrap();
    pool.wait();
    let io: HashSet<ThreadId> = workers.thread_ids(Lane::Io).into_iter().collect();
    let cpu: HashSet<ThreadId> = workers.thread_ids(Lane::Cpu).into_iter().collect();
    assert_eq!((io.len(), cpu.len()), (2, 2));
    let threads = recorder.threads.lock().unwrap();
    assert_eq!(threads.len(), n);
    for &(task, thread) in threads.iter() {
        let expected = if task.0 % 2 == 0 { &io } else { &cpu };
        assert!(
            expected.contains(&thread),
            "task {task:?} ran on the wrong lane"
        );
    }
}

#[test]
fn critical_runs_before_background_on_one_worker() {
    let n = 40;
    let resources = vec![ResourceClass::Cpu; n];
    // Background first in id order, so FIFO alone would run them first.
    let priorities: Vec<_> = (0..n)
        .map(|i| {
            if i < n / 2 {
                Priority::Background
            } else {
                Priority::Critical
            }
        })
        .collect();
    let deps: Vec<Vec<TaskId>> = vec![Vec::new(); n];
    let graph = TaskGraph::new(&resources, &priorities, &Csr::from_rows(&deps)).unwrap();
    let recorder = Recorder::new(n);
    let workers = WorkerPool::new(config(1, 1));
    let pool = workers.submit(graph, recorder.clone()).unwrap();
    pool.wait();
    let last_critical = (n / 2..n)
        .map(|i| recorder.order[i].load(Ordering::SeqCst))
        .max();
    let first_background = (0..n / 2)
        .map(|i| recorder.order[i].load(Ordering::SeqCst))
        .min();
    assert!(last_critical < first_background);
}

#[test]
fn panicking_task_fails_and_suppresses_its_dependents() {
    struct Panicky;
    impl TaskRunner for Panicky {
        fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
            if task.0 == 1 {
                panic!("task 1 fails");
            }
            Ok(())
        }
    }
    let deps = vec![vec![], vec![TaskId(0)], vec![TaskId(1)]];
    let graph = TaskGraph::new(
        &[ResourceClass::Cpu; 3],
        &[Priority::Critical; 3],
        &Csr::from_rows(&deps),
    )
    .unwrap();
    let workers = WorkerPool::new(config(1, 1));
    let pool = workers.submit(graph, Arc::new(Panicky)).unwrap();
    let outcome = pool.wait();
    assert_eq!((pool.finished(), pool.panicked()), (2, 1));
    assert_eq!(outcome.completed, 1);
    assert_eq!(
        outcome.failed,
        Some((TaskId(1), TaskFailure::new("panicked: task 1 fails")))
    );
    assert_eq!(outcome.suppressed, [TaskId(2)]);
}

#[test]
fn drop_joins_idle_and_unfinished_pools() {
    for _ in 0..20 {
        let graph =
            TaskGraph::new(&[], &[], &Csr::<TaskId>::from_rows::<Vec<TaskId>>(&[])).unwrap();
        let workers = WorkerPool::new(config(2, 2));
        let pool = workers.submit(graph, Recorder::new(0)).unwrap();
        pool.wait();
        drop(pool);
        drop(workers);
    }
    // A pool dropped while tasks are queued: running tasks finish, joins.
    let n = 2000;
    let graph = TaskGraph::new(
        &vec![ResourceClass::Cpu; n],
        &vec![Priority::Background; n],
        &Csr::from_rows(&vec![Vec::<TaskId>::new(); n]),
    )
    .unwrap();
    let recorder = Recorder::new(n);
    let workers = WorkerPool::new(config(2, 1));
    let pool = workers.submit(graph, recorder.clone()).unwrap();
    drop(pool);
    drop(workers);
    assert!(recorder.runs.iter().all(|r| r.load(Ordering::Relaxed) <= 1));
    // Every worker thread released its `Arc` of the runner.
    assert_eq!(Arc::strong_count(&recorder), 1);
}

#[test]
fn graph_errors() {
    let cycle = Csr::from_rows(&[vec![TaskId(1)], vec![TaskId(0)]]);
    assert_eq!(
        TaskGraph::new(&[ResourceClass::Cpu; 2], &[Priority::Critical; 2], &cycle).unwrap_err(),
        GraphError::Cycle
    );
    let out = Csr::from_rows(&[vec![TaskId(5)]]);
    assert!(matches!(
        TaskGraph::new(&[ResourceClass::Cpu], &[Priority::Critical], &out),
        Err(GraphError::DependencyOutOfRange { .. })
    ));
}

/// A lane without workers is refused at submit with a typed error naming
/// the first task of that lane.
#[test]
fn a_lane_without_workers_is_refused_at_submit() {
    let graph = TaskGraph::new(
        &[ResourceClass::Cpu, ResourceClass::Io],
        &[Priority::Critical; 2],
        &Csr::from_rows(&[vec![], vec![TaskId(0)]]),
    )
    .unwrap();
    let workers = WorkerPool::new(config(1, 0));
    assert_eq!(
        workers.submit(graph, Recorder::new(2)).unwrap_err(),
        SubmitError::NoWorkers {
            task: TaskId(1),
            lane: Lane::Io
        }
    );
}

/// A finished submission runs again in place: every round runs each task
/// exactly once in dependency order; an unfinished one is handed back.
#[test]
fn resubmit_reruns_a_finished_submission() {
    let graph = TaskGraph::new(
        &[ResourceClass::Io, ResourceClass::Cpu, ResourceClass::Inline],
        &[Priority::Critical; 3],
        &Csr::from_rows(&[vec![], vec![TaskId(0)], vec![TaskId(1)]]),
    )
    .unwrap();
    let recorder = Recorder::new(3);
    let workers = WorkerPool::new(config(1, 1));
    let mut run = workers.submit(graph, recorder.clone()).unwrap();
    for round in 1..=100 {
        let outcome = run.wait();
        assert!(outcome.is_success());
        assert_eq!(outcome.completed, 3);
        for t in 0..3 {
            assert_eq!(
                recorder.runs[t].load(Ordering::Relaxed),
                round,
                "round {round}"
            );
        }
        run = workers.resubmit(run).unwrap();
    }
    run.wait();
    // Still running: handed back.
    let gate = Arc::new(onnx_prepared::sync::Latch::new());
    struct Gate(Arc<onnx_prepared::sync::Latch>);
    impl TaskRunner for Gate {
        fn run(&self, _: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
            self.0.wait();
            Ok(())
        }
    }
    let one = TaskGraph::new(
        &[ResourceClass::Cpu],
        &[Priority::Critical],
        &Csr::from_rows(&[Vec::<TaskId>::new()]),
    )
    .unwrap();
    let live = workers.submit(one, Arc::new(Gate(gate.clone()))).unwrap();
    let live = workers.resubmit(live).unwrap_err();
    gate.open();
    live.wait();
}
