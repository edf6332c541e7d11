//! A damaged prepared cache never yields wrong outputs and never panics:
//! each corruption of a complete tiny-llm cache is either rebuilt from the
//! sources (read-only, build-if-missing; reported in the diagnostics) or a
//! typed error (require-complete), and outputs always equal an uncached
//! session's.

use crate::support;

use std::path::{Path, PathBuf};

use onnx_prepared::cache::{CacheError, Miss, PreparedModelPolicy as Policy};
use onnx_prepared::error::RunError;
use onnx_prepared::model::proto::{Message, ModelProto, StringStringEntryProto, TensorProto};
use onnx_prepared::{
    Error, ErrorKind, ExecutionError, RuntimeContext, RuntimeSession, SessionOptions, Tensor,
};

type Outputs = Vec<(String, Tensor)>;

/// A complete cache of tiny-llm in a fresh temp dir, and the reference.
struct Fixture {
    root: tempfile::TempDir,
    model: PathBuf,
    /// `<root>/c/cache`, so `../../` from it stays inside the temp dir.
    cache: PathBuf,
    reference: Outputs,
    objects: usize,
    /// The corrupted entry: a packed object with a payload of its own.
    target: Target,
}

struct Target {
    /// The requirement's name (`onnx_prepared.requirement`).
    requirement: String,
    /// The initializer's name (`prepared/<lineage>/<layout>/dev<device>`).
    tensor: String,
    /// The payload file.
    payload: PathBuf,
    /// Bytes of the requirement's sources.
    source_bytes: u64,
}

fn options(cache: &Path, policy: Policy) -> SessionOptions {
    SessionOptions::default()
        .with_cpu_workers(1)
        .with_io_workers(1)
        .with_cache_dir(cache.to_owned())
        .with_cache_policy(policy)
}

fn try_run(session: &RuntimeSession) -> Result<Outputs, ExecutionError> {
    let mut ctx = RuntimeContext::new(session);
    for (name, t) in support::tiny_llm_prefill(8) {
        ctx = ctx.with_input(&name, t).unwrap();
    }
    Ok(session.run(ctx)?.outputs().to_vec())
}

fn open(fx: &Fixture, policy: Policy) -> RuntimeSession {
    RuntimeSession::open(&fx.model, options(&fx.cache, policy))
        .unwrap_or_else(|e| panic!("{policy:?}: open failed: {e}"))
}

fn value<'a>(props: &'a [StringStringEntryProto], key: &str) -> &'a str {
    props.iter().find(|p| p.key() == key).unwrap().value()
}

fn set(props: &mut [StringStringEntryProto], key: &str, v: &str) {
    props.iter_mut().find(|p| p.key() == key).unwrap().value = Some(v.into());
}

fn manifest_path(cache: &Path) -> PathBuf {
    let mut found = std::fs::read_dir(cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".prepared.onnx"));
    let path = found.next().expect("a companion model");
    assert!(found.next().is_none(), "one companion model");
    path
}

fn read_manifest(cache: &Path) -> ModelProto {
    ModelProto::decode(&*std::fs::read(manifest_path(cache)).unwrap()).unwrap()
}

/// Decodes the companion model, applies `f` to the target's initializer and
/// writes it back.
fn edit_entry(fx: &Fixture, f: impl FnOnce(&mut TensorProto)) {
    let mut m = read_manifest(&fx.cache);
    let graph = m.graph.as_mut().unwrap();
    f(graph
        .initializer
        .iter_mut()
        .find(|t| t.name() == fx.target.tensor)
        .unwrap());
    std::fs::write(manifest_path(&fx.cache), m.encode_to_vec()).unwrap();
}

