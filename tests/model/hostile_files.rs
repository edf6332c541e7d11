//! Hostile files: a FIFO given as a model or as an `.npz` input is refused
//! without blocking, a `.npy` header with a repeated key is refused (NumPy
//! would read its last value), a deflate bomb stops at the limit, and
//! `write_npz` never replaces a symbolic link, a FIFO or its target.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use onnx_prepared::model::Model;
use onnx_prepared::npz::{self, NpzError};
use onnx_prepared_kernels::Tensor;

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
}

/// Runs `f` on another thread; fails the test if it does not return within
/// 20 s (a blocked open of `fifo` is released by opening its write end).
fn within_deadline<T: Send + 'static>(fifo: &Path, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(v) => v,
        Err(_) => {
            // Unblock the reader so the process can end, then fail.
            let _ = std::fs::OpenOptions::new().write(true).open(fifo);
            panic!("reading {} blocked", fifo.display());
        }
    }
}

#[test]
fn a_fifo_as_model_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.onnx");
    mkfifo(&fifo);
    let path = fifo.clone();
    let result = within_deadline(&fifo, move || Model::open(&path).map(|_| ()));
    let err = result.unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn a_fifo_as_npz_input_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("inputs.npz");
    mkfifo(&fifo);
    let path = fifo.clone();
    let result = within_deadline(&fifo, move || npz::read_npz(&path).map(|_| ()));
    assert!(
        matches!(result, Err(NpzError::NotRegularFile { kind: "a FIFO", .. })),
        "{result:?}"
    );
}

/// An `.npy` with its header and 8 data bytes.
fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn npy_headers_with_repeated_or_unknown_keys_are_refused() {
    let data = [0u8, 0, 128, 63, 0, 0, 0, 64];
    // NumPy keeps the last 'descr' (int32); a first-match reader sees f32.
    for header in [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'descr': '<i4', }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,), }",
        "{'descr': '<f4', 'fortran_order': False, 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1, }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': \"'shape': (1,)\", }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} trailing",
    ] {
        let result = npz::read_npy("x", &npy(header, &data));
        assert!(
            matches!(result, Err(NpzError::BadArray { .. })),
            "{header}: {result:?}"
        );
    }
    let ok = npz::read_npy(
        "x",
        &npy(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &data,
        ),
    )
    .unwrap();
    assert_eq!(ok, Tensor::from_f32(vec![2], vec![1.0, 2.0]).unwrap());
}

fn tensor() -> Tensor {
    Tensor::from_f32(vec![3], vec![1.0, 2.0, 3.0]).unwrap()
}

fn file_type(path: &Path) -> std::fs::FileType {
    std::fs::symlink_metadata(path).unwrap().file_type()
}

#[test]
fn write_npz_refuses_a_symlink_and_keeps_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.txt");
    std::fs::write(&target, b"keep me").unwrap();
    let link = dir.path().join("out.npz");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let result = npz::write_npz(&link, &[("y".into(), tensor())]);
    assert!(
        matches!(
            result,
            Err(NpzError::NotRegularFile {
                kind: "a symbolic link",
                ..
            })
        ),
        "{result:?}"
    );
    assert!(file_type(&link).is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
    assert_only(dir.path(), &["out.npz", "target.txt"]);
}

#[test]
fn write_npz_refuses_a_fifo_and_leaves_it_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("out.npz");
    mkfifo(&fifo);
    let result = npz::write_npz(&fifo, &[("y".into(), tensor())]);
    assert!(
        matches!(result, Err(NpzError::NotRegularFile { kind: "a FIFO", .. })),
        "{result:?}"
    );
    assert!(file_type(&fifo).is_fifo());
    assert_only(dir.path(), &["out.npz"]);
}

#[test]
fn write_npz_replaces_a_regular_file_and_creates_a_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("old.npz");
    std::fs::write(&existing, b"old").unwrap();
    let fresh = dir.path().join("new.npz");
    for path in [&existing, &fresh] {
        npz::write_npz(path, &[("y".into(), tensor())]).unwrap();
        assert_eq!(npz::read_npz(path).unwrap(), vec![("y".into(), tensor())]);
    }
    assert_only(dir.path(), &["new.npz", "old.npz"]);
}

/// No temporary file is left behind.
fn assert_only(dir: &Path, names: &[&str]) {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| PathBuf::from(e.unwrap().file_name()))
        .collect();
    found.sort();
    let want: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
    assert_eq!(found, want);
}

/// Two million empty nodes (4 MB of file, hundreds of MB once decoded) are
/// refused before decoding.
#[test]
fn a_model_of_millions_of_empty_nodes_is_refused_before_decoding() {
    use onnx_prepared::model::proto::{GraphProto, Message, ModelProto, NodeProto};
    let graph = GraphProto {
        node: vec![NodeProto::default(); 2_000_000],
        ..Default::default()
    };
    let bytes = ModelProto {
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodes.onnx");
    std::fs::write(&path, bytes).unwrap();
    let err = Model::open(&path).unwrap_err();
    assert!(err.to_string().contains("2000000 nodes"), "{err}");
}
