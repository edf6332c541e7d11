//! The hot path allocates nothing: 1,000 hot tiny-llm decode steps through
//! `RuntimeSession::run` (one reused context, whose output tensors are
//! written in place) make no allocation on any thread (the count is
//! global: the run executes on a pool worker), where merely cloning the
//! outputs would make 28. The only test of this binary, so no other test
//! disturbs the counter.

use std::alloc::{GlobalAlloc, Layout, System};

use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::sync::{AtomicU64, Ordering};
use onnx_prepared_kernels::Tensor;

struct CountingAlloc;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a plain atomic, touched without allocating.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocs() -> u64 {
    ALLOCS.load(Ordering::SeqCst)
}

/// One tiny-llm decode step: T = 1 after P = 16 cached positions.
fn decode(session: &RuntimeSession) -> RuntimeContext {
    let (t, p) = (1usize, 16usize);
    let mut ctx = RuntimeContext::new(session);
    ctx.set_input("input_ids", Tensor::from_i64(vec![1, t], vec![42]).unwrap())
        .unwrap();
    ctx.set_input(
        "attn_bias",
        Tensor::from_f32(vec![1, 1, t, p + t], vec![0.0; p + t]).unwrap(),
    )
    .unwrap();
    for b in 0..4 {
        for kv in ["key", "value"] {
            let values = (0..8 * p * 64).map(|i| (i % 13) as f32 * 0.01).collect();
            ctx.set_input(
                &format!("past_{kv}_{b}"),
                Tensor::from_f32(vec![1, 8, p, 64], values).unwrap(),
            )
            .unwrap();
        }
    }
    ctx
}

/// Both sources in one test: the allocation counter is process-wide, so
/// the two must not run concurrently.
#[test]
fn hot_runs_allocate_nothing() {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    // Weights decoded from reads, then used in place from the mapping.
    for map_weights in [false, true] {
        hot_runs_allocate_nothing_with(&dir, map_weights);
    }
}

fn hot_runs_allocate_nothing_with(dir: &std::path::Path, map_weights: bool) {
    let model = Model::open(dir.join("tiny-llm.onnx")).unwrap();
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    let plan = PreparedExecutionPlan::build(resolved).unwrap();
    let session = RuntimeSession::new(
        plan,
        SessionOptions::default()
            .with_cpu_workers(2)
            .with_io_workers(1)
            .with_map_weights(map_weights),
    )
    .unwrap();
    session.prepare().unwrap();
    let mut ctx = decode(&session);
    // Warm-up: lowering, buffers, first-use allocations of the pool's
    // threads (epoch registration and the like).
    for _ in 0..20 {
        ctx = session.run(ctx).unwrap();
    }
    assert!(session.is_hot());
    let expected = ctx.outputs().to_vec();
    // What the outputs alone cost: cloning them.
    let before = allocs();
    let clone = ctx.outputs().to_vec();
    let outputs_cost = allocs() - before;
    drop(clone);
    assert!(outputs_cost > 0);

    let mut per_run = Vec::new();
    for runs in [100u64, 1000] {
        let before = allocs();
        for _ in 0..runs {
            ctx = session.run(ctx).unwrap();
        }
        per_run.push((allocs() - before) as f64 / runs as f64);
    }
    assert_eq!(ctx.outputs(), expected.as_slice(), "hot runs stay exact");
    eprintln!(
        "map_weights {map_weights}: allocations per hot run: {per_run:?} (cloning the outputs: {outputs_cost})"
    );
    for (runs, cost) in [100, 1000].iter().zip(&per_run) {
        // The context's output tensors are reused: a hot run allocates
        // nothing at all.
        assert!(
            *cost == 0.0,
            "map_weights {map_weights}, {runs} hot runs: {cost} allocations per run (cloning the outputs costs {outputs_cost})"
        );
    }
}
