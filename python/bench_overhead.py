#!/usr/bin/env python3
"""The Python `run`'s overhead on a one-node model, beside onnxruntime's.

    python python/bench_overhead.py [--repeat 20000] [--json out.json]

The model: one Relu on x: f32[1, 16] (made here with onnx.helper), so a run
is almost all fixed cost. Every number is the median of `--repeat` timed
calls after a warm-up, all in this process, one thread per run:

* ours, Python: `InferenceSession.run(None, {"x": x})` (inputs wrapped
  without a copy, the GIL released, outputs moved into NumPy arrays);
* ours, Rust: `RuntimeSession::run` on the same session, timed in Rust
  (`_time_rust_runs`: one context reused, outputs left in it, as
  `onnx-prepared run --repeat`);
* onnxruntime, Python: `InferenceSession.run(None, {"x": x})`
  (intra_op_num_threads = 1);
* onnxruntime, IOBinding: `run_with_iobinding` on pre-bound OrtValues,
  its run with the least Python around it, so that `run` minus it is the
  cost of its NumPy path alone (a lower bound of its Python overhead: its
  C++ run cannot be timed from here). onnxruntime's own profiler adds more
  per run than the run costs, so it is not used.

Prints the medians in microseconds and the two overheads. Timings on a
shared machine are noisy: it reports and does not judge.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# This file sits beside the package's sources: import the installed wheel,
# not python/onnx_prepared (which lacks the compiled extension).
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def one_node_model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "one-node", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.save(model, str(path))


def time_calls(fn, repeat: int, warmup: int = 1000) -> list[float]:
    for _ in range(warmup):
        fn()
    clock = time.perf_counter_ns
    times = []
    for _ in range(repeat):
        t = clock()
        fn()
        times.append(clock() - t)
    return [t / 1e3 for t in times]


def ort_bound_run(sess, feeds: dict):
    """`run_with_iobinding` on pre-bound OrtValues: onnxruntime's run with
    the least Python around it (no NumPy conversion on the way in; the
    output is allocated by the run and left as an OrtValue)."""
    import onnxruntime as ort

    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value))
    for o in sess.get_outputs():
        binding.bind_output(o.name)
    return lambda: sess.run_with_iobinding(binding)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=20000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import onnxruntime as ort

    import onnx_prepared

    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        tmp = Path(tmp)
        model = tmp / "one-node.onnx"
        one_node_model(model)
        x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16)
        feeds = {"x": x}

        opts = onnx_prepared.SessionOptions()
        opts.intra_op_num_threads = 1
        ours = onnx_prepared.InferenceSession(str(model), opts)
        ours.prepare()
        ort_opts = ort.SessionOptions()
        ort_opts.intra_op_num_threads = 1
        ort_opts.inter_op_num_threads = 1
        theirs = ort.InferenceSession(str(model), ort_opts, providers=["CPUExecutionProvider"])
        want = theirs.run(None, feeds)[0]
        got = ours.run(None, feeds)[0]
        if not np.array_equal(got, want):
            print(f"outputs differ: {got} vs {want}", file=sys.stderr)
            return 1

        timer = statistics.median(time_calls(lambda: None, args.repeat))
        # Interleaved rounds, so that drift in the machine's load hits each alike.
        rounds = 5
        per = max(args.repeat // rounds, 1)
        bound = ort_bound_run(theirs, feeds)
        py, rust, ort_py, ort_bound = [], [], [], []
        for _ in range(rounds):
            py += time_calls(lambda: ours.run(None, feeds), per)
            rust += [t / 1e3 for t in ours._time_rust_runs(feeds, per)]
            ort_py += time_calls(lambda: theirs.run(None, feeds), per)
            ort_bound += time_calls(bound, per)

    row = {
        "ours_python_run_us": statistics.median(py),
        "ours_rust_run_us": statistics.median(rust),
        "ort_python_run_us": statistics.median(ort_py),
        "ort_iobinding_run_us": statistics.median(ort_bound),
        "timer_pair_us": timer,
        "repeat": args.repeat,
    }
    row["ours_overhead_us"] = row["ours_python_run_us"] - row["ours_rust_run_us"]
    row["ort_numpy_path_us"] = row["ort_python_run_us"] - row["ort_iobinding_run_us"]
    print("one Relu on f32[1, 16], medians in µs, one thread per run:")
    print(f"  ours   Python run     {row['ours_python_run_us']:8.2f}")
    print(f"  ours   Rust run       {row['ours_rust_run_us']:8.2f}")
    print(f"  ours   Python overhead{row['ours_overhead_us']:8.2f}")
    print(f"  ORT    Python run     {row['ort_python_run_us']:8.2f}")
    print(f"  ORT    IOBinding run  {row['ort_iobinding_run_us']:8.2f}  (pre-bound OrtValues)")
    print(f"  ORT    run - IOBinding{row['ort_numpy_path_us']:8.2f}  (its NumPy path alone)")
    print(f"  (a perf_counter_ns pair alone: {timer:.2f})")
    if args.json:
        args.json.write_text(json.dumps(row, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
