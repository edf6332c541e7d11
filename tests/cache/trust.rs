//! What was verified once stays true or fails loudly: a data file or cache
//! file changed on disk after a check is never served as if unchanged, a
//! cache this build cannot read is a miss that is never overwritten,
//! `prune` removes only what the runtime owns, and two writers committing
//! at once both keep their entries.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use onnx_prepared::cache::{
    CacheError, Manifest, PersistObject, PreparedCache, PreparedModelPolicy as Policy, maintain,
};
use onnx_prepared::decoder::{self, Lengths};
use onnx_prepared::model::Model;
use onnx_prepared::{ErrorKind, RuntimeSession, SessionOptions, Tensor};

type Outputs = Vec<(String, Tensor)>;

fn run(session: &RuntimeSession) -> Result<Outputs, onnx_prepared::Error> {
    let len = Lengths {
        batch: 1,
        tokens: 4,
        past: 2,
    };
    let inputs = decoder::generated_inputs(session.plan().resolved(), len, &[]).unwrap();
    let mut ctx = onnx_prepared::RuntimeContext::new(session);
    for (name, t) in inputs {
        ctx.set_input(&name, t).unwrap();
    }
    Ok(session.run(ctx).map_err(|e| e.error)?.outputs().to_vec())
}

fn options(cache: &Path, policy: Policy) -> SessionOptions {
    SessionOptions::default()
        .with_cpu_workers(1)
        .with_io_workers(1)
        .with_cache_dir(cache)
        .with_cache_policy(policy)
}

/// A copy of the committed llama-genai-fp32 model (weights without
/// declared digests) in a fresh temp dir: (root, model path).
fn undigested_model() -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/real/llama-genai-fp32");
    let dir = support::tempdir();
    for f in ["model.onnx", "model.onnx.data", "genai_config.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let model = dir.path().join("model.onnx");
    (dir, model)
}

/// Rewrites `data` in place (same inode, same size) with every f32 halved,
/// then restores its modification time, as `cp -p` or `rsync -a` leave it.
fn rewrite_keeping_mtime(data: &Path) {
    let before = std::fs::metadata(data).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(data).unwrap();
    for chunk in bytes.chunks_exact_mut(4) {
        let v = f32::from_le_bytes(chunk.try_into().unwrap());
        chunk.copy_from_slice(&(v * 0.5).to_le_bytes());
    }
    let f = std::fs::OpenOptions::new().write(true).open(data).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &bytes, 0).unwrap();
    f.set_modified(before).unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(data).unwrap().modified().unwrap(), before);
}

#[test]
fn a_data_file_rewritten_with_its_mtime_restored_never_serves_stale_entries() {
    let (dir, model) = undigested_model();
    let cache = dir.path().join("cache");
    let first = RuntimeSession::open(&model, options(&cache, Policy::BuildIfMissing)).unwrap();
    let before = run(&first).unwrap();
    first.flush_cache();
    drop(first);
    let complete = RuntimeSession::open(&model, options(&cache, Policy::RequireComplete)).unwrap();
    assert_eq!(run(&complete).unwrap(), before);
    drop(complete);

    rewrite_keeping_mtime(&dir.path().join("model.onnx.data"));
    let expected = run(&RuntimeSession::open(&model, SessionOptions::default()).unwrap()).unwrap();
    assert_ne!(expected, before, "the data changed the outputs");
    for policy in [Policy::ReadOnly, Policy::BuildIfMissing] {
        let s = RuntimeSession::open(&model, options(&cache, policy)).unwrap();
        assert_eq!(
            run(&s).unwrap(),
            expected,
            "{policy:?}: no stale entry was used"
        );
        assert!(s.preparation_stats().source_bytes_read > 0, "{policy:?}");
    }
}

