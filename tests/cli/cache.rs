//! The prepared cache across processes, through the CLI: a process killed
//! with SIGKILL at each step of a cache write leaves no corrupt entry (the
//! next run gives identical outputs and rebuilds only what is missing);
//! two processes building one cache at once both succeed; a complete cache
//! gives a run with no source read and no prepack.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use onnx_prepared::cache::{Manifest, PAUSE_ENV};
use onnx_prepared_fixtures::{TinyLlmConfig, WriteMode, tiny_llm, write_fixture};

fn tiny_llm_in(dir: &Path) -> PathBuf {
    let fixture = tiny_llm(&TinyLlmConfig::default()).expect("generates");
    write_fixture(dir, &fixture, WriteMode::Verify).expect("writes")[0].clone()
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
}

/// `run` arguments writing outputs and stats into `out` (a fresh folder).
fn run_args(model: &Path, cache: &Path, policy: &str, out: &Path) -> Vec<String> {
    std::fs::create_dir_all(out).unwrap();
    [
        "run",
        model.to_str().unwrap(),
        "--dim",
        "T=4",
        "--cache",
        cache.to_str().unwrap(),
        "--cache-policy",
        policy,
        "--outputs",
        out.join("out.npz").to_str().unwrap(),
        "--stats",
        out.join("stats.json").to_str().unwrap(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Runs to completion; returns the stats.
fn run_ok(args: &[String]) -> serde_json::Value {
    let out = bin().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats = Path::new(&args[args.len() - 1]);
    serde_json::from_slice(&std::fs::read(stats).unwrap()).unwrap()
}

fn outputs(dir: &Path) -> Vec<(String, onnx_prepared::Tensor)> {
    onnx_prepared::npz::read_npz(&dir.join("out.npz")).unwrap()
}

/// Entries in the cache's companion model (0 when there is none).
fn entries(cache: &Path) -> usize {
    let Ok(dir) = std::fs::read_dir(cache) else {
        return 0;
    };
    let manifests: Vec<PathBuf> = dir
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".prepared.onnx"))
        .collect();
    assert!(manifests.len() <= 1, "{manifests:?}");
    manifests.first().map_or(0, |p| {
        Manifest::parse(&std::fs::read(p).unwrap(), p)
            .expect("a complete manifest")
            .entries
            .len()
    })
}

fn verify(cache: &Path) {
    let out = bin()
        .args(["cache", "verify", cache.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cache verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts `args` with the writer told to pause at `step`, waits for the
/// pause, and kills the process with SIGKILL there.
fn kill_at(args: &[String], step: &str) {
    let mut child = bin()
        .args(args)
        .env(PAUSE_ENV, step)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    onnx_prepared::sync::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let marker = format!("cache write paused at {step}");
    let start = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if line.contains(&marker) => break,
            Ok(_) => {}
            Err(_) => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("the writer never reached {step}; it exited with {status}");
                }
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "the writer never reached {step}"
                );
            }
        }
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "killed at {step}");
}

