#!/usr/bin/env python3
"""A stand-in for `onnx-prepared run` built on ONNX Runtime: the harness's
self-test, not a conformance check.

    python tests/conformance/ort_cli.py run MODEL [--inputs IN.npz]
        [--outputs OUT.npz] [--threads N] [--repeat N] [--portable]

Pass it as `--bin tests/conformance/ort_cli.py` to parity.py, node_tests.py
or compare_speed.py: ORT compared with itself must pass everything the
scripts select (node tests ORT cannot run are reported as skipped), which
checks the scripts' plumbing (input building, .npz naming, output matching,
the decode chaining). With ORT_CLI_PERTURB=REL every float output gets
REL * max|y| + 1e-6 added to its first element (only the output named by
ORT_CLI_PERTURB_OUTPUT, if set): a perturbation above the tolerance must
make the scripts fail, one well below it must not.

ORT's NOT_IMPLEMENTED errors are reported as "... is not supported", the
wording onnx-prepared uses, so node_tests.py counts them as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # keep tests/conformance free of __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import read_npz, write_npz  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(prog="ort_cli.py")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("model")
    run.add_argument("--inputs")
    run.add_argument("--outputs")
    run.add_argument("--threads", type=int, default=1)
    run.add_argument("--repeat", type=int, default=0)
    run.add_argument("--portable", action="store_true")
    run.add_argument("--dim", action="append", default=[])
    # Accepted and ignored: ONNX Runtime has one way to a result.
    run.add_argument("--mode", choices=["eager", "streaming", "hot"])
    args = parser.parse_args()

    import onnxruntime as ort

    start = time.perf_counter()
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(args.model, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        msg = str(e).replace("\n", " ")
        if "NOT_IMPLEMENTED" in msg or "not implemented" in msg.lower():
            print(f"error: {msg} (is not supported)", file=sys.stderr)
        else:
            print(f"error: {msg}", file=sys.stderr)
        return 1
    load_ms = (time.perf_counter() - start) * 1e3
    if not args.inputs:
        print("error: ort_cli.py needs --inputs", file=sys.stderr)
        return 1
    feeds = read_npz(Path(args.inputs))
    names = [o.name for o in sess.get_outputs()]
    try:
        t = time.perf_counter()
        outs = sess.run(names, feeds)
        first_ms = (time.perf_counter() - t) * 1e3
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            sess.run(names, feeds)
            times.append((time.perf_counter() - t) * 1e3)
    except Exception as e:  # noqa: BLE001
        print(f"error: {str(e).replace(chr(10), ' ')}", file=sys.stderr)
        return 1

    perturb = float(os.environ.get("ORT_CLI_PERTURB", "0") or 0)
    only = os.environ.get("ORT_CLI_PERTURB_OUTPUT")
    result = {}
    for name, y in zip(names, outs):
        y = np.array(y)
        if perturb and y.size and y.dtype.kind == "f" and (only is None or only == name):
            flat = y.reshape(-1)
            flat[0] += perturb * float(np.max(np.abs(y))) + 1e-6
        result[name] = y
    if args.outputs:
        write_npz(Path(args.outputs), result)
    if args.repeat > 0:
        times.sort()
        print(json.dumps({
            "load_ms": load_ms,
            "first_run_ms": first_ms,
            "median_ms": times[len(times) // 2],
            "min_ms": times[0],
            "runs": len(times),
            "threads": args.threads,
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
