//! Scheduler benchmarks: the spin-then-park threshold and the
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
//! * `dag/<shape>/<runner>`: empty tasks as a 1000-node chain, a 1000-node
//!   wide DAG (root → 998 → sink) and a seeded 10,000-node random DAG (0–3
//!   dependencies among the previous 64 nodes, one source, one sink) on a
//!   persistent pool (1 or 2 CPU workers; one submission per pass) vs a
//!   single-thread topological replay of the same graph (Kahn's algorithm
//!   with counters, and `plain`: the tasks in id order, no dependency
//!   tracking — the floor) and vs the naive
//!   rayon baseline (atomic counters, one `spawn` per ready node, 1 or 2
//!   threads). Timed from the start of the first task's run to the end of
//!   the last one's (submission set-up excluded); a per-node median over
//!   `DAG_SAMPLES` passes of each runner is printed first.
//!
//! `wake` creates a pool per sample, outside the timed span; workers are not
//! pinned (shared machine).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};
use onnx_prepared::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};

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

impl Span {
    /// The empty task every runner runs: records the span's ends.
    #[inline]
    fn task(&self, task: u32) {
        if task == self.warm_task {
            // Let the pool's creator park in `wait` first, so the two
            // workers have the two cores to themselves.
            let until = Instant::now() + SETTLE;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            self.warm.store(true, Ordering::Release);
        }
        if task == self.delay_task {
            while !self.warm.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            let until = Instant::now() + self.delay;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        if task == self.first {
            self.start.store(self.now(), Ordering::Release);
        }
        black_box(task);
        if task == self.last {
            self.end.store(self.now(), Ordering::Release);
        }
    }
}

impl TaskRunner for Span {
    fn run(&self, task: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        self.task(task.0);
        Ok(())
    }
}

/// How long the warm-up task runs before the measured handoff.
const SETTLE: Duration = Duration::from_micros(300);

fn config(cpu_workers: usize) -> WorkerPoolOptions {
    WorkerPoolOptions {
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
    let workers = WorkerPool::new(config(1));
    let pool = workers.submit(graph.clone(), span.clone()).unwrap();
    pool.wait();
    drop(pool);
    drop(workers);
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

fn graph_of(deps: &[Vec<TaskId>]) -> TaskGraph {
    let n = deps.len();
    TaskGraph::new(
        &vec![ResourceClass::Cpu; n],
        &vec![Priority::Critical; n],
        &Csr::from_rows(deps),
    )
    .unwrap()
}

fn chain(n: usize) -> Vec<Vec<TaskId>> {
    (0..n)
        .map(|i| {
            if i == 0 {
                vec![]
            } else {
                vec![TaskId(i as u32 - 1)]
            }
        })
        .collect()
}

fn wide(n: usize) -> Vec<Vec<TaskId>> {
    (0..n)
        .map(|i| match i {
            0 => vec![],
            i if i == n - 1 => (1..n - 1).map(|j| TaskId(j as u32)).collect(),
            _ => vec![TaskId(0)],
        })
        .collect()
}

/// `n` nodes: a source (0), `n − 2` random nodes each depending on 0–3
/// distinct nodes among the 64 before it (the source when it has none), and
/// a sink depending on every node nothing else depends on. Seeded
/// (SplitMix64), so every run builds the same graph.
fn random_dag(n: usize, seed: u64) -> Vec<Vec<TaskId>> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut deps: Vec<Vec<TaskId>> = vec![vec![]];
    let mut has_dependent = vec![false; n];
    for i in 1..n - 1 {
        let k = (next() % 4) as usize;
        let mut row: Vec<TaskId> = Vec::with_capacity(k);
        for _ in 0..k {
            let lo = i.saturating_sub(64);
            let d = lo + (next() as usize) % (i - lo);
            if !row.contains(&TaskId(d as u32)) {
                row.push(TaskId(d as u32));
            }
        }
        if row.is_empty() {
            row.push(TaskId(0));
        }
        for d in &row {
            has_dependent[d.0 as usize] = true;
        }
        deps.push(row);
    }
    deps.push(
        (0..n - 1)
            .filter(|&i| !has_dependent[i])
            .map(|i| TaskId(i as u32))
            .collect(),
    );
    deps
}

/// Single-thread topological replay (Kahn's algorithm with a stack).
fn replay(graph: &TaskGraph, counts: &mut [u32], stack: &mut Vec<TaskId>, span: &Span) {
    for (i, c) in counts.iter_mut().enumerate() {
        *c = graph.dependency_count(TaskId(i as u32));
        if *c == 0 {
            stack.push(TaskId(i as u32));
        }
    }
    while let Some(t) = stack.pop() {
        span.task(t.0);
        for &d in graph.dependents(t) {
            let c = &mut counts[d.0 as usize];
            *c -= 1;
            if *c == 0 {
                stack.push(d);
            }
        }
    }
}

/// The naive rayon baseline: atomic dependency counters, one `spawn` per
/// ready node inside a `scope`.
fn rayon_dag(pool: &rayon::ThreadPool, graph: &TaskGraph, counts: &[AtomicU32], span: &Span) {
    fn spawn<'s>(
        scope: &rayon::Scope<'s>,
        graph: &'s TaskGraph,
        counts: &'s [AtomicU32],
        span: &'s Span,
        t: TaskId,
    ) {
        scope.spawn(move |scope| {
            span.task(t.0);
            for &d in graph.dependents(t) {
                if counts[d.0 as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                    spawn(scope, graph, counts, span, d);
                }
            }
        });
    }
    for (i, c) in counts.iter().enumerate() {
        c.store(graph.dependency_count(TaskId(i as u32)), Ordering::Relaxed);
    }
    pool.install(|| {
        rayon::scope(|scope| {
            for i in 0..graph.len() {
                if graph.dependency_count(TaskId(i as u32)) == 0 {
                    spawn(scope, graph, counts, span, TaskId(i as u32));
                }
            }
        })
    });
}

/// One timed pass of `runner` over `graph`: start of task 0's run to the
/// end of the last task's run.
#[derive(Clone, Copy)]
enum Runner<'a> {
    /// The tasks in id order (a topological order in every graph here):
    /// no dependency tracking at all.
    Plain,
    Replay,
    Pool(&'a WorkerPool),
    Rayon(&'a rayon::ThreadPool),
}

fn pass(
    runner: Runner<'_>,
    graph: &Arc<TaskGraph>,
    scratch: &mut (Vec<u32>, Vec<TaskId>, Vec<AtomicU32>),
) -> Duration {
    let n = graph.len() as u32;
    match runner {
        Runner::Plain => {
            let span = Span::new(0, n - 1);
            for t in 0..n {
                span.task(t);
            }
            span.elapsed()
        }
        Runner::Replay => {
            let span = Span::new(0, n - 1);
            replay(graph, &mut scratch.0, &mut scratch.1, &span);
            span.elapsed()
        }
        Runner::Pool(pool) => {
            let span = Arc::new(Span::new(0, n - 1));
            let run = pool.submit(graph.clone(), span.clone()).unwrap();
            assert!(run.wait().is_success());
            span.elapsed()
        }
        Runner::Rayon(pool) => {
            let span = Span::new(0, n - 1);
            rayon_dag(pool, graph, &scratch.2, &span);
            span.elapsed()
        }
    }
}

/// Runs per runner for the printed per-node medians.
const DAG_SAMPLES: usize = 200;

fn dag(c: &mut Criterion) {
    const N: usize = 1000;
    const RANDOM_N: usize = 10_000;
    let pools: Vec<WorkerPool> = [1, 2].map(|w| WorkerPool::new(config(w))).into();
    let rayons: Vec<rayon::ThreadPool> = [1, 2]
        .map(|w| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(w)
                .build()
                .unwrap()
        })
        .into();
    let shapes = [
        ("chain", Arc::new(graph_of(&chain(N)))),
        ("wide", Arc::new(graph_of(&wide(N)))),
        (
            "random10k",
            Arc::new(graph_of(&random_dag(RANDOM_N, 0x5eed))),
        ),
    ];
    let runners: Vec<(String, Runner<'_>)> = vec![
        ("plain".into(), Runner::Plain),
        ("replay".into(), Runner::Replay),
        ("pool-1cpu".into(), Runner::Pool(&pools[0])),
        ("pool-2cpu".into(), Runner::Pool(&pools[1])),
        ("rayon-1".into(), Runner::Rayon(&rayons[0])),
        ("rayon-2".into(), Runner::Rayon(&rayons[1])),
    ];
    for (shape, graph) in &shapes {
        let n = graph.len();
        let mut scratch = (
            vec![0u32; n],
            Vec::with_capacity(n),
            (0..n).map(|_| AtomicU32::new(0)).collect(),
        );
        let mut line = format!(
            "dag/{shape} ({n} nodes, {} edges) ns/node, median of {DAG_SAMPLES}:",
            (0..n)
                .map(|i| graph.dependency_count(TaskId(i as u32)) as usize)
                .sum::<usize>()
        );
        for (name, runner) in &runners {
            let mut samples: Vec<Duration> = (0..DAG_SAMPLES)
                .map(|_| pass(*runner, graph, &mut scratch))
                .collect();
            samples.sort();
            let ns = samples[samples.len() / 2].as_nanos() as f64 / n as f64;
            line.push_str(&format!(" {name} {ns:.1}"));
        }
        eprintln!("{line}");
    }
    let mut group = c.benchmark_group("dag");
    for (shape, graph) in &shapes {
        let n = graph.len();
        group.throughput(Throughput::Elements(n as u64));
        let mut scratch = (
            vec![0u32; n],
            Vec::with_capacity(n),
            (0..n).map(|_| AtomicU32::new(0)).collect(),
        );
        for (name, runner) in &runners {
            group.bench_function(format!("{shape}/{name}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| pass(*runner, graph, &mut scratch)).sum());
            });
        }
    }
    group.finish();
}

criterion_group!(benches, wake, dag);
criterion_main!(benches);
