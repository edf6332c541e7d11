//! Scheduler benchmarks (issue 5): the spin-then-park threshold and the
//! per-task overhead of the `WorkerPool`.
//!
//! * `wake/<delay>`: post-ready → run latency of a CPU worker. A CPU task
//!   finishes (the worker starts spinning), then an I/O task busy-waits
//!   `delay` and finishes, firing a CPU task; the latency is from the end of
//!   the I/O task's run to the start of the CPU task's run. The warm-up task
//!   first runs 300 µs so the pool's creator is parked in `wait` and the
//!   two workers have the two cores. With delay 0 the
//!   worker is still spinning; once the delay outlasts
//!   `SCHEDULER_SPIN_POLLS` empty polls the worker is parked and the latency
//!   includes the futex wake.
//! * `dag/<shape>/<runner>`: 1000 empty tasks as a chain or as a wide DAG
//!   (root → 998 → sink) on the pool (1 or 2 CPU workers) vs a single-thread
//!   topological replay of the same graph. Timed from the start of the first
//!   task's run to the end of the last one's (pool start-up excluded).
//!
//! Pools are created per iteration, outside the timed span; workers are not
//! pinned (shared machine).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{PoolConfig, TaskFailure, TaskGraph, TaskRunner, WorkerPool};
use onnx_prepared::sync::{AtomicBool, AtomicU64, Ordering};

/// Records, in ns since `base`, the start of `first`'s run and the end of
/// `last`'s run; `delay_task` busy-waits `delay` (after `warm` ran) before
/// it records.
struct Span {
    base: Instant,
    first: u32,
    last: u32,
    start: AtomicU64,
    end: AtomicU64,
    warm_task: u32,
    warm: AtomicBool,
    delay_task: u32,
    delay: Duration,
}

impl Span {
    fn new(first: u32, last: u32) -> Self {
        Self {
            base: Instant::now(),
            first,
            last,
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            warm_task: u32::MAX,
            warm: AtomicBool::new(false),
            delay_task: u32::MAX,
            delay: Duration::ZERO,
        }
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    fn elapsed(&self) -> Duration {
        Duration::from_nanos(
            self.end
                .load(Ordering::Acquire)
                .saturating_sub(self.start.load(Ordering::Acquire)),
        )
    }
}

impl TaskRunner for Span {
    fn run(&self, task: TaskId) -> Result<(), TaskFailure> {
        if task.0 == self.warm_task {
            // Let the pool's creator park in `wait` first, so the two
            // workers have the two cores to themselves.
            let until = Instant::now() + SETTLE;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            self.warm.store(true, Ordering::Release);
        }
        if task.0 == self.delay_task {
            while !self.warm.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let until = Instant::now() + self.delay;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        if task.0 == self.first {
            self.start.store(self.now(), Ordering::Release);
        }
        black_box(task);
        if task.0 == self.last {
            self.end.store(self.now(), Ordering::Release);
        }
        Ok(())
    }
}

/// How long the warm-up task runs before the measured handoff.
const SETTLE: Duration = Duration::from_micros(300);

fn config(cpu_workers: usize) -> PoolConfig {
    PoolConfig {
        cpu_workers,
        io_workers: 1,
        pin_cpu_workers: false,
    }
}

/// Delays swept by `wake` (µs).
const DELAYS_US: [u64; 7] = [0, 10, 30, 60, 100, 300, 1000];
/// Runs per delay for the printed percentiles.
const WAKE_SAMPLES: usize = 400;

/// One handoff on a fresh pool: end of task 1's run (after its delay) →
/// start of task 2's run.
fn wake_once(graph: &TaskGraph, delay_us: u64) -> Duration {
    let mut span = Span::new(1, 2);
    span.warm_task = 0;
    span.delay_task = 1;
    span.delay = Duration::from_micros(delay_us);
    let span = Arc::new(span);
    let pool = WorkerPool::new(config(1), graph.clone(), span.clone());
    pool.wait();
    drop(pool);
    span.elapsed()
}

fn wake(c: &mut Criterion) {
    // 0: cpu warm-up (the CPU worker starts spinning when it returns); 1: io, busy-waits `delay` after 0 ran; 2: cpu after 1.
    let graph = TaskGraph::new(
        &[ResourceClass::Cpu, ResourceClass::Io, ResourceClass::Cpu],
        &[Priority::Critical; 3],
        &Csr::from_rows(&[vec![], vec![], vec![TaskId(1)]]),
    )
    .unwrap();
    // Criterion reports means, which a descheduled worker on a shared
    // machine dominates; print the distribution too.
    for delay_us in DELAYS_US {
        let mut samples: Vec<Duration> = (0..WAKE_SAMPLES)
            .map(|_| wake_once(&graph, delay_us))
            .collect();
        samples.sort();
        let at = |q: usize| samples[(samples.len() - 1) * q / 100].as_secs_f64() * 1e6;
        eprintln!(
            "wake/{delay_us}us over {WAKE_SAMPLES} runs: p10 {:.2} µs, p50 {:.2} µs, p90 {:.2} µs",
            at(10),
            at(50),
            at(90)
        );
    }
    let mut group = c.benchmark_group("wake");
    for delay_us in DELAYS_US {
        group.bench_function(format!("{delay_us}us"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += wake_once(&graph, delay_us);
                }
                total
            });
        });
    }
    group.finish();
}

