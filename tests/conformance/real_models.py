#!/usr/bin/env python3
"""ONNX Runtime parity on real exported decoder models (tests/models/real).

Every `*/model.onnx` under --models (tiny random-weight Llama, Qwen2, Phi-3,
Mistral checkpoints exported by torch, optimum, ONNX Runtime's int4
quantizer and the ONNX Runtime GenAI builder; see tools/real-models/):

* prefill T=16, P=0 (zero-length past KV) and one decode step T=1, P=16 fed
  with ONNX Runtime's presents, each through `onnx-prepared run` in the
  eager, streaming and hot modes; every output within
  `max|ours - ORT| <= 1e-4 * max|ORT|`;
* `onnx-prepared generate --prompt-ids ... --max-new-tokens 16 --json`
  against ONNX Runtime's greedy tokens.

Inputs are made by role, whatever the exporter called them: token ids below
the vocabulary size, an attention mask of ones over P+T, positions P..P+T,
past K/V [B, kv_heads, P, head], GroupQueryAttention's seqlens_k = P+T-1 and
total_sequence_length = P+T.

int4 models: ONNX Runtime's default CPU path quantizes activations to int8
(MatMulNBits accuracy_level=4; session.qdq_matmulnbits_accuracy_level=4),
about 1 % away from an fp32-activation computation. The reference here is
ORT with that turned off (every MatMulNBits rewritten to accuracy_level=0 in
a temporary copy, and the session option set to "0"), which matches an
exact fp32 computation within 1e-6.

    target/venv/bin/python tests/conformance/real_models.py --bin target/debug/onnx-prepared
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RunFailed, bin_command, max_abs, max_abs_err, read_npz, run_cli, write_npz  # noqa: E402

RTOL = 1e-4
PREFILL = 16
NEW_TOKENS = 16
MODES = ("eager", "streaming", "hot")

NP_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def role(name: str) -> str:
    n = name.lower()
    if "position_ids" in n:
        return "positions"
    if "input_ids" in n:
        return "ids"
    if "attention_mask" in n:
        return "mask"
    if "seqlens_k" in n:
        return "seqlens"
    if "total_sequence_length" in n:
        return "total"
    if ("past" in n or "cache" in n) and ("key" in n or "value" in n):
        return "past"
    return "other"


def ort_session(model: Path, work: Path):
    """An ORT session with int8 activations off (see the module doc)."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(model), load_external_data=False)
    changed = False
    for node in proto.graph.node:
        if node.op_type == "MatMulNBits":
            for a in node.attribute:
                if a.name == "accuracy_level" and a.i != 0:
                    a.i = 0
                    changed = True
    path = model
    if changed:
        copy = work / model.parent.name
        shutil.copytree(model.parent, copy, dirs_exist_ok=True)
        path = copy / model.name
        onnx.save(proto, str(path))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def vocab_of(sess) -> int:
    for o in sess.get_outputs():
        if "logits" in o.name and isinstance(o.shape[-1], int):
            return o.shape[-1]
    return 256


def head_size(model: Path) -> int | None:
    """The KV head size when the model declares it symbolically (the GenAI
    builder's `kv_cache_dim`): from genai_config.json beside it."""
    config = model.parent / "genai_config.json"
    if config.exists():
        return json.loads(config.read_text())["model"]["decoder"]["head_size"]
    return None


def sliding_capacity(model: Path) -> int | None:
    """Positions of a sliding-window layer's window-sized KV buffer (the
    GenAI builder's `past_sliding_length` inputs, GroupQueryAttention's
    `sliding_window_cache`): window_size + cache_slack, as onnxruntime-genai
    sizes them."""
    config = model.parent / "genai_config.json"
    if config.exists():
        w = json.loads(config.read_text())["model"]["decoder"].get("sliding_window")
        if w:
            return w["window_size"] + w.get("cache_slack", 0)
    return None


def make_inputs(sess, t: int, p: int, ids: np.ndarray, pasts: dict | None, head: int | None = None,
                sliding: int | None = None) -> dict:
    feeds = {}
    for i in sess.get_inputs():
        dtype = NP_TYPES[i.type]
        r = role(i.name)
        if r == "ids":
            feeds[i.name] = ids.reshape(1, t).astype(dtype)
        elif r == "mask":
            feeds[i.name] = np.ones((1, p + t), dtype=dtype)
        elif r == "positions":
            feeds[i.name] = np.arange(p, p + t, dtype=dtype).reshape(1, t)
        elif r == "seqlens":
            feeds[i.name] = np.full((1,), p + t - 1, dtype=dtype)
        elif r == "total":
            feeds[i.name] = np.array(p + t, dtype=dtype)
        elif r == "past":
            if pasts is not None:
                feeds[i.name] = pasts[i.name]
            else:
                shape = [1 if not isinstance(d, int) else d for d in i.shape]
                shape[0] = 1
                shape[2] = sliding if sliding is not None and "sliding" in str(i.shape[2]) else 0
                if not isinstance(i.shape[3], int):
                    shape[3] = head
                feeds[i.name] = np.zeros(shape, dtype=dtype)
        else:
            raise ValueError(f"input {i.name}: no role known for it")
    return feeds


