//! `onnx-prepared bench`, `demo` and `run` through the session: the JSON
//! report names every mode and key with consistent values, the demo prints
//! its table and timeline, and `run` handles a model with only embedded
//! weights.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::fixture;
use onnx_prepared::model::proto::tensor_proto::DataType;
use onnx_prepared::model::proto::{
    GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};

const MODES: [&str; 4] = ["eager", "streaming", "prepared", "hot"];
const DOMAINS: [&str; 4] = ["preparation", "prepared", "execution", "io"];

fn cli(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
        .args(args)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `bench --json` on `model` and checks the report; returns it.
fn bench_json(model: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["bench", model.to_str().unwrap(), "--json", "--threads", "2"];
    args.extend_from_slice(extra);
    let out = cli(&args);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let modes = report["modes"].as_array().expect("modes");
    assert_eq!(modes.len(), 4, "{report}");
    for (m, name) in modes.iter().zip(MODES) {
        assert_eq!(m["mode"], name);
        for key in [
            "time_to_first_runnable_node_s",
            "time_to_first_output_s",
            "time_all_session_tasks_s",
        ] {
            assert!(m[key].as_f64().is_some_and(|s| s >= 0.0), "{name} {key}");
        }
        assert!(
            m["time_to_first_runnable_node_s"].as_f64() <= m["time_to_first_output_s"].as_f64(),
            "{name}: the first node runs before the output"
        );
        for key in ["bytes_read", "prepacks", "max_bytes_in_flight"] {
            assert!(m[key].as_u64().is_some(), "{name} {key}");
        }
        for domain in DOMAINS {
            assert!(
                m["peak_live_bytes"][domain].as_u64().is_some(),
                "{name} {domain}"
            );
        }
        // Every mode but the hot one loads the whole model into the
        // prepared domain from an empty store.
        assert!(
            m["peak_live_bytes"]["prepared"].as_u64() > Some(0),
            "{name}"
        );
    }
    for cold in &modes[..3] {
        assert!(cold["bytes_read"].as_u64() > Some(0), "{cold}");
        assert!(cold["max_bytes_in_flight"].as_u64() > Some(0), "{cold}");
        assert!(
            cold["time_all_session_tasks_s"].as_f64() > Some(0.0),
            "{cold}"
        );
    }
    let (eager, hot) = (&modes[0], &modes[3]);
    // Streaming reads and packs every weight too (at least once).
    assert!(modes[1]["bytes_read"].as_u64() >= eager["bytes_read"].as_u64());
    assert!(modes[1]["prepacks"].as_u64() >= eager["prepacks"].as_u64());
    assert_eq!(hot["prepacks"], 0);
    assert_eq!(hot["max_bytes_in_flight"], 0);
    assert_eq!(hot["time_all_session_tasks_s"], 0.0);
    // Eager preparation finishes before its run starts.
    assert!(
        eager["time_all_session_tasks_s"].as_f64()
            <= eager["time_to_first_runnable_node_s"].as_f64()
    );
    report
}

#[test]
fn bench_json_on_gemm_chain() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.json");
    let report = bench_json(
        &fixture("gemm-chain"),
        &["--trace", trace.to_str().unwrap()],
    );
    // Two Gemm weights packed, every byte of the data file read once.
    assert_eq!(report["modes"][0]["prepacks"], 2);
    assert_eq!(report["modes"][0]["bytes_read"], 526_336);
    assert_eq!(
        report["modes"][3]["bytes_read"], 0,
        "a hot run reads nothing"
    );
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert!(trace.starts_with("{\"traceEvents\":["), "{trace}");
    assert!(trace.contains("read_source") && trace.contains("\"cat\":\"inference\""));
}