#[test]
fn a_persist_job_from_a_changed_data_file_is_not_persisted() {
    let (dir, model_path) = undigested_model();
    let cache_dir = dir.path().join("cache");
    // A first process records the sources' digests.
    let first =
        RuntimeSession::open(&model_path, options(&cache_dir, Policy::BuildIfMissing)).unwrap();
    run(&first).unwrap();
    first.flush_cache();
    let r = first.plan().resolved().requirements()[0].clone();
    drop(first);
    std::fs::remove_dir_all(cache_dir.join("payloads")).unwrap();

    let model = Model::open(&model_path).unwrap();
    let cpu = onnx_prepared_kernels::CpuFeatures::detect();
    let cache = PreparedCache::open(&cache_dir, Policy::BuildIfMissing, &model, cpu).unwrap();
    let tensor = Arc::new(Tensor::from_f32(vec![1], vec![1.0]).unwrap());
    let job = cache
        .persist_job(&model, &r, PersistObject::Tensor(tensor))
        .expect("every source has a recorded digest");
    // The source changes between its verification and the write.
    rewrite_keeping_mtime(&dir.path().join("model.onnx.data"));
    let err = job.run().unwrap_err();
    assert!(matches!(err, CacheError::Source(_)), "{err}");
    assert!(
        err.to_string().contains("changed since it was verified"),
        "{err}"
    );
    assert_eq!(cache.writes(), 0);
    assert!(
        !cache_dir.join("payloads").exists()
            || std::fs::read_dir(cache_dir.join("payloads"))
                .unwrap()
                .next()
                .is_none()
    );
}

/// Writes a complete cache of tiny-llm; returns (root, model, cache dir,
/// the manifest path, the reference outputs).
fn tiny_cache() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf, Outputs) {
    let root = support::tempdir();
    let model = support::tiny_llm_in(root.path());
    let cache = root.path().join("cache");
    let s = RuntimeSession::open(&model, options(&cache, Policy::BuildIfMissing)).unwrap();
    let reference = support::run_tiny_llm(&s);
    s.flush_cache();
    let manifest = s.cache().unwrap().manifest_path().to_owned();
    drop(s);
    (root, model, cache, manifest, reference)
}

