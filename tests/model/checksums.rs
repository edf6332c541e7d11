//! Declared `sha256:` digests are verified before a weight is used: a data
//! file tampered with at the same size fails every path that reads the
//! weight — the scheduled session, the sequential state, session tasks run
//! by id, DirectReplay — with a typed error naming the tensor, unless
//! `ChecksumPolicy::Off` (the CLI's `--checksums off`). A digest that is
//! not hex is refused at open.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_prepared::Error;
use onnx_prepared::arena::MemoryBudget;
use onnx_prepared::error::RunError;
use onnx_prepared::exec::{
    DirectReplay, DirectReplayOptions, InvocationState, PreparedExecutionState,
};
use onnx_prepared::model::{
    ChecksumPolicy, ExternalDataError as X, FileSource, Model, PayloadError, PayloadSource,
    ResolveOptions, ResolvedModel, WeightSource,
};
use onnx_prepared::plan::{PreparedExecutionPlan, TaskKind};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_fixtures::{GEMM_CHAIN, WriteMode, gemm_fixtures, write_fixture};
use onnx_prepared_kernels::Tensor;
use support::{Init, tempdir, write_data, write_model};

/// The weight whose bytes the tests change.
const TAMPERED: &str = "chain1.weight";

/// gemm-chain (every external weight declares a `sha256:` digest) written
/// into `dir`; with `tamper`, one byte of [`TAMPERED`] flipped in place (the
/// file keeps its size).
fn gemm_chain(dir: &Path, tamper: bool) -> PathBuf {
    let fixture = gemm_fixtures()
        .into_iter()
        .find(|f| f.name == GEMM_CHAIN)
        .unwrap();
    let path = write_fixture(dir, &fixture, WriteMode::Verify).unwrap()[0].clone();
    if tamper {
        let model = Model::open(&path).unwrap();
        let w = model.weight_by_name(TAMPERED).unwrap();
        assert!(w.checksum().and_then(|c| c.tensor_sha256()).is_some());
        let WeightSource::External { file, offset, .. } = w.source() else {
            panic!("{TAMPERED} is external");
        };
        let data = model.external_files()[file.index()].path().to_path_buf();
        let mut bytes = std::fs::read(&data).unwrap();
        bytes[*offset as usize + 5] ^= 0x40;
        std::fs::write(&data, bytes).unwrap();
    }
    path
}

fn input() -> Tensor {
    Tensor::from_f32(
        vec![2, 256],
        (0..512).map(|i| ((i % 19) as f32 - 9.0) / 8.0).collect(),
    )
    .unwrap()
}

fn plan(path: &Path) -> PreparedExecutionPlan {
    let model = Model::open(path).unwrap();
    PreparedExecutionPlan::build(ResolvedModel::resolve(model, &ResolveOptions::default()).unwrap())
        .unwrap()
}

fn is_mismatch_of_tampered(err: &Error) -> bool {
    matches!(err, Error::Payload(PayloadError::ChecksumMismatch { tensor, .. }) if tensor == TAMPERED)
}

/// The read's mismatch, or a run step's report that the object it needs
/// failed because of it.
fn reports_mismatch_of_tampered(err: &Error) -> bool {
    is_mismatch_of_tampered(err)
        || matches!(err, Error::Run(RunError::PreparationFailed { cause, .. })
            if cause.contains(&format!("tensor `{TAMPERED}`"))
                && cause.contains("does not match the declared checksum"))
}

fn session(path: &Path, checksums: ChecksumPolicy) -> RuntimeSession {
    let options = SessionOptions::default()
        .with_cpu_workers(2)
        .with_io_workers(1)
        .with_checksums(checksums);
    RuntimeSession::new(plan(path), options).unwrap()
}

fn session_run(session: &RuntimeSession) -> Result<Tensor, Error> {
    let ctx = RuntimeContext::new(session).with_input("A", input())?;
    let ctx = session.run(ctx).map_err(|e| e.error)?;
    Ok(ctx.output("Y").unwrap().clone())
}

#[test]
fn scheduled_session_refuses_a_tampered_weight() {
    let dir = tempdir();
    let path = gemm_chain(dir.path(), true);
    let err = session_run(&session(&path, ChecksumPolicy::default())).unwrap_err();
    assert!(reports_mismatch_of_tampered(&err), "{err:?}");
    // Eager preparation fails, its diagnostics naming the read and why.
    let failed = session(&path, ChecksumPolicy::Strict)
        .prepare()
        .unwrap_err();
    let (task, why) = failed.diagnostics.failed_task.clone().unwrap();
    assert!(task.contains(TAMPERED), "{task}");
    assert!(
        why.contains(&format!("tensor `{TAMPERED}`"))
            && why.contains("does not match the declared checksum"),
        "{why}"
    );
    assert!(failed.error.to_string().contains(&why), "{}", failed.error);
}

