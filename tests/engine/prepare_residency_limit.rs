//! Residency under a prepared-domain limit: tiny-llm (21.5 MB of prepared
//! objects, the largest an 8 MiB embedding) decodes greedily under a 9 MiB
//! limit, its objects evicted after use and restored when needed again —
//! rebuilt from their sources without a cache, read back from the prepared
//! cache with one — with the same tokens as without a limit and the
//! prepared domain's peak never above the limit; under 5 MiB the embedding
//! is read row by row. A limit below the largest packed object, or one
//! that may not evict what it cannot persist, fails with a typed error
//! naming the domain, the need and the limit.

use crate::support;

use std::path::Path;

use onnx_prepared::arena::{BudgetLimits, Domain};
use onnx_prepared::decoder;
use onnx_prepared::session::{RuntimeSession, SessionOptions};
use onnx_prepared::{ErrorKind, PreparedModelPolicy, UnpersistedEviction};

/// Holds the embedding (8 MiB) or a layer's weights with room to spare,
/// never the whole model (21.5 MB).
const LIMIT: usize = 9 << 20;
const TOKENS: usize = 16;
const PROMPT: &[i64] = &[1, 17, 333, 4095, 8000];

fn open(
    model: &Path,
    limit: Option<usize>,
    cache: Option<(&Path, PreparedModelPolicy)>,
    unpersisted: UnpersistedEviction,
) -> RuntimeSession {
    let budget = match limit {
        Some(l) => BudgetLimits::unlimited().with_domain(Domain::Prepared, l),
        None => BudgetLimits::unlimited(),
    };
    RuntimeSession::open(
        model,
        match cache {
            Some((dir, policy)) => limited(budget, 1)
                .with_cache_dir(dir)
                .with_cache_policy(policy),
            None => limited(budget, 1),
        }
        .with_unpersisted_eviction(unpersisted),
    )
    .expect("tiny-llm opens")
}

/// Options of a session under `budget` with `cpu_threads` CPU workers and
/// one I/O worker.
fn limited(budget: BudgetLimits, cpu_threads: usize) -> SessionOptions {
    SessionOptions::default()
        .with_cpu_workers(cpu_threads)
        .with_io_workers(1)
        .with_budget(budget)
}

fn tokens(session: &RuntimeSession) -> Result<Vec<i64>, onnx_prepared::Error> {
    Ok(decoder::generate(session, PROMPT, TOKENS)?.tokens)
}

fn assert_within_limit(session: &RuntimeSession) {
    let peak = session.memory().domain(Domain::Prepared).peak;
    assert!(
        peak <= LIMIT,
        "prepared peak {peak} above the limit {LIMIT}"
    );
}

/// The number of requirements the model packs (each packed once at most
/// when evicted objects come back from the cache).
fn packed_requirements(session: &RuntimeSession) -> u64 {
    let resolved = session.plan().resolved();
    resolved
        .requirements()
        .iter()
        .filter(|r| r.prepack.is_some())
        .count() as u64
}

#[test]
fn without_a_cache_evicted_objects_are_rebuilt_from_their_sources() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let reference = tokens(&open(&model, None, None, UnpersistedEviction::Rebuild)).unwrap();
    assert_eq!(reference.len(), TOKENS);

    let limited = open(&model, Some(LIMIT), None, UnpersistedEviction::Rebuild);
    assert_eq!(tokens(&limited).unwrap(), reference);
    assert_within_limit(&limited);
    let stats = limited.preparation_stats();
    assert!(stats.evictions > 0, "{stats:?}");
    assert!(stats.restores > 0, "{stats:?}");
    // Every token reads the model again (21.5 MB does not fit in 9 MiB).
    assert!(
        stats.source_bytes_reread >= (8 * (TOKENS as u64 - 1)) << 20,
        "{stats:?}"
    );
    assert!(!limited.is_hot());
}

