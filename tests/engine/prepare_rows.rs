//! A table larger than the prepared domain's limit that only `Gather`
//! (axis 0) reads is served row by row from its source: a run reads the
//! rows its indices pick, negative indices count from the end, an index
//! out of range is a typed error naming the node, and the outputs equal
//! the table's rows. A table something else reads too must be resident,
//! so under that limit it is refused with the prepared domain's error.

use std::path::{Path, PathBuf};

use crate::support;
use onnx_prepared::arena::{BudgetLimits, Domain};
use onnx_prepared::model::proto::tensor_proto::{DataLocation, DataType};
use onnx_prepared::model::proto::{
    GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto, ValueInfoProto,
};
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared::{ErrorKind, Tensor};

const ROWS: usize = 1000;
const WIDTH: usize = 64;
/// Below the table's 256,000 bytes.
const LIMIT: usize = 64 << 10;

/// The table's element `(r, c)`, computed here independently of the runtime.
fn element(r: usize, c: usize) -> f32 {
    r as f32 * 0.5 + c as f32
}

fn value(name: &str, elem: DataType, dims: &[Result<i64, &str>]) -> ValueInfoProto {
    support::tensor_value(name, elem as i32, Some(dims))
}

/// The table's bytes: `ROWS × WIDTH` little-endian f32.
fn table_bytes() -> Vec<u8> {
    (0..ROWS)
        .flat_map(|r| (0..WIDTH).flat_map(move |c| element(r, c).to_le_bytes()))
        .collect()
}

/// `y = Gather(emb, ids)`, and with `also_added`, `z = emb + emb` too.
fn write_model(dir: &Path, also_added: bool) -> PathBuf {
    write_model_declaring(dir, also_added, None)
}

/// [`write_model`] whose table declares `checksum` (a `sha256:` entry).
fn write_model_declaring(dir: &Path, also_added: bool, checksum: Option<String>) -> PathBuf {
    let table = table_bytes();
    std::fs::write(dir.join("emb.data"), &table).unwrap();
    let mut node = vec![NodeProto {
        name: Some("lookup".into()),
        op_type: Some("Gather".into()),
        input: vec!["emb".into(), "ids".into()],
        output: vec!["y".into()],
        ..Default::default()
    }];
    let mut output = vec![value("y", DataType::Float, &[Err("n"), Ok(WIDTH as i64)])];
    if also_added {
        node.push(NodeProto {
            name: Some("twice".into()),
            op_type: Some("Add".into()),
            input: vec!["emb".into(), "emb".into()],
            output: vec!["z".into()],
            ..Default::default()
        });
        output.push(value(
            "z",
            DataType::Float,
            &[Ok(ROWS as i64), Ok(WIDTH as i64)],
        ));
    }
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    let model = ModelProto {
        ir_version: Some(11),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("rows".into()),
            node,
            initializer: vec![TensorProto {
                name: Some("emb".into()),
                data_type: Some(DataType::Float as i32),
                dims: vec![ROWS as i64, WIDTH as i64],
                data_location: Some(DataLocation::External as i32),
                external_data: [
                    entry("location", "emb.data"),
                    entry("offset", "0"),
                    entry("length", &table.len().to_string()),
                ]
                .into_iter()
                .chain(checksum.map(|c| entry("checksum", &c)))
                .collect(),
                ..Default::default()
            }],
            input: vec![value("ids", DataType::Int64, &[Err("n")])],
            output,
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("rows.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

fn open(path: &Path, limit: Option<usize>) -> RuntimeSession {
    let budget = limit.map_or(BudgetLimits::unlimited(), |l| {
        BudgetLimits::unlimited().with_domain(Domain::Prepared, l)
    });
    RuntimeSession::open(
        path,
        SessionOptions::default()
            .with_cpu_workers(1)
            .with_io_workers(1)
            .with_budget(budget),
    )
    .unwrap()
}

fn gather(session: &RuntimeSession, ids: &[i64]) -> Result<Vec<f32>, onnx_prepared::Error> {
    let ids = Tensor::from_i64(vec![ids.len()], ids.to_vec()).unwrap();
    let ctx = RuntimeContext::new(session).with_input("ids", ids).unwrap();
    let ctx = session.run(ctx).map_err(|e| e.error)?;
    Ok(ctx.outputs()[0].1.as_f32().unwrap().to_vec())
}

#[test]
fn a_gathered_table_above_the_limit_is_read_row_by_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), false);
    let limited = open(&path, Some(LIMIT));
    let ids = [3_i64, -1, 999, 0, 3];
    let want: Vec<f32> = [3_usize, 999, 999, 0, 3]
        .iter()
        .flat_map(|&r| (0..WIDTH).map(move |c| element(r, c)))
        .collect();
    // Twice: the second run reuses the table object.
    assert_eq!(gather(&limited, &ids).unwrap(), want);
    assert_eq!(gather(&limited, &ids[..2]).unwrap(), want[..2 * WIDTH]);
    assert_eq!(gather(&open(&path, None), &ids).unwrap(), want);
    let memory = limited.memory();
    assert!(memory.domain(Domain::Prepared).peak <= LIMIT, "{memory}");
    // No digest to check: the table is never read whole, only rows.
    let read = limited.preparation_stats().source_bytes_read as usize;
    assert_eq!(read, 7 * WIDTH * 4);

    let err = gather(&limited, &[1, 1000]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Kernel, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("lookup") && message.contains("out of range"),
        "{message}"
    );
    assert_eq!(
        gather(&limited, &[-1000]).unwrap(),
        want[3 * WIDTH..4 * WIDTH]
    );
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A table that declares its digest is checked once, read piece by piece
/// (the preparation domain never holds it whole), then served by rows; a
/// table whose bytes do not match its digest is never served.
#[test]
fn a_declared_digest_is_checked_without_holding_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let table = table_bytes();
    let good = format!("sha256:{}", sha256_hex(&table));
    let path = write_model_declaring(dir.path(), false, Some(good));
    let limited = open(&path, Some(LIMIT));
    let want: Vec<f32> = (0..WIDTH).map(|c| element(7, c)).collect();
    assert_eq!(gather(&limited, &[7]).unwrap(), want);
    let read = limited.preparation_stats().source_bytes_read as usize;
    assert_eq!(read, table.len() + WIDTH * 4);
    let prep = limited.memory().domain(Domain::Preparation).peak;
    assert!(
        prep > 0 && prep < table.len() / 2,
        "preparation peak {prep} for a {}-byte table",
        table.len()
    );

    let other = tempfile::tempdir().unwrap();
    let wrong = format!("sha256:{}", sha256_hex(b"other bytes"));
    let path = write_model_declaring(other.path(), false, Some(wrong));
    let err = gather(&open(&path, Some(LIMIT)), &[7]).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("emb") && message.contains("checksum"),
        "{message}"
    );
}

