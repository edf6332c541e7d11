//! The command line under hostile flags and paths: `--outputs` never
//! replaces a symbolic link or a FIFO, absurd `--threads` and `--repeat`
//! are refused with a message, a declared dim of 2^40 or a device given as
//! the model is an error exit (never an abort, a hang or a read without
//! end).

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use onnx_prepared::model::proto::{
    GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, ValueInfoProto,
};

fn value(name: &str, dims: Option<&[i64]>) -> ValueInfoProto {
    support::tensor_value(name, 1, dims.map(support::fixed).as_deref())
}

/// `y = Relu(x)` with `x: [dims]`.
fn relu_model(dir: &Path, dims: &[i64]) -> PathBuf {
    let model = ModelProto {
        ir_version: Some(11),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                name: Some("relu".into()),
                op_type: Some("Relu".into()),
                input: vec!["x".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![value("x", Some(dims))],
            output: vec![value("y", None)],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("relu.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

/// Runs the CLI; fails the test if it runs longer than 60 s (then kills it).
fn cli(args: &[&std::ffi::OsStr]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("onnx-prepared {args:?} ran past 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

/// An error exit (status 1, not a signal) whose message contains `needle`.
/// `onnx-prepared run MODEL --outputs PATH`.
fn run_with_outputs(model: &Path, path: &Path) -> Output {
    cli(&[
        os("run"),
        model.as_os_str(),
        os("--outputs"),
        path.as_os_str(),
    ])
}

fn assert_refused(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some_and(|c| c != 0),
        "status {:?}, stderr: {stderr}",
        out.status
    );
    assert!(stderr.contains(needle), "`{needle}` not in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn outputs_to_a_symlink_is_refused_and_its_target_kept() {
    let dir = tempfile::tempdir().unwrap();
    let model = relu_model(dir.path(), &[4]);
    let target = dir.path().join("target.txt");
    std::fs::write(&target, b"keep me").unwrap();
    let link = dir.path().join("out.npz");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = run_with_outputs(&model, &link);
    assert_refused(&out, "symbolic link");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
}

#[test]
fn outputs_to_a_fifo_is_refused_and_the_fifo_kept() {
    let dir = tempfile::tempdir().unwrap();
    let model = relu_model(dir.path(), &[4]);
    let fifo = dir.path().join("out.npz");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let out = run_with_outputs(&model, &fifo);
    assert_refused(&out, "FIFO");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 2, "a temporary file was left: {left:?}");
}

#[test]
fn outputs_to_a_regular_file_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let model = relu_model(dir.path(), &[4]);
    let path = dir.path().join("out.npz");
    std::fs::write(&path, b"old").unwrap();
    let out = run_with_outputs(&model, &path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let arrays = onnx_prepared::npz::read_npz(&path).unwrap();
    assert_eq!(arrays[0].0, "y");
    assert_eq!(arrays[0].1.shape(), &[4]);
}

#[test]
fn absurd_threads_and_repeat_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = relu_model(dir.path(), &[4]);
    let m = model.as_os_str();
    assert_refused(
        &cli(&[os("run"), m, os("--threads"), os("0")]),
        "at least 1 thread",
    );
    assert_refused(
        &cli(&[os("run"), m, os("--threads"), os("5000")]),
        "more than the 1024",
    );
    assert_refused(
        &cli(&[os("bench"), m, os("--threads"), os("0")]),
        "at least 1 thread",
    );
    assert_refused(
        &cli(&[os("run"), m, os("--repeat"), os("2000000")]),
        "more than the 1000000",
    );
    assert_refused(
        &cli(&[os("run"), m, os("--repeat"), os("18446744073709551615")]),
        "more than the 1000000",
    );
    // The largest accepted values still run.
    let out = cli(&[
        os("run"),
        m,
        os("--threads"),
        os("64"),
        os("--repeat"),
        os("3"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fixed input dim of 2^40: the generated input (4 TiB) is refused before
/// it is allocated.
#[test]
fn a_declared_dim_of_two_to_the_forty_is_an_error_exit() {
    let dir = tempfile::tempdir().unwrap();
    let model = relu_model(dir.path(), &[1 << 40]);
    let out = cli(&[os("run"), model.as_os_str()]);
    assert_refused(&out, "ceiling");
}

/// `--dim` sizing a real model's activations past memory is refused before
/// the buffers exist.
#[test]
fn a_huge_dim_on_a_real_model_is_an_error_exit() {
    let model =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/real/llama-optimum/model.onnx");
    let out = cli(&[
        os("run"),
        model.as_os_str(),
        os("--dim"),
        // Large enough that the first quadratic value (the causal mask)
        // is over the ceiling: a dim of 10^5 makes a 10 GB mask that fits
        // under it and is built before a later value is refused, which
        // takes about a minute of page faults on this kind of machine.
        os("sequence_length=1000000"),
    ]);
    assert_refused(&out, "ceiling");
}

#[test]
fn a_device_or_a_fifo_as_the_model_is_an_error_exit() {
    let out = cli(&[os("inspect"), os("/dev/zero")]);
    assert_refused(&out, "not a regular file");
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("m.onnx");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let out = cli(&[os("inspect"), fifo.as_os_str()]);
    assert_refused(&out, "not a regular file");
}
