//! A large table that only `Gather` (axis 0) reads — tiny-llm's 8 MiB f16
//! embedding — is served row by row from the model's data file by default:
//! the session never holds it, a run reads exactly the rows its indices
//! pick, the outputs are bit-identical to a session that keeps the table
//! resident, and a data file cut under a running session is a typed error,
//! not a crash.

use crate::support;

use onnx_prepared::arena::Domain;
use onnx_prepared::{ErrorKind, RuntimeContext, RuntimeSession, SessionOptions, Tensor};

/// tiny-llm's embedding: 8192 rows of 512 f16 values.
const ROW_BYTES: u64 = 512 * 2;
const TABLE_BYTES: usize = 8192 * 512 * 2;

fn open(model: &std::path::Path, tables_from_source: bool) -> RuntimeSession {
    RuntimeSession::open(
        model,
        SessionOptions::default()
            .with_cpu_workers(1)
            .with_io_workers(1)
            .with_resident_tables(!tables_from_source),
    )
    .unwrap()
}

/// A prefill of 8 tokens with `ids` as its input ids.
fn run_ids(
    session: &RuntimeSession,
    ids: &[i64],
) -> Result<Vec<(String, Tensor)>, onnx_prepared::Error> {
    let mut ctx = RuntimeContext::new(session);
    for (name, t) in support::tiny_llm_prefill(ids.len()) {
        let t = if name == "input_ids" {
            Tensor::from_i64(t.shape().to_vec(), ids.to_vec()).unwrap()
        } else {
            t
        };
        ctx = ctx.with_input(&name, t).unwrap();
    }
    Ok(session.run(ctx).map_err(|e| e.error)?.outputs().to_vec())
}

#[test]
fn a_gathered_embedding_is_served_by_rows_with_identical_outputs() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let rows = open(&model, true);
    let resident = open(&model, false);
    // Two runs of consecutive ids (one read) and one of scattered, repeated
    // and negative ones (one read per run of consecutive rows).
    let ids: [&[i64]; 2] = [
        &[10, 11, 12, 13, 14, 15, 16, 17],
        &[8191, 0, 5, 5, -1, 42, 43, 7],
    ];
    for ids in ids {
        assert_eq!(
            support::f32_bits(&run_ids(&rows, ids).unwrap()),
            support::f32_bits(&run_ids(&resident, ids).unwrap()),
            "{ids:?}"
        );
    }

    // A hot run reads its 8 rows and nothing else; the resident table
    // reads nothing.
    let (before, kept) = (
        rows.preparation_stats().source_bytes_read,
        resident.preparation_stats().source_bytes_read,
    );
    run_ids(&rows, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    run_ids(&resident, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    assert_eq!(
        rows.preparation_stats().source_bytes_read - before,
        8 * ROW_BYTES
    );
    assert_eq!(resident.preparation_stats().source_bytes_read, kept);

    // The table is never held: the prepared domain peaks a whole table
    // lower.
    let peak = |s: &RuntimeSession| s.memory().domain(Domain::Prepared).peak;
    assert!(
        peak(&rows) + TABLE_BYTES <= peak(&resident),
        "prepared peak {} served by rows, {} resident",
        peak(&rows),
        peak(&resident)
    );

    // An index outside the table is a typed error naming the gather, read
    // before anything is read.
    let before = rows.preparation_stats().source_bytes_read;
    let err = run_ids(&rows, &[0, 1, 2, 8192, 4, 5, 6, 7]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Kernel, "{err}");
    assert!(err.to_string().contains("out of range"), "{err}");
    assert_eq!(rows.preparation_stats().source_bytes_read, before);
}

#[test]
fn a_data_file_cut_under_a_served_table_is_a_typed_error() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let data = model.with_extension("data");
    let session = open(&model, true);
    let ids = [3, 1, 4, 1, 5, 9, 2, 6];
    let want = support::f32_bits(&run_ids(&session, &ids).unwrap());

    // Every other weight is resident; only the embedding's rows are read
    // from the file now.
    let bytes = std::fs::read(&data).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(0)
        .unwrap();
    let err = run_ids(&session, &ids).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Payload, "{err}");
    assert!(err.to_string().contains("embed.weight"), "{err}");

    // The same bytes back: the file was still written since it was
    // verified, so the session keeps refusing it; a new session serves it.
    std::fs::write(&data, &bytes).unwrap();
    let err = run_ids(&session, &ids).unwrap_err();
    assert!(
        err.to_string().contains("changed since it was verified"),
        "{err}"
    );
    assert_eq!(
        support::f32_bits(&run_ids(&open(&model, true), &ids).unwrap()),
        want
    );
}

