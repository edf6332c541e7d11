#!/usr/bin/env python3
"""Real onnxruntime clients on onnx_prepared, against onnxruntime.

    target/clients-venv/bin/python python/clients/run_clients.py [--only NAME ...]

Builds small random-weight models offline under target/clients/ (a BERT
encoder with a WordPiece tokenizer, a Llama decoder, a YOLO11n detector
from its yaml), exports them with the clients' own exporters (optimum,
sentence-transformers, Ultralytics), then runs each client three ways, each
in a fresh process:

* `ort`: the library as shipped, on onnxruntime;
* `patched`: `onnx_prepared.patch_onnxruntime()` first, the library
  unchanged;
* `session`: an `onnx_prepared.InferenceSession` handed to the library
  where it takes a session object (optimum's `ORTModel*(session=...)`).
  optimum then builds onnxruntime's own `IOBinding(session)` around it,
  which only takes an onnxruntime session, so this way patches too.

Clients: optimum's `ORTModelForFeatureExtraction` (last hidden state),
`ORTModelForCausalLM.generate` (greedy tokens, KV cache through the
model's past/present inputs), a sentence-transformers ONNX backend
(embeddings), Ultralytics' `YOLO(model.onnx).predict` (boxes, scores,
classes). Prints, per client and way, the largest difference from
onnxruntime relative to max|onnxruntime| of each returned array (exact
equality for tokens and classes) and exits non-zero if a client fails or
differs by more than 1e-3 (the random detector's scores are sigmoid tails
near 1e-4, where the two runtimes' exponentials differ in the 4th digit;
against the whole detector output, as the conformance scripts compare,
that is 1e-9).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "target" / "clients"
CLIENTS = ["feature-extraction", "causal-lm", "sentence-transformers", "ultralytics"]
WAYS = {
    "feature-extraction": ["ort", "patched", "session"],
    "causal-lm": ["ort", "patched", "session"],
    "sentence-transformers": ["ort", "patched"],
    "ultralytics": ["ort", "patched"],
}
TOLERANCE = 1e-3
WORDS = "the quick brown fox jumps over lazy dog a an of to in on runtime model onnx prepared fast edge".split()


# -- models ---------------------------------------------------------------


def build_bert(folder: Path) -> None:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, *"abcdefghijklmnopqrstuvwxyz"]
    vocab += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128,
    )  # fmt: skip
    BertModel(config).eval().save_pretrained(folder)


def build_llama(folder: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    LlamaForCausalLM(config).eval().save_pretrained(folder)


def build_models() -> None:
    from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForFeatureExtraction

    bert, llama = WORK / "bert", WORK / "llama"
    if not (WORK / "bert-onnx" / "model.onnx").exists():
        build_bert(bert)
        ORTModelForFeatureExtraction.from_pretrained(bert, export=True).save_pretrained(WORK / "bert-onnx")
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(bert).save_pretrained(WORK / "bert-onnx")
    if not (WORK / "llama-onnx" / "model.onnx").exists():
        build_llama(llama)
        ORTModelForCausalLM.from_pretrained(llama, export=True, use_cache=True).save_pretrained(WORK / "llama-onnx")
    if not (WORK / "st" / "modules.json").exists():
        from sentence_transformers import SentenceTransformer, models

        st = SentenceTransformer(modules=[models.Transformer(str(bert)), models.Pooling(64, "mean")])
        st.save(str(WORK / "st"))
    if not (WORK / "yolo" / "yolo11n.onnx").exists():
        from ultralytics import YOLO

        (WORK / "yolo").mkdir(parents=True, exist_ok=True)
        model = YOLO("yolo11n.yaml")  # random weights, built from the yaml
        path = model.export(format="onnx", imgsz=64, opset=17, simplify=False, dynamic=False)
        Path(path).rename(WORK / "yolo" / "yolo11n.onnx")


# -- clients (one per process) --------------------------------------------


def our_session(path: Path):
    import onnx_prepared

    opts = onnx_prepared.SessionOptions()
    opts.intra_op_num_threads = 1
    return onnx_prepared.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def feature_extraction(way: str) -> dict:
    from optimum.onnxruntime import ORTModelForFeatureExtraction
    from transformers import AutoConfig, AutoTokenizer

    folder = WORK / "bert-onnx"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if way == "session":
        model = ORTModelForFeatureExtraction(
            config=AutoConfig.from_pretrained(folder), session=our_session(folder / "model.onnx")
        )
    else:
        model = ORTModelForFeatureExtraction.from_pretrained(folder)
    batch = tokenizer(["the quick brown fox", "onnx prepared runtime on the edge"], padding=True, return_tensors="np")
    out = model(**batch)
    return {"last_hidden_state": np.asarray(out.last_hidden_state), "session": type(model.model).__module__}


def causal_lm(way: str) -> dict:
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM
    from transformers import AutoConfig, GenerationConfig

    folder = WORK / "llama-onnx"
    if way == "session":
        config = AutoConfig.from_pretrained(folder)
        model = ORTModelForCausalLM(
            config=config,
            session=our_session(folder / "model.onnx"),
            generation_config=GenerationConfig.from_model_config(config),
        )
    else:
        model = ORTModelForCausalLM.from_pretrained(folder)
    ids = torch.tensor([[1, 17, 42, 99, 7, 250, 31]])
    tokens = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
    return {"tokens": tokens.numpy(), "session": type(model.model).__module__}


def sentence_transformers(way: str) -> dict:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(WORK / "st"), backend="onnx", model_kwargs={"provider": "CPUExecutionProvider"})
    emb = model.encode(["the quick brown fox", "a lazy dog", "fast edge runtime"], convert_to_numpy=True)
    return {"embeddings": emb, "session": type(model[0].auto_model.model).__module__}


def ultralytics(way: str) -> dict:
    from ultralytics import YOLO

    model = YOLO(str(WORK / "yolo" / "yolo11n.onnx"), task="detect")
    image = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    # Random weights score every class low: keep every candidate NMS keeps.
    (result,) = model.predict(image, imgsz=64, conf=1e-6, verbose=False)
    boxes = result.boxes
    session = model.predictor.model.backend.session if hasattr(model.predictor.model, "backend") else None
    session = session or getattr(model.predictor.model, "session", None)
    return {
        "xyxy": boxes.xyxy.numpy(),
        "conf": boxes.conf.numpy(),
        "cls": boxes.cls.numpy(),
        "session": type(session).__module__ if session is not None else "?",
    }


RUN = {
    "feature-extraction": feature_extraction,
    "causal-lm": causal_lm,
    "sentence-transformers": sentence_transformers,
    "ultralytics": ultralytics,
}


def child(name: str, way: str, out: Path) -> None:
    if way in ("patched", "session"):
        import onnx_prepared

        onnx_prepared.patch_onnxruntime()
    result = RUN[name](way)
    session = result.pop("session")
    np.savez(out, **result)
    out.with_suffix(".json").write_text(json.dumps({"session": session}))


# -- the driver -------------------------------------------------------------


def compare(name: str, ours: dict, theirs: dict) -> tuple[float, str]:
    worst, notes = 0.0, []
    for key, want in theirs.items():
        got = ours[key]
        if got.shape != want.shape:
            return float("inf"), f"{key}: shape {got.shape} vs {want.shape}"
        if key in ("tokens", "cls"):
            if not np.array_equal(got, want):
                return float("inf"), f"{key} differ"
            notes.append(f"{key} equal ({want.size})")
            continue
        scale = max(float(np.abs(want).max(initial=0)), 1e-30)
        err = float(np.abs(got.astype(np.float64) - want).max(initial=0)) / scale
        worst = max(worst, err)
        notes.append(f"{key} {err:.1e}")
    return worst, ", ".join(notes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", choices=CLIENTS)
    ap.add_argument("--child", nargs=3, metavar=("CLIENT", "WAY", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], Path(args.child[2]))
        return 0
    build_models()
    failed = False
    for name in args.only or CLIENTS:
        results = {}
        for way in WAYS[name]:
            out = WORK / "results" / f"{name}-{way}.npz"
            out.parent.mkdir(parents=True, exist_ok=True)
            run = subprocess.run(
                [sys.executable, __file__, "--child", name, way, str(out)], capture_output=True, text=True
            )
            if run.returncode != 0:
                print(f"{name:22s} {way:8s} FAILED\n{run.stderr[-3000:]}")
                failed = True
                continue
            session = json.loads(out.with_suffix(".json").read_text())["session"]
            results[way] = (dict(np.load(out)), session)
        if "ort" not in results:
            continue
        for way, (data, session) in results.items():
            if way == "ort":
                print(f"{name:22s} {way:8s} session from {session}")
                continue
            worst, notes = compare(name, data, results["ort"][0])
            ok = worst <= TOLERANCE and session.startswith("onnx_prepared")
            failed |= not ok
            print(f"{name:22s} {way:8s} session from {session}: {notes} {'ok' if ok else 'DIFFERS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