/// Builds the complete cache (build-if-missing, then checked complete) and
/// picks the target entry.
fn fixture() -> Fixture {
    let root = support::tempdir();
    let model = support::tiny_llm_in(root.path());
    let cache = root.path().join("c").join("cache");
    let reference =
        try_run(&RuntimeSession::open(&model, SessionOptions::default()).unwrap()).unwrap();

    let first = RuntimeSession::open(&model, options(&cache, Policy::BuildIfMissing)).unwrap();
    assert_eq!(try_run(&first).unwrap(), reference);
    first.flush_cache();
    let objects = first.plan().requirements().len();
    assert_eq!(first.preparation_stats().cache.writes as usize, objects);
    let packed: Vec<(String, u64)> = first
        .plan()
        .resolved()
        .requirements()
        .iter()
        .filter(|r| r.prepack.is_some())
        .map(|r| (r.name.clone(), r.source_bytes))
        .collect();
    drop(first);

    let m = read_manifest(&cache);
    let inits = &m.graph.as_ref().unwrap().initializer;
    assert_eq!(inits.len(), objects);
    let location = |t: &TensorProto| value(&t.external_data, "location").to_owned();
    let t = inits
        .iter()
        .filter(|t| inits.iter().filter(|u| location(u) == location(t)).count() == 1)
        .find(|t| {
            let name = value(&t.metadata_props, "onnx_prepared.requirement");
            packed.iter().any(|(n, _)| n == name)
        })
        .expect("a packed entry with a payload of its own");
    let requirement = value(&t.metadata_props, "onnx_prepared.requirement").to_owned();
    let target = Target {
        source_bytes: packed.iter().find(|(n, _)| *n == requirement).unwrap().1,
        requirement,
        tensor: t.name().to_owned(),
        payload: cache.join(location(t)),
    };
    let fx = Fixture {
        root,
        model,
        cache,
        reference,
        objects,
        target,
    };
    expect_complete(&fx);
    fx
}

/// Under require-complete: no source byte, no prepack, no diagnostic.
fn expect_complete(fx: &Fixture) {
    let s = open(fx, Policy::RequireComplete);
    assert_eq!(try_run(&s).unwrap(), fx.reference);
    let stats = s.preparation_stats();
    assert_eq!((stats.source_bytes_read, stats.prepacks), (0, 0));
    assert_eq!(stats.cache.hits as usize, fx.objects);
    assert_eq!(s.cache().unwrap().diagnostics(), Vec::<String>::new());
}

/// Require-complete fails at open, naming only the target.
fn expect_incomplete_at_open(fx: &Fixture) {
    let err = RuntimeSession::open(&fx.model, options(&fx.cache, Policy::RequireComplete))
        .expect_err("require-complete refuses the damaged cache");
    assert_eq!(err.kind(), ErrorKind::Cache);
    let Error::Cache(CacheError::Incomplete { missing }) = &err else {
        panic!("expected Incomplete, got {err}");
    };
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].contains(&fx.target.requirement), "{missing:?}");
}

/// The target is planned from its sources (a miss of kind `miss`, checked
/// through the session's store) and only it is read and packed; outputs
/// equal the reference; diagnostics mention `mention` when given.
fn expect_miss(fx: &Fixture, policy: Policy, miss: fn(&Miss) -> bool, mention: Option<&str>) {
    let s = open(fx, policy);
    // The kind of miss, as the plan saw it (before any rewrite).
    let store = s.cache().unwrap();
    let resolved = s.plan().resolved();
    let r = resolved
        .requirements()
        .iter()
        .find(|r| r.name == fx.target.requirement)
        .unwrap();
    let found = store.lookup(resolved.model(), r);
    assert!(found.as_ref().is_err_and(miss), "{policy:?}: {found:?}");
    assert_eq!(try_run(&s).unwrap(), fx.reference, "{policy:?}");
    s.flush_cache();
    let stats = s.preparation_stats();
    assert_eq!(stats.cache.hits as usize, fx.objects - 1, "{policy:?}");
    assert_eq!(stats.cache.misses, 1, "{policy:?}");
    assert_eq!(stats.prepacks, 1, "{policy:?}: only the target is packed");
    assert_eq!(
        stats.source_bytes_read, fx.target.source_bytes,
        "{policy:?}"
    );
    if let Some(m) = mention {
        let d = store.diagnostics();
        assert!(d.iter().any(|l| l.contains(m)), "{policy:?}: {d:?}");
    }
}