#[test]
fn with_a_cache_evicted_objects_come_back_packed() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let cache = dir.path().join("cache");
    let reference = tokens(&open(&model, None, None, UnpersistedEviction::Rebuild)).unwrap();

    // Cache cold: what is evicted is written first, then read back. After
    // the first token every object was built once: from then on, only
    // packed payloads are read (no source byte, no prepack).
    let cold = open(
        &model,
        Some(LIMIT),
        Some((&cache, PreparedModelPolicy::BuildIfMissing)),
        UnpersistedEviction::Persist,
    );
    decoder::generate(&cold, PROMPT, 1).unwrap();
    let first = cold.preparation_stats();
    assert!(first.prepacks <= packed_requirements(&cold), "{first:?}");
    assert_eq!(tokens(&cold).unwrap(), reference);
    assert_within_limit(&cold);
    cold.flush_cache();
    let stats = cold.preparation_stats();
    assert!(stats.evictions > first.evictions, "{stats:?}");
    assert!(stats.restores > first.restores, "{stats:?}");
    assert_eq!(
        (stats.source_bytes_read, stats.prepacks),
        (first.source_bytes_read, first.prepacks),
        "after the first token: {stats:?}"
    );
    assert!(
        stats.cache.packed_bytes_read > first.cache.packed_bytes_read,
        "{stats:?}"
    );
    drop(cold);

    // Cache warm: no source byte, no prepack, only packed payloads.
    let warm = open(
        &model,
        Some(LIMIT),
        Some((&cache, PreparedModelPolicy::ReadOnly)),
        UnpersistedEviction::Keep,
    );
    assert_eq!(tokens(&warm).unwrap(), reference);
    assert_within_limit(&warm);
    let stats = warm.preparation_stats();
    assert_eq!(
        (stats.source_bytes_read, stats.prepacks),
        (0, 0),
        "{stats:?}"
    );
    assert!(stats.evictions > 0 && stats.restores > 0, "{stats:?}");
}

/// The design's 5 MiB: below the 8 MiB embedding, which only a `Gather`
/// reads, so it is served row by row from its source; everything else is
/// evicted and restored as under 9 MiB.
#[test]
fn five_mib_serve_the_embedding_row_by_row() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let reference = tokens(&open(&model, None, None, UnpersistedEviction::Rebuild)).unwrap();
    let limit = 5 << 20;
    let session = open(&model, Some(limit), None, UnpersistedEviction::Rebuild);
    assert_eq!(tokens(&session).unwrap(), reference);
    let peak = session.memory().domain(Domain::Prepared).peak;
    assert!(peak <= limit, "prepared peak {peak} above {limit}");
    assert!(session.preparation_stats().evictions > 0);

    // Cache cold, then warm: the same tokens; warm, nothing is packed and
    // the only source bytes are the table's one check and its rows.
    let cache = dir.path().join("cache");
    for policy in [
        PreparedModelPolicy::BuildIfMissing,
        PreparedModelPolicy::ReadOnly,
    ] {
        let s = open(
            &model,
            Some(limit),
            Some((&cache, policy)),
            UnpersistedEviction::Persist,
        );
        assert_eq!(tokens(&s).unwrap(), reference, "{policy:?}");
        let peak = s.memory().domain(Domain::Prepared).peak;
        assert!(peak <= limit, "{policy:?}: prepared peak {peak}");
        s.flush_cache();
        let stats = s.preparation_stats();
        if policy == PreparedModelPolicy::ReadOnly {
            assert_eq!(stats.prepacks, 0, "{stats:?}");
            assert!(stats.source_bytes_read < 9 << 20, "{stats:?}");
        }
    }
}

/// A limit below the largest packed object (the 2.5 MiB LM head) cannot
/// run: a typed error naming the domain and the limit.
#[test]
fn a_limit_below_the_largest_packed_object_is_a_typed_error() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let limit = 2 << 20;
    let session = open(&model, Some(limit), None, UnpersistedEviction::Rebuild);
    let err = tokens(&session).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Preparation, "{err}");
    let message = err.to_string();
    for part in ["prepared domain", "cannot reserve", &limit.to_string()] {
        assert!(message.contains(part), "`{part}` missing from: {message}");
    }
    assert!(session.memory().domain(Domain::Prepared).peak <= limit);
}