fn chain(n: usize) -> TaskGraph {
    let deps: Vec<Vec<TaskId>> = (0..n)
        .map(|i| {
            if i == 0 {
                vec![]
            } else {
                vec![TaskId(i as u32 - 1)]
            }
        })
        .collect();
    TaskGraph::new(
        &vec![ResourceClass::Cpu; n],
        &vec![Priority::Critical; n],
        &Csr::from_rows(&deps),
    )
    .unwrap()
}

fn wide(n: usize) -> TaskGraph {
    let deps: Vec<Vec<TaskId>> = (0..n)
        .map(|i| match i {
            0 => vec![],
            i if i == n - 1 => (1..n - 1).map(|j| TaskId(j as u32)).collect(),
            _ => vec![TaskId(0)],
        })
        .collect();
    TaskGraph::new(
        &vec![ResourceClass::Cpu; n],
        &vec![Priority::Critical; n],
        &Csr::from_rows(&deps),
    )
    .unwrap()
}

/// Single-thread topological replay (Kahn's algorithm with a stack).
fn replay(graph: &TaskGraph, counts: &mut [u32], stack: &mut Vec<TaskId>, runner: &dyn TaskRunner) {
    for (i, c) in counts.iter_mut().enumerate() {
        *c = graph.dependency_count(TaskId(i as u32));
        if *c == 0 {
            stack.push(TaskId(i as u32));
        }
    }
    while let Some(t) = stack.pop() {
        runner.run(t).unwrap();
        for &d in graph.dependents(t) {
            let c = &mut counts[d.0 as usize];
            *c -= 1;
            if *c == 0 {
                stack.push(d);
            }
        }
    }
}

fn dag(c: &mut Criterion) {
    const N: usize = 1000;
    let mut group = c.benchmark_group("dag");
    for (shape, graph) in [("chain", chain(N)), ("wide", wide(N))] {
        group.bench_function(format!("{shape}/replay"), |b| {
            let mut counts = vec![0u32; N];
            let mut stack = Vec::with_capacity(N);
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let span = Span::new(0, N as u32 - 1);
                    replay(&graph, &mut counts, &mut stack, &span);
                    total += span.elapsed();
                }
                total
            });
        });
        for workers in [1, 2] {
            group.bench_function(format!("{shape}/pool-{workers}cpu"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let span = Arc::new(Span::new(0, N as u32 - 1));
                        let pool = WorkerPool::new(config(workers), graph.clone(), span.clone());
                        pool.wait();
                        drop(pool);
                        total += span.elapsed();
                    }
                    total
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, wake, dag);
criterion_main!(benches);
