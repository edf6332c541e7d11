#!/usr/bin/env python3
"""Decode speed and time to first token against onnxruntime-genai, and the
machine's read bandwidth at the model's working-set size (not in CI).

For a GenAI-builder int4 folder, per thread count and accuracy mode, in
fresh processes (medians of --rounds):

* onnxruntime-genai: `og.Model()` -> first token in-process (model load,
  prompt run, first token), then tokens/s over the next --tokens steps;
* ours: `onnx-prepared generate --prompt-ids ... --json --ignore-eos`:
  process start -> first token, and tokens/s after it; and the time to
  first token with the prepared cache (`--cache`, filled by one process
  before the timed ones).

Modes, each side at the same accuracy: `int8` (onnxruntime-genai's
default, int8 activations in its int4 products, against our
`--int8-activations`) and `f32` (a copy of the folder with every
MatMulNBits at accuracy_level 0, against our default exact path).

Bytes read per decode step: every weight but the tables read only through
Gather (the token embedding: one row a step). Read bandwidth: NumPy and BLAS
readers over a buffer of that size on 1 and 2 threads, best of several
passes (a buffer that fits the last level cache is read from it). Effective
GB/s of a decode step: those bytes x tokens/s. The two sides' processes
alternate.

    target/rm-venv/bin/python tests/conformance/compare_genai.py --bin target/release/onnx-prepared \\
        --folder target/real-models-bench/llama-genai-int4 --threads 1,2
"""
import os

# BLAS on one thread: the bandwidth readers split the buffer themselves.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

