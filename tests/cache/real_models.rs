//! The prepared cache on every committed real model (torch, optimum, ONNX
//! Runtime's quantizer, the GenAI builder; their weights carry no declared
//! digest, so the first session records the digests its reads compute): a
//! second session under require-complete reads no source byte, packs
//! nothing and computes identical outputs.

use crate::support;

use std::path::Path;

use onnx_prepared::PreparedModelPolicy;
use onnx_prepared::decoder::{self, Lengths};
use onnx_prepared::{RuntimeContext, RuntimeSession, SessionOptions, Tensor};

fn run(session: &RuntimeSession) -> Vec<(String, Tensor)> {
    let len = Lengths {
        batch: 1,
        tokens: 4,
        past: 2,
    };
    let inputs = decoder::generated_inputs(session.plan().resolved(), len, &[]).unwrap();
    let mut ctx = RuntimeContext::new(session);
    for (name, t) in inputs {
        ctx.set_input(&name, t).unwrap();
    }
    session.run(ctx).unwrap().outputs().to_vec()
}

#[test]
fn a_complete_cache_serves_every_real_model() {
    let all = support::real_models();
    assert!(all.len() >= 27, "{} models", all.len());
    let cache = tempfile::tempdir().unwrap();
    for path in &all {
        let options = |policy| {
            SessionOptions::default()
                .with_cpu_workers(1)
                .with_io_workers(1)
                .with_cache_dir(cache.path().to_owned())
                .with_cache_policy(policy)
        };
        let first = RuntimeSession::open(path, options(PreparedModelPolicy::BuildIfMissing))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let expected = run(&first);
        first.flush_cache();
        assert!(
            first.cache().unwrap().diagnostics().is_empty(),
            "{}: {:?}",
            path.display(),
            first.cache().unwrap().diagnostics()
        );
        drop(first);

        let second = RuntimeSession::open(path, options(PreparedModelPolicy::RequireComplete))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(run(&second), expected, "{}", path.display());
        let stats = second.preparation_stats();
        assert_eq!(stats.source_bytes_read, 0, "{}", path.display());
        assert_eq!(stats.prepacks, 0, "{}", path.display());
        assert_eq!(
            stats.cache.hits as usize,
            second.plan().requirements().len(),
            "{}",
            path.display()
        );
    }
}

#[test]
fn a_changed_data_file_without_digests_never_serves_stale_entries() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/real/llama-genai-fp32");
    let dir = tempfile::tempdir().unwrap();
    for f in ["model.onnx", "model.onnx.data", "genai_config.json"] {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap();
    }
    let model = dir.path().join("model.onnx");
    let cache = dir.path().join("cache");
    let options = |policy| {
        SessionOptions::default()
            .with_cpu_workers(1)
            .with_io_workers(1)
            .with_cache_dir(cache.clone())
            .with_cache_policy(policy)
    };
    let first = RuntimeSession::open(&model, options(PreparedModelPolicy::BuildIfMissing)).unwrap();
    let before = run(&first);
    drop(first);
    let objects = {
        let s =
            RuntimeSession::open(&model, options(PreparedModelPolicy::RequireComplete)).unwrap();
        assert_eq!(run(&s), before);
        s.plan().requirements().len()
    };

    // Same size, other bytes, a later modification time: the digests the
    // first session recorded no longer apply.
    let data = dir.path().join("model.onnx.data");
    let mut bytes = std::fs::read(&data).unwrap();
    for chunk in bytes.chunks_exact_mut(4) {
        let v = f32::from_le_bytes(chunk.try_into().unwrap());
        chunk.copy_from_slice(&(v * 0.5).to_le_bytes());
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&data, &bytes).unwrap();

    let fresh = RuntimeSession::open(&model, SessionOptions::default()).unwrap();
    let expected = run(&fresh);
    assert_ne!(expected, before, "the data changed the outputs");
    let read_only = RuntimeSession::open(&model, options(PreparedModelPolicy::ReadOnly)).unwrap();
    assert_eq!(run(&read_only), expected, "no stale entry was used");
    let stats = read_only.preparation_stats();
    assert!(stats.cache.misses > 0 && (stats.cache.hits as usize) < objects);
    assert!(stats.source_bytes_read > 0);
}
