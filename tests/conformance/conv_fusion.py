#!/usr/bin/env python3
"""Convolution chains the runtime fuses, against ONNX Runtime.

Each case is a small graph built here with random weights (seeded):
`Conv [-> BatchNormalization] [-> Add(residual)] [-> activation]` in the
forms exporters write (Relu, Clip, LeakyRelu, HardSigmoid, HardSwish,
Sigmoid, `x * Sigmoid(x)`, `x * HardSigmoid(x)`; grouped, depthwise,
pointwise, strided, 1-D), and chains that must NOT fuse (an intermediate
value that is a graph output, a broadcast addend, normalization
parameters that are graph inputs). For every case:

* `onnx-prepared plan` must list the operators the case expects (e.g.
  `Conv+BatchNormalization+Add+Relu`, or plain `Conv` and `Relu`);
* `onnx-prepared run` on every kernel family this CPU has (`--isa scalar`,
  `avx2`, `avx512`), in the eager and hot modes, on 1 and 2 threads, must
  give ONNX Runtime's outputs (all graph optimizations off: the unfused
  arithmetic) within `1e-4 * max|ORT|`;
* a first process with `--cache` writes the folded packed weights and a
  second one reads them (no prepack) and gives the same outputs.

    target/venv/bin/python tests/conformance/conv_fusion.py --bin target/debug/onnx-prepared
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RunFailed, bin_command, max_abs, max_abs_err, read_npz, run_cli, write_npz  # noqa: E402

RTOL = 1e-4


class Graph:
    """A graph under construction: nodes, initializers, inputs."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.inputs = []
        self.feeds = {}
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def input(self, shape: list[int]) -> str:
        from onnx import TensorProto, helper

        n = self.name("in")
        self.inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, shape))
        self.feeds[n] = self.rng.standard_normal(shape).astype(np.float32)
        return n

    def const(self, value: np.ndarray) -> str:
        from onnx import numpy_helper

        n = self.name("w")
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), n))
        return n

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        from onnx import helper

        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: list[int], group: int = 1, bias: bool = True, **attrs) -> str:
        w = self.const(self.rng.standard_normal([cout, cin // group, *k]) / np.sqrt(cin * np.prod(k) / group))
        ins = [x, w]
        if bias:
            ins.append(self.const(self.rng.standard_normal([cout]) * 0.1))
        return self.node("Conv", ins, group=group, **attrs)

    def bn(self, x: str, c: int, params_as_inputs: bool = False, **attrs) -> str:
        r = self.rng
        values = [
            r.uniform(0.5, 1.5, c),
            r.standard_normal(c) * 0.1,
            r.standard_normal(c) * 0.1,
            r.uniform(0.5, 2.0, c),
        ]
        if params_as_inputs:
            names = []
            for v in values:
                n = self.input([c])
                self.feeds[n] = v.astype(np.float32)
                names.append(n)
        else:
            names = [self.const(v) for v in values]
        return self.node("BatchNormalization", [x, *names], **attrs)

    def model(self, outputs: list[str], opset: int = 18):
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes,
            "conv_fusion",
            self.inputs,
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m


def case_bn_relu(g: Graph):
    x = g.input([1, 8, 14, 14])
    y = g.node("Relu", [g.bn(g.conv(x, 8, 16, [3, 3], pads=[1, 1, 1, 1]), 16, epsilon=1e-3)])
    return [y], ["Conv+BatchNormalization+Relu"]


def case_residual(g: Graph):
    x = g.input([1, 8, 16, 16])
    main = g.bn(g.conv(x, 8, 16, [3, 3], bias=False, strides=[2, 2], pads=[1, 1, 1, 1]), 16)
    short = g.bn(g.conv(x, 8, 16, [1, 1], bias=False, strides=[2, 2]), 16)
    y = g.node("Relu", [g.node("Add", [main, short])])
    return [y], ["Conv+BatchNormalization", "Conv+BatchNormalization+Add+Relu"]


def case_depthwise_clip(g: Graph):
    x = g.input([1, 12, 15, 15])
    lo, hi = g.const(np.array(0.0)), g.const(np.array(6.0))
    y = g.node("Clip", [g.bn(g.conv(x, 12, 12, [3, 3], group=12, pads=[1, 1, 1, 1]), 12), lo, hi])
    return [y], ["Conv+BatchNormalization+Clip"]


def case_pointwise_hardswish_residual(g: Graph):
    x = g.input([1, 16, 10, 10])
    y = g.node("HardSwish", [g.node("Add", [x, g.conv(x, 16, 16, [1, 1])])])
    return [y], ["Conv+Add+HardSwish"]


def case_silu(g: Graph):
    x = g.input([1, 6, 12, 12])
    c = g.conv(x, 6, 10, [3, 3], pads=[1, 1, 1, 1])
    y = g.node("Mul", [g.node("Sigmoid", [c]), c])
    return [y], ["Conv+Sigmoid*Mul"]


def case_hard_sigmoid_mul(g: Graph):
    x = g.input([1, 6, 12, 12])
    c = g.conv(x, 6, 10, [3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    y = g.node("Mul", [c, g.node("HardSigmoid", [c], alpha=0.25, beta=0.4)])
    return [y], ["Conv+HardSigmoid*Mul"]


def case_gates(g: Graph):
    x = g.input([1, 8, 9, 9])
    a = g.node("Sigmoid", [g.conv(x, 8, 8, [1, 1])])
    b = g.node("HardSigmoid", [g.conv(x, 8, 8, [3, 3], dilations=[2, 2], pads=[2, 2, 2, 2])])
    c = g.node("LeakyRelu", [g.conv(x, 8, 4, [3, 3], group=4)], alpha=0.1)
    return [a, b, c], ["Conv+Sigmoid", "Conv+HardSigmoid", "Conv+LeakyRelu"]


def case_1d(g: Graph):
    x = g.input([2, 4, 40])
    y = g.node("Relu", [g.bn(g.conv(x, 4, 8, [5], pads=[2, 2], strides=[2]), 8)])
    return [y], ["Conv+BatchNormalization+Relu"]


def case_large(g: Graph):
    x = g.input([1, 32, 28, 28])
    a = g.node("Relu", [g.bn(g.conv(x, 32, 64, [3, 3], pads=[1, 1, 1, 1]), 64)])
    b = g.node("Clip", [g.bn(g.conv(a, 64, 64, [3, 3], group=64, pads=[1, 1, 1, 1]), 64)], min=0.0, max=6.0)
    return [b], ["Conv+BatchNormalization+Relu", "Conv+BatchNormalization+Clip"]


def case_opset10_clip(g: Graph):
    x = g.input([1, 4, 8, 8])
    y = g.node("Clip", [g.conv(x, 4, 4, [3, 3], pads=[1, 1, 1, 1])], min=-0.5, max=0.5)
    return [y], ["Conv+Clip"]


def case_not_intermediate_output(g: Graph):
    x = g.input([1, 4, 8, 8])
    c = g.conv(x, 4, 4, [3, 3], pads=[1, 1, 1, 1])
    return [c, g.node("Relu", [c])], ["Conv", "Relu"]


def case_not_broadcast_addend(g: Graph):
    x = g.input([1, 4, 8, 8])
    b = g.input([1, 4, 1, 1])
    y = g.node("Relu", [g.node("Add", [g.conv(x, 4, 4, [3, 3], pads=[1, 1, 1, 1]), b])])
    return [y], ["Conv", "Add", "Relu"]


def case_not_bn_inputs(g: Graph):
    x = g.input([1, 4, 8, 8])
    y = g.node("Relu", [g.bn(g.conv(x, 4, 4, [3, 3]), 4, params_as_inputs=True)])
    return [y], ["Conv", "BatchNormalization", "Relu"]


CASES = {
    "bn_relu": (case_bn_relu, 18),
    "residual": (case_residual, 18),
    "depthwise_clip": (case_depthwise_clip, 18),
    "pointwise_hardswish_residual": (case_pointwise_hardswish_residual, 18),
    "silu": (case_silu, 18),
    "hard_sigmoid_mul": (case_hard_sigmoid_mul, 18),
    "gates": (case_gates, 18),
    "conv1d": (case_1d, 18),
    "large": (case_large, 10),
    "opset10_clip": (case_opset10_clip, 10),
    "not_intermediate_output": (case_not_intermediate_output, 18),
    "not_broadcast_addend": (case_not_broadcast_addend, 18),
    "not_bn_inputs": (case_not_bn_inputs, 18),
}


def isas() -> list[str]:
    """Kernel families of this CPU (`--isa` values)."""
    flags = ""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        pass
    out = ["scalar"]
    if " avx2 " in flags and " fma " in flags:
        out.append("avx2")
    if all(f" {f} " in flags for f in ("avx512f", "avx512bw", "avx512dq", "avx512vl")):
        out.append("avx512")
    return out


def plan_ops(binary: str, model: Path) -> list[str]:
    proc = subprocess.run(
        bin_command(binary) + ["plan", str(model), "--json"], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RunFailed(proc.returncode, proc.stderr)
    return [n["op"] for n in json.loads(proc.stdout)["nodes"]]


def check(binary: str, name: str, work: Path) -> list[str]:
    import onnx
    import onnxruntime as ort

    build, opset = CASES[name]
    g = Graph(seed=sum(map(ord, name)))
    outputs, expect_ops = build(g)
    model = work / f"{name}.onnx"
    onnx.save(g.model(outputs, opset), model)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    ref = dict(zip(outputs, sess.run(None, g.feeds)))
    inp = work / f"{name}-in.npz"
    write_npz(inp, g.feeds)
    failures = []
    ops = sorted(plan_ops(binary, model))
    if ops != sorted(expect_ops):
        failures.append(f"plan lists {ops}, expected {sorted(expect_ops)}")

    def compare(label: str, out: Path):
        got = read_npz(out)
        for o in outputs:
            err, scale = max_abs_err(got[o], ref[o]), max_abs(ref[o])
            if not err <= RTOL * max(scale, 1e-6):
                failures.append(f"{label} {o}: max|err| {err:.3e} > {RTOL} * {scale:.3e}")

    runs = [(isa, mode, threads) for isa in isas() for mode in ("eager", "hot") for threads in (1, 2)]
    for isa, mode, threads in runs:
        out = work / f"{name}-out.npz"
        label = f"--isa {isa} {mode} {threads}t"
        try:
            run_cli(binary, model, inputs=inp, outputs=out, threads=threads, mode=mode, extra=("--isa", isa))
        except RunFailed as e:
            failures.append(f"{label}: {e}")
            continue
        compare(label, out)
    cache = work / f"{name}-cache"
    for label in ("cache write", "cache read"):
        out = work / f"{name}-out.npz"
        stats = work / f"{name}-stats.json"
        try:
            run_cli(binary, model, inputs=inp, outputs=out, mode="eager",
                    extra=("--cache", str(cache), "--stats", str(stats)))
        except RunFailed as e:
            failures.append(f"{label}: {e}")
            continue
        compare(label, out)
        counters = json.loads(stats.read_text())
        if label == "cache read" and counters.get("prepacks", 0) != 0:
            failures.append(f"{label}: {counters.get('prepacks')} prepacks, expected none")
    status = "OK" if not failures else "FAILED"
    print(f"  {name:<30} {', '.join(sorted(set(ops)))}: {status}")
    for f in failures:
        print(f"    {f}")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the onnx-prepared binary (or `cargo`)")
    ap.add_argument("--cases", help="comma-separated subset of: " + ", ".join(CASES))
    args = ap.parse_args()
    names = args.cases.split(",") if args.cases else list(CASES)
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if check(args.bin, name, Path(tmp)):
                failed.append(name)
    print(f"\n{len(names) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
