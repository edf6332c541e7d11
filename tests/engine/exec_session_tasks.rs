//! Session tasks run one at a time by id (`SessionTasks::execute`) on
//! tiny-llm: from one thread in task-id order and from two threads in a
//! valid concurrent order, every requirement becomes resident, preparation
//! bytes return, and a following run matches DirectReplay bit for bit
//! without reading another byte; a failed read fails exactly what depends
//! on it.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_prepared::arena::{Domain, MemoryBudget};
use onnx_prepared::exec::{
    DirectReplay, DirectReplayOptions, InvocationState, PreparedExecutionState, SessionTasks,
};
use onnx_prepared::model::{
    FaultInjectingSource, FileSource, Model, PayloadSource, ReadFault, ResolveOptions,
    ResolvedModel,
};
use onnx_prepared::plan::{PreparedExecutionPlan, RequirementId, TaskId, TaskKind};
use onnx_prepared::store::Residency;
use onnx_prepared::sync::{AtomicU32, Ordering, thread};
use onnx_prepared_kernels::{CpuFeatures, Tensor};

fn tiny_llm() -> PathBuf {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    dir.join("tiny-llm.onnx")
}

fn plan(path: &Path) -> Arc<PreparedExecutionPlan> {
    let model = Model::open(path).unwrap();
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    Arc::new(PreparedExecutionPlan::build(resolved).unwrap())
}

fn state(path: &Path, source: Arc<dyn PayloadSource>) -> PreparedExecutionState {
    PreparedExecutionState::new(plan(path), source, MemoryBudget::unlimited())
}

fn direct(path: &Path, inputs: &[(&str, &Tensor)]) -> Vec<(String, Tensor)> {
    let model = Model::open(path).unwrap();
    let source = FileSource::open(&model).unwrap();
    let options = DirectReplayOptions {
        threads: 1,
        cpu: CpuFeatures::detect(),
        ..DirectReplayOptions::default()
    };
    DirectReplay::new(&model, Arc::new(source), options)
        .unwrap()
        .run(inputs)
        .unwrap()
}

fn external_bytes(path: &Path) -> u64 {
    Model::open(path)
        .unwrap()
        .weights()
        .iter()
        .filter(|w| w.is_external())
        .map(|w| w.byte_len())
        .sum()
}

/// After every session task ran: all requirements resident, every external
/// weight read exactly once, preparation bytes returned, and a prefill run
/// that matches DirectReplay and reads nothing more.
fn check_prepared(path: &Path, s: &PreparedExecutionState, source: &dyn PayloadSource) {
    let requirements = s.plan().requirements().len();
    assert!(
        (0..requirements).all(|r| s.store().snapshot(r).is_resident()),
        "every requirement resident"
    );
    assert_eq!(s.store().resident_count(), requirements);
    assert_eq!(s.budget().live(Domain::Preparation), 0);
    assert_eq!(
        s.budget().live(Domain::Prepared),
        s.store().resident_bytes()
    );
    let read = source.counters().total();
    assert_eq!(read, external_bytes(path), "each weight read once");

    let owned = support::tiny_llm_prefill(8);
    let inputs: Vec<(&str, &Tensor)> = owned.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let got = s.run(&mut InvocationState::default(), &inputs).unwrap();
    assert_eq!(got, direct(path, &inputs), "bit for bit");
    assert_eq!(source.counters().total(), read, "the run read nothing more");
}

#[test]
fn session_tasks_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<SessionTasks<'static>>();
}

#[test]
fn one_thread_in_task_order_prepares_everything() {
    let path = tiny_llm();
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let s = state(&path, source.clone());
    let tasks = s.session_tasks();
    let mut kinds = Vec::new();
    for t in s.plan().session_tasks() {
        kinds.push(s.plan().tasks().kind[t.0 as usize]);
        tasks.execute(t).unwrap();
    }
    assert!(kinds.contains(&TaskKind::ReadSource) && kinds.contains(&TaskKind::Prepack));
    assert_eq!(tasks.held_shares(), 0, "every share was consumed");
    check_prepared(&path, &s, &*source);
}

#[test]
fn prepare_sequential_prepares_everything() {
    let path = tiny_llm();
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let s = state(&path, source.clone());
    s.prepare_sequential().unwrap();
    check_prepared(&path, &s, &*source);
}

#[test]
fn any_order_is_correct_and_reads_each_weight_once() {
    // Reverse order: each prepack reads its sources itself, and the reads
    // that run afterwards find their consumers resident and skip.
    let path = tiny_llm();
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let s = state(&path, source.clone());
    let tasks = s.session_tasks();
    let order: Vec<TaskId> = s.plan().session_tasks().collect();
    for &t in order.iter().rev() {
        tasks.execute(t).unwrap();
    }
    assert_eq!(tasks.held_shares(), 0);
    check_prepared(&path, &s, &*source);
}