#[test]
fn a_table_read_otherwise_too_must_fit() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), true);
    let err = gather(&open(&path, Some(LIMIT)), &[1]).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("prepared domain") && message.contains(&LIMIT.to_string()),
        "{message}"
    );
}

/// `y = (x · a) · b` in one step (both nodes in scope `block`), each
/// weight 256 KiB: under a limit that holds one weight but not both, the
/// step cannot run. The run fails with the prepared domain's error after
/// the admission's bounded wait — it does not evict its own step's weights
/// in turn forever.
#[test]
fn a_step_whose_objects_exceed_the_limit_together_fails() {
    let dir = tempfile::tempdir().unwrap();
    let n = 256;
    let weight: Vec<u8> = (0..n * n)
        .flat_map(|i| (i as f32 * 1e-4).to_le_bytes())
        .collect();
    std::fs::write(
        dir.path().join("w.data"),
        [&weight[..], &weight[..]].concat(),
    )
    .unwrap();
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    let init = |name: &str, offset: usize| TensorProto {
        name: Some(name.into()),
        data_type: Some(DataType::Float as i32),
        dims: vec![n as i64, n as i64],
        data_location: Some(DataLocation::External as i32),
        external_data: vec![
            entry("location", "w.data".into()),
            entry("offset", offset.to_string()),
            entry("length", weight.len().to_string()),
        ],
        ..Default::default()
    };
    let matmul = |name: &str, a: &str, b: &str, y: &str| NodeProto {
        name: Some(name.into()),
        op_type: Some("MatMul".into()),
        input: vec![a.into(), b.into()],
        output: vec![y.into()],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(11),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("pair".into()),
            node: vec![
                matmul("block/first", "x", "a", "h"),
                matmul("block/second", "h", "b", "y"),
            ],
            initializer: vec![init("a", 0), init("b", weight.len())],
            input: vec![value("x", DataType::Float, &[Ok(1), Ok(n as i64)])],
            output: vec![value("y", DataType::Float, &[Ok(1), Ok(n as i64)])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.path().join("pair.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let limit = 300 << 10;
    let session = open(&path, Some(limit));
    let x = Tensor::from_f32(vec![1, n], vec![1.0; n]).unwrap();
    let ctx = RuntimeContext::new(&session).with_input("x", x).unwrap();
    let started = std::time::Instant::now();
    let err = session.run(ctx).unwrap_err().error;
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    let message = err.to_string();
    assert!(
        message.contains("prepared domain") && message.contains(&limit.to_string()),
        "{message}"
    );
    assert!(session.memory().domain(Domain::Prepared).peak <= limit);
}