#[test]
fn a_data_file_rewritten_in_place_under_a_served_table_is_a_typed_error() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let data = model.with_extension("data");
    let session = open(&model, true);
    let ids = [3, 1, 4, 1, 5, 9, 2, 6];
    run_ids(&session, &ids).unwrap();
    // Same size, other bytes, the modification time put back (`cp -p`,
    // `rsync --inplace -t`): the rows would silently mix new embeddings
    // with layers prepared from the old file.
    let mtime = std::fs::metadata(&data).unwrap().modified().unwrap();
    let mut bytes = std::fs::read(&data).unwrap();
    bytes.iter_mut().for_each(|b| *b = b.wrapping_add(1));
    let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &bytes, 0).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    let err = run_ids(&session, &ids).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Payload, "{err}");
    assert!(err.to_string().contains("embed.weight"), "{err}");
    assert!(
        err.to_string().contains("changed since it was verified"),
        "{err}"
    );
}

/// A 4-bit table `[65536, 33]` (odd rows: a row ends mid-byte) gathered
/// then cast to f32, its data in `table.bin`.
fn int4_gather_model(dir: &std::path::Path) -> std::path::PathBuf {
    use onnx_prepared::model::proto::tensor_proto::{DataLocation, DataType};
    use onnx_prepared::model::proto::{
        AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto,
        StringStringEntryProto, TensorProto, attribute_proto::AttributeType,
    };
    const ROWS: usize = 65536;
    const COLS: usize = 33;
    // Element e holds (e % 15) - 7, two per byte, low nibble first.
    let nibble = |e: usize| ((e % 15) as i8 - 7) as u8 & 0x0f;
    let bytes: Vec<u8> = (0..(ROWS * COLS).div_ceil(2))
        .map(|b| nibble(2 * b) | (nibble(2 * b + 1) << 4))
        .collect();
    std::fs::write(dir.join("table.bin"), &bytes).unwrap();
    let kv = |k: &str, v: String| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    let io = |name: &str, elem: DataType, dims: &[i64]| {
        use onnx_prepared::model::proto::tensor_shape_proto::{Dimension, dimension};
        use onnx_prepared::model::proto::{
            TensorShapeProto, TypeProto, ValueInfoProto, type_proto,
        };
        ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(elem as i32),
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&d| Dimension {
                                value: Some(dimension::Value::DimValue(d)),
                                ..Default::default()
                            })
                            .collect(),
                    }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    let graph = GraphProto {
        name: Some("int4-gather".into()),
        initializer: vec![TensorProto {
            name: Some("table".into()),
            data_type: Some(DataType::Int4 as i32),
            dims: vec![ROWS as i64, COLS as i64],
            data_location: Some(DataLocation::External as i32),
            external_data: vec![
                kv("location", "table.bin".into()),
                kv("length", bytes.len().to_string()),
            ],
            ..Default::default()
        }],
        node: vec![
            NodeProto {
                op_type: Some("Gather".into()),
                input: vec!["table".into(), "ids".into()],
                output: vec!["rows".into()],
                ..Default::default()
            },
            NodeProto {
                op_type: Some("Cast".into()),
                input: vec!["rows".into()],
                output: vec!["out".into()],
                attribute: vec![AttributeProto {
                    name: Some("to".into()),
                    r#type: Some(AttributeType::Int as i32),
                    i: Some(DataType::Float as i64),
                    ..Default::default()
                }],
                ..Default::default()
            },
        ],
        input: vec![io("ids", DataType::Int64, &[3])],
        output: vec![io("out", DataType::Float, &[3, COLS as i64])],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(11),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(23),
        }],
        graph: Some(graph),
        ..Default::default()
    };
    let path = dir.join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

#[test]
fn a_4_bit_table_with_odd_rows_is_gathered_whole_not_by_rows() {
    let dir = support::tempdir();
    let model = int4_gather_model(dir.path());
    let ids = [65535i64, 1, 2];
    let want: Vec<f32> = ids
        .iter()
        .flat_map(|&r| (0..33).map(move |c| ((r as usize * 33 + c) % 15) as f32 - 7.0))
        .collect();
    for tables_from_source in [true, false] {
        let session = open(&model, tables_from_source);
        let out = session
            .run_with([("ids", Tensor::from_i64(vec![3], ids.to_vec()).unwrap())])
            .unwrap_or_else(|e| panic!("tables from source {tables_from_source}: {e}"));
        let got = out.output("out").unwrap().as_f32().unwrap().to_vec();
        assert_eq!(got, want, "tables from source {tables_from_source}");
    }
}