#[test]
fn invocation_tasks_are_refused() {
    let path = tiny_llm();
    let model = Model::open(&path).unwrap();
    let s = state(&path, Arc::new(FileSource::open(&model).unwrap()));
    let step = s.plan().steps()[0].task;
    let err = s.session_tasks().execute(step).unwrap_err();
    assert!(err.to_string().contains("not supported"), "{err}");
}

const PENDING: u32 = 0;
const DONE: u32 = 1;
const FAILED: u32 = 2;

#[test]
// Scoped threads borrow the state; the sync seam has no `scope`.
#[allow(clippy::disallowed_methods)]
fn two_threads_reads_then_dependent_prepacks() {
    let path = tiny_llm();
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let s = state(&path, source.clone());
    let plan = s.plan().clone();
    let table = plan.tasks();
    let (reads, prepacks): (Vec<TaskId>, Vec<TaskId>) = plan
        .session_tasks()
        .partition(|t| table.kind[t.0 as usize] == TaskKind::ReadSource);
    assert!(
        prepacks
            .iter()
            .all(|p| table.kind[p.0 as usize] == TaskKind::Prepack)
    );
    let status: Vec<AtomicU32> = (0..table.len()).map(|_| AtomicU32::new(PENDING)).collect();
    let tasks = s.session_tasks();
    let run = |t: TaskId| {
        let result = tasks.execute(t);
        let word = if result.is_ok() { DONE } else { FAILED };
        status[t.0 as usize].store(word, Ordering::Release);
        result.unwrap();
    };
    std::thread::scope(|scope| {
        scope.spawn(|| reads.iter().for_each(|&t| run(t)));
        scope.spawn(|| {
            for &p in &prepacks {
                for d in table.deps.row(p.0 as usize) {
                    loop {
                        match status[d.0 as usize].load(Ordering::Acquire) {
                            DONE => break,
                            FAILED => panic!("dependency {d:?} of {p:?} failed"),
                            _ => thread::yield_now(),
                        }
                    }
                }
                run(p);
            }
        });
    });
    assert!(
        reads
            .iter()
            .chain(&prepacks)
            .all(|t| status[t.0 as usize].load(Ordering::Relaxed) == DONE)
    );
    assert_eq!(tasks.held_shares(), 0);
    check_prepared(&path, &s, &*source);
}

/// Requirements published by `read` or by a prepack depending on it.
fn published_from(plan: &PreparedExecutionPlan, read: TaskId) -> Vec<RequirementId> {
    let table = plan.tasks();
    let mut out: Vec<RequirementId> = table.publishes[read.0 as usize].into_iter().collect();
    for d in table.dependents.row(read.0 as usize) {
        if table.kind[d.0 as usize] == TaskKind::Prepack {
            out.extend(table.publishes[d.0 as usize]);
        }
    }
    out
}

/// Runs every session task but the dependents of `failing`, whose weight
/// reads fail; checks exactly the requirements produced from it are not
/// resident, with `expected` as their residency.
fn fail_one_read(path: &Path, failing: TaskId, expected: Residency) {
    let plan = plan(path);
    let table = plan.tasks();
    let weight = table.reads[failing.0 as usize].unwrap();
    let model = Model::open(path).unwrap();
    let faulty =
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(weight, ReadFault::Fail);
    let s = PreparedExecutionState::new(plan.clone(), Arc::new(faulty), MemoryBudget::unlimited());
    let tasks = s.session_tasks();
    let skipped = table.dependents.row(failing.0 as usize);
    for t in s.plan().session_tasks() {
        if skipped.contains(&t) {
            continue;
        }
        let result = tasks.execute(t);
        if t == failing {
            let err = result.unwrap_err();
            assert!(err.to_string().contains("injected"), "{err}");
        } else {
            result.unwrap();
        }
    }
    let lost = published_from(s.plan(), failing);
    assert!(!lost.is_empty());
    for r in 0..s.plan().requirements().len() {
        let now = s.store().snapshot(r);
        if lost.contains(&RequirementId(r as u32)) {
            assert!(!now.is_resident(), "requirement {r} must not be resident");
            assert_eq!(now.residency(), expected, "requirement {r}");
            let cause = s
                .failure_cause(RequirementId(r as u32))
                .expect("cause recorded");
            assert!(cause.contains("injected"), "{cause}");
        } else {
            assert!(now.is_resident(), "requirement {r} resident: {now:?}");
        }
    }
    // The other reads of a skipped prepack delivered shares nobody will
    // take: the failed read dropped them (protocol 1(g)), so no source
    // waits for a prepack that never runs.
    assert_eq!(tasks.held_shares(), 0);
    assert_eq!(
        s.budget().live(Domain::Preparation),
        0,
        "sources of a prepack that will never run are released at once"
    );
    drop(tasks);
}

