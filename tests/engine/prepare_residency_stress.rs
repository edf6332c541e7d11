//! Eviction under load: two sessions of gemm-chain on one shared pool, each
//! under a prepared limit that holds one of its two 256 KiB weights at a
//! time (so nearly every run evicts and restores), run by four driver
//! threads that keep runs in flight and cancel some at random — 10,000
//! submissions. Every completed run gives the unlimited session's output,
//! the prepared peak never exceeds the limit, nothing deadlocks (a
//! watchdog fails the test after a bound), and once every context is
//! dropped no execution, I/O or preparation byte is left charged.

use onnx_prepared::sync::{AtomicBool, AtomicUsize, Ordering, thread};
use std::sync::Arc;
use std::time::{Duration, Instant};

use onnx_prepared::arena::{BudgetLimits, Domain};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::{ErrorKind, WorkerPool, WorkerPoolOptions};
use onnx_prepared_kernels::Tensor;

const SUBMISSIONS: usize = 10_000;
const DRIVERS: usize = 4;
/// One packed 256x256 f32 weight and both biases, not both weights.
const LIMIT: usize = 400 << 10;

fn input(seed: usize) -> Tensor {
    Tensor::from_f32(
        vec![2, 256],
        (0..512)
            .map(|i| ((i * 7 + seed) % 97) as f32 / 97.0)
            .collect(),
    )
    .unwrap()
}

fn output(ctx: &RuntimeContext) -> Vec<f32> {
    ctx.outputs()[0].1.as_f32().unwrap().to_vec()
}

#[test]
fn concurrent_runs_with_cancels_under_a_tight_prepared_limit() {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let model = dir.join("gemm-chain.onnx");
    let pool = Arc::new(WorkerPool::new(WorkerPoolOptions {
        cpu_workers: 2,
        io_workers: 1,
        pin_cpu_workers: false,
    }));
    let options = |limit: Option<usize>| {
        SessionOptions::default()
            .with_pool(pool.clone())
            .with_budget(limit.map_or(BudgetLimits::unlimited(), |l| {
                BudgetLimits::unlimited().with_domain(Domain::Prepared, l)
            }))
    };
    // Reference outputs for the seeds the drivers use.
    let reference = RuntimeSession::open(&model, options(None)).unwrap();
    let seeds = 8;
    let expected: Vec<Vec<f32>> = (0..seeds)
        .map(|s| {
            let ctx = RuntimeContext::new(&reference)
                .with_input("A", input(s))
                .unwrap();
            output(&reference.run(ctx).unwrap())
        })
        .collect();
    drop(reference);

    let sessions: Vec<Arc<RuntimeSession>> = (0..2)
        .map(|_| Arc::new(RuntimeSession::open(&model, options(Some(LIMIT))).unwrap()))
        .collect();
    let submitted = Arc::new(AtomicUsize::new(0));
    let completed = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        let submitted = submitted.clone();
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(600);
            while !done.load(Ordering::SeqCst) {
                if Instant::now() >= deadline {
                    // The drivers are stuck: no join would return.
                    eprintln!(
                        "deadlock? {} submissions after 600 s",
                        submitted.load(Ordering::SeqCst)
                    );
                    std::process::abort();
                }
                thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let expected = Arc::new(expected);
    let drivers: Vec<_> = (0..DRIVERS)
        .map(|d| {
            let session = sessions[d % 2].clone();
            let (submitted, completed, cancelled) =
                (submitted.clone(), completed.clone(), cancelled.clone());
            let expected = expected.clone();
            thread::spawn(move || {
                // xorshift64: a reproducible sequence per driver.
                let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ (d as u64 + 1);
                let mut next = move |n: u64| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % n) as usize
                };
                let mut ctx = RuntimeContext::new(&session);
                while submitted.fetch_add(1, Ordering::SeqCst) < SUBMISSIONS {
                    let seed = next(seeds as u64);
                    ctx.set_input("A", input(seed)).unwrap();
                    let handle = session.run_async(ctx);
                    let cancel = next(8) == 0;
                    if cancel {
                        if next(2) == 0 {
                            std::thread::yield_now();
                        }
                        handle.cancel();
                    }
                    ctx = match handle.wait() {
                        Ok(done) => {
                            assert_eq!(output(&done), expected[seed], "seed {seed}");
                            completed.fetch_add(1, Ordering::Relaxed);
                            done
                        }
                        Err(e) => {
                            assert!(cancel, "a run failed uncancelled: {}", e.error);
                            assert_eq!(e.error.kind(), ErrorKind::Cancelled, "{}", e.error);
                            cancelled.fetch_add(1, Ordering::Relaxed);
                            *e.context.expect("a cancelled run returns its context")
                        }
                    };
                }
            })
        })
        .collect();
    for driver in drivers {
        driver.join().expect("a driver panicked");
    }
    done.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();
    let (completed, cancelled) = (
        completed.load(Ordering::SeqCst),
        cancelled.load(Ordering::SeqCst),
    );
    assert_eq!(completed + cancelled, SUBMISSIONS);
    assert!(completed > SUBMISSIONS / 2, "{completed} completed");
    let mut evictions = 0;
    for session in &sessions {
        session.wait_idle();
        let memory = session.memory();
        assert!(memory.domain(Domain::Prepared).peak <= LIMIT, "{memory}");
        for d in [Domain::Execution, Domain::Io, Domain::Preparation] {
            assert_eq!(memory.domain(d).live, 0, "{d:?} bytes left: {memory}");
        }
        evictions += session.preparation_stats().evictions;
    }
    assert!(
        evictions > 1000,
        "{evictions} evictions: the limit should force them"
    );
}
