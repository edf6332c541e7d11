//! Loom models of protocol "own" (a graph whose tasks are all critical CPU
//! tasks in topological id order, on a pool with one CPU worker: the worker
//! may take the whole submission and run it in id order without counting
//! dependencies). A cancel racing the owned run leaves every task in one
//! terminal state; a waiter helping races the worker for the submission and
//! every task still runs once, after its dependencies; a run that suspends
//! inside an owned run hands the rest of the graph back to dependency
//! counting, and the resumed task's dependents run once, after it — also
//! when a helping waiter popped a root entry while the run was owned.
#![cfg(loom)]

use loom_tests::{model, one_cpu_worker, spawn_resumer};

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{ResumeHandle, TaskContext, TaskFailure, TaskGraph, TaskRunner};
use onnx_prepared::sync::{AtomicUsize, Lock, Ordering};

fn cpu_graph(deps: &[Vec<TaskId>]) -> TaskGraph {
    let n = deps.len();
    let graph = TaskGraph::new(
        &vec![ResourceClass::Cpu; n],
        &vec![Priority::Critical; n],
        &Csr::from_rows(deps),
    )
    .unwrap();
    assert!(graph.is_sequential());
    graph
}

/// Counts runs per task; records, per task, how many of its dependencies
/// had finished a run when it started; task `suspend` suspends its first
/// run and parks the handle.
struct Runs {
    deps: Vec<Vec<TaskId>>,
    count: [AtomicUsize; 4],
    ready_deps: [AtomicUsize; 4],
    suspend: Option<u32>,
    handle: Lock<Option<ResumeHandle>>,
}

impl Runs {
    fn new(deps: &[Vec<TaskId>], suspend: Option<u32>) -> Self {
        Self {
            deps: deps.to_vec(),
            count: Default::default(),
            ready_deps: Default::default(),
            suspend,
            handle: Lock::new(None),
        }
    }

    fn counts(&self) -> Vec<usize> {
        self.count
            .iter()
            .take(self.deps.len())
            .map(|c| c.load(Ordering::SeqCst))
            .collect()
    }
}

impl TaskRunner for Runs {
    fn run(&self, task: TaskId, ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        let t = task.0 as usize;
        let ready = self.deps[t]
            .iter()
            .filter(|d| {
                let runs = self.count[d.0 as usize].load(Ordering::SeqCst);
                // A suspending task has finished only its second run.
                runs >= if self.suspend == Some(d.0) { 2 } else { 1 }
            })
            .count();
        self.ready_deps[t].store(ready, Ordering::SeqCst);
        let n = self.count[t].fetch_add(1, Ordering::SeqCst);
        if self.suspend == Some(task.0) && n == 0 {
            let handle = ctx.suspend();
            self.handle.with(|h| *h = Some(handle));
        }
        Ok(())
    }
}

#[test]
fn cancel_racing_an_owned_run_gives_one_terminal_state_per_task() {
    model(|| {
        let deps = [vec![], vec![TaskId(0)], vec![TaskId(1)]];
        let runs = std::sync::Arc::new(Runs::new(&deps, None));
        let workers = one_cpu_worker();
        let run = workers.submit(cpu_graph(&deps), runs.clone()).unwrap();
        run.cancel_token().cancel();
        let outcome = run.wait();
        drop(run);
        drop(workers);
        let counts = runs.counts();
        // A prefix of the chain ran once; the rest never ran.
        let ran = counts.iter().take_while(|&&c| c == 1).count();
        assert!(counts[ran..].iter().all(|&c| c == 0), "{counts:?}");
        assert_eq!(outcome.completed, ran);
        assert_eq!(outcome.cancelled, 3 - ran);
    });
}

#[test]
fn a_helping_waiter_racing_the_owner_runs_each_task_once_in_order() {
    model(|| {
        // 0 → {1, 2} → 3
        let deps = [
            vec![],
            vec![TaskId(0)],
            vec![TaskId(0)],
            vec![TaskId(1), TaskId(2)],
        ];
        let runs = std::sync::Arc::new(Runs::new(&deps, None));
        let workers = one_cpu_worker();
        let run = workers.submit(cpu_graph(&deps), runs.clone()).unwrap();
        let outcome = run.wait_helping();
        assert_eq!(outcome.completed, 4);
        assert_eq!(runs.counts(), [1, 1, 1, 1]);
        for (t, d) in deps.iter().enumerate() {
            assert_eq!(
                runs.ready_deps[t].load(Ordering::SeqCst),
                d.len(),
                "task {t}"
            );
        }
        drop(run);
        drop(workers);
    });
}

#[test]
fn a_suspension_hands_the_owned_rest_back_to_counting() {
    model(|| {
        // 0 → 1 (suspends once) → 2, and 0 → 3.
        let deps = [vec![], vec![TaskId(0)], vec![TaskId(1)], vec![TaskId(0)]];
        let runs = std::sync::Arc::new(Runs::new(&deps, Some(1)));
        let workers = one_cpu_worker();
        let run = workers.submit(cpu_graph(&deps), runs.clone()).unwrap();
        let resumer = spawn_resumer(runs.clone(), |r| &r.handle);
        let outcome = run.wait();
        resumer.join().unwrap();
        assert_eq!(outcome.completed, 4);
        assert_eq!(runs.counts(), [1, 2, 1, 1]);
        for t in [2, 3] {
            assert_eq!(runs.ready_deps[t].load(Ordering::SeqCst), 1, "task {t}");
        }
        drop(run);
        drop(workers);
    });
}

#[test]
fn a_root_popped_by_a_helper_during_an_owned_run_survives_the_hand_back() {
    model(|| {
        // 0 → 1 (suspends once); 2 is a second root. The waiter helps:
        // it may pop root 2's entry while the worker owns the run.
        let deps = [vec![], vec![TaskId(0)], vec![]];
        let runs = std::sync::Arc::new(Runs::new(&deps, Some(1)));
        let workers = one_cpu_worker();
        let run = workers.submit(cpu_graph(&deps), runs.clone()).unwrap();
        let resumer = spawn_resumer(runs.clone(), |r| &r.handle);
        let outcome = run.wait_helping();
        resumer.join().unwrap();
        assert_eq!(outcome.completed, 3);
        assert_eq!(runs.counts(), [1, 2, 1]);
        assert_eq!(runs.ready_deps[1].load(Ordering::SeqCst), 1);
        drop(run);
        drop(workers);
    });
}
