#!/usr/bin/env python3
"""Cold start and memory against ONNX Runtime, in fresh processes.

    python tests/conformance/compare_coldstart.py --bin PATH --fixtures DIR
        [--model PATH] [--threads 1,2] [--rounds 5] [--map-weights]
        [--checksums strict|off] [--inputs NPZ] [--json PATH]

Cases: tiny-llm (or --model, a decoder model with a past/present cache)
prefill T=128 and T=1, P=0, at each thread count; same inputs for both
runtimes. With `--inputs NPZ` (any model, e.g. a vision model and its
image): one case, those inputs. Every round starts fresh processes, interleaved:
  * ORT: a Python process imports onnxruntime and loads the inputs, then
    times `InferenceSession(model)` + the first `run` and reports its
    resident-set growth over that (VmHWM minus VmRSS before create).
  * ours, `bench --json`: the `streaming` mode's time to first output (a
    cold session, from the first call) and the `hot` mode's.
  * ours, `run --stats` (streams: a cold session): time to first output
    from the process's start, the whole process's wall time, peak RSS and
    peak live bytes per memory domain.
Prints, per case, the medians and each goal's ratio:
  cold/ORT = bench streaming / ORT create+run          (goal <= 0.4)
  cold/hot = bench streaming / our hot run              (goal <= 1.3)
  proc/ORT = run's time to first output / ORT create+run (goal <= 0.6)
  rss/need = run's peak RSS / (weights + one invocation's activations) (goal <= 1.25)
  rss/ORT  = run's peak RSS / ORT's RSS growth          (goal < 1)
`--map-weights` passes the flag to `run` and `bench` (external weights
used in place from a read-only mapping); `--checksums off` passes
`--checksums off` (declared sha256 digests not checked: ONNX Runtime checks
none, so this compares the same work). It reports; it does not judge. Steady state: compare_speed.py. The hot
path's fixed cost: benches/hot_path.rs.
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

import numpy as np

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bin_command, write_npz  # noqa: E402

ORT_CHILD = r"""
import json, sys, time
import numpy as np
import onnxruntime as ort

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0