/// On-demand production records why a requirement failed, like a session
/// task does: the cause is readable once `prepare` returns (and before the
/// failed generation's waiters wake).
#[test]
fn an_on_demand_failure_records_its_cause() {
    let path = tiny_llm();
    let plan = plan(&path);
    let table = plan.tasks();
    let failing = plan
        .session_tasks()
        .find(|t| table.kind[t.0 as usize] == TaskKind::ReadSource)
        .expect("tiny-llm reads weights");
    let weight = table.reads[failing.0 as usize].unwrap();
    let model = Model::open(&path).unwrap();
    let faulty =
        FaultInjectingSource::new(FileSource::open(&model).unwrap(), model.weights().len())
            .with_fault(weight, ReadFault::Fail);
    let s = PreparedExecutionState::new(plan.clone(), Arc::new(faulty), MemoryBudget::unlimited());
    let err = s.prepare().unwrap_err();
    assert!(err.to_string().contains("injected"), "{err}");
    let lost = published_from(&plan, failing);
    // `prepare` stops at the first requirement it could not produce.
    let first = *lost.iter().min().expect("the read feeds a requirement");
    assert_eq!(
        s.store().snapshot(first.0 as usize).residency(),
        Residency::Failed
    );
    let cause = s.failure_cause(first).expect("cause recorded");
    assert!(cause.contains("injected"), "{cause}");
    assert_eq!(s.budget().live(Domain::Preparation), 0);
}

#[test]
fn a_failed_read_fails_only_what_it_feeds() {
    let path = tiny_llm();
    let plan = plan(&path);
    let table = plan.tasks();
    let reads: Vec<TaskId> = plan
        .session_tasks()
        .filter(|t| table.kind[t.0 as usize] == TaskKind::ReadSource)
        .collect();
    let prepacks_of = |t: TaskId| -> Vec<TaskId> {
        table
            .dependents
            .row(t.0 as usize)
            .iter()
            .copied()
            .filter(|d| table.kind[d.0 as usize] == TaskKind::Prepack)
            .collect()
    };
    // A weight packed by exactly one prepack (with its scales): the failed
    // read claims and drops that requirement (protocol 1(g)), so it is
    // failed and its waiters wake, with the cause recorded.
    let packed = reads
        .iter()
        .rev()
        .copied()
        .find(|&t| table.publishes[t.0 as usize].is_none() && prepacks_of(t).len() == 1)
        .expect("tiny-llm has a weight packed once");
    fail_one_read(&path, packed, Residency::Failed);
    // A weight used as is: its read claimed the requirement, so the dropped
    // claim marks it failed.
    if let Some(plain) = reads
        .iter()
        .rev()
        .copied()
        .find(|&t| table.publishes[t.0 as usize].is_some() && prepacks_of(t).is_empty())
    {
        fail_one_read(&path, plain, Residency::Failed);
    }
}

#[test]
fn tasks_after_an_on_demand_run_read_nothing() {
    let path = tiny_llm();
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let s = state(&path, source.clone());
    let owned = support::tiny_llm_prefill(8);
    let inputs: Vec<(&str, &Tensor)> = owned.iter().map(|(n, t)| (n.as_str(), t)).collect();
    s.run(&mut InvocationState::default(), &inputs).unwrap();
    let read = source.counters().total();
    s.prepare_sequential().unwrap();
    assert_eq!(
        source.counters().total(),
        read,
        "resident requirements are done"
    );
    assert_eq!(s.budget().live(Domain::Preparation), 0);
}

/// The session tasks as a scheduler submission: 2 CPU + 2 I/O workers run
/// the reads and prepacks in parallel with the same result, each weight
/// read once.
#[test]
fn pooled_session_tasks_prepare_everything() {
    use onnx_prepared::scheduler::{Remapped, WorkerPool, WorkerPoolOptions};
    let path = tiny_llm();
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let s = Arc::new(state(&path, source.clone()));
    let (graph, ids) = s.plan().session_graph().unwrap();
    assert_eq!(graph.len(), s.plan().session_tasks().count());
    let workers = WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 2,
        io_workers: 2,
        pin_cpu_workers: false,
    });
    let runner = Arc::new(Remapped {
        runner: s.shared_session_tasks(),
        ids,
    });
    let outcome = workers.submit(graph, runner.clone()).unwrap().wait();
    assert!(outcome.is_success(), "{outcome:?}");
    assert_eq!(runner.runner.held_shares(), 0);
    drop(runner);
    check_prepared(&path, &s, &*source);
}
