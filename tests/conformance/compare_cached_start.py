#!/usr/bin/env python3
"""Time to first output with a prepared cache, against ONNX Runtime with its
saved prepacked initializers.

    python tests/conformance/compare_cached_start.py --bin PATH --fixtures DIR
        [--model PATH [--inputs NPZ]] [--threads 2] [--rounds 5] [--json PATH]

One case: tiny-llm (or --model) prefill T=128, P=0, the same inputs for
both runtimes; with `--inputs`, those inputs (any model). Each round, interleaved:
  * ORT plain: `InferenceSession(model)` + the first `run`, in this process.
  * ORT prepacked: the same on the optimized model ORT saved once with
    `session.save_external_prepacked_constant_initializers=1` (its prepacked
    weights in the external data file, loaded by mmap).
  * ours, no cache: `run MODEL --mode streaming --stats`, a fresh process;
    `time_to_first_output_s` counts from the process's start.
  * ours, cached: the same with `--cache DIR --cache-policy require-complete`
    (the cache was completed once before the rounds).
  * `bench --cache DIR --json`: its `streaming` and `cached` modes (time from
    the first call on a created session, in one process).
Prints the medians and the ratios ours/ORT (ours includes process start-up,
ORT does not). It reports; it does not judge. Timings on a shared machine
are noisy: compare ratios from one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bin_command, write_npz  # noqa: E402
from parity import PREFILL_T, tiny_llm_feeds  # noqa: E402


def ort_first_output(model: Path, feeds: dict, threads: int) -> float:
    import onnxruntime as ort

    t = time.perf_counter()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    sess.run(None, feeds)
    return time.perf_counter() - t


def ort_save_prepacked(model: Path, out: Path, threads: int) -> Path:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.optimized_model_filepath = str(out)
    opts.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", out.name + ".data")
    opts.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "64")
    opts.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
    ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    return out


def ours_first_output(binary: str, model: Path, inputs: Path, threads: int, tmp: Path,
                      cache: Path | None) -> dict:
    stats = tmp / "stats.json"
    cmd = bin_command(binary) + [
        "run", str(model), "--inputs", str(inputs), "--threads", str(threads),
        "--mode", "streaming", "--stats", str(stats),
    ]
    if cache is not None:
        cmd += ["--cache", str(cache), "--cache-policy", "require-complete"]
    subprocess.run(cmd, check=True, capture_output=True)
    return json.loads(stats.read_text())


def ours_bench(binary: str, model: Path, inputs: Path, threads: int, cache: Path) -> dict:
    out = subprocess.run(bin_command(binary) + [
        "bench", str(model), "--inputs", str(inputs), "--threads", str(threads),
        "--cache", str(cache), "--json"], check=True, capture_output=True, text=True)
    modes = json.loads(out.stdout)["modes"]
    return {m["mode"]: m["time_to_first_output_s"] for m in modes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--fixtures", type=Path)
    ap.add_argument("--model", type=Path, help="a tiny-llm-shaped model instead of the fixture")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inputs", type=Path, help="the inputs of --model")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    model = args.model or (args.fixtures / "tiny-llm.onnx")
    import numpy as np
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.inputs:
            feeds = dict(np.load(args.inputs))
        else:
            sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
            feeds = tiny_llm_feeds(sess, PREFILL_T, 0, seed=5, past=None)
            del sess
        inputs = tmp / "inputs.npz"
        write_npz(inputs, feeds)
        optimized = ort_save_prepacked(model, tmp / "ort-optimized.onnx", args.threads)
        cache = tmp / "cache"
        subprocess.run(bin_command(args.bin) + [
            "run", str(model), "--inputs", str(inputs), "--cache", str(cache),
            "--cache-policy", "build-if-missing"], check=True, capture_output=True)
        rows = {"ort": [], "ort_prepacked": [], "ours": [], "ours_cached": [],
                "bench_streaming": [], "bench_cached": []}
        counters = {}
        for _ in range(args.rounds):
            rows["ort"].append(ort_first_output(model, feeds, args.threads))
            rows["ort_prepacked"].append(ort_first_output(optimized, feeds, args.threads))
            s = ours_first_output(args.bin, model, inputs, args.threads, tmp, None)
            rows["ours"].append(s["time_to_first_output_s"])
            c = ours_first_output(args.bin, model, inputs, args.threads, tmp, cache)
            rows["ours_cached"].append(c["time_to_first_output_s"])
            counters = {"uncached": s, "cached": c}
            b = ours_bench(args.bin, model, inputs, args.threads, cache)
            rows["bench_streaming"].append(b["streaming"])
            rows["bench_cached"].append(b["cached"])
    med = {k: statistics.median(v) * 1e3 for k, v in rows.items()}
    case = f"inputs {args.inputs.name}" if args.inputs else f"prefill T={PREFILL_T}"
    print(f"{model.name}, {case}, {args.threads} threads, median of {args.rounds} "
          "(ms to the first output; ours from process start, ORT in-process create + run)")
    print(f"  ORT create + first run            {med['ort']:8.1f}")
    print(f"  ORT, saved prepacked initializers {med['ort_prepacked']:8.1f}")
    print(f"  ours, streaming, no cache         {med['ours']:8.1f}   "
          f"{med['ours'] / med['ort']:.2f}x ORT")
    print(f"  ours, streaming, cached           {med['ours_cached']:8.1f}   "
          f"{med['ours_cached'] / med['ort_prepacked']:.2f}x ORT prepacked, "
          f"{med['ours_cached'] / med['ours']:.2f}x uncached")
    print(f"  bench --cache: streaming {med['bench_streaming']:.1f}, cached {med['bench_cached']:.1f} "
          f"({med['bench_cached'] / med['bench_streaming']:.2f}x; from the first call on a created session)")
    cached = counters["cached"]
    print(f"  cached run: {cached['source_bytes_read']} source bytes, {cached['prepacks']} prepacks, "
          f"{cached['packed_bytes_read']} packed bytes ({cached['packed_bytes_in_place']} in place)")
    if args.json:
        args.json.write_text(json.dumps({"median_ms": med, "rounds": rows, "counters": counters},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