def present_to_past(sess) -> dict:
    """present output name -> past input name (same layer number and kind)."""
    pasts = [i.name for i in sess.get_inputs() if role(i.name) == "past"]
    pairs = {}
    for o in sess.get_outputs():
        if "present" not in o.name:
            continue
        kind = "key" if o.name.rfind("key") > o.name.rfind("value") else "value"
        num = re.findall(r"\d+", o.name)
        for p in pasts:
            pk = "key" if p.rfind("key") > p.rfind("value") else "value"
            if pk == kind and re.findall(r"\d+", p) == num:
                pairs[o.name] = p
    return pairs


def compare(label: str, ours: dict, ref: dict) -> list[str]:
    failures = []
    for name, want in ref.items():
        got = ours.get(name)
        if got is None:
            failures.append(f"{label}: output {name} missing")
            continue
        if got.shape != want.shape:
            failures.append(f"{label}: {name} shape {got.shape} != {want.shape}")
            continue
        err = max_abs_err(got, want)
        scale = max(max_abs(want), 1e-30)
        ok = err <= RTOL * scale
        print(f"  {label:<28} {name:<28} max|err| {err:.3e} rel {err / scale:.2e} {'OK' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"{label}: {name} rel err {err / scale:.2e}")
    return failures


def ort_greedy(sess, prompt: np.ndarray, n: int, head: int | None, sliding: int | None = None) -> list[int]:
    pairs = present_to_past(sess)
    out_names = [o.name for o in sess.get_outputs()]
    logits_name = next((o for o in out_names if "logits" in o), out_names[0])
    ids, p, pasts, tokens = prompt, 0, None, []
    for _ in range(n):
        feeds = make_inputs(sess, len(ids), p, ids, pasts, head, sliding)
        outs = dict(zip(out_names, sess.run(None, feeds)))
        tok = int(np.argmax(outs[logits_name].reshape(-1, outs[logits_name].shape[-1])[-1]))
        tokens.append(tok)
        pasts = {pairs[o]: outs[o] for o in pairs}
        p += len(ids)
        ids = np.array([tok], dtype=np.int64)
    return tokens


def check_model(binary: str, model: Path, work: Path, threads: int) -> list[str]:
    print(f"== {model.parent.name}")
    sess = ort_session(model, work)
    vocab = vocab_of(sess)
    rng = np.random.default_rng(7)
    prompt = rng.integers(0, vocab, size=PREFILL, dtype=np.int64)
    out_names = [o.name for o in sess.get_outputs()]
    failures = []

    # Prefill, then one decode step fed with ORT's presents.
    head = head_size(model)
    sliding = sliding_capacity(model)
    feeds = make_inputs(sess, PREFILL, 0, prompt, None, head, sliding)
    ref = dict(zip(out_names, sess.run(None, feeds)))
    pairs = present_to_past(sess)
    step_ids = np.array([int(rng.integers(0, vocab))], dtype=np.int64)
    decode_feeds = make_inputs(sess, 1, PREFILL, step_ids, {pairs[o]: ref[o] for o in pairs})
    decode_ref = dict(zip(out_names, sess.run(None, decode_feeds)))
    for label, f, r in (("prefill T=16 P=0", feeds, ref), ("decode T=1 P=16", decode_feeds, decode_ref)):
        inp = work / "in.npz"
        write_npz(inp, f)
        for mode in MODES:
            out = work / "out.npz"
            try:
                run_cli(binary, model, inputs=inp, outputs=out, threads=threads, mode=mode)
            except RunFailed as e:
                failures.append(f"{label} {mode}: {e}")
                print(f"  {label} {mode}: FAILED {e}")
                continue
            failures += compare(f"{label} {mode}", read_npz(out), r)

    # Greedy generation.
    want = ort_greedy(sess, prompt, NEW_TOKENS, head, sliding)
    cmd = bin_command(binary) + ["generate", str(model), "--prompt-ids", ",".join(map(str, prompt)),
                                 "--max-new-tokens", str(NEW_TOKENS), "--threads", str(threads), "--json",
                                 "--ignore-eos"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        failures.append(f"generate: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        print(f"  generate: FAILED {proc.stderr.strip()[-300:]}")
    else:
        got = json.loads(proc.stdout.strip().splitlines()[-1])["tokens"]
        ok = got == want
        print(f"  generate {NEW_TOKENS} tokens: {'OK' if ok else 'FAIL'} ours {got} ORT {want}")
        if not ok:
            failures.append(f"generate: {got} != ORT {want}")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", type=Path, default=Path(__file__).resolve().parents[1] / "models" / "real")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated model folder names")
    args = ap.parse_args()
    models = sorted(args.models.glob("*/model.onnx"))
    if args.only:
        keep = set(args.only.split(","))
        models = [m for m in models if m.parent.name in keep]
    if not models:
        print(f"no models under {args.models}", file=sys.stderr)
        return 2
    failed = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            work = Path(tmp) / model.parent.name
            work.mkdir()
            try:
                f = check_model(args.bin, model, work, args.threads)
            except Exception as e:  # noqa: BLE001 - one model's harness error is that model's failure
                f = [f"harness: {e}"]
                print(f"  FAILED {e}")
            if f:
                failed[model.parent.name] = f
    print(f"\n{len(models) - len(failed)} passed, {len(failed)} failed")
    for name, f in failed.items():
        print(f"  {name}: {f[0]}" + (f" (+{len(f) - 1} more)" if len(f) > 1 else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