/// A packed object is charged before it is packed: under a limit below
/// the packed size of a Gemm's `B` (256 KiB of f32 panels), the packing
/// never runs and the run fails with the domain, the need and the limit.
#[test]
fn a_packed_object_is_charged_before_it_is_packed() {
    use onnx_prepared_fixtures::{WriteMode, fixture_by_name, write_fixture};
    let dir = support::tempdir();
    let fixture = fixture_by_name("gemm-transb0").expect("fixture");
    let model = write_fixture(dir.path(), &fixture, WriteMode::Verify).expect("writes")[0].clone();
    let a = onnx_prepared::Tensor::from_f32(vec![1, 256], vec![0.5; 256]).expect("tensor");
    for (limit, fits) in [(200 << 10, false), (300 << 10, true)] {
        let budget = BudgetLimits::unlimited().with_domain(Domain::Prepared, limit);
        let session = RuntimeSession::open(&model, limited(budget, 1)).expect("opens");
        let mut ctx = onnx_prepared::RuntimeContext::new(&session);
        ctx.set_input("A", a.clone()).expect("input");
        let result = session.run(ctx);
        let prepacks = session.preparation_stats().prepacks;
        if fits {
            result.expect("runs under 300 KiB");
            assert_eq!(prepacks, 1);
        } else {
            let err = result.unwrap_err();
            let message = err.to_string();
            for part in ["prepared domain", "cannot reserve", &limit.to_string()] {
                assert!(message.contains(part), "`{part}` missing from: {message}");
            }
            assert_eq!(prepacks, 0, "packed before it was charged: {err}");
        }
        assert!(session.memory().domain(Domain::Prepared).peak <= limit);
    }
}

#[test]
fn keep_never_evicts_what_the_cache_does_not_hold() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let session = open(&model, Some(LIMIT), None, UnpersistedEviction::Keep);
    let err = tokens(&session).unwrap_err();
    assert!(err.to_string().contains("prepared domain"), "{err}");
    assert_eq!(session.preparation_stats().evictions, 0);
    assert_within_limit(&session);
}

/// A payload is hashed once per process and file: restoring an evicted
/// object maps the checked file again without hashing it, but a file
/// changed on disk since (a new modification time) is hashed again, found
/// damaged and the object rebuilt from its sources — same tokens.
#[test]
fn a_payload_changed_after_its_check_is_checked_again() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let cache = dir.path().join("cache");
    let reference = tokens(&open(
        &model,
        None,
        Some((&cache, PreparedModelPolicy::BuildIfMissing)),
        UnpersistedEviction::Rebuild,
    ))
    .unwrap();
    let session = open(
        &model,
        Some(LIMIT),
        Some((&cache, PreparedModelPolicy::ReadOnly)),
        UnpersistedEviction::Keep,
    );
    decoder::generate(&session, PROMPT, 1).unwrap();
    // The embedding's payload (the largest file), evicted by now: its
    // last byte flipped in place.
    let payloads = cache.join("payloads");
    let largest = std::fs::read_dir(&payloads)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&largest).unwrap();
    *bytes.last_mut().unwrap() ^= 0x40;
    onnx_prepared::sync::thread::sleep(std::time::Duration::from_millis(10));
    std::fs::write(&largest, &bytes).unwrap();
    assert_eq!(tokens(&session).unwrap(), reference);
    let diagnostics = session.cache().unwrap().diagnostics().join("\n");
    assert!(diagnostics.contains("checksum"), "{diagnostics}");
    assert!(session.preparation_stats().source_bytes_read > 0);
}

