//! The prepared cache folder on hostile bytes: a complete cache of the
//! `gemm-chain` fixture (built once per process) is copied into a scratch
//! folder and damaged as the input says — bytes of the manifest or of a
//! payload overwritten, files truncated, replaced by fuzzer bytes or by a
//! link — then a session opens it under read-only or build-if-missing,
//! mapping or copying payloads in, and runs.
//!
//! Oracle: a cache is an optimization. Whatever the damage, the session
//! opens, runs, and its outputs equal an uncached session's, bit for bit.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use onnx_prepared::decoder::{Lengths, generated_inputs};
use onnx_prepared::{PreparedModelPolicy, RuntimeContext, RuntimeSession, SessionOptions, Tensor};

#[derive(Debug, Arbitrary)]
enum Damage {
    /// Overwrite bytes at an offset (modulo the file's length).
    Write { offset: u32, bytes: Vec<u8> },
    /// Cut the file to a length (modulo its length).
    Truncate { len: u32 },
    /// Replace the file with these bytes.
    Replace { bytes: Vec<u8> },
    /// Replace the file with a link to the model file.
    Link,
}

#[derive(Debug, Arbitrary)]
struct Case {
    /// Which cache file each damage hits (0: the manifest, else a payload).
    damages: Vec<(u8, Damage)>,
    build_if_missing: bool,
    copy_in: bool,
}

struct Base {
    _dir: tempfile::TempDir,
    model: PathBuf,
    cache: PathBuf,
    reference: Vec<(String, Tensor)>,
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = onnx_prepared_fuzz::scratch();
        onnx_prepared_fixtures::ensure_all(dir.path()).expect("fixtures");
        let model = dir.path().join("gemm-chain.onnx");
        let cache = dir.path().join("cache");
        let s = RuntimeSession::open(&model, options(&cache, PreparedModelPolicy::BuildIfMissing, false))
            .expect("open");
        let reference = run(&s);
        s.flush_cache();
        Base {
            _dir: dir,
            model,
            cache,
            reference,
        }
    })
}

fn options(cache: &Path, policy: PreparedModelPolicy, copy_in: bool) -> SessionOptions {
    SessionOptions::default()
        .with_cpu_workers(1)
        .with_io_workers(1)
        .with_cache_dir(cache)
        .with_cache_policy(policy)
        .with_cache_copy_in(copy_in)
}

fn run(s: &RuntimeSession) -> Vec<(String, Tensor)> {
    let len = Lengths {
        batch: 1,
        tokens: 2,
        past: 0,
    };
    let inputs = generated_inputs(s.plan().resolved(), len, &[]).expect("inputs");
    let mut ctx = RuntimeContext::new(s);
    for (name, t) in inputs {
        ctx.set_input(&name, t).expect("input");
    }
    s.run(ctx).expect("a damaged cache never fails a run").outputs().to_vec()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn damage(path: &Path, d: &Damage, model: &Path) {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    match d {
        Damage::Write { offset, bytes } if len > 0 => {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            let at = u64::from(*offset) % len;
            let n = bytes.len().min((len - at) as usize);
            f.write_all_at(&bytes[..n], at).unwrap();
        }
        Damage::Write { .. } => {}
        Damage::Truncate { len: to } => {
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            f.set_len(u64::from(*to) % (len + 1)).unwrap();
        }
        Damage::Replace { bytes } => {
            let _ = std::fs::remove_file(path);
            std::fs::write(path, bytes).unwrap();
        }
        Damage::Link => {
            let _ = std::fs::remove_file(path);
            std::os::unix::fs::symlink(model, path).unwrap();
        }
    }
}

fuzz_target!(|case: Case| {
    let base = base();
    let scratch = onnx_prepared_fuzz::scratch();
    let cache = scratch.path().join("cache");
    copy_dir(&base.cache, &cache);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".prepared.onnx"))
        .collect();
    let mut payloads: Vec<PathBuf> = std::fs::read_dir(cache.join("payloads"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    payloads.sort();
    files.extend(payloads);
    for (which, d) in case.damages.iter().take(8) {
        let path = &files[usize::from(*which) % files.len()];
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
            damage(path, d, &base.model);
        }
    }
    let policy = if case.build_if_missing {
        PreparedModelPolicy::BuildIfMissing
    } else {
        PreparedModelPolicy::ReadOnly
    };
    let s = RuntimeSession::open(&base.model, options(&cache, policy, case.copy_in))
        .expect("a damaged cache never fails a session's open");
    let outputs = run(&s);
    s.flush_cache();
    assert_eq!(outputs, base.reference, "outputs changed under a damaged cache");
});
