//! The prepared cache across sessions: a session under build-if-missing
//! persists every prepared object; a later session under require-complete
//! reads no source byte, packs nothing and computes the same outputs.

use crate::support;

use std::path::Path;

use onnx_prepared::cache::{CacheError, PreparedModelPolicy};
use onnx_prepared::{Error, RuntimeSession, SessionOptions};

fn options(cache: &Path, policy: PreparedModelPolicy) -> SessionOptions {
    SessionOptions::default()
        .with_cpu_workers(1)
        .with_io_workers(1)
        .with_cache_dir(cache.to_owned())
        .with_cache_policy(policy)
}

#[test]
fn a_complete_cache_replaces_every_read_and_prepack() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let cache = dir.path().join("cache");

    let reference = {
        let s = RuntimeSession::open(&model, SessionOptions::default()).unwrap();
        support::run_tiny_llm(&s)
    };

    // Under require-complete an empty cache fails before any inference,
    // naming every missing object.
    let err = RuntimeSession::open(
        &model,
        options(&cache, PreparedModelPolicy::RequireComplete),
    )
    .unwrap_err();
    let Error::Cache(CacheError::Incomplete { missing }) = &err else {
        panic!("expected an incomplete cache, got {err}");
    };
    let first =
        RuntimeSession::open(&model, options(&cache, PreparedModelPolicy::BuildIfMissing)).unwrap();
    let objects = first.plan().requirements().len();
    assert_eq!(missing.len(), objects);
    assert_eq!(support::run_tiny_llm(&first), reference);
    first.flush_cache();
    let stats = first.preparation_stats();
    assert!(stats.prepacks > 0 && stats.source_bytes_read > 0);
    assert_eq!(stats.cache.writes as usize, objects);
    assert_eq!(stats.cache.hits, 0);
    drop(first);

    let second = RuntimeSession::open(
        &model,
        options(&cache, PreparedModelPolicy::RequireComplete),
    )
    .unwrap();
    assert_eq!(support::run_tiny_llm(&second), reference);
    let stats = second.preparation_stats();
    assert_eq!(
        stats.source_bytes_read, 0,
        "a cached session reads no source byte"
    );
    assert_eq!(stats.prepacks, 0, "a cached session packs nothing");
    assert_eq!(stats.cache.hits as usize, objects);
    assert!(stats.cache.packed_bytes_read > 0);
    assert_eq!(stats.cache.writes, 0);
    // Packed weights and source tensors are used in place from the mapped
    // payloads: every byte of them the session holds lies in a mapping.
    let store = second.internals().store();
    let packed: u64 = (0..store.len())
        .filter_map(|r| store.pin(r))
        .filter_map(|pin| pin.object.as_packed().map(|p| p.byte_len() as u64))
        .sum();
    let sources: u64 = (0..store.len())
        .filter_map(|r| store.pin(r))
        .filter_map(|pin| pin.object.as_source().map(|t| t.byte_len() as u64))
        .sum();
    assert!(packed > 0 && sources > 0);
    assert_eq!(stats.cache.bytes_in_place, packed + sources);
    assert!(second.cache().unwrap().diagnostics().is_empty());
}

#[test]
fn sessions_sharing_prepared_objects_hold_one_copy() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let sharing = SessionOptions::default()
        .with_cpu_workers(1)
        .with_io_workers(1)
        .with_share_prepared(true);
    let first = RuntimeSession::open(&model, sharing.clone()).unwrap();
    first.prepare().unwrap();
    let weights = first.memory().domain(onnx_prepared::Domain::Prepared).live;
    assert!(weights > 0);
    let reference = support::run_tiny_llm(&first);

    let second = RuntimeSession::open(&model, sharing).unwrap();
    second.prepare().unwrap();
    assert!(second.is_hot());
    let stats = second.preparation_stats();
    assert_eq!(
        stats.source_bytes_read, 0,
        "the second session reads nothing"
    );
    assert_eq!(stats.prepacks, 0, "the second session packs nothing");
    assert_eq!(
        second.memory().domain(onnx_prepared::Domain::Prepared).live,
        0,
        "the second session's weights cost no memory of its own"
    );
    assert_eq!(support::run_tiny_llm(&second), reference);

    // A session that does not share has objects of its own.
    let own = RuntimeSession::open(
        &model,
        SessionOptions::default()
            .with_cpu_workers(1)
            .with_io_workers(1),
    )
    .unwrap();
    own.prepare().unwrap();
    assert_eq!(
        own.memory().domain(onnx_prepared::Domain::Prepared).live,
        weights
    );
    assert!(own.preparation_stats().source_bytes_read > 0);

    // The objects outlive the session that built them while another holds
    // them.
    drop(first);
    assert_eq!(support::run_tiny_llm(&second), reference);
}