/// The design's arena table, walked on tiny-llm's first token under 5 MiB
/// (a traced session records each step's live bytes as it ends). The
/// design's example model differs from the fixture (an int4 tied
/// embedding there, an f16 one served row by row here), so the walk checks
/// the table's shape, not its figures: one row per plan step, in plan
/// order; the prepared arena within the limit at every row; the execution
/// arena holding the one lowering's activations, the same at every row and
/// under 1 MiB for a 5-token prompt; the preparation arena empty once the
/// step ran; and evictions as the blocks go by.
#[test]
fn the_first_token_walks_the_design_s_arena_table() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let limit = 5 << 20;
    let session = RuntimeSession::open(
        &model,
        limited(
            BudgetLimits::unlimited().with_domain(Domain::Prepared, limit),
            1,
        )
        .with_trace(true),
    )
    .unwrap();
    decoder::generate(&session, PROMPT, 1).unwrap();
    let trace = session.trace().unwrap();
    let rows: Vec<_> = trace
        .events()
        .into_iter()
        .filter(|e| e.run == 1 && e.lane == onnx_prepared::session::TraceLane::Inference)
        .collect();
    let scopes: Vec<&str> = session
        .plan()
        .steps()
        .iter()
        .map(|s| s.scope.as_str())
        .collect();
    let names: Vec<&str> = rows.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, scopes);
    let memory: Vec<_> = rows.iter().map(|e| e.memory.expect("cold steps")).collect();
    let live = |m: &onnx_prepared::session::StepMemory, d: Domain| m.live[d.index()];
    for (name, m) in names.iter().zip(&memory) {
        assert!(live(m, Domain::Prepared) <= limit, "{name}: {m:?}");
        assert!(live(m, Domain::Execution) > 0, "{name}: {m:?}");
        assert!(live(m, Domain::Execution) < 1 << 20, "{name}: {m:?}");
        assert_eq!(
            live(m, Domain::Execution),
            live(&memory[0], Domain::Execution),
            "{name}"
        );
    }
    let last = memory.last().unwrap();
    assert!(last.evictions > 0, "{last:?}");
    let table = trace.arena_table(1);
    assert_eq!(table.lines().count(), scopes.len() + 1, "{table}");
    assert!(table.contains("evicted"), "{table}");
}

/// Every domain limited at once to the least that can work — prepared at
/// the design's 5 MiB, the others at the peaks a one-worker run reached
/// under that limit — with one and with two CPU workers: decoding finishes
/// (a watchdog turns a deadlock into a failure) with the unlimited tokens,
/// and no domain's peak passes its limit.
#[test]
fn the_smallest_limits_that_can_work_all_finish() {
    use onnx_prepared::sync::thread;
    use std::sync::{Arc, mpsc};
    use std::time::Duration;

    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let expected = tokens(&open(&model, None, None, UnpersistedEviction::Rebuild)).unwrap();
    let probe = open(&model, Some(5 << 20), None, UnpersistedEviction::Rebuild);
    assert_eq!(tokens(&probe).unwrap(), expected);
    let peak = |d| probe.memory().domain(d).peak;
    let mut limits = BudgetLimits::unlimited().with_domain(Domain::Prepared, 5 << 20);
    for d in [Domain::Preparation, Domain::Execution, Domain::Io] {
        limits = limits.with_domain(d, peak(d).max(1));
    }
    for cpu_threads in [1, 2] {
        let session =
            Arc::new(RuntimeSession::open(&model, limited(limits, cpu_threads)).expect("opens"));
        let (done, finished) = mpsc::channel();
        let worker = {
            let session = session.clone();
            thread::spawn(move || done.send(tokens(&session)).expect("the test waits"))
        };
        let got = finished
            .recv_timeout(Duration::from_secs(300))
            .unwrap_or_else(|_| panic!("{cpu_threads} workers under {limits:?}: no end in 300 s"));
        worker.join().expect("decodes");
        assert_eq!(got.expect("finishes under the smallest limits"), expected);
        for d in [
            Domain::Prepared,
            Domain::Preparation,
            Domain::Execution,
            Domain::Io,
        ] {
            let p = session.memory().domain(d).peak;
            assert!(p <= limits.domain(d), "{d}: peak {p} above its limit");
        }
    }
}