#[test]
fn bench_json_on_tiny_llm_with_a_small_prefill() {
    let report = bench_json(&fixture("tiny-llm"), &["--dim", "T=8"]);
    // The embedding (8192 × 512 f16) is served from the data file: read
    // whole once, in pieces, to check its digest, then by rows: the eager
    // run reads its 8 tokens' rows, a hot prefill those rows and nothing
    // else.
    assert_eq!(report["modes"][0]["bytes_read"], 21_514_240 + 8 * 512 * 2);
    assert_eq!(report["modes"][3]["bytes_read"], 8 * 512 * 2);
    // Kept resident, it is read whole once and a hot run reads nothing.
    let resident = bench_json(&fixture("tiny-llm"), &["--dim", "T=8", "--resident-tables"]);
    assert_eq!(resident["modes"][0]["bytes_read"], 21_514_240);
    assert_eq!(resident["modes"][3]["bytes_read"], 0);
    let prepared = |r: &serde_json::Value| r["modes"][0]["peak_live_bytes"]["prepared"].as_u64();
    assert!(
        prepared(&report).unwrap() + 8192 * 512 * 2 <= prepared(&resident).unwrap(),
        "served by rows, the table is not held: {report} vs {resident}"
    );
}

#[test]
fn bench_table_says_the_page_cache_is_warm() {
    let out = cli(&["bench", fixture("gemm-chain").to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("page cache is warm"), "{text}");
    for mode in MODES {
        assert!(text.lines().any(|l| l.starts_with(mode)), "{text}");
    }
}

#[test]
fn demo_prints_the_table_and_the_timeline() {
    let dir = onnx_prepared_fixtures::default_dir();
    let out = cli(&["demo", "--fixtures", dir.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("mode") && l.contains("first output")),
        "{text}"
    );
    for lane in ["io", "prepack", "inference"] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{lane} |"))),
            "{lane}: {text}"
        );
    }
    let (hot, offloaded) = text
        .split_once("offloading:")
        .expect("the demo decodes under a limit too");
    let decode_rows = |part: &str| -> Vec<String> {
        part.lines()
            .filter(|l| l.trim_start().starts_with("decode"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(decode_rows(hot).len(), 8, "{text}");
    // Under the limit: objects evicted and restored at every step, the
    // prepared peak within 5 MiB.
    let limited = decode_rows(offloaded);
    assert_eq!(limited.len(), 8, "{text}");
    for row in &limited {
        let fields: Vec<&str> = row.split_whitespace().collect();
        let after = |name: &str| -> u64 {
            let at = fields.iter().position(|f| *f == name).expect(name);
            fields[at + 1].parse().expect(name)
        };
        assert!(after("evicted") > 0 && after("restored") > 0, "{row}");
        assert!(after("peak") <= 5 << 20, "{row}");
    }
}

/// `y = (x + c) * c` with `c` embedded in the model (no data file).
fn embedded_model(dir: &Path) -> PathBuf {
    let value = |name: &str| ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto {
                    dim: [2, 3]
                        .map(|n| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(n)),
                            ..Default::default()
                        })
                        .to_vec(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    };
    let c: Vec<u8> = [-1.0f32, 0.0, 1.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let node = |name: &str, op: &str, inputs: &[&str], output: &str| NodeProto {
        name: Some(name.into()),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(11),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(23),
        }],
        graph: Some(GraphProto {
            node: vec![
                node("add", "Add", &["x", "c"], "s"),
                node("mul", "Mul", &["s", "c"], "y"),
            ],
            initializer: vec![TensorProto {
                name: Some("c".into()),
                data_type: Some(DataType::Float as i32),
                dims: vec![3],
                raw_data: Some(c.into()),
                ..Default::default()
            }],
            input: vec![value("x")],
            output: vec![value("y")],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("embedded.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

#[test]
fn run_goes_through_the_session_and_writes_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let model = embedded_model(dir.path());
    let trace = dir.path().join("run.json");
    let out = cli(&[
        "run",
        model.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--repeat",
        "2",
    ]);
    let timing: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(timing["runs"], 2);
    let trace = std::fs::read_to_string(&trace).unwrap();
    assert!(trace.contains("\"cat\":\"inference\""), "{trace}");
}