/// An embedded weight's SHA-256 is computed by the process that writes the
/// cache and recorded under the manifest of that model's bytes; a later
/// process keys its lookups on the recorded digest instead of hashing the
/// weights again. The proof: a recorded digest altered on disk turns the
/// later process's lookups of that source into misses (had it hashed the
/// bytes, they would hit), and the outputs stay right.
#[test]
fn embedded_sources_are_hashed_by_the_writer_and_recorded() {
    use onnx_prepared::cache::Manifest;
    use onnx_prepared::decoder::{self, Lengths};
    use onnx_prepared::model::proto::{Message, ModelProto};
    use sha2::Digest;

    let dir = support::tempdir();
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/vision/resnet-dynamo/model.onnx");
    let model = dir.path().join("model.onnx");
    std::fs::copy(&src, &model).unwrap();
    let cache = dir.path().join("cache");
    let run = |s: &RuntimeSession| {
        let len = Lengths {
            batch: 1,
            tokens: 1,
            past: 0,
        };
        let inputs = decoder::generated_inputs(s.plan().resolved(), len, &[]).unwrap();
        let mut ctx = onnx_prepared::RuntimeContext::new(s);
        for (name, t) in inputs {
            ctx.set_input(&name, t).unwrap();
        }
        s.run(ctx).map_err(|e| e.error).unwrap().outputs().to_vec()
    };

    let first =
        RuntimeSession::open(&model, options(&cache, PreparedModelPolicy::BuildIfMissing)).unwrap();
    let reference = run(&first);
    first.flush_cache();
    let objects = first.plan().requirements().len();
    let manifest_path = first.cache().unwrap().manifest_path().to_owned();
    drop(first);

    // Every embedded source is recorded with the SHA-256 of its bytes.
    let good = std::fs::read(&manifest_path).unwrap();
    let manifest = Manifest::parse(&good, &manifest_path).unwrap();
    let proto = ModelProto::decode(std::fs::read(&model).unwrap().as_slice()).unwrap();
    let initializers = &proto.graph.as_ref().unwrap().initializer;
    let embedded: Vec<(&String, &[u8; 32])> = manifest
        .source_digests
        .iter()
        .filter_map(|(k, v)| Some((k, v)).filter(|_| k.starts_with("embedded:")))
        .collect();
    assert!(embedded.len() > 10, "{:?}", manifest.source_digests.keys());
    for (key, digest) in &embedded {
        let name = key.strip_prefix("embedded:").unwrap();
        let t = initializers
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("no initializer `{name}`"));
        assert!(!t.raw_data().is_empty(), "{name}");
        let actual: [u8; 32] = sha2::Sha256::digest(t.raw_data()).into();
        assert_eq!(&actual, *digest, "{name}");
    }

    // Recorded digests altered: a later process trusts them, misses, packs
    // from the sources and still computes the same outputs.
    let mut altered = manifest.clone();
    for (key, digest) in altered.source_digests.iter_mut() {
        if key.starts_with("embedded:") {
            digest[0] ^= 0xff;
        }
    }
    std::fs::write(&manifest_path, altered.to_bytes()).unwrap();
    let misled =
        RuntimeSession::open(&model, options(&cache, PreparedModelPolicy::ReadOnly)).unwrap();
    assert_eq!(run(&misled), reference);
    let stats = misled.preparation_stats();
    assert!(stats.prepacks > 0, "{stats:?}");
    assert_eq!(stats.cache.hits, 0, "{stats:?}");
    drop(misled);

    // The manifest as written: every object from the cache, nothing hashed
    // or packed.
    std::fs::write(&manifest_path, &good).unwrap();
    let second = RuntimeSession::open(
        &model,
        options(&cache, PreparedModelPolicy::RequireComplete),
    )
    .unwrap();
    assert_eq!(run(&second), reference);
    let stats = second.preparation_stats();
    assert_eq!((stats.prepacks, stats.source_bytes_read), (0, 0));
    assert_eq!(stats.cache.hits as usize, objects);
}