#[test]
fn a_manifest_this_build_cannot_read_is_a_miss_and_never_overwritten() {
    let (root, model, cache, manifest, reference) = tiny_cache();
    let good = std::fs::read(&manifest).unwrap();
    let mut newer = Manifest::parse(&good, &manifest).unwrap().to_proto();
    for p in &mut newer.metadata_props {
        if p.key() == "onnx_prepared.cache_format_version" {
            p.value = Some("99".into());
        }
    }
    let newer = onnx_prepared::model::proto::Message::encode_to_vec(&newer);
    let elsewhere = root.path().join("elsewhere.onnx");
    std::fs::write(&elsewhere, &good).unwrap();
    type Damage<'a> = Box<dyn Fn() + 'a>;
    let cases: [(&str, Damage<'_>); 3] = [
        (
            "garbage",
            Box::new(|| std::fs::write(&manifest, b"\xff\x00 not a model").unwrap()),
        ),
        (
            "newer format",
            Box::new(|| std::fs::write(&manifest, &newer).unwrap()),
        ),
        (
            "a link",
            Box::new(|| std::os::unix::fs::symlink(&elsewhere, &manifest).unwrap()),
        ),
    ];
    for (what, damage) in cases {
        let _ = std::fs::remove_file(&manifest);
        damage();
        let on_disk = std::fs::symlink_metadata(&manifest).unwrap();
        let bytes = std::fs::read(&manifest).unwrap();
        for policy in [Policy::ReadOnly, Policy::BuildIfMissing] {
            let s = RuntimeSession::open(&model, options(&cache, policy))
                .unwrap_or_else(|e| panic!("{what}, {policy:?}: {e}"));
            assert_eq!(support::run_tiny_llm(&s), reference, "{what}, {policy:?}");
            s.flush_cache();
            let d = s.cache().unwrap().diagnostics();
            assert!(
                d.iter().any(|l| l.contains("not overwritten")),
                "{what}: {d:?}"
            );
            assert_eq!(s.preparation_stats().cache.hits, 0, "{what}, {policy:?}");
        }
        let after = std::fs::symlink_metadata(&manifest).unwrap();
        assert_eq!(after.file_type(), on_disk.file_type(), "{what}");
        assert_eq!(
            std::fs::read(&manifest).unwrap(),
            bytes,
            "{what}: never overwritten"
        );
        let err = RuntimeSession::open(&model, options(&cache, Policy::RequireComplete))
            .expect_err("require-complete is strict");
        assert_eq!(err.kind(), ErrorKind::Cache, "{what}: {err}");
    }
    assert_eq!(
        std::fs::read(&elsewhere).unwrap(),
        good,
        "the link's target is untouched"
    );
}

#[test]
fn a_payload_truncated_or_rewritten_between_processes_never_crashes_read_only() {
    let (_root, model, cache, _manifest, _reference) = tiny_cache();
    let payloads: Vec<PathBuf> = std::fs::read_dir(cache.join("payloads"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // Every payload cut in half, one rewritten in place at the same size.
    for (i, p) in payloads.iter().enumerate() {
        let len = std::fs::metadata(p).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
        if i == 0 {
            std::os::unix::fs::FileExt::write_all_at(&f, &vec![0x5a; len as usize], 0).unwrap();
        } else {
            f.set_len(len / 2).unwrap();
        }
    }
    // A child process (a SIGBUS would kill it, not this test).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
        .args(["run"])
        .arg(&model)
        .args(["--cache"])
        .arg(&cache)
        .args([
            "--cache-policy",
            "read-only",
            "--dim",
            "T=8",
            "--dim",
            "P=0",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "status {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_payload_truncated_while_copied_in_is_never_touched() {
    let (_root, model, cache, _manifest, reference) = tiny_cache();
    let s = RuntimeSession::open(
        &model,
        options(&cache, Policy::ReadOnly).with_cache_copy_in(true),
    )
    .unwrap();
    assert_eq!(support::run_tiny_llm(&s), reference);
    assert_eq!(s.preparation_stats().source_bytes_read, 0);
    for e in std::fs::read_dir(cache.join("payloads")).unwrap() {
        let p = e.unwrap().path();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(0)
            .unwrap();
    }
    // Mapped, these runs would fault the process; copied, they never look.
    assert_eq!(support::run_tiny_llm(&s), reference);
    assert_eq!(support::run_tiny_llm(&s), reference);
}

#[test]
fn a_payload_folder_link_is_never_followed() {
    let (root, model, cache, _manifest, reference) = tiny_cache();
    let moved = root.path().join("moved-payloads");
    std::fs::rename(cache.join("payloads"), &moved).unwrap();
    std::os::unix::fs::symlink(&moved, cache.join("payloads")).unwrap();
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let before = listing(&moved);
    for policy in [Policy::ReadOnly, Policy::BuildIfMissing] {
        let s = RuntimeSession::open(&model, options(&cache, policy)).unwrap();
        assert_eq!(support::run_tiny_llm(&s), reference, "{policy:?}");
        s.flush_cache();
        assert_eq!(
            s.preparation_stats().cache.hits,
            0,
            "{policy:?}: nothing read through the link"
        );
    }
    assert!(
        maintain::prune(&cache).is_err(),
        "prune refuses a linked payload folder"
    );
    assert_eq!(
        listing(&moved),
        before,
        "nothing created or removed through the link"
    );
}

#[test]
fn prune_removes_only_what_the_runtime_creates() {
    let (_root, _model, cache, manifest, _reference) = tiny_cache();
    let payloads = cache.join("payloads");
    let keep = [
        cache.join(".notes.tmp"),
        cache.join("notes.txt"),
        payloads.join(".user.tmp"),
        payloads.join("readme.bin"),
    ];
    for k in &keep {
        std::fs::write(k, b"not the runtime's").unwrap();
    }
    let name = manifest.file_name().unwrap().to_str().unwrap();
    let dead_temps = [
        cache.join(format!(".{name}.999999.0.tmp")),
        payloads.join(format!(".{:032x}.bin.999999.3.tmp", 7)),
    ];
    for t in &dead_temps {
        std::fs::write(t, b"half").unwrap();
    }
    let orphan = payloads.join(format!("{:032x}.bin", 0xabcu128));
    std::fs::write(&orphan, b"unreferenced").unwrap();
    // A companion this build cannot read: its payloads may not be removed.
    let foreign = cache.join(format!("{:032x}.prepared.onnx", 1));
    std::fs::write(&foreign, b"\xffnewer or damaged").unwrap();

    let report = maintain::prune(&cache).unwrap();
    for t in &dead_temps {
        assert!(!t.exists(), "{} removed", t.display());
    }
    for k in keep.iter().chain([&orphan, &foreign]) {
        assert!(k.exists(), "{} kept", k.display());
    }
    assert!(
        report
            .kept
            .iter()
            .any(|k| k.contains(&foreign.display().to_string()))
    );
    assert!(
        maintain::verify(&cache).unwrap().problems.len() == 1,
        "only the foreign companion"
    );

    // Without the unreadable companion the orphan goes, nothing else.
    std::fs::remove_file(&foreign).unwrap();
    maintain::prune(&cache).unwrap();
    assert!(!orphan.exists());
    for k in &keep {
        assert!(k.exists(), "{} kept", k.display());
    }
}

#[test]
fn caches_committing_at_once_keep_every_entry() {
    let root = support::tempdir();
    let model_path = support::tiny_llm_in(root.path());
    let cache_dir = root.path().join("cache");
    let model = Arc::new(Model::open(&model_path).unwrap());
    let s = RuntimeSession::open(&model_path, SessionOptions::default()).unwrap();
    let requirements = s.plan().resolved().requirements().to_vec();
    drop(s);
    let cpu = onnx_prepared_kernels::CpuFeatures::detect();
    let n = requirements.len().min(8);
    let barrier = Arc::new(Barrier::new(n));
    let threads: Vec<_> = requirements[..n]
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (model, r, dir, barrier) =
                (model.clone(), r.clone(), cache_dir.clone(), barrier.clone());
            onnx_prepared::sync::thread::spawn(move || {
                // One cache per thread: as separate processes would, they
                // share nothing but the folder.
                let cache = PreparedCache::open(&dir, Policy::BuildIfMissing, &model, cpu).unwrap();
                let t = Arc::new(Tensor::from_f32(vec![1], vec![i as f32]).unwrap());
                let job = cache
                    .persist_job(&model, &r, PersistObject::Tensor(t))
                    .unwrap();
                barrier.wait();
                job.run().unwrap();
                assert_eq!(cache.diagnostics(), Vec::<String>::new());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let path = cache_dir.join(format!("{:032x}.prepared.onnx", model.identity()));
    let m = Manifest::parse(&std::fs::read(&path).unwrap(), &path).unwrap();
    assert_eq!(m.entries.len(), n, "every writer's entry survived");
}

/// Sharing sessions of one process key an undigested source by its data
/// file's identity: a session opened after the file was rewritten in place
/// (mtime put back) builds its own objects instead of reusing the first
/// session's, built from the old bytes.
#[test]
fn a_sharing_session_never_reuses_objects_of_a_rewritten_data_file() {
    let (dir, model) = undigested_model();
    let sharing = || SessionOptions::default().with_share_prepared(true);
    let first = RuntimeSession::open(&model, sharing()).unwrap();
    let before = run(&first).unwrap();
    rewrite_keeping_mtime(&dir.path().join("model.onnx.data"));
    let expected = run(&RuntimeSession::open(&model, SessionOptions::default()).unwrap()).unwrap();
    assert_ne!(expected, before, "the data changed the outputs");
    let second = RuntimeSession::open(&model, sharing()).unwrap();
    assert_eq!(
        run(&second).unwrap(),
        expected,
        "no object of the old file was reused"
    );
    drop(first);
}

/// A session with a prepared cache, once dropped, leaves nothing behind:
/// its cache (and the payloads it maps), plan and worker pool are freed —
/// a long-running process opening sessions does not grow.
#[test]
fn a_dropped_session_frees_its_cache_and_pool() {
    let (_root, model, cache, _manifest, _reference) = tiny_cache();
    for policy in [Policy::ReadOnly, Policy::BuildIfMissing] {
        for copy_in in [false, true] {
            let s =
                RuntimeSession::open(&model, options(&cache, policy).with_cache_copy_in(copy_in))
                    .unwrap();
            let (cache, pool) = (Arc::downgrade(s.cache().unwrap()), Arc::downgrade(s.pool()));
            support::run_tiny_llm(&s);
            s.prepare().unwrap();
            drop(s);
            assert_eq!(
                cache.strong_count(),
                0,
                "{policy:?} {copy_in}: the cache is freed"
            );
            assert_eq!(
                pool.strong_count(),
                0,
                "{policy:?} {copy_in}: the pool is freed"
            );
        }
    }
}
