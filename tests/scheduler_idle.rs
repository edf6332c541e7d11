//! An idle `WorkerPool` parks: near-zero CPU time while nothing is queued.
//! Alone in its own test binary so no other test's CPU time is counted.
#![allow(clippy::disallowed_types)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use onnx_prepared::plan::{Csr, Priority, ResourceClass, TaskId};
use onnx_prepared::scheduler::{
    TaskContext, TaskFailure, TaskGraph, TaskRunner, WorkerPool, WorkerPoolOptions,
};

struct Nop;
impl TaskRunner for Nop {
    fn run(&self, _: TaskId, _ctx: &TaskContext<'_>) -> Result<(), TaskFailure> {
        Ok(())
    }
}

/// utime + stime of this process, in clock ticks (1/100 s on Linux).
fn process_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesized command name; utime and stime are
    // fields 14 and 15 (1-based), i.e. 11 and 12 after the ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn idle_workers_use_near_zero_cpu() {
    let n = 100;
    let graph = TaskGraph::new(
        &vec![ResourceClass::Cpu; n],
        &vec![Priority::Critical; n],
        &Csr::from_rows(&vec![Vec::<TaskId>::new(); n]),
    )
    .unwrap();
    let workers = WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 2,
        io_workers: 2,
        pin_cpu_workers: true,
    });
    let pool = workers.submit(graph, Arc::new(Nop)).unwrap();
    pool.wait();
    // Let the workers finish spinning and park.
    std::thread::sleep(Duration::from_millis(20));
    let before = process_cpu_ticks();
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let ticks = process_cpu_ticks() - before;
    let wall = start.elapsed();
    eprintln!("idle: {ticks} ticks of CPU over {wall:?} with 4 workers");
    // Four busy-spinning workers would burn ~4 × 30 = 120 ticks (or 60 on
    // two cores); parked ones burn none. Allow scheduler noise.
    assert!(ticks <= 3, "idle pool used {ticks} ticks in {wall:?}");
    drop(pool);
    drop(workers);
}
