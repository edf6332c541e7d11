//! `prepare()` returns `Ok` only when every prepared object is resident:
//! an object evicted (or whose next generation failed) between its
//! producer's publish and `prepare`'s check is produced again, never
//! reported ready while missing.
#![allow(clippy::disallowed_types)] // test bookkeeping

use std::sync::{Arc, Mutex};

use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeSession, SessionOptions};
use onnx_prepared::store::{Evict, Generation, LoadAttempt, Residency};

fn new_session() -> RuntimeSession {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let model = Model::open(dir.join("gemm-chain.onnx")).unwrap();
    let resolved = ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap();
    let plan = PreparedExecutionPlan::build(resolved).unwrap();
    let options = SessionOptions::default()
        .with_cpu_workers(2)
        .with_io_workers(1);
    RuntimeSession::new(plan, options).unwrap()
}

/// What the interference did, recorded by the continuation.
#[derive(Debug, Default)]
struct Seen {
    evicted: Option<bool>,
    failed_next: Option<bool>,
}

/// Registers, on the first generation of requirement `r`, a continuation
/// that runs on the producer's thread right after the publish: it evicts
/// the object and, with `fail_next`, claims and abandons the next
/// generation so that it ends `Failed` — all before the preparation's
/// submission finishes and `prepare` checks.
fn interfere(session: &RuntimeSession, r: usize, fail_next: bool) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (state, record) = (session.internals().clone(), seen.clone());
    let registration = session
        .internals()
        .store()
        .waiter(r, Generation(1))
        .on_complete(move |_| {
            let store = state.store();
            let evicted = matches!(store.try_evict(r), Evict::Evicted { .. });
            let failed_next = fail_next.then(|| match store.try_claim_load(r) {
                LoadAttempt::Claimed(claim) => {
                    drop(claim); // abandoned: this generation fails
                    true
                }
                _ => false,
            });
            let mut seen = record.lock().unwrap();
            seen.evicted = Some(evicted);
            seen.failed_next = failed_next;
        });
    assert!(registration.is_some(), "nothing produced yet");
    seen
}

fn check(fail_next: bool) {
    let session = new_session();
    let store = session.internals().store();
    for r in 0..store.len() {
        let session = new_session();
        let seen = interfere(&session, r, fail_next);
        session
            .prepare()
            .expect("prepare produces what went missing");
        let seen = seen.lock().unwrap();
        assert_eq!(seen.evicted, Some(true), "requirement {r}: {seen:?}");
        if fail_next {
            assert_eq!(seen.failed_next, Some(true), "requirement {r}: {seen:?}");
        }
        let store = session.internals().store();
        let residency: Vec<Residency> = (0..store.len())
            .map(|i| store.snapshot(i).residency())
            .collect();
        assert!(
            residency.iter().all(|&s| s == Residency::Resident),
            "prepare returned Ok with requirement {r} interfered with: {residency:?}"
        );
        assert!(session.is_hot());
    }
}

#[test]
fn an_object_evicted_before_the_check_is_produced_again() {
    check(false);
}

#[test]
fn an_object_whose_next_generation_failed_is_produced_again() {
    check(true);
}