#[test]
fn a_writer_killed_at_any_step_leaves_a_usable_cache() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_llm_in(dir.path());
    let reference = dir.path().join("reference");
    let nocache = dir.path().join("no-cache");
    let stats = run_ok(&run_args(&model, &nocache, "disabled", &reference));
    let expected = outputs(&reference);
    let total = stats["cache_misses"].as_u64().unwrap() + stats["cache_hits"].as_u64().unwrap();
    assert_eq!(total, 0, "a disabled cache plans nothing");

    for step in [
        "payload-temp",
        "payload-rename",
        "manifest-temp",
        "manifest-rename",
        "dir-sync",
    ] {
        let cache = dir.path().join(format!("cache-{step}"));
        let out = dir.path().join(format!("out-{step}"));
        kill_at(&run_args(&model, &cache, "build-if-missing", &out), step);
        // Whatever the kill left: a manifest that parses whole (with the
        // entries committed by then) or none.
        let before = entries(&cache);
        let expect_complete = matches!(step, "manifest-rename" | "dir-sync");
        assert_eq!(before > 0, expect_complete, "{step}: {before} entries");

        let again = dir.path().join(format!("again-{step}"));
        let stats = run_ok(&run_args(&model, &cache, "build-if-missing", &again));
        assert_eq!(outputs(&again), expected, "{step}: outputs differ");
        assert_eq!(
            stats["cache_diagnostics"].as_array().unwrap().len(),
            0,
            "{step}: {stats}"
        );
        let objects =
            stats["cache_hits"].as_u64().unwrap() + stats["cache_misses"].as_u64().unwrap();
        assert_eq!(
            stats["cache_hits"].as_u64().unwrap(),
            before as u64,
            "{step}"
        );
        assert_eq!(
            stats["cache_writes"].as_u64().unwrap(),
            objects - before as u64,
            "{step}: only what was missing is rebuilt"
        );
        // A manifest generation commits whenever the writer's queue
        // drains, so a kill at its rename may leave the entries written by
        // then: only the others are packed again.
        let missing = objects - before as u64;
        assert!(
            stats["prepacks"].as_u64().unwrap() <= missing,
            "{step}: {missing} missing, {stats}"
        );
        if missing == 0 {
            assert_eq!(stats["source_bytes_read"], 0, "{step}");
        }
        verify(&cache);
        assert_eq!(entries(&cache) as u64, objects, "{step}");

        let last = dir.path().join(format!("last-{step}"));
        let stats = run_ok(&run_args(&model, &cache, "require-complete", &last));
        assert_eq!(outputs(&last), expected, "{step}");
        assert_eq!(stats["source_bytes_read"], 0, "{step}");
        assert_eq!(stats["prepacks"], 0, "{step}");
        assert!(stats["packed_bytes_read"].as_u64().unwrap() > 0, "{step}");
    }
}

#[test]
fn two_processes_building_one_cache_both_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_llm_in(dir.path());
    let cache = dir.path().join("cache");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let spawn = |out: &Path| {
        bin()
            .args(run_args(&model, &cache, "build-if-missing", out))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (spawn(&a), spawn(&b));
    for child in [first, second] {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(outputs(&a), outputs(&b));
    verify(&cache);
    let c = dir.path().join("c");
    let stats = run_ok(&run_args(&model, &cache, "require-complete", &c));
    assert_eq!(outputs(&c), outputs(&a));
    assert_eq!(stats["source_bytes_read"], 0);
    assert_eq!(stats["prepacks"], 0);
}

/// Two writers with different entries (portable and native packed
/// layouts) committing at once: the first one pauses with the manifest
/// read and its new generation written to a temp file; the second one
/// runs meanwhile. Both keep their entries: each serves a later
/// require-complete process of its kind.
#[test]
fn two_writers_committing_at_once_keep_both_entries() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_llm_in(dir.path());
    let cache = dir.path().join("cache");
    let resume = dir.path().join("resume");
    let with = |mut args: Vec<String>, portable: bool| {
        if portable {
            args.insert(1, "--portable".into());
        }
        args
    };
    let a_args = with(
        run_args(&model, &cache, "build-if-missing", &dir.path().join("a")),
        true,
    );
    let mut a = bin()
        .args(&a_args)
        .env(PAUSE_ENV, "manifest-temp")
        .env(onnx_prepared::cache::RESUME_ENV, &resume)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = a.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    loop {
        let line = lines.next().expect("the first writer pauses").unwrap();
        if line.contains("cache write paused at manifest-temp") {
            break;
        }
    }
    let b_args = with(
        run_args(&model, &cache, "build-if-missing", &dir.path().join("b")),
        false,
    );
    let mut b = bin()
        .args(&b_args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The second writer reaches its commit while the first holds its own.
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&resume, b"").unwrap();
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    verify(&cache);
    for portable in [true, false] {
        let out = dir.path().join(format!("check-{portable}"));
        let stats = run_ok(&with(
            run_args(&model, &cache, "require-complete", &out),
            portable,
        ));
        assert_eq!(stats["prepacks"], 0, "portable {portable}");
    }
}

#[test]
fn cache_flags_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_llm_in(dir.path());
    for bad in [
        vec![
            "run",
            model.to_str().unwrap(),
            "--cache-policy",
            "read-only",
        ],
        vec![
            "run",
            model.to_str().unwrap(),
            "--cache",
            "x",
            "--cache-policy",
            "sometimes",
        ],
    ] {
        let out = bin().args(&bad).output().unwrap();
        assert!(!out.status.success(), "{bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cache"), "{bad:?}: {err}");
    }
}