/// The shared expectations of a corruption found at plan build.
fn expect_planned_miss(fx: &Fixture, miss: fn(&Miss) -> bool, mention: Option<&str>) {
    expect_incomplete_at_open(fx);
    expect_miss(fx, Policy::ReadOnly, miss, mention);
    expect_miss(fx, Policy::BuildIfMissing, miss, mention);
    // Build-if-missing wrote the object again: the cache is complete.
    expect_complete(fx);
}

#[test]
fn a_flipped_payload_byte_is_rebuilt_and_healed_or_an_error() {
    let fx = fixture();
    let mut bytes = std::fs::read(&fx.target.payload).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&fx.target.payload, &bytes).unwrap();

    // Require-complete: the plan is complete (sizes match); the read fails.
    let s = open(&fx, Policy::RequireComplete);
    let err = try_run(&s).expect_err("a damaged payload under require-complete");
    assert_eq!(err.error.kind(), ErrorKind::Preparation, "{err}");
    assert!(
        matches!(&err.error, Error::Run(RunError::PreparationFailed { requirement, .. })
            if *requirement == fx.target.requirement),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&fx.target.requirement),
        "names the entry: {err}"
    );
    drop(s);

    for policy in [Policy::ReadOnly, Policy::BuildIfMissing] {
        let s = open(&fx, policy);
        assert_eq!(try_run(&s).unwrap(), fx.reference, "{policy:?}");
        s.flush_cache();
        let stats = s.preparation_stats();
        assert_eq!(
            stats.cache.hits as usize, fx.objects,
            "{policy:?}: planned as hits"
        );
        assert_eq!(
            stats.prepacks, 1,
            "{policy:?}: only the damaged object is packed"
        );
        assert_eq!(
            stats.source_bytes_read, fx.target.source_bytes,
            "{policy:?}"
        );
        let d = s.cache().unwrap().diagnostics();
        assert!(
            d.iter().any(|l| l.contains(&fx.target.requirement)),
            "{policy:?}: {d:?}"
        );
    }
    // Build-if-missing rewrote the damaged payload (same content address).
    let healed = std::fs::read(&fx.target.payload).unwrap() != bytes;
    assert!(
        healed,
        "build-if-missing left the damaged payload `{}` in place",
        fx.target.payload.display()
    );
    expect_complete(&fx);
}

#[test]
fn a_truncated_payload_is_a_miss_at_plan_build() {
    let fx = fixture();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&fx.target.payload)
        .unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len / 2).unwrap();
    drop(f);
    expect_planned_miss(
        &fx,
        |m| matches!(m, Miss::Corrupt(_)),
        Some(&fx.target.requirement),
    );
}

#[test]
fn an_entry_whose_layout_does_not_match_its_name_is_rejected() {
    let fx = fixture();
    edit_entry(&fx, |t| {
        let layout = format!(
            "{}-other",
            value(&t.metadata_props, "onnx_light.prepack.layout")
        );
        set(&mut t.metadata_props, "onnx_light.prepack.layout", &layout);
    });
    expect_planned_miss(&fx, |m| *m == Miss::Absent, Some(&fx.target.tensor));
}

#[test]
fn an_entry_of_another_kernel_abi_is_incompatible() {
    let fx = fixture();
    edit_entry(&fx, |t| {
        set(
            &mut t.metadata_props,
            "onnx_light.prepack.kernel_abi",
            "another build",
        );
    });
    expect_planned_miss(&fx, |m| matches!(m, Miss::Incompatible(_)), None);
}

#[test]
fn an_entry_of_another_source_lineage_is_absent() {
    let fx = fixture();
    edit_entry(&fx, |t| {
        let key = "onnx_light.prepack.source_lineage_digest";
        let old = value(&t.metadata_props, key).to_owned();
        let new: String = old.chars().rev().collect();
        assert_ne!(old, new);
        set(&mut t.metadata_props, key, &new);
        t.name = Some(t.name().replace(&old, &new));
    });
    expect_planned_miss(&fx, |m| *m == Miss::Absent, None);
    // The edited entry itself is well-formed: nothing was rejected.
    let s = open(&fx, Policy::ReadOnly);
    assert!(s.cache().unwrap().generation().rejected.is_empty());
}

