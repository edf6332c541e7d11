#!/usr/bin/env python3
"""Per decode step: `run_with_iobinding` (KV caches moved as OrtValues)
against `run` (KV caches as NumPy arrays) and the Rust decode loop, on a
committed decoder, beside onnxruntime's two loops.

    python python/bench_iobinding.py [--model qwen2-optimum] [--steps 32] [--repeat 5]

Every loop greedy-decodes `--steps` tokens after a 16-token prompt on one
thread; the number is the median over `--repeat` loops of the mean time
per decode step (the prefill excluded):

* ours, `run`: feeds are arrays (used in place); every output, the
  presents included, is copied once into a NumPy array, which the next
  step feeds back as its past;
* ours, `run_with_iobinding`: the presents come back as `OrtValue`s and are
  bound as the next step's pasts (`bind_ortvalue_input`): no copy of a KV
  cache outside the graph;
* ours, Rust: `InferenceSession.generate` (the runtime's own loop: the
  context moves each present into its past), the floor the two above are
  measured against;
* onnxruntime: the same `run` and `run_with_iobinding` loops.

Timings on a shared machine are noisy: it reports and does not judge.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# The installed wheel, not python/onnx_prepared (no compiled extension).
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE / "tests"))
from _models import REAL, feeds_for, present_to_past  # noqa: E402

PROMPT = 16


def session(rt, path: Path):
    so = rt.SessionOptions()
    so.intra_op_num_threads = 1
    return rt.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def loop_run(sess, model: Path, steps: int) -> tuple[float, list[int]]:
    inputs, outputs = sess.get_inputs(), sess.get_outputs()
    names = [o.name for o in outputs]
    pairs = present_to_past(inputs, outputs)
    logits = next(n for n in names if "logits" in n)
    ids_name = next(i.name for i in inputs if "input_ids" in i.name)
    ids = np.arange(1, PROMPT + 1, dtype=np.int64)
    p, pasts, tokens, start = 0, None, [], 0.0
    for step in range(steps + 1):
        if step == 1:
            start = time.perf_counter()
        feeds = feeds_for(model, inputs, outputs, t=len(ids), p=p, seed=0, pasts=pasts)
        feeds[ids_name] = ids.reshape(1, -1)
        outs = dict(zip(names, sess.run(None, feeds)))
        tokens.append(int(np.argmax(outs[logits][0, -1])))
        pasts = {pairs[o]: outs[o] for o in pairs}
        p += len(ids)
        ids = np.array([tokens[-1]], np.int64)
    return (time.perf_counter() - start) / steps, tokens


def loop_iobinding(sess, model: Path, steps: int) -> tuple[float, list[int]]:
    inputs, outputs = sess.get_inputs(), sess.get_outputs()
    names = [o.name for o in outputs]
    pairs = present_to_past(inputs, outputs)
    logits = next(n for n in names if "logits" in n)
    ids_name = next(i.name for i in inputs if "input_ids" in i.name)
    io = sess.io_binding()
    ids = np.arange(1, PROMPT + 1, dtype=np.int64)
    p, bound_pasts, tokens, start = 0, None, [], 0.0
    for step in range(steps + 1):
        if step == 1:
            start = time.perf_counter()
        # The small per-step inputs (ids, mask, positions); zero pasts once.
        feeds = feeds_for(model, inputs, outputs, t=len(ids), p=p, seed=0, pasts=bound_pasts)
        feeds[ids_name] = ids.reshape(1, -1)
        for name, value in feeds.items():
            if bound_pasts is None or name not in bound_pasts:
                io.bind_cpu_input(name, value)
        io.clear_binding_outputs()
        for name in names:
            io.bind_output(name, "cpu")
        sess.run_with_iobinding(io)
        outs = dict(zip(names, io.get_outputs()))
        tokens.append(int(np.argmax(outs[logits].numpy()[0, -1])))
        for present, past in pairs.items():
            io.bind_ortvalue_input(past, outs[present])
        bound_pasts = {past: None for past in pairs.values()}
        p += len(ids)
        ids = np.array([tokens[-1]], np.int64)
    return (time.perf_counter() - start) / steps, tokens


def rust_loop(sess, steps: int) -> float:
    prompt = list(range(1, PROMPT + 1))
    t0 = time.perf_counter()
    sess.generate(prompt, 1)
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    sess.generate(prompt, steps + 1)
    return (time.perf_counter() - t0 - prefill) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2-optimum")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import onnxruntime

    import onnx_prepared

    model = REAL / args.model / "model.onnx"
    ours, theirs = session(onnx_prepared, model), session(onnxruntime, model)
    ours.prepare()
    rows, tokens = {}, {}
    for label, fn in [
        ("ours, run", lambda: loop_run(ours, model, args.steps)),
        ("ours, run_with_iobinding", lambda: loop_iobinding(ours, model, args.steps)),
        ("onnxruntime, run", lambda: loop_run(theirs, model, args.steps)),
        ("onnxruntime, run_with_iobinding", lambda: loop_iobinding(theirs, model, args.steps)),
    ]:
        fn()  # warm-up
        times = []
        for _ in range(args.repeat):
            t, tokens[label] = fn()
            times.append(t)
        rows[label] = statistics.median(times)
    rust = statistics.median(rust_loop(ours, args.steps) for _ in range(args.repeat))
    assert len({tuple(t) for t in tokens.values()}) == 1, f"the loops disagree: {tokens}"
    print(f"{args.model}: {args.steps} decode steps after a {PROMPT}-token prompt, 1 thread, median of {args.repeat}")
    print(f"  {'ours, Rust (generate)':34s} {rust * 1e3:8.3f} ms/step")
    for label, t in rows.items():
        extra = f"  (+{(t - rust) * 1e6:7.1f} us over Rust)" if label.startswith("ours") else ""
        print(f"  {label:34s} {t * 1e3:8.3f} ms/step{extra}")
    print(f"  iobinding / run: ours {rows['ours, run_with_iobinding'] / rows['ours, run']:.3f}, "
          f"onnxruntime {rows['onnxruntime, run_with_iobinding'] / rows['onnxruntime, run']:.3f}")


if __name__ == "__main__":
    main()
