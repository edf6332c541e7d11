#!/usr/bin/env python3
"""GroupQueryAttention with `sliding_window_cache = 1` (onnxruntime-genai's
window-sized KV buffers for sliding-window layers) against ONNX Runtime.

One GQA node (rotary, softcap, a window of 4) runs a prompt and then steps
of one and several tokens through caches of 4, 6 and 9 positions, so that
steps append in place, compact whole gaps and take the staging path; each
runtime feeds its own presents back as the next pasts. Per step: the
output, and the present rows the cache keeps, equal ONNX Runtime's within
1e-5 of max|ref|.

    target/venv/bin/python tests/conformance/windowed_attention.py --bin target/release/onnx-prepared
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

H, KVH, D, WINDOW, MAX_POS = 4, 2, 16, 4, 64


def model(capacity: int) -> onnx.ModelProto:
    f = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("query", f, [1, "S", H * D]),
        helper.make_tensor_value_info("key", f, [1, "S", KVH * D]),
        helper.make_tensor_value_info("value", f, [1, "S", KVH * D]),
        helper.make_tensor_value_info("past_key", f, [1, KVH, capacity, D]),
        helper.make_tensor_value_info("past_value", f, [1, KVH, capacity, D]),
        helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
        helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, []),
    ]
    rng = np.random.default_rng(5)
    cos = rng.uniform(-1, 1, (MAX_POS, D // 2)).astype(np.float32)
    sin = rng.uniform(-1, 1, (MAX_POS, D // 2)).astype(np.float32)
    node = helper.make_node(
        "GroupQueryAttention",
        ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
         "cos_cache", "sin_cache"],
        ["output", "present_key", "present_value"], domain="com.microsoft",
        num_heads=H, kv_num_heads=KVH, local_window_size=WINDOW, softcap=50.0, do_rotary=1,
        sliding_window_cache=1)
    outputs = [
        helper.make_tensor_value_info("output", f, [1, "S", H * D]),
        helper.make_tensor_value_info("present_key", f, [1, KVH, capacity, D]),
        helper.make_tensor_value_info("present_value", f, [1, KVH, capacity, D]),
    ]
    graph = helper.make_graph([node], "windowed", inputs, outputs,
                              [helper.make_tensor("cos_cache", f, cos.shape, cos.ravel()),
                               helper.make_tensor("sin_cache", f, sin.shape, sin.ravel())])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


def cache_end(past: int, capacity: int) -> int:
    gap = capacity - WINDOW + 1
    if past <= capacity:
        return past
    return past - gap * -(-(past - capacity) // gap)


def ours(binary: str, path: Path, feeds: dict, work: Path) -> dict:
    np.savez(work / "in.npz", **feeds)
    subprocess.run([binary, "run", str(path), "--inputs", str(work / "in.npz"), "--outputs",
                    str(work / "out.npz")], check=True, capture_output=True, text=True, timeout=120)
    with np.load(work / "out.npz") as z:
        return {k: z[k] for k in z.files}


def check(binary: str, capacity: int, steps: list[int], work: Path) -> list[str]:
    m = model(capacity)
    path = work / f"gqa-{capacity}.onnx"
    onnx.save(m, str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(capacity)
    zeros = np.zeros((1, KVH, capacity, D), np.float32)
    caches = {"ort": (zeros, zeros), "ours": (zeros, zeros)}
    failures, total = [], 0
    for s in steps:
        total += s
        feeds = {
            "query": rng.standard_normal((1, s, H * D)).astype(np.float32),
            "key": rng.standard_normal((1, s, KVH * D)).astype(np.float32),
            "value": rng.standard_normal((1, s, KVH * D)).astype(np.float32),
            "seqlens_k": np.array([total - 1], np.int32),
            "total_sequence_length": np.array(total, np.int32),
        }
        ref = dict(zip(["output", "present_key", "present_value"],
                       sess.run(None, {**feeds, "past_key": caches["ort"][0], "past_value": caches["ort"][1]})))
        got = ours(binary, path, {**feeds, "past_key": caches["ours"][0], "past_value": caches["ours"][1]}, work)
        rows = cache_end(total, capacity)
        for name in ("output", "present_key", "present_value"):
            r, g = ref[name], got[name]
            if name != "output":
                r, g = r[:, :, :rows], g[:, :, :rows]
            err = float(np.max(np.abs(r - g))) if r.size else 0.0
            scale = max(float(np.max(np.abs(r))) if r.size else 0.0, 1e-6)
            if r.shape != g.shape or err > 1e-5 * scale:
                failures.append(f"capacity {capacity}, step of {s} to total {total}: {name} max|err| {err:.3g}")
        caches["ort"] = (ref["present_key"], ref["present_value"])
        caches["ours"] = (got["present_key"], got["present_value"])
    print(f"  capacity {capacity}, steps {steps}: {'OK' if not failures else 'FAILED'}")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    failures = []
    plans = {
        4: [3, 1, 1, 1, 2, 1, 3, 1, 1],      # gap 1: every full step compacts; multi-token steps stage
        6: [5, 1, 1, 1, 1, 1, 1, 4, 1, 1],   # gap 3: in place most steps
        9: [12, 1, 1, 2, 1, 1, 1, 1, 5, 1],  # a prompt longer than the cache
    }
    with tempfile.TemporaryDirectory() as work:
        for capacity, steps in plans.items():
            failures += check(args.bin, capacity, steps, Path(work))
    for f in failures:
        print("FAIL", f)
    print(f"{len(plans)} caches, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