#[test]
fn a_garbage_manifest_is_a_typed_corrupt_error_under_require_complete() {
    let fx = fixture();
    let path = manifest_path(&fx.cache);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let garbage: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&path, garbage).unwrap();
    // (Read-only and build-if-missing take it as a miss: `trust.rs`.)
    {
        let policy = Policy::RequireComplete;
        let err = RuntimeSession::open(&fx.model, options(&fx.cache, policy))
            .err()
            .unwrap_or_else(|| panic!("{policy:?}: a garbage manifest was accepted"));
        assert_eq!(err.kind(), ErrorKind::Cache, "{policy:?}");
        let Error::Cache(CacheError::Corrupt { path: p, .. }) = &err else {
            panic!("{policy:?}: expected Corrupt, got {err}");
        };
        assert_eq!(p, &path, "{policy:?}");
    }
}

#[test]
fn a_payload_outside_the_cache_dir_is_never_read() {
    let fx = fixture();
    let escape = fx.root.path().join("escape.bin");
    assert_eq!(fx.cache.join("../../escape.bin").canonicalize().ok(), None);
    let len = std::fs::metadata(&fx.target.payload).unwrap().len() as usize;
    std::fs::write(&escape, vec![0xffu8; len]).unwrap();
    assert_eq!(
        fx.cache.join("../../escape.bin").canonicalize().unwrap(),
        escape.canonicalize().unwrap()
    );
    edit_entry(&fx, |t| {
        set(&mut t.external_data, "location", "../../escape.bin")
    });
    expect_planned_miss(&fx, |m| *m == Miss::Absent, Some(&fx.target.tensor));
}

/// A payload that decodes and passes its checksum but whose packed header
/// names another shape: the packing's validation refuses it at read (so
/// the object is rebuilt, never handed to a kernel that fails every run),
/// and `cache verify` reports it.
#[test]
fn a_decodable_but_unusable_payload_is_a_miss_and_fails_verify() {
    use onnx_prepared::cache::{Decoded, decode_payload, encode_packed, maintain};
    use onnx_prepared_kernels::TensorData;
    let fx = fixture();
    let bytes = std::fs::read(&fx.target.payload).unwrap();
    let Decoded::Packed(mut packed) = decode_payload(&bytes).unwrap() else {
        panic!("the target is a packed object");
    };
    let TensorData::U64(mut header) = packed.parts[0].to_data() else {
        panic!("a packed layout starts with its u64 header");
    };
    // The header's K: one more row than the panels hold.
    header[2] += 1;
    packed.parts[0] = TensorData::U64(header).into();
    let damaged = encode_packed(&packed);
    std::fs::write(&fx.target.payload, &damaged).unwrap();
    let sum = xxhash_rust::xxh3::xxh3_128(&damaged);
    edit_entry(&fx, |t| {
        set(
            &mut t.metadata_props,
            "onnx_prepared.payload_checksum",
            &format!("xxh3-128:{sum:032x}"),
        );
        set(&mut t.external_data, "length", &damaged.len().to_string());
        t.dims = vec![damaged.len() as i64];
    });
    let report = maintain::verify(&fx.cache).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("not usable"),
        "{:?}",
        report.problems
    );

    let s = open(&fx, Policy::RequireComplete);
    let err = try_run(&s).expect_err("an unusable payload under require-complete");
    assert!(err.to_string().contains(&fx.target.requirement), "{err}");
    drop(s);
    for policy in [Policy::ReadOnly, Policy::BuildIfMissing] {
        let s = open(&fx, policy);
        assert_eq!(try_run(&s).unwrap(), fx.reference, "{policy:?}");
        s.flush_cache();
        assert_eq!(
            s.preparation_stats().prepacks,
            1,
            "{policy:?}: only it is packed"
        );
        let d = s.cache().unwrap().diagnostics();
        assert!(
            d.iter().any(|l| l.contains("not usable")),
            "{policy:?}: {d:?}"
        );
    }
    // Build-if-missing wrote a usable object under a new entry.
    expect_complete(&fx);
    assert!(maintain::verify(&fx.cache).unwrap().problems.is_empty());
}