model, inputs, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
feeds = dict(np.load(inputs))
base = status("VmRSS")
t = time.perf_counter()
opts = ort.SessionOptions()
opts.intra_op_num_threads = threads
opts.inter_op_num_threads = 1
sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
sess.run(None, feeds)
elapsed = time.perf_counter() - t
print(json.dumps({"create_run_s": elapsed, "rss_growth": status("VmHWM") - base}))
"""


def weight_bytes(model: Path) -> int:
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    total = 0
    for t in m.graph.initializer:
        ext = {e.key: e.value for e in t.external_data}
        if "length" in ext:
            total += int(ext["length"])
        else:
            total += len(t.raw_data) or onnx.numpy_helper.to_array(t).nbytes
    return total


def cases_for(model: Path, is_tiny: bool, tmp: Path) -> list[tuple[str, Path]]:
    import onnxruntime as ort

    out = []
    if is_tiny:
        from parity import tiny_llm_feeds

        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        for t in (128, 1):
            path = tmp / f"t{t}.npz"
            write_npz(path, tiny_llm_feeds(sess, t, 0, seed=3, past=None))
            out.append((f"T={t}", path))
        return out
    from real_models import head_size, make_inputs, ort_session, vocab_of

    sess = ort_session(model, tmp)
    head = head_size(model)
    rng = np.random.default_rng(3)
    for t in (128, 1):
        ids = rng.integers(0, vocab_of(sess), size=t)
        path = tmp / f"t{t}.npz"
        write_npz(path, make_inputs(sess, t, 0, ids, None, head))
        out.append((f"T={t}", path))
    return out


def ort_round(model: Path, inputs: Path, threads: int, python: str) -> dict:
    proc = subprocess.run([python, "-c", ORT_CHILD, str(model), str(inputs), str(threads)],
                          check=True, capture_output=True, text=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ours_bench(binary: str, model: Path, inputs: Path, threads: int, extra: list[str]) -> dict:
    proc = subprocess.run(bin_command(binary) + [
        "bench", str(model), "--inputs", str(inputs), "--threads", str(threads), "--json", *extra],
        check=True, capture_output=True, text=True)
    return {m["mode"]: m for m in json.loads(proc.stdout)["modes"]}


def ours_run(binary: str, model: Path, inputs: Path, threads: int, tmp: Path,
             extra: list[str]) -> dict:
    stats = tmp / "stats.json"
    t = time.perf_counter()
    subprocess.run(bin_command(binary) + [
        "run", str(model), "--inputs", str(inputs), "--threads", str(threads),
        "--stats", str(stats), *extra], check=True, capture_output=True)
    wall = time.perf_counter() - t
    s = json.loads(stats.read_text())
    s["wall_s"] = wall
    return s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--fixtures", type=Path)
    ap.add_argument("--model", type=Path)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--map-weights", action="store_true")
    ap.add_argument("--checksums", choices=("strict", "off"), default="strict")
    ap.add_argument("--inputs", type=Path, help="the inputs of --model (one case)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    extra = ["--map-weights"] if args.map_weights else []
    if args.checksums == "off":
        extra += ["--checksums", "off"]
    model = args.model or (args.fixtures / "tiny-llm.onnx")
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    weights = weight_bytes(model)
    rows = []
    with tempfile.TemporaryDirectory(prefix="coldstart-") as tmp:
        tmp = Path(tmp)
        cases = ([("inputs", args.inputs)] if args.inputs
                 else cases_for(model, args.model is None, tmp))
        for label, inputs in cases:
            for n in threads:
                r = {"ort": [], "ort_rss": [], "stream": [], "hot": [], "proc": [], "wall": [],
                     "rss": [], "need": []}
                for _ in range(args.rounds):
                    o = ort_round(model, inputs, n, sys.executable)
                    r["ort"].append(o["create_run_s"])
                    r["ort_rss"].append(o["rss_growth"])
                    b = ours_bench(args.bin, model, inputs, n, extra)
                    r["stream"].append(b["streaming"]["time_to_first_output_s"])
                    r["hot"].append(b["hot"]["time_to_first_output_s"])
                    s = ours_run(args.bin, model, inputs, n, tmp, extra)
                    r["proc"].append(s["time_to_first_output_s"])
                    r["wall"].append(s["wall_s"])
                    r["rss"].append(s["peak_rss_bytes"] or 0)
                    peaks = s["peak_live_bytes"]
                    r["need"].append(weights + peaks["execution"] + peaks["io"])
                med = {k: statistics.median(v) for k, v in r.items()}
                rows.append({"case": label, "threads": n, **med})
    print(f"{model.name}: {weights / 1e6:.1f} MB of weights; medians of {args.rounds} rounds, "
          f"fresh processes{', --map-weights' if args.map_weights else ''}, "
          f"--checksums {args.checksums}; times in ms, memory in MB")
    head = (f"{'case':<6} {'thr':>3} {'ORT':>7} {'cold':>7} {'hot':>7} {'proc':>7} {'wall':>7} "
            f"{'cold/ORT':>9} {'cold/hot':>9} {'proc/ORT':>9} {'rss':>6} {'need':>6} {'ORTrss':>6} "
            f"{'rss/need':>9} {'rss/ORT':>8}")
    print(head)
    for x in rows:
        ms = lambda k: x[k] * 1e3  # noqa: E731
        mb = lambda k: x[k] / 1e6  # noqa: E731
        print(f"{x['case']:<6} {x['threads']:>3} {ms('ort'):>7.1f} {ms('stream'):>7.1f} {ms('hot'):>7.1f} "
              f"{ms('proc'):>7.1f} {ms('wall'):>7.1f} {x['stream'] / x['ort']:>9.2f} "
              f"{x['stream'] / x['hot']:>9.2f} {x['proc'] / x['ort']:>9.2f} {mb('rss'):>6.1f} "
              f"{mb('need'):>6.1f} {mb('ort_rss'):>6.1f} {x['rss'] / x['need']:>9.2f} "
              f"{x['rss'] / max(1, x['ort_rss']):>8.2f}")
    print("goals: cold/ORT <= 0.4, cold/hot <= 1.3, proc/ORT <= 0.6, rss/need <= 1.25, rss/ORT < 1")
    if args.json:
        args.json.write_text(json.dumps({"model": str(model), "weights": weights, "rows": rows},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
