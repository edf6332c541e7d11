//! The command line under an address-space limit (`ulimit -v`, which the
//! allocation ceiling reads as `RLIMIT_AS`): a `--dim` of 10^9 and a sparse
//! 8 GiB external weight are error exits naming the ceiling, never an
//! abort in the allocator.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support;
use onnx_prepared::model::proto::{GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto};

/// The address-space limit the binary runs under: room for its code,
/// threads and small buffers; its ceiling is half of it (2 GiB).
const ADDRESS_SPACE_KIB: u64 = 4 << 20;

/// Runs the CLI under [`ADDRESS_SPACE_KIB`]; fails the test if it runs
/// longer than 60 s (then kills it).
fn cli_limited(args: &[&OsStr]) -> Output {
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_onnx-prepared"))
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

/// An error exit (status 1, not a signal) whose message names the ceiling.
fn assert_refused_by_the_ceiling(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "status {:?}: {stderr}",
        out.status
    );
    assert!(stderr.contains("ceiling"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("memory allocation"), "{stderr}");
}

/// A one-node model: `y = op(inputs)`, with `x: [dims]` (f32) as its graph
/// input and `inits` as initializers.
fn model(dir: &Path, op: &str, dims: &[Result<i64, &str>], inits: &[support::Init]) -> PathBuf {
    let mut bytes = support::model_bytes(inits);
    let mut proto = ModelProto::decode(bytes.as_slice()).unwrap();
    let graph = proto.graph.get_or_insert_with(GraphProto::default);
    let mut inputs = vec!["x".to_owned()];
    inputs.extend(inits.iter().map(|i| i.name.clone()));
    graph.node = vec![NodeProto {
        name: Some("node".into()),
        op_type: Some(op.into()),
        input: inputs,
        output: vec!["y".into()],
        ..Default::default()
    }];
    graph.input = vec![support::tensor_value("x", 1, Some(dims))];
    graph.output = vec![support::tensor_value("y", 1, None)];
    proto.opset_import = vec![OperatorSetIdProto {
        domain: Some(String::new()),
        version: Some(21),
    }];
    bytes.clear();
    proto.encode(&mut bytes).unwrap();
    let path = dir.join("model.onnx");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `--dim T=1000000000` makes a 4 GB generated input: past the ceiling, so
/// it is refused before it is allocated (it used to abort when the system
/// would not map it).
#[test]
fn a_dim_of_a_billion_is_an_error_exit() {
    let dir = support::tempdir();
    let model = model(dir.path(), "Relu", &[Err("T")], &[]);
    let out = cli_limited(&[
        OsStr::new("run"),
        model.as_os_str(),
        OsStr::new("--dim"),
        OsStr::new("T=1000000000"),
    ]);
    assert_refused_by_the_ceiling(&out);
}

/// An 8 GiB external weight in a sparse file: its read buffer is past the
/// ceiling, so it is refused before it is allocated.
#[test]
fn a_sparse_eight_gib_weight_is_an_error_exit() {
    let dir = support::tempdir();
    let len: u64 = 8 << 30;
    let data = std::fs::File::create(dir.path().join("w.bin")).unwrap();
    data.set_len(len).unwrap();
    let weight = support::Init::external(
        "w",
        &[(len / 4) as i64],
        &[
            ("location", "w.bin"),
            ("offset", "0"),
            ("length", &len.to_string()),
        ],
    );
    let model = model(dir.path(), "Add", &[Ok(1)], &[weight]);
    for mode in ["eager", "streaming"] {
        let out = cli_limited(&[
            OsStr::new("run"),
            model.as_os_str(),
            OsStr::new("--mode"),
            OsStr::new(mode),
        ]);
        assert_refused_by_the_ceiling(&out);
    }
}