#[test]
fn policy_off_runs_the_tampered_weight_and_strict_runs_an_intact_one() {
    let intact = tempdir();
    let intact = gemm_chain(intact.path(), false);
    let good = session_run(&session(&intact, ChecksumPolicy::Strict)).unwrap();
    let tampered = tempdir();
    let tampered = gemm_chain(tampered.path(), true);
    let bad = session_run(&session(&tampered, ChecksumPolicy::Off)).unwrap();
    assert_ne!(good, bad, "the flipped byte reaches the output");
}

#[test]
fn sequential_state_refuses_a_tampered_weight() {
    let dir = tempdir();
    let path = gemm_chain(dir.path(), true);
    let state = |policy| {
        let model = Model::open(&path).unwrap();
        let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
        PreparedExecutionState::new(Arc::new(plan(&path)), source, MemoryBudget::unlimited())
            .with_checksums(policy)
    };
    let a = input();
    let inputs = [("A", &a)];
    let err = Error::from(
        state(ChecksumPolicy::Strict)
            .run(&mut InvocationState::default(), &inputs)
            .unwrap_err(),
    );
    assert!(is_mismatch_of_tampered(&err), "{err:?}");
    let err = Error::from(state(ChecksumPolicy::Strict).prepare().unwrap_err());
    assert!(is_mismatch_of_tampered(&err), "{err:?}");
    state(ChecksumPolicy::Off)
        .run(&mut InvocationState::default(), &inputs)
        .unwrap();
}

#[test]
fn session_task_reading_a_tampered_weight_fails_it() {
    let dir = tempdir();
    let path = gemm_chain(dir.path(), true);
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let state = Arc::new(PreparedExecutionState::new(
        Arc::new(plan(&path)),
        source,
        MemoryBudget::unlimited(),
    ));
    let tasks = state.session_tasks();
    let table = state.plan().tasks();
    let tampered = model.weight_by_name(TAMPERED).unwrap().id();
    let mut failed = 0;
    for t in 0..table.kind.len() {
        if table.kind[t] != TaskKind::ReadSource {
            continue;
        }
        let result = tasks.execute(onnx_prepared::plan::TaskId(t as u32));
        if table.reads[t] == Some(tampered) {
            let err = Error::from(result.unwrap_err());
            assert!(is_mismatch_of_tampered(&err), "{err:?}");
            failed += 1;
        } else {
            result.unwrap();
        }
    }
    assert_eq!(failed, 1, "one read task reads the tampered weight");
}

#[test]
fn direct_replay_refuses_a_tampered_weight() {
    let dir = tempdir();
    let path = gemm_chain(dir.path(), true);
    let model = Model::open(&path).unwrap();
    let source: Arc<dyn PayloadSource> = Arc::new(FileSource::open(&model).unwrap());
    let err = Error::from(
        DirectReplay::new(&model, source.clone(), DirectReplayOptions::default()).unwrap_err(),
    );
    assert!(is_mismatch_of_tampered(&err), "{err:?}");
    let off = DirectReplayOptions {
        checksums: ChecksumPolicy::Off,
        ..DirectReplayOptions::default()
    };
    DirectReplay::new(&model, source, off).unwrap();
}

#[test]
fn a_digest_that_is_not_ascii_hex_is_refused_at_open() {
    let dims: &[i64] = &[2, 4];
    // 64 bytes after the prefix, but `é` is two of them and straddles a
    // digit pair; `+a` parses as a number but is not two hex digits.
    let straddle = format!("sha256:0é{}", "0".repeat(61));
    let plus = format!("sha256:+a{}", "00".repeat(31));
    let short = format!("sha256:{}", "ab".repeat(31));
    for value in [
        straddle.as_str(),
        &plus,
        &short,
        "not a digest",
        "ünïcode",
        "",
    ] {
        let dir = tempdir();
        write_data(dir.path(), "w.bin", 32);
        let path = write_model(
            dir.path(),
            &[Init::external(
                "w",
                dims,
                &[("location", "w.bin"), ("checksum", value)],
            )],
        );
        let err = Error::from(Model::open(path).unwrap_err());
        assert!(
            matches!(&err, Error::ExternalData(X::InvalidChecksum { tensor, .. }) if tensor == "w"),
            "{value:?}: {err:?}"
        );
    }
}

#[test]
fn the_cli_refuses_a_tampered_weight_unless_checksums_are_off() {
    let dir = tempdir();
    let path = gemm_chain(dir.path(), true);
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
            .arg("run")
            .arg(&path)
            .args(extra)
            .output()
            .unwrap()
    };
    let strict = run(&[]);
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(TAMPERED), "{stderr}");
    let off = run(&["--checksums", "off"]);
    assert!(
        off.status.success(),
        "{}",
        String::from_utf8_lossy(&off.stderr)
    );
}