OG_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import onnxruntime_genai as og
folder, threads, prompt, n = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
config = og.Config(folder)
config.overlay(json.dumps({"model": {"decoder": {"session_options": {
    "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
model = og.Model(config)
params = og.GeneratorParams(model)
total = len(prompt) + n
params.set_search_options(max_length=total, min_length=total, do_sample=False)
g = og.Generator(model, params)
g.append_tokens(prompt)
g.generate_next_token()
ttft = time.perf_counter() - t0
t1 = time.perf_counter()
for _ in range(n - 1):
    g.generate_next_token()
dt = time.perf_counter() - t1
print(json.dumps({"ttft": ttft, "tps": (n - 1) / dt, "tokens": [int(t) for t in g.get_sequence(0)][len(prompt):]}))
"""


def og_once(folder: Path, threads: int, prompt: list[int], n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", OG_CHILD, str(folder), str(threads), json.dumps(prompt), str(n)],
                         capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ours_once(binary: str, folder: Path, threads: int, prompt: list[int], n: int, int8: bool,
              cache: Path | None = None) -> dict:
    cmd = [binary, "generate", str(folder), "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens",
           str(n), "--ignore-eos", "--json", "--threads", str(threads)] + (["--int8-activations"] if int8 else [])
    if cache is not None:
        cmd += ["--cache", str(cache)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900)
    j = json.loads(out.stdout.strip().splitlines()[-1])
    return {"ttft": j["process_time_to_first_token_s"], "tps": j["tokens_per_s"], "tokens": j["tokens"]}


def level0_copy(folder: Path, work: Path) -> Path:
    """The folder with every MatMulNBits at accuracy_level 0."""
    import onnx
    out = work / f"{folder.parent.name}-{folder.name}-level0"
    if (out / "model.onnx").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        if f.name != "model.onnx":
            dst = out / f.name
            if not dst.exists():
                # A hard link (ONNX Runtime refuses data reached through a
                # link out of the folder), else a copy.
                try:
                    os.link(f, dst)
                except OSError:
                    shutil.copy(f, dst)
    m = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    for node in m.graph.node:
        if node.op_type == "MatMulNBits":
            for a in node.attribute:
                if a.name == "accuracy_level":
                    a.i = 0
    onnx.save(m, str(out / "model.onnx"))
    return out


def bytes_per_token(folder: Path) -> tuple[int, int]:
    """(all weight bytes, the bytes a decode step reads): every initializer
    but the tables read only through Gather (the token embedding), of which
    a step reads one row."""
    import onnx
    m = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    sizes = {}
    for t in m.graph.initializer:
        n = int(np.prod(t.dims, dtype=np.int64))
        sizes[t.name] = (n, n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize,
                         t.dims[-1] if t.dims else 1)
    uses: dict[str, list[tuple[str, int]]] = {}
    for node in m.graph.node:
        for i, name in enumerate(node.input):
            uses.setdefault(name, []).append((node.op_type, i))
    total = sum(b for _, b, _ in sizes.values())
    step = total
    for name, (n, nbytes, row) in sizes.items():
        if uses.get(name) and all(op == "Gather" and i == 0 for op, i in uses[name]):
            step -= nbytes - nbytes // max(n // max(row, 1), 1)
    return total, step


def bandwidth(nbytes: int, threads: int) -> float:
    """GB/s of reading `nbytes`: the best of several passes of two readers,
    a NumPy OR-reduction over the whole buffer and a BLAS dot product of its
    two halves (single-threaded BLAS, the threads split the buffer)."""
    a = np.ones(max(nbytes // 8, 1), dtype=np.uint64)
    f = a.view(np.float32)
    half = len(f) // 2
    readers = [
        [(np.bitwise_or.reduce, (p,)) for p in np.array_split(a, threads)],
        [(np.dot, (x, y)) for x, y in zip(np.array_split(f[:half], threads), np.array_split(f[half:2 * half], threads))],
    ]
    best = float("inf")
    for jobs in readers:
        for _ in range(max(3, int(2e9 // max(nbytes, 1)))):
            t0 = time.perf_counter()
            if threads == 1:
                fn, args = jobs[0]
                fn(*args)
            else:
                ts = [threading.Thread(target=fn, args=args) for fn, args in jobs]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
            best = min(best, time.perf_counter() - t0)
            if best * 20 > 10:
                break
    return nbytes / best / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--folder", type=Path, required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("target/compare-genai"))
    args = ap.parse_args()
    weights, step_bytes = bytes_per_token(args.folder)
    prompt = [int(x) for x in np.random.default_rng(3).integers(3, 200, size=args.prompt)]
    level0 = level0_copy(args.folder, args.work)
    print(f"{args.folder}: {weights / 1e6:.1f} MB of weights, {step_bytes / 1e6:.1f} MB read per decode step "
          f"(the embedding table but one row left out), prompt {args.prompt}, {args.tokens} new tokens, "
          f"medians of {args.rounds} fresh processes")
    print("mode  thr  og tok/s  ours tok/s  ratio  ours GB/s  read GB/s  of read  og TTFT ms  ours TTFT ms  ratio  "
          "cached TTFT ms  ratio  tokens")
    for threads in [int(t) for t in args.threads.split(",")]:
        read = bandwidth(step_bytes, threads)
        for mode, og_folder, int8 in (("int8", args.folder, True), ("f32", level0, False)):
            # Alternated, so that a drift of this shared machine's speed
            # reaches both sides alike.
            ogs, ours = [], []
            for _ in range(args.rounds):
                ogs.append(og_once(og_folder, threads, prompt, args.tokens))
                ours.append(ours_once(args.bin, args.folder, threads, prompt, args.tokens, int8))
            # The prepared cache: filled by a first process, then read.
            cache = args.work / f"cache-{args.folder.name}-{mode}"
            shutil.rmtree(cache, ignore_errors=True)
            ours_once(args.bin, args.folder, threads, prompt, 2, int8, cache)
            cached = [ours_once(args.bin, args.folder, threads, prompt, 2, int8, cache) for _ in range(args.rounds)]
            cached_ttft = statistics.median(r["ttft"] for r in cached) * 1e3
            og_tps = statistics.median(r["tps"] for r in ogs)
            our_tps = statistics.median(r["tps"] for r in ours)
            og_ttft = statistics.median(r["ttft"] for r in ogs) * 1e3
            our_ttft = statistics.median(r["ttft"] for r in ours) * 1e3
            gbs = step_bytes * our_tps / 1e9
            agree = sum(a == b for a, b in zip(ogs[0]["tokens"], ours[0]["tokens"]))
            print(f"{mode:5} {threads:3}  {og_tps:8.1f}  {our_tps:10.1f}  {our_tps / og_tps:5.2f}  {gbs:9.1f}  "
                  f"{read:9.1f}  {gbs / read:7.2f}  {og_ttft:10.1f}  {our_ttft:12.1f}  {our_ttft / og_ttft:5.2f}  "
                  f"{cached_ttft:14.1f}  {cached_ttft / og_ttft:5.2f}  "
                  f"{agree}/{len(ours[0]['tokens'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
