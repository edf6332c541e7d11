//! The committed real models (tests/models/real: torch, optimum, ONNX
//! Runtime's int4 quantizer and the GenAI builder): every one resolves and
//! plans, the QDQ pattern runs prepacked, and greedy generation through the
//! KV cache agrees with full-prefix prefills that use no cache at all.
//! (ONNX Runtime parity is tests/conformance/real_models.py.)

use std::path::{Path, PathBuf};

use onnx_prepared::decoder::{self, InputRole, Lengths, input_role};
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::session::{RuntimeContext, RuntimeSession, SessionOptions};
use onnx_prepared_kernels::DataRef;

fn models() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/real");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/models/real")
        .filter_map(|e| {
            let p = e.ok()?.path().join("model.onnx");
            p.exists().then_some(p)
        })
        .collect();
    out.sort();
    out
}

fn model(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/models/real/{name}/model.onnx"))
}

fn session(path: &Path) -> RuntimeSession {
    session_with(path, &ResolveOptions::default())
}

fn session_with(path: &Path, options: &ResolveOptions) -> RuntimeSession {
    let resolved = ResolvedModel::resolve(Model::open(path).unwrap(), options).unwrap();
    RuntimeSession::new(
        PreparedExecutionPlan::build(resolved).unwrap(),
        SessionOptions::default(),
    )
    .unwrap()
}

