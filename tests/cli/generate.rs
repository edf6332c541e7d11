//! `onnx-prepared generate`, `run --mode` and `--dim` names on a real
//! exported model (the GenAI builder's int4 Llama in tests/models/real).

use std::path::PathBuf;
use std::process::{Command, Output};

fn model(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/models/real/{name}/model.onnx"))
}

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
        .args(args)
        .output()
        .expect("runs")
}

#[test]
fn generate_prints_tokens_and_timings_as_json() {
    let m = model("llama-genai-int4");
    let out = cli(&[
        "generate",
        m.to_str().unwrap(),
        "--prompt-ids",
        "3,1,4,1,5",
        "--max-new-tokens",
        "6",
        "--ignore-eos",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_slice(out.stdout.trim_ascii()).expect("one JSON line");
    let tokens = json["tokens"].as_array().expect("tokens");
    assert_eq!(tokens.len(), 6);
    assert!(
        tokens
            .iter()
            .all(|t| (0..256).contains(&t.as_i64().unwrap()))
    );
    assert!(json["time_to_first_token_s"].as_f64().unwrap() > 0.0);
    assert!(json["tokens_per_s"].as_f64().unwrap() > 0.0);

    // The plain form prints the same ids.
    let plain = cli(&[
        "generate",
        m.to_str().unwrap(),
        "--prompt-ids",
        "3,1,4,1,5",
        "--max-new-tokens",
        "6",
        "--ignore-eos",
    ]);
    let ids: Vec<i64> = String::from_utf8_lossy(&plain.stdout)
        .trim()
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let json_ids: Vec<i64> = tokens.iter().map(|t| t.as_i64().unwrap()).collect();
    assert_eq!(ids, json_ids);

    // Weights used in place from a mapping of the data file give the same
    // tokens.
    let mapped = cli(&[
        "generate",
        m.to_str().unwrap(),
        "--prompt-ids",
        "3,1,4,1,5",
        "--max-new-tokens",
        "6",
        "--ignore-eos",
        "--map-weights",
    ]);
    assert!(
        mapped.status.success(),
        "{}",
        String::from_utf8_lossy(&mapped.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&mapped.stdout),
        String::from_utf8_lossy(&plain.stdout)
    );
}

#[test]
fn every_run_mode_writes_the_same_outputs() {
    let m = model("qwen2-torch-dynamo");
    let dir = tempfile::tempdir().unwrap();
    let mut written = Vec::new();
    for mode in ["eager", "streaming", "hot"] {
        let out = dir.path().join(format!("{mode}.npz"));
        let run = cli(&[
            "run",
            m.to_str().unwrap(),
            "--mode",
            mode,
            "--outputs",
            out.to_str().unwrap(),
        ]);
        assert!(
            run.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        written.push(onnx_prepared::npz::read_npz(&out).unwrap());
    }
    assert!(!written[0].is_empty());
    assert_eq!(written[0], written[1]);
    assert_eq!(written[0], written[2]);
}

#[test]
fn an_unknown_dim_name_lists_the_models_dims() {
    let m = model("llama-genai-int4");
    let out = cli(&["run", m.to_str().unwrap(), "--dim", "T=16"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no symbolic dim `T`"), "{err}");
    assert!(
        err.contains("past_sequence_length, sequence_length"),
        "{err}"
    );
    // The model's own names work.
    let out = cli(&[
        "run",
        m.to_str().unwrap(),
        "--dim",
        "sequence_length=16",
        "--dim",
        "past_sequence_length=0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("[1, 16, 256]"));
}

#[test]
fn unsupported_operators_are_listed_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    let model = onnx_prepared::model::proto::ModelProto {
        ir_version: Some(11),
        opset_import: vec![onnx_prepared::model::proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(23),
        }],
        graph: Some(onnx_prepared::model::proto::GraphProto {
            node: vec![onnx_prepared::model::proto::NodeProto {
                name: Some("nz".into()),
                op_type: Some("StringNormalizer".into()),
                input: vec!["x".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    use onnx_prepared::model::proto::Message;
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let out = cli(&["plan", path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ai.onnx::StringNormalizer (opset 23): 1 node, first `nz`"),
        "{err}"
    );
}

#[test]
fn absurd_token_counts_are_refused() {
    let m = model("qwen2-optimum");
    for n in ["0", "100000000000", "many"] {
        let out = cli(&[
            "generate",
            m.to_str().unwrap(),
            "--prompt-ids",
            "1",
            "--max-new-tokens",
            n,
        ]);
        assert!(!out.status.success(), "--max-new-tokens {n} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("max-new-tokens"), "{err}");
    }
}

/// `generate --limit prepared=SIZE --stats FILE`: under a limit below the
/// model's prepared bytes, the same tokens as without one, with evictions
/// and restores counted and the prepared peak within the limit; a limit
/// below the largest object is an error naming the domain.
#[test]
fn generate_under_a_prepared_limit() {
    let m = model("llama-genai-int4");
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let args = [
        "generate",
        m.to_str().unwrap(),
        "--prompt-ids",
        "3,1,4,1,5",
        "--max-new-tokens",
        "6",
        "--ignore-eos",
    ];
    let free = cli(&args);
    assert!(
        free.status.success(),
        "{}",
        String::from_utf8_lossy(&free.stderr)
    );
    let free_stats = dir.path().join("free.json");
    let unlimited = cli(&[&args[..], &["--stats", free_stats.to_str().unwrap()]].concat());
    assert!(unlimited.status.success());
    let all: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&free_stats).unwrap()).unwrap();
    let total = all["peak_live_bytes"]["prepared"].as_u64().unwrap();
    // Room for the largest object but not for all of them.
    let limit = total * 2 / 3;
    let limit_arg = format!("prepared={limit}");
    let limited = cli(&[
        &args[..],
        &["--limit", &limit_arg, "--stats", stats.to_str().unwrap()],
    ]
    .concat());
    assert!(
        limited.status.success(),
        "{}",
        String::from_utf8_lossy(&limited.stderr)
    );
    assert_eq!(limited.stdout, free.stdout, "tokens differ under the limit");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    assert!(s["evictions"].as_u64().unwrap() > 0, "{s}");
    assert!(s["restores"].as_u64().unwrap() > 0, "{s}");
    assert!(
        s["peak_live_bytes"]["prepared"].as_u64().unwrap() <= limit,
        "{s}"
    );

    let tiny = cli(&[&args[..], &["--limit", "prepared=1KiB"]].concat());
    assert!(!tiny.status.success());
    let err = String::from_utf8_lossy(&tiny.stderr);
    assert!(
        err.contains("prepared domain") && err.contains("1024"),
        "{err}"
    );
}

#[test]
fn generate_text_stops_at_a_stop_string_and_needs_a_tokenizer() {
    let folder = model("llama-genai-fp32").parent().unwrap().to_owned();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            folder.to_str().unwrap(),
            "--prompt",
            "the quick brown fox",
            "--max-new-tokens",
            "16",
            "--ignore-eos",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = cli(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(out.stdout.trim_ascii()).unwrap()
    };
    let full = run(&[]);
    let text = full["text"].as_str().unwrap().to_owned();
    let tokens = full["tokens"].as_array().unwrap().len();
    assert_eq!(tokens, 16);
    // A stop string taken from the middle of the text: the text ends before
    // it and fewer tokens are generated.
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() > 6, "{text:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let cut = run(&["--stop", &stop]);
    let at = text.find(&stop).unwrap();
    assert_eq!(cut["text"].as_str().unwrap(), &text[..at]);
    assert!(cut["tokens"].as_array().unwrap().len() < tokens);

    // A model without a tokenizer.json beside it: a typed error naming it.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(model("llama-nbits-sym"), dir.path().join("model.onnx")).unwrap();
    let out = cli(&["generate", dir.path().to_str().unwrap(), "--prompt", "hi"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no tokenizer.json"), "{err}");
}

#[test]
fn ctrl_c_stops_generation_between_tokens_and_keeps_the_text() {
    use std::io::Read;
    let folder = model("llama-optimum").parent().unwrap().to_owned();
    let mut child = Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
        .args([
            "generate",
            folder.to_str().unwrap(),
            "--prompt",
            "the quick brown fox",
            "--max-new-tokens",
            "65536",
            "--ignore-eos",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    // Text streams before the end: read some, then interrupt.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout
        .read_exact(&mut first)
        .expect("text streams as tokens arrive");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(err.contains("interrupted after"), "{err}");
    let tokens: usize = err
        .split("interrupted after ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("a token count");
    assert!(tokens > 0 && tokens < 65536, "{tokens}");
}

#[test]
fn chat_replies_as_generate_does_and_reuses_the_cache_across_turns() {
    use std::io::Write;
    let folder = model("qwen2-genai-fp32").parent().unwrap().to_owned();
    let folder = folder.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_onnx-prepared"))
        .args(["chat", folder, "--max-new-tokens", "8", "--ignore-eos"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello there\nand then?\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let replies: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    let reused: Vec<usize> = err
        .split('[')
        .skip(1)
        .filter_map(|s| s.split("; ").nth(1)?.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(reused.len(), 2, "{err}");
    assert_eq!(reused[0], 0, "{err}");
    assert!(
        reused[1] > 0,
        "the second turn reuses the first's prompt: {err}"
    );

    // The first reply is what `generate --chat` gives for the same message.
    let once = cli(&[
        "generate",
        folder,
        "--chat",
        "hello there",
        "--max-new-tokens",
        "8",
        "--ignore-eos",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(once.stdout.trim_ascii()).unwrap();
    assert_eq!(replies[0], json["text"].as_str().unwrap());
}
