//! Tables served by rows on hostile indices and a data file changed under
//! the session: tiny-llm's embedding (8192 × 512 f16, read row by row from
//! its data file) gathers fuzzer-chosen token ids; then the data file is
//! written, truncated or only touched as the input says, and the session
//! runs again.
//!
//! Oracles: before the change a run equals a session holding the table
//! resident (or both fail: an id out of range); after any change of the
//! data file every run fails with a typed payload error — never rows of
//! the new file mixed with layers prepared from the old one.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use onnx_prepared::{ErrorKind, RuntimeContext, RuntimeSession, SessionOptions, Tensor};

#[derive(Debug, Arbitrary)]
enum Change {
    /// Overwrite bytes at an offset (modulo the file's length).
    Write { offset: u32, bytes: Vec<u8> },
    /// Cut the file (modulo its length).
    Truncate { len: u32 },
    /// Set its modification time (the bytes stay).
    Touch { secs: u32 },
}

#[derive(Debug, Arbitrary)]
struct Case {
    ids: Vec<i64>,
    change: Change,
}

struct Base {
    dir: tempfile::TempDir,
    resident: RuntimeSession,
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let dir = onnx_prepared_fuzz::scratch();
        onnx_prepared_fixtures::ensure_all(dir.path()).expect("fixtures");
        let resident = RuntimeSession::open(
            dir.path().join("tiny-llm.onnx"),
            options().with_resident_tables(true),
        )
        .expect("open");
        Base { dir, resident }
    })
}

fn options() -> SessionOptions {
    SessionOptions::default().with_cpu_workers(1).with_io_workers(1)
}

fn run(s: &RuntimeSession, ids: &[i64]) -> Result<Vec<(String, Tensor)>, onnx_prepared::Error> {
    let t = ids.len();
    let mut ctx = RuntimeContext::new(s)
        .with_input("input_ids", Tensor::from_i64(vec![1, t], ids.to_vec()).unwrap())?
        .with_input(
            "attn_bias",
            Tensor::from_f32(
                vec![1, 1, t, t],
                (0..t * t)
                    .map(|k| if k % t <= k / t { 0.0 } else { -10000.0 })
                    .collect(),
            )
            .unwrap(),
        )?;
    for b in 0..4 {
        for kv in ["key", "value"] {
            let empty = Tensor::from_f32(vec![1, 8, 0, 64], vec![]).unwrap();
            ctx = ctx.with_input(&format!("past_{kv}_{b}"), empty)?;
        }
    }
    Ok(s.run(ctx).map_err(|e| e.error)?.outputs().to_vec())
}

fuzz_target!(|case: Case| {
    let base = base();
    let ids: Vec<i64> = case.ids.iter().take(8).copied().collect();
    if ids.is_empty() {
        return;
    }
    let scratch = onnx_prepared_fuzz::scratch();
    let model: PathBuf = scratch.path().join("tiny-llm.onnx");
    for f in ["tiny-llm.onnx", "tiny-llm.data"] {
        std::fs::copy(base.dir.path().join(f), scratch.path().join(f)).unwrap();
    }
    let rows = RuntimeSession::open(&model, options()).expect("open");
    match (run(&rows, &ids), run(&base.resident, &ids)) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "rows differ from the resident table"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("served by rows {:?}, resident {:?}", a.is_ok(), b.is_ok()),
    }
    let data = scratch.path().join("tiny-llm.data");
    let len = std::fs::metadata(&data).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
    match &case.change {
        Change::Write { offset, bytes } => {
            use std::os::unix::fs::FileExt;
            let at = u64::from(*offset) % len;
            let n = bytes.len().min((len - at) as usize).max(1);
            let fill = if bytes.is_empty() { vec![0u8] } else { bytes[..n.min(bytes.len())].to_vec() };
            f.write_all_at(&fill, at).unwrap();
        }
        Change::Truncate { len: to } => f.set_len(u64::from(*to) % len).unwrap(),
        Change::Touch { secs } => {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(u64::from(*secs));
            f.set_modified(t).unwrap();
        }
    }
    drop(f);
    for _ in 0..2 {
        let err = run(&rows, &ids).expect_err("a changed data file is never served");
        assert!(
            err.kind() == ErrorKind::Payload,
            "{err}"
        );
    }
});
