//! tiny-llm session tasks (every read and prepack of the plan) run by id
//! through `SessionTasks::execute`.
//!
//! * `session_tasks/tiny-llm/sequential`: `prepare_sequential` on the calling
//!   thread, in task-id order — the baseline for a pooled preparation. Each
//!   iteration starts from a fresh state (new store, budget and file source;
//!   the immutable plan is shared); creating it and dropping the prepared
//!   state are outside the measured time. Reads hit the page cache after the
//!   first iteration, so "read" time is copying, checksumming and decoding.
//!
//! * `session_tasks/tiny-llm/pool-<n>cpu-<m>io`: the same tasks submitted to
//!   a persistent `WorkerPool` (`PreparedExecutionPlan::session_graph`): reads on the
//!   I/O workers, prepacks on the CPU workers, as soon as their reads are
//!   done. Same fresh-state setup, outside the measured time.
//!
//! Before the group runs, one sequential run is timed task by task and the
//! split between read and prepack tasks is printed (stderr), to tell whether
//! preparation is I/O- or CPU-bound.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use onnx_prepared::arena::MemoryBudget;
use onnx_prepared::exec::PreparedExecutionState;
use onnx_prepared::model::{FileSource, Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::{PreparedExecutionPlan, TaskKind};
use onnx_prepared::scheduler::{Remapped, WorkerPool, WorkerPoolOptions};

fn fresh(model: &Model, plan: &Arc<PreparedExecutionPlan>) -> PreparedExecutionState {
    let source = Arc::new(FileSource::open(model).expect("source"));
    PreparedExecutionState::new(plan.clone(), source, MemoryBudget::unlimited())
}

/// Times one sequential run task by task and prints the read/prepack split.
fn print_split(model: &Model, plan: &Arc<PreparedExecutionPlan>) {
    let state = fresh(model, plan);
    let tasks = state.session_tasks();
    let table = plan.tasks();
    let (mut read, mut prepack) = ((Duration::ZERO, 0usize), (Duration::ZERO, 0usize));
    for t in plan.session_tasks() {
        let start = Instant::now();
        tasks.execute(t).expect("session task");
        let spent = start.elapsed();
        let slot = match table.kind[t.0 as usize] {
            TaskKind::ReadSource => &mut read,
            _ => &mut prepack,
        };
        slot.0 += spent;
        slot.1 += 1;
    }
    let total = read.0 + prepack.0;
    let bytes: u64 = table
        .reads
        .iter()
        .flatten()
        .map(|w| model.weights()[w.index()].byte_len())
        .sum();
    eprintln!(
        "session_tasks/tiny-llm: one sequential run {total:?}: read tasks {:?} ({} tasks, \
         {bytes} bytes, {:.1}%), prepack tasks {:?} ({} tasks, {:.1}%)",
        read.0,
        read.1,
        100.0 * read.0.as_secs_f64() / total.as_secs_f64(),
        prepack.0,
        prepack.1,
        100.0 * prepack.0.as_secs_f64() / total.as_secs_f64(),
    );
}

fn session_tasks(c: &mut Criterion) {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let path = dir.join("tiny-llm.onnx");
    let model = Model::open(&path).expect("opens");
    let resolved =
        ResolvedModel::resolve(model.clone(), &ResolveOptions::default()).expect("resolves");
    let plan = Arc::new(PreparedExecutionPlan::build(resolved).expect("plan"));
    print_split(&model, &plan);

    let mut group = c.benchmark_group("session_tasks/tiny-llm");
    group.sample_size(20);
    group.bench_function("sequential", |b| {
        b.iter_batched(
            || fresh(&model, &plan),
            |state| {
                state.prepare_sequential().expect("prepares");
                // Returned, so dropping the prepared objects is not measured.
                black_box(state)
            },
            BatchSize::PerIteration,
        )
    });
    let (graph, ids) = plan.session_graph().expect("session graph");
    let graph = Arc::new(graph);
    for (name, cpu, io) in [("pool-1cpu-1io", 1, 1), ("pool-2cpu-2io", 2, 2)] {
        let workers = WorkerPool::new(WorkerPoolOptions {
            cpu_workers: cpu,
            io_workers: io,
            pin_cpu_workers: false,
        });
        group.bench_function(name, |b| {
            b.iter_batched(
                || Arc::new(fresh(&model, &plan)),
                |state| {
                    let runner = Arc::new(Remapped {
                        runner: state.shared_session_tasks(),
                        ids: ids.clone(),
                    });
                    let outcome = workers.submit(graph.clone(), runner).unwrap().wait();
                    assert!(outcome.is_success(), "{outcome:?}");
                    black_box(state)
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, session_tasks);
criterion_main!(benches);
