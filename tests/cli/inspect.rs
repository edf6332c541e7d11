//! `onnx-prepared inspect`: the report agrees with the model and is built
//! without reading payloads.

use std::process::Command;

use onnx_prepared::model::Model;
use onnx_prepared_fixtures::{TinyLlmConfig, WriteMode, tiny_llm, write_fixture};

fn inspect(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
        .arg("inspect")
        .args(args)
        .output()
        .expect("runs")
}

#[test]
fn json_report_matches_the_model_without_reading_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = tiny_llm(&TinyLlmConfig::default()).unwrap();
    let path = write_fixture(dir.path(), &fixture, WriteMode::Verify).unwrap()[0].clone();
    let model = Model::open(&path).unwrap();
    // Payload bytes are irrelevant to the report: zero them all.
    let data = dir.path().join("tiny-llm.data");
    let size = std::fs::metadata(&data).unwrap().len();
    std::fs::write(&data, vec![0u8; size as usize]).unwrap();

    let out = inspect(&[path.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let cfg = TinyLlmConfig::default();
    assert_eq!(
        report["ops"]["com.microsoft::MatMulNBits"],
        4 * cfg.blocks + 1
    );
    assert_eq!(report["ops"]["RMSNormalization"], 2 * cfg.blocks + 1);
    assert_eq!(report["opsets"][0], serde_json::json!(["ai.onnx", 23]));
    let weights = report["weights"].as_array().unwrap();
    assert_eq!(weights.len(), model.weights().len());
    let external: u64 = model
        .weights()
        .iter()
        .filter(|w| w.is_external())
        .map(|w| w.byte_len())
        .sum();
    assert_eq!(report["totals"]["external_bytes"], external);
    assert_eq!(report["totals"]["external_files"], 1);
    assert_eq!(
        report["totals"]["external_with_sha256"],
        model.weights().iter().filter(|w| w.is_external()).count()
    );
    let ids = report["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "input_ids")
        .unwrap();
    assert_eq!(ids["element_type"], "INT64");
    assert_eq!(ids["shape"], serde_json::json!(["1", "T"]));

    let text = inspect(&[path.to_str().unwrap()]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("com.microsoft::MatMulNBits"));
    assert!(text.contains("layer3.down.weight"));
}

#[test]
fn bad_model_fails_with_a_readable_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.onnx");
    std::fs::write(&path, b"not a model").unwrap();
    let out = inspect(&[path.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a valid ONNX protobuf"), "{stderr}");
}