#[test]
fn every_committed_model_plans() {
    let all = models();
    assert!(all.len() >= 27, "{} models", all.len());
    for path in all {
        let resolved =
            ResolvedModel::resolve(Model::open(&path).unwrap(), &ResolveOptions::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        PreparedExecutionPlan::build(resolved)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[test]
fn qdq_int4_matmuls_are_fused() {
    for arch in ["llama", "qwen2", "phi3"] {
        let path = model(&format!("{arch}-nbits-qdq"));
        let source = Model::open(&path).unwrap();
        let dq = source
            .graph()
            .node
            .iter()
            .filter(|n| n.op_type.as_deref() == Some("DequantizeLinear"))
            .count();
        assert!(
            dq >= 4 * 2,
            "{arch}: {dq} DequantizeLinear nodes in the source"
        );
        let resolved = ResolvedModel::resolve(source, &ResolveOptions::default()).unwrap();
        assert!(
            resolved
                .nodes()
                .iter()
                .all(|n| n.op.name() != "DequantizeLinear"),
            "{arch}: a DequantizeLinear was not fused"
        );
        let fused = resolved
            .nodes()
            .iter()
            .filter(|n| n.op.name() == "QdqMatMulNBits")
            .count();
        assert_eq!(
            fused, dq,
            "{arch}: one fused operator per DequantizeLinear -> MatMul"
        );
        // These weights are small enough to be inline constants; external
        // ones become prepared objects in the MatMulNBits layout (see
        // `qdq_weights_become_prepacked_objects`).
    }
}

/// The logits' argmax of the last position after running `ids` as one
/// prefill with an empty cache.
fn prefill_argmax(session: &RuntimeSession, ids: &[i64]) -> i64 {
    let (v, width) = prefill_logits(session, ids);
    let row = &v[v.len() - width..];
    let best = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    row.iter().position(|&x| x == best).unwrap() as i64
}

/// Every logit (and the vocabulary width) after running `ids` as one
/// prefill with an empty cache.
fn prefill_logits(session: &RuntimeSession, ids: &[i64]) -> (Vec<f32>, usize) {
    let resolved = session.plan().resolved().clone();
    let len = Lengths {
        batch: 1,
        tokens: ids.len(),
        past: 0,
    };
    let others = decoder::model_dims(&resolved);
    let vocab = decoder::vocab_size(&resolved).unwrap();
    let mut rng = decoder::Rng::default();
    let mut ctx = RuntimeContext::new(session);
    for input in resolved.inputs() {
        let t = decoder::input_tensor(input, len, &others, Some(ids), vocab, &mut rng).unwrap();
        ctx.set_input(&input.name, t).unwrap();
    }
    let ctx = session.run(ctx).map_err(|e| e.error).unwrap();
    let logits = ctx.output("logits").unwrap();
    let DataRef::F32(v) = logits.data() else {
        panic!("f32 logits")
    };
    (v.to_vec(), *logits.shape().last().unwrap())
}

/// With `int8_activations`, the GenAI int4 model's `accuracy_level = 4`
/// MatMulNBits quantize their activations: logits move, by at most 2 % of
/// max|logit| (measured: see BENCHMARKS.md), and greedy decoding picks
/// the same tokens on this prompt.
#[test]
fn int8_activations_stay_within_the_bound_on_the_genai_int4_model() {
    let path = model("llama-genai-int4");
    let level4 = Model::open(&path)
        .unwrap()
        .graph()
        .node
        .iter()
        .filter(|n| {
            n.op_type.as_deref() == Some("MatMulNBits")
                && n.attribute
                    .iter()
                    .any(|a| a.name.as_deref() == Some("accuracy_level") && a.i == Some(4))
        })
        .count();
    assert!(
        level4 >= 4,
        "{level4} MatMulNBits nodes at accuracy_level 4"
    );
    let exact = session(&path);
    let int8 = session_with(
        &path,
        &ResolveOptions {
            int8_activations: true,
            ..ResolveOptions::default()
        },
    );
    for ids in [
        &[5i64, 17, 42, 9][..],
        &[7],
        &[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2],
    ] {
        let (want, _) = prefill_logits(&exact, ids);
        let (got, _) = prefill_logits(&int8, ids);
        let max = want.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        eprintln!(
            "int8 activations, {} tokens: max |diff| / max|logit| = {}",
            ids.len(),
            err / max
        );
        assert!(
            err > 0.0 && err <= 0.02 * max,
            "{ids:?}: {err} vs max {max}"
        );
        assert_eq!(
            prefill_argmax(&int8, ids),
            prefill_argmax(&exact, ids),
            "{ids:?}"
        );
    }
    let prompt = [5i64, 17, 42, 9];
    assert_eq!(
        decoder::generate(&int8, &prompt, 5).unwrap().tokens,
        decoder::generate(&exact, &prompt, 5).unwrap().tokens
    );
}

#[test]
fn generation_with_the_cache_matches_prefills_without_it() {
    for name in [
        "llama-genai-int4",
        "qwen2-optimum",
        "phi3-torch-dynamo",
        "mistral-nbits-qdq",
    ] {
        let session = session(&model(name));
        let prompt = [5i64, 17, 42, 9];
        let generated = decoder::generate(&session, &prompt, 5).unwrap();
        assert_eq!(generated.tokens.len(), 5, "{name}");
        let mut ids = prompt.to_vec();
        for (step, &token) in generated.tokens.iter().enumerate() {
            assert_eq!(
                prefill_argmax(&session, &ids),
                token,
                "{name}: token {step}"
            );
            ids.push(token);
        }
    }
}

#[test]
fn generated_inputs_follow_the_roles() {
    let resolved = ResolvedModel::resolve(
        Model::open(model("llama-genai-int4")).unwrap(),
        &ResolveOptions::default(),
    )
    .unwrap();
    assert_eq!(decoder::vocab_size(&resolved), Some(256));
    assert_eq!(decoder::kv_head_size(&resolved), Some(16));
    let len = Lengths {
        batch: 1,
        tokens: 3,
        past: 5,
    };
    let inputs = decoder::generated_inputs(&resolved, len, &[]).unwrap();
    for (name, t) in &inputs {
        match input_role(name) {
            InputRole::TokenIds => {
                assert_eq!(t.shape(), [1, 3]);
                let DataRef::I64(v) = t.data() else { panic!() };
                assert!(v.iter().all(|&x| (0..256).contains(&x)), "{v:?}");
            }
            InputRole::AttentionMask => {
                assert_eq!(t.shape(), [1, 8]);
                let DataRef::I64(v) = t.data() else { panic!() };
                assert!(v.iter().all(|&x| x == 1));
            }
            InputRole::PastKv => assert_eq!(t.shape(), [1, 2, 5, 16], "{name}"),
            other => panic!("{name}: unexpected role {other:?}"),
        }
    }
}

#[test]
fn the_genai_shared_buffer_cache_generates_the_same_tokens() {
    // Gemma-2's local layers hold window-sized buffers (a window of 8).
    for (name, window) in [
        ("llama-genai-int4", None),
        ("qwen2-genai-fp32", None),
        ("phi3-genai-int4", None),
        ("gemma2-genai-fp32", Some(8)),
        ("gemma2-genai-int4", Some(8)),
    ] {
        let path = model(name);
        let cache = decoder::genai_kv_cache(&path);
        assert_eq!(
            cache,
            Some(decoder::KvCache::Shared {
                capacity: 256,
                window
            }),
            "{name}"
        );
        let session = session(&path);
        // Longer than the window: the local layers' buffers compact.
        let prompt = [7i64, 3, 99, 12, 5, 41, 17, 8, 200, 31];
        let shared = decoder::generate_with(&session, &prompt, 6, cache.unwrap()).unwrap();
        let growing = decoder::generate(&session, &prompt, 6).unwrap();
        assert_eq!(shared.tokens, growing.tokens, "{name}");
        // Beyond the capacity is refused before any run.
        let err = decoder::generate_with(&session, &prompt, 300, cache.unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("shared KV cache of 256 positions"),
            "{err}"
        );
    }
}

/// The step-wise generator: a prompt appended in pieces gives the logits of
/// one prefill (the cache carries the first piece), and a rewind followed by
/// the same tokens gives the same logits again, in either cache form.
#[test]
fn the_step_wise_generator_appends_in_pieces_and_rewinds() {
    let close = |a: &[f32], b: &[f32], what: &str| {
        let max = a.iter().fold(0f32, |m, x| m.max(x.abs()));
        let err = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(err <= 1e-4 * max.max(1.0), "{what}: max|err| {err}");
    };
    for name in ["llama-genai-fp32", "qwen2-optimum"] {
        let path = model(name);
        let cache = decoder::genai_kv_cache(&path).unwrap_or(decoder::KvCache::Growing);
        let session = session(&path);
        let prompt = [7i64, 3, 99, 12, 5, 41];
        let mut whole = decoder::Generator::new(&session, cache).unwrap();
        assert!(whole.logits().is_err(), "no logits before a token");
        whole.append(&prompt).unwrap();
        let once = whole.logits().unwrap().to_vec();

        let mut pieces = decoder::Generator::new(&session, cache).unwrap();
        pieces.append(&prompt[..2]).unwrap();
        pieces.append(&prompt[2..5]).unwrap();
        pieces.append(&prompt[5..]).unwrap();
        assert_eq!(pieces.sequence(), &prompt);
        close(pieces.logits().unwrap(), &once, name);

        // Two more tokens, then back to the prompt and the same two again.
        pieces.append(&[17]).unwrap();
        pieces.append(&[23]).unwrap();
        let ahead = pieces.logits().unwrap().to_vec();
        pieces.rewind_to(prompt.len()).unwrap();
        assert!(pieces.logits().is_err(), "a rewind drops the logits");
        pieces.append(&[17, 23]).unwrap();
        close(pieces.logits().unwrap(), &ahead, name);
        assert!(pieces.rewind_to(100).is_err());
        assert!(pieces.append(&[]).is_err());
    }
}

/// An interrupt set before the prompt's run ends it at its first kernel
/// (no token); set while choosing the 4th token, it ends the run of that
/// token: the tokens so far are returned, equal to an uninterrupted
/// generation's first ones. The generator then starts again from an empty
/// cache and generates as before.
#[test]
fn an_interrupt_ends_generation_between_kernels_with_the_tokens_so_far() {
    use std::sync::Arc;

    use onnx_prepared::decoder::Next;
    use onnx_prepared::session::RunInterrupt;

    let path = model("qwen2-optimum");
    let session = session(&path);
    let prompt = [7i64, 3, 99, 12, 5, 41];
    let argmax = |row: &[f32]| {
        (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best }) as i64
    };
    let want = decoder::generate_with(&session, &prompt, 8, decoder::KvCache::Growing)
        .unwrap()
        .tokens;

    let interrupt = Arc::new(RunInterrupt::new());
    interrupt.interrupt();
    let none = decoder::generate_streaming(
        &session,
        &prompt,
        8,
        decoder::KvCache::Growing,
        Some(interrupt.clone()),
        |row, _| Ok(Next::Token(argmax(row))),
    )
    .unwrap();
    assert!(none.tokens.is_empty(), "the prompt's run was interrupted");

    interrupt.clear();
    let some = decoder::generate_streaming(
        &session,
        &prompt,
        8,
        decoder::KvCache::Growing,
        Some(interrupt.clone()),
        |row, history| {
            if history.len() == prompt.len() + 3 {
                interrupt.interrupt(); // as a Ctrl-C would
            }
            Ok(Next::Token(argmax(row)))
        },
    )
    .unwrap();
    assert_eq!(some.tokens, want[..4], "ended in the 4th token's run");

    let mut generator = decoder::Generator::new(&session, decoder::KvCache::Growing).unwrap();
    generator.set_interrupt(Some(interrupt.clone()));
    let e = generator.append(&prompt).unwrap_err();
    assert_eq!(e.kind(), onnx_prepared::ErrorKind::Cancelled);
    interrupt.clear();
    generator.append(&prompt).unwrap();
    assert_eq!(argmax(generator.logits().unwrap()), want[0]);
    // A rewind rebuilds the growing cache's context: it keeps the interrupt.
    generator.rewind_to(2).unwrap();
    interrupt.interrupt();
    let e = generator.append(&prompt[2..]).unwrap_err();
    assert_eq!(e.kind(), onnx_prepared::ErrorKind::Cancelled);
    interrupt.clear();
}

/// A GenAI shared-buffer cache is updated where it lies: once the session
/// runs hot, each step's present is the past buffer the context bound (no
/// copy, no second buffer), and its logits equal those of a context that
/// keeps its pasts, whose tensors a run leaves as they were.
#[test]
fn a_bound_shared_cache_is_updated_in_place() {
    let path = model("llama-genai-fp32");
    let session = session(&path);
    let resolved = session.plan().resolved().clone();
    let capacity = 256;
    let step_inputs = |ids: &[i64], past: usize| {
        let len = Lengths {
            batch: 1,
            tokens: ids.len(),
            past,
        };
        let mut inputs = decoder::generated_inputs(&resolved, len, &[]).unwrap();
        for (name, t) in &mut inputs {
            match input_role(name) {
                InputRole::TokenIds => {
                    *t = onnx_prepared_kernels::Tensor::from_i64(vec![1, ids.len()], ids.to_vec())
                        .unwrap()
                }
                InputRole::PastKv => {
                    let mut shape = t.shape().to_vec();
                    shape[2] = capacity;
                    let n = shape.iter().product();
                    let rows: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.01).collect();
                    *t = onnx_prepared_kernels::Tensor::from_f32(shape, rows).unwrap();
                }
                _ => {}
            }
        }
        inputs
    };
    let f32s = |t: &onnx_prepared_kernels::Tensor| match t.data() {
        DataRef::F32(v) => v.to_vec(),
        _ => panic!("f32 expected"),
    };
    let past_ptr = |ctx: &RuntimeContext| {
        let (_, t) = ctx
            .inputs()
            .iter()
            .find(|(n, _)| input_role(n) == InputRole::PastKv)
            .unwrap();
        match t.data() {
            DataRef::F32(v) => v.as_ptr() as usize,
            _ => panic!("f32 expected"),
        }
    };
    let logits = |ctx: &RuntimeContext| f32s(ctx.output("logits").unwrap());

    // The bound context: prompt, then one token at a time.
    let prompt = [5i64, 17, 42, 9];
    let mut bound = RuntimeContext::new(&session);
    bound.bind_kv_cache();
    for (name, t) in step_inputs(&prompt, 0) {
        bound.set_input(&name, t).unwrap();
    }
    bound = session.run(bound).unwrap();
    let mut ptrs = Vec::new();
    let mut bound_logits = Vec::new();
    for (step, token) in [3i64, 8, 200].into_iter().enumerate() {
        for (name, t) in step_inputs(&[token], prompt.len() + step) {
            if input_role(&name) != InputRole::PastKv {
                bound.set_input(&name, t).unwrap();
            }
        }
        ptrs.push(past_ptr(&bound));
        bound = session.run(bound).unwrap();
        bound_logits.push(logits(&bound));
    }
    assert!(session.is_hot());
    // Hot steps: the past that went in is the present that came out.
    assert_eq!(ptrs[1], past_ptr(&bound), "{ptrs:?}");
    assert_eq!(ptrs[1], ptrs[2], "{ptrs:?}");

    // A context that keeps its pasts: a step over the bound context's
    // cache before the last token gives the same logits, and leaves the
    // pasts it was given unchanged.
    let mut kept = RuntimeContext::new(&session);
    let mut replay = RuntimeContext::new(&session);
    replay.bind_kv_cache();
    for (name, t) in step_inputs(&prompt, 0) {
        replay.set_input(&name, t).unwrap();
    }
    replay = session.run(replay).unwrap();
    for (step, token) in [3i64, 8].into_iter().enumerate() {
        for (name, t) in step_inputs(&[token], prompt.len() + step) {
            if input_role(&name) != InputRole::PastKv {
                replay.set_input(&name, t).unwrap();
            }
        }
        replay = session.run(replay).unwrap();
    }
    for (name, t) in step_inputs(&[200], prompt.len() + 2) {
        let value = match replay.inputs().iter().find(|(n, _)| *n == name) {
            Some((_, past)) if input_role(&name) == InputRole::PastKv => {
                onnx_prepared_kernels::Tensor::from_f32(past.shape().to_vec(), f32s(past)).unwrap()
            }
            _ => t,
        };
        kept.set_input(&name, value).unwrap();
    }
    let floats = |ctx: &RuntimeContext| -> Vec<Vec<f32>> {
        ctx.inputs()
            .iter()
            .map(|(_, t)| match t.data() {
                DataRef::F32(v) => v.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    };
    let before = floats(&kept);
    kept = session.run(kept).unwrap();
    assert_eq!(logits(&kept), bound_logits[2]);
    assert!(before == floats(&kept), "a kept past changed");
}
