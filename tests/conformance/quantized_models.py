#!/usr/bin/env python3
"""ONNX Runtime parity on int8-quantized models and on every quantized
operator, one node at a time.

**Models.** Every `*/model.onnx` under --models (tests/models/quant, made by
tools/quant-models/: QDQ and QOperator forms of the small ResNet- and
MobileNetV3-style CNNs of tests/models/vision, a BERT-like encoder in float,
dynamically quantized and QDQ, and ONNX Runtime's own optimized copies with
its com.microsoft fused operators) runs through `onnx-prepared run` in the
eager, streaming and hot modes against ONNX Runtime with default options
(CPU EP, one thread). The tolerance of a model is

    max|ours - ORT| <= max(1e-2, 2 * spread) * max|ORT|

per output, where `spread` is ONNX Runtime's own disagreement with itself,
max|ORT(ORT_DISABLE_ALL) - ORT(default)| / max|ORT|: with its graph
optimizations off ORT dequantizes and computes QDQ models in float, with
them on it fuses them into integer kernels, and the two differ by a few
quantization steps after a few layers. Classifier outputs (`logits`) must
also give ORT's top-1 in every row; the inputs are drawn (seeded, up to 20
draws) so that ORT's top-1 leads its runner-up by more than the tolerance,
so no error the tolerance allows can flip it.

**Operators.** Single-node graphs built here (seeded random data, odd
sizes) for QuantizeLinear, DequantizeLinear (int8, uint8, int16, uint16,
int32; per-tensor, per-axis, blocked), DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv and the com.microsoft QLinearAdd,
QLinearMul, QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat,
QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QGemm,
DynamicQuantizeMatMul, MatMulIntegerToFloat, QuantizeLinear and
DequantizeLinear, each against ONNX Runtime (default options), in the same
three modes. Per output:

* `exact`  integer accumulations (MatMulInteger, ConvInteger, a zero point)
           must be equal;
* `quant`  quantized outputs (QuantizeLinear, QLinear*, requantized int8 or
           uint8) at most 1 apart - the float rounding of a requantization
           scale may move a value across a rounding tie;
* `float`  float outputs within 1e-4 * max|ORT|. That includes
           DynamicQuantizeMatMul, MatMulIntegerToFloat and QGemm without
           y_scale: their integer accumulators are exact and ORT turns them
           into float as float(acc) * (a_scale * b_scale) (+ bias), so a
           runtime that computes the same accumulators is within a few ulps
           (~1e-7); DynamicQuantizeMatMul's activation quantization is
           DynamicQuantizeLinear's exact formula, so it adds nothing - an
           element quantized one step off moves the output by ~1e-3 of its
           range, which the tolerance catches.

ONNX Runtime's integer arithmetic on x86-64 without AVX-512 VNNI saturates
the sum of each pair of uint8 x int8 products (k = 2j, 2j+1) to int16
(vpmaddubsw) in MatMulInteger, QLinearMatMul, QLinearConv, QGemm,
MatMulIntegerToFloat and DynamicQuantizeMatMul (tools/quant-models/README.md,
"ONNX Runtime's integer arithmetic on x86-64"); with AVX-512 VNNI
(vpdpbusd) it is exact, and so is the runtime's. The `-7bit` cases keep int8
operands in [-64, 63] so that no pair can saturate; the `-saturating` cases
use the full range and the script asserts that ORT's result differs there
from the exact one without VNNI and equals it with VNNI (else the case
would not test what its name says). A case the runtime refuses (an
unsupported operator) is a failure.

    target/venv/bin/python tests/conformance/quantized_models.py --bin target/release/onnx-prepared
        [--only SUBSTRING[,SUBSTRING]] [--skip-models] [--skip-nodes] [--modes eager,hot]
        [--threads N] [--keep DIR] [--list]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # keep tests/conformance free of __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RunFailed, binary_exists, max_abs, max_abs_err, read_npz, run_cli, write_npz  # noqa: E402

MODES = ("eager", "streaming", "hot")
MODEL_FLOOR = 1e-2
FLOAT_RTOL = 1e-4
DRAWS = 20
# The encoder's vocabulary (tools/quant-models/generate.py VOCAB).
VOCAB = 128
OPSET = 21


# ------------------------------------------------------------------ models


def model_feeds(sess, rng) -> dict:
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else None for d in i.shape]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, VOCAB, size=[2, 11]).astype(np.int64)
        elif i.name == "attention_mask":
            mask = np.ones([2, 11], np.int64)
            mask[1, 8:] = 0
            feeds[i.name] = mask
        elif i.type == "tensor(float)":
            feeds[i.name] = rng.standard_normal([d or 1 for d in shape]).astype(np.float32)
        else:
            raise ValueError(f"no input recipe for {i.name} ({i.type})")
    return feeds


def spread_of(ref: list, other: list) -> float:
    return max(max_abs_err(o, r) / max(max_abs(r), 1e-30) for r, o in zip(ref, other))


def top1_margin(logits: np.ndarray) -> float:
    """min over rows of (best - runner-up) / max|logits|."""
    s = np.sort(logits.reshape(logits.shape[0], -1), axis=1)
    return float((s[:, -1] - s[:, -2]).min()) / max(max_abs(logits), 1e-30)


def plan_ops(binary: str, model: Path) -> list[str]:
    """The operators `onnx-prepared plan` resolves `model` to."""
    import json
    import subprocess

    from _common import bin_command

    proc = subprocess.run(
        bin_command(binary) + ["plan", str(model), "--json"], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RunFailed(proc.returncode, proc.stderr)
    return [n["op"] for n in json.loads(proc.stdout)["nodes"]]


# Float operators a QDQ group around them is resolved away from: a QDQ
# model's plan must hold none of them (each runs as one integer operator,
# QLinearConv, QLinearMatMul or QGemm, as ONNX Runtime's QDQ transformer
# fuses them).
FUSED_AWAY = ("Conv", "MatMul", "Gemm")


def check_model(binary: str, model: Path, work: Path, seed: int, modes, threads: int) -> tuple[list[str], dict]:
    import onnxruntime as ort

    print(f"== {model.parent.name}")
    plan_failures = []
    if "-qdq" in model.parent.name:
        try:
            ops = plan_ops(binary, model)
            left = sorted({o for o in ops if o in FUSED_AWAY})
            fused = sum(o.startswith("QLinear") or o == "QGemm" for o in ops)
            print(f"  plan: {fused} integer operators, float {left or 'none'} left")
            if left:
                plan_failures.append(f"plan: still runs {left} in float")
        except RunFailed as e:
            plan_failures.append(f"plan: {e}")
    if "-dynamic" in model.parent.name:
        # quantize_dynamic's MatMulInteger -> Cast -> Mul(scales) [-> Add]
        # runs as one MatMulIntegerToFloat, as ONNX Runtime fuses it.
        try:
            ops = plan_ops(binary, model)
            left = ops.count("MatMulInteger")
            fused = ops.count("MatMulIntegerToFloat") + ops.count("DynamicQuantizeMatMul")
            print(f"  plan: {fused} float-output integer products, {left} MatMulInteger left")
            if left:
                plan_failures.append(f"plan: {left} MatMulInteger nodes not fused")
        except RunFailed as e:
            plan_failures.append(f"plan: {e}")
    sessions = {}
    for level in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        sessions[level] = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    sess = sessions["ORT_ENABLE_ALL"]
    names = [o.name for o in sess.get_outputs()]
    classifier = [n for n in names if n == "logits"]
    rng = np.random.default_rng(seed)
    best = None
    for draw in range(DRAWS):
        feeds = model_feeds(sess, rng)
        ref = sess.run(None, feeds)
        spread = spread_of(ref, sessions["ORT_DISABLE_ALL"].run(None, feeds))
        rtol = max(MODEL_FLOOR, 2 * spread)
        margin = min((top1_margin(ref[names.index(n)]) for n in classifier), default=np.inf)
        if best is None or margin - rtol > best[4] - best[3]:
            best = (feeds, ref, spread, rtol, margin, draw)
        if margin > rtol:
            break
    feeds, ref, spread, rtol, margin, draw = best
    ref = dict(zip(names, ref))
    note = f"draw {draw}" + (f", top-1 margin {margin:.3f}" if classifier else "")
    print(f"  ORT spread {spread:.2e} -> tolerance {rtol:.2e} * max|ORT| ({note})")
    if classifier and margin <= rtol:
        print(f"  note: no draw of {DRAWS} has a top-1 margin above the tolerance; top-1 is checked anyway")
    inp = work / "in.npz"
    write_npz(inp, feeds)
    failures, worst, top1, compared = plan_failures, 0.0, "n/a" if not classifier else "ok", False
    for mode in modes:
        out = work / f"out-{mode}.npz"
        try:
            run_cli(binary, model, inputs=inp, outputs=out, threads=threads, mode=mode)
        except RunFailed as e:
            failures.append(f"{mode}: {e}")
            print(f"  {mode}: FAILED {e}")
            worst = np.inf
            continue
        ours = read_npz(out)
        compared = True
        for name, want in ref.items():
            got = ours.get(name)
            if got is None or got.shape != want.shape or got.dtype != want.dtype:
                what = "missing" if got is None else f"{got.dtype}{list(got.shape)}"
                failures.append(f"{mode}: {name} {what}, ORT {want.dtype}{list(want.shape)}")
                print(f"  {mode:<10} {name:<18} FAIL {what}, ORT {want.dtype}{list(want.shape)}")
                worst = np.inf
                continue
            err = max_abs_err(got, want)
            scale = max(max_abs(want), 1e-30)
            worst = max(worst, err / scale)
            ok = err <= rtol * scale
            extra = ""
            if name in classifier:
                same = np.array_equal(got.reshape(got.shape[0], -1).argmax(1), want.reshape(want.shape[0], -1).argmax(1))
                extra = f" top-1 {'same' if same else 'DIFFERS'}"
                if not same:
                    top1 = "DIFFERS"
                    failures.append(f"{mode}: {name} top-1 differs")
            print(f"  {mode:<10} {name:<18} {list(want.shape)} max|err| {err:.3e} rel {err / scale:.2e}{extra} {'OK' if ok else 'FAIL'}")
            if not ok:
                failures.append(f"{mode}: {name} rel err {err / scale:.2e} > {rtol:.2e}")
    if not compared:
        top1 = "-"
    row = {"model": model.parent.name, "rtol": rtol, "spread": spread, "worst": worst, "top1": top1, "ok": not failures}
    return failures, row


# ------------------------------------------------------------------ operators


INFO = {
    np.uint8: (0, 255), np.int8: (-128, 127), np.uint16: (0, 65535), np.int16: (-32768, 32767),
    np.int32: (-(2**31), 2**31 - 1),
}


class Graph:
    """A one-node (or few-node) graph under construction, with its feeds."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.inputs, self.feeds = [], [], [], {}
        self.count = 0
        self.ms = False

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def input(self, value: np.ndarray) -> str:
        from onnx import helper

        n = self.name("x")
        self.inputs.append(helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
        self.feeds[n] = value
        return n

    def const(self, value) -> str:
        from onnx import numpy_helper

        n = self.name("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def node(self, op: str, inputs: list[str], outputs: int = 1, domain: str = "", **attrs) -> list[str]:
        from onnx import helper

        if domain:
            self.ms = True
        outs = [self.name("y") for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=outs[0], domain=domain, **attrs))
        return outs

    def model(self, outputs: list[str]):
        from onnx import helper

        graph = helper.make_graph(
            self.nodes, "quantized_op", self.inputs, [helper.make_empty_tensor_value_info(o) for o in outputs], self.inits
        )
        opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("com.microsoft", 1)] if self.ms else [])
        m = helper.make_model(graph, opset_imports=opsets)
        m.ir_version = 10
        return m

    # data
    def ints(self, dtype, shape, lo=None, hi=None) -> np.ndarray:
        dlo, dhi = INFO[dtype]
        lo = dlo if lo is None else lo
        hi = dhi if hi is None else hi
        return self.rng.integers(lo, hi + 1, size=shape).astype(dtype)

    def scale(self, shape=(), lo=0.002, hi=0.05) -> np.ndarray:
        return self.rng.uniform(lo, hi, size=shape).astype(np.float32)

    def zp(self, dtype, shape=(), spread: int = 20) -> np.ndarray:
        """Zero points near the middle of the type's range."""
        lo, hi = INFO[dtype]
        mid = (lo + hi + 1) // 2
        return self.rng.integers(mid - spread, mid + spread + 1, size=shape).astype(dtype)


def fit(real: np.ndarray, dtype, spill: float = 1.05) -> tuple[np.ndarray, np.ndarray]:
    """Output scale and zero point that map `real`'s range onto `dtype`'s,
    a little short so that the extremes saturate."""
    lo, hi = INFO[dtype]
    rmin, rmax = min(float(real.min()), 0.0), max(float(real.max()), 0.0)
    scale = max(rmax - rmin, 1e-6) / (hi - lo) / spill
    zp = int(np.clip(np.rint(lo - rmin / scale), lo, hi))
    return np.array(scale, np.float32), np.array(zp, dtype)


def deq(q, scale, zp, axis: int | None = None) -> np.ndarray:
    q = q.astype(np.float64)
    s, z = np.asarray(scale, np.float64), np.asarray(zp, np.float64)
    if axis is not None and s.ndim == 1:
        shape = [1] * q.ndim
        shape[axis] = -1
        s, z = s.reshape(shape), z.reshape(shape)
    return (q - z) * s


def matmul_exact(a, za, b, zb) -> np.ndarray:
    return (a.astype(np.int64) - np.asarray(za, np.int64)) @ (b.astype(np.int64) - np.asarray(zb, np.int64))


def conv_exact(x, zx, w, zw, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1) -> np.ndarray:
    """Exact int64 2-D convolution of zero-point-shifted operands."""
    zw = np.asarray(zw, np.int64)
    x = np.pad(x.astype(np.int64) - np.int64(zx), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    w = w.astype(np.int64) - (zw.reshape(-1, 1, 1, 1) if zw.ndim else zw)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh = (h - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow), np.int64)
    mg = m // group
    for g in range(group):
        xs = x[:, g * cg : (g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dilations[0] : i * dilations[0] + strides[0] * (oh - 1) + 1 : strides[0],
                           j * dilations[1] : j * dilations[1] + strides[1] * (ow - 1) + 1 : strides[1]]
                y[:, g * mg : (g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, w[g * mg : (g + 1) * mg, :, i, j])
    return y


def requant(acc, scale, zp, dtype, bias=None) -> np.ndarray:
    lo, hi = INFO[dtype]
    v = acc.astype(np.float64) if bias is None else acc.astype(np.float64) + bias
    return np.clip(np.rint(v * scale) + np.int64(zp), lo, hi)


class Case:
    def __init__(self, name: str, build):
        self.name = name
        self.build = build


CASES: list[Case] = []


def case(name: str):
    def register(fn):
        CASES.append(Case(name, fn))
        return fn

    return register


# Each builder takes a Graph and returns {output: kind} and optionally a
# function of ORT's outputs that returns a harness problem (or None).

# --- QuantizeLinear / DequantizeLinear (ai.onnx opset 21, com.microsoft)

QTYPES = {"u8": np.uint8, "s8": np.int8, "u16": np.uint16, "s16": np.int16}


def quantize_input(g: Graph, shape, scale) -> np.ndarray:
    """Floats on the quantization grid's half steps (rounding ties), on it
    and off it, some beyond the type's range (saturation)."""
    steps = g.rng.integers(-150, 151, size=shape) + g.rng.choice([0.0, 0.5, 0.25, -0.5, 0.49], size=shape)
    x = (steps * np.broadcast_to(scale, shape)).astype(np.float32)
    return x


def broadcast_param(p: np.ndarray, shape, axis: int, block: int | None = None) -> np.ndarray:
    if p.ndim == 0:
        return p
    axis %= len(shape)
    if block:
        return np.repeat(p, block, axis=axis).take(range(shape[axis]), axis=axis)
    s = [1] * len(shape)
    s[axis] = -1
    return p.reshape(s)


def add_quantize_cases():
    shape = (3, 5, 7)
    for tname, dt in QTYPES.items():
        for mode in ("tensor", "axis1", "axis-1", "blocked"):
            for domain in ("", "com.microsoft"):
                if domain and mode == "blocked":
                    continue  # the contrib op has no block_size
                dname = "com.microsoft." if domain else ""

                def build(g, dt=dt, mode=mode, domain=domain):
                    attrs, pshape, axis, block = {}, (), 1, None
                    if mode == "axis1":
                        attrs, pshape = {"axis": 1}, (5,)
                    elif mode == "axis-1":
                        attrs, pshape, axis = {"axis": -1}, (7,), -1
                    elif mode == "blocked":
                        attrs, pshape, axis, block = {"axis": 2, "block_size": 3}, (3, 5, 3), 2, 3
                    scale = g.scale(pshape, 0.01, 0.1)
                    zp = g.zp(dt, pshape, 10 if dt in (np.uint8, np.int8) else 1000)
                    full = broadcast_param(scale, shape, axis, block)
                    x = quantize_input(g, shape, full)
                    if dt in (np.uint16, np.int16):
                        x = (x * 300).astype(np.float32)  # reach 16-bit saturation too
                    # Exact ties of the grid need a power-of-two scale: one.
                    x.flat[:4] = np.array([0.5, 1.5, -0.5, -2.5], np.float32) * np.broadcast_to(full, shape).flat[:4]
                    (y,) = g.node("QuantizeLinear", [g.input(x), g.const(scale), g.const(zp)], domain=domain, **attrs)
                    return {y: "quant"}

                CASES.append(Case(f"{dname}QuantizeLinear/{tname}/{mode}", build))

                def build_dq(g, dt=dt, mode=mode, domain=domain):
                    attrs, pshape = {}, ()
                    if mode == "axis1":
                        attrs, pshape = {"axis": 1}, (5,)
                    elif mode == "axis-1":
                        attrs, pshape = {"axis": -1}, (7,)
                    elif mode == "blocked":
                        attrs, pshape = {"axis": 2, "block_size": 3}, (3, 5, 3)
                    x = g.ints(dt, shape)
                    (y,) = g.node("DequantizeLinear", [g.input(x), g.const(g.scale(pshape)), g.const(g.zp(dt, pshape))], domain=domain, **attrs)
                    return {y: "float"}

                CASES.append(Case(f"{dname}DequantizeLinear/{tname}/{mode}", build_dq))

    @case("QuantizeLinear/u8/no-zero-point")
    def _(g):
        scale = g.scale((), 0.01, 0.1)
        (y,) = g.node("QuantizeLinear", [g.input(quantize_input(g, (4, 9), scale)), g.const(scale)])
        return {y: "quant"}

    @case("DequantizeLinear/s32/tensor")
    def _(g):
        (y,) = g.node("DequantizeLinear", [g.input(g.ints(np.int32, (5, 7), -(2**20), 2**20)), g.const(g.scale())])
        return {y: "float"}

    @case("DequantizeLinear/s8/no-zero-point")
    def _(g):
        (y,) = g.node("DequantizeLinear", [g.input(g.ints(np.int8, (5, 7))), g.const(g.scale())])
        return {y: "float"}


add_quantize_cases()


# --- DynamicQuantizeLinear


def add_dynamic_quantize_cases():
    recipes = {
        "mixed": lambda r: (r.standard_normal((7, 13)) * 3).astype(np.float32),
        "positive": lambda r: np.abs(r.standard_normal((5, 11))).astype(np.float32),
        "negative": lambda r: -np.abs(r.standard_normal((5, 11))).astype(np.float32),
        "one-element": lambda r: np.array([1.7], np.float32),
        # The zero point's intermediate value -min/scale is exactly 2.5 (a
        # tie: rounds to 2), and the data sit on half steps.
        "ties": lambda r: np.concatenate([np.array([-2.5, 252.5], np.float32) * np.float32(0.25),
                                          ((r.integers(-2, 250, 61) + 0.5) * 0.25).astype(np.float32)]),
        "zeros": lambda r: np.zeros((3, 4), np.float32),
    }
    for label, make in recipes.items():
        def build(g, make=make):
            y, s, z = g.node("DynamicQuantizeLinear", [g.input(make(g.rng))], outputs=3)
            return {y: "quant", s: "float", z: "exact"}

        CASES.append(Case(f"DynamicQuantizeLinear/{label}", build))


add_dynamic_quantize_cases()


# --- MatMulInteger


def cpu_has_vnni() -> bool:
    """AVX-512 VNNI on this CPU (Linux flags), where ORT's uint8 x int8
    products are exact."""
    try:
        return " avx512_vnni" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


VNNI = cpu_has_vnni()


def shows_saturation(differs) -> str | None:
    """A `-saturating` case's check: ORT's result `differs` from the exact
    one without VNNI, and does not with it."""
    if VNNI:
        return "ORT's result differs from the exact one on a CPU with VNNI" if differs else None
    return None if differs else "no saturation shows"


def saturates(ref_out: np.ndarray, exact: np.ndarray) -> str | None:
    if VNNI:
        return exact_is(ref_out, exact)
    if np.array_equal(ref_out.astype(np.int64), exact.astype(np.int64)):
        return "ORT's result equals the exact one: this case does not exercise pair saturation"
    return None


def exact_is(ref_out: np.ndarray, exact: np.ndarray) -> str | None:
    if not np.array_equal(ref_out.astype(np.int64), exact.astype(np.int64)):
        return "ORT's result differs from the exact one where no saturation was expected"
    return None


def add_matmul_integer_cases():
    variants = [
        # name, A type, B type, B range, zero points, A shape, B shape, B as input
        ("u8u8", np.uint8, np.uint8, None, False, (5, 13), (13, 7), False),
        ("u8u8/zero-points", np.uint8, np.uint8, None, True, (5, 13), (13, 7), False),
        ("u8s8-7bit", np.uint8, np.int8, (-64, 63), False, (5, 13), (13, 7), False),
        ("u8s8-7bit/zero-points", np.uint8, np.int8, (-64, 63), True, (5, 13), (13, 7), False),
        ("u8s8-7bit/per-column-zero-point", np.uint8, np.int8, (-64, 63), "column", (6, 17), (17, 9), False),
        ("u8s8-7bit/batched-3d-A", np.uint8, np.int8, (-64, 63), True, (2, 3, 17), (17, 9), False),
        ("u8s8-7bit/batched-both", np.uint8, np.int8, (-64, 63), False, (2, 1, 5, 11), (3, 11, 6), False),
        ("u8s8-7bit/B-input", np.uint8, np.int8, (-64, 63), True, (5, 13), (13, 7), True),
        ("u8s8-saturating", np.uint8, np.int8, None, False, (6, 33), (33, 10), False),
        ("u8s8-saturating/zero-points", np.uint8, np.int8, None, True, (6, 33), (33, 10), False),
        ("u8s8-saturating/batched-3d-A", np.uint8, np.int8, None, False, (2, 5, 64), (64, 7), False),
        ("s8s8", np.int8, np.int8, None, False, (5, 13), (13, 7), False),
        ("s8s8/zero-points", np.int8, np.int8, None, True, (5, 13), (13, 7), False),
        ("s8u8", np.int8, np.uint8, None, True, (5, 13), (13, 7), False),
    ]
    for name, ta, tb, brange, zps, ashape, bshape, b_input in variants:
        def build(g, ta=ta, tb=tb, brange=brange, zps=zps, ashape=ashape, bshape=bshape, b_input=b_input, name=name):
            a = g.ints(ta, ashape)
            b = g.ints(tb, bshape, *(brange or (None, None)))
            if "saturating" in name:
                a = g.ints(ta, ashape, 128, 255)  # large activations: pairs overflow int16
            ins = [g.input(a), g.input(b) if b_input else g.const(b)]
            za, zb = np.array(0, ta), np.array(0, tb)
            if zps:
                za = g.zp(ta, (), 10)
                zb = g.zp(tb, (bshape[-1],) if zps == "column" else (), 8)
                ins += [g.const(za), g.const(zb)]
            (y,) = g.node("MatMulInteger", ins)
            exact = matmul_exact(a, za, b, zb)
            if "saturating" in name:
                return {y: "exact"}, lambda ref: saturates(ref[0], exact)
            return {y: "exact"}, lambda ref: exact_is(ref[0], exact)

        CASES.append(Case(f"MatMulInteger/{name}", build))


add_matmul_integer_cases()


# --- ConvInteger


def add_conv_integer_cases():
    variants = [
        ("u8u8", np.uint8, False, {}),
        ("u8u8/zero-points", np.uint8, True, {"pads": [1, 1, 1, 1]}),
        ("u8s8/zero-points", np.int8, True, {"pads": [1, 0, 2, 1]}),
        ("u8u8/group-stride-dilation", np.uint8, True, {"group": 2, "strides": [2, 1], "dilations": [2, 2], "pads": [2, 1, 2, 1]}),
    ]
    for name, tw, zps, attrs in variants:
        def build(g, tw=tw, zps=zps, attrs=attrs):
            group = attrs.get("group", 1)
            x = g.ints(np.uint8, (2, 6, 9, 11))
            w = g.ints(tw, (5 * group if group > 1 else 5, 6 // group, 3, 3))
            ins = [g.input(x), g.const(w)]
            zx, zw = np.array(0, np.uint8), np.array(0, tw)
            if zps:
                zx, zw = g.zp(np.uint8, (), 10), g.zp(tw, (), 10)
                ins += [g.const(zx), g.const(zw)]
            (y,) = g.node("ConvInteger", ins, kernel_shape=[3, 3], **attrs)
            exact = conv_exact(x, zx, w, zw, attrs.get("strides", (1, 1)), attrs.get("pads", (0, 0, 0, 0)),
                               attrs.get("dilations", (1, 1)), group)
            return {y: "exact"}, lambda ref: exact_is(ref[0], exact)

        CASES.append(Case(f"ConvInteger/{name}", build))


add_conv_integer_cases()


# --- QLinearMatMul and QGemm


def qmatmul_operands(g: Graph, ta, tb, brange, ashape, bshape, per_column: bool, saturating: bool):
    a = g.ints(ta, ashape, 128, 255) if saturating else g.ints(ta, ashape)
    b = g.ints(tb, bshape, *(brange or (None, None)))
    sa, za = g.scale(), g.zp(ta, (), 10)
    n = bshape[-1]
    sb = g.scale((n,) if per_column else ())
    zb = (np.zeros((n,) if per_column else (), tb) if tb == np.int8 else g.zp(tb, (n,) if per_column else (), 10))
    return a, sa, za, b, sb, zb


def add_qlinear_matmul_cases():
    variants = [
        ("u8s8-7bit", np.uint8, np.int8, np.uint8, (-64, 63), (7, 13), (13, 9), False, False),
        ("u8s8-7bit/per-column", np.uint8, np.int8, np.uint8, (-64, 63), (7, 13), (13, 9), True, False),
        ("u8s8-7bit/batched-3d-A", np.uint8, np.int8, np.uint8, (-64, 63), (3, 5, 21), (21, 6), False, False),
        ("u8s8-saturating", np.uint8, np.int8, np.uint8, None, (6, 64), (64, 10), False, True),
        ("u8s8-saturating/per-column", np.uint8, np.int8, np.uint8, None, (6, 33), (33, 10), True, True),
        ("u8u8", np.uint8, np.uint8, np.uint8, None, (7, 13), (13, 9), False, False),
        ("s8s8", np.int8, np.int8, np.int8, None, (7, 13), (13, 9), False, False),
        ("s8s8/per-column/batched-3d-A", np.int8, np.int8, np.int8, None, (2, 5, 19), (19, 7), True, False),
    ]
    for name, ta, tb, ty, brange, ashape, bshape, per_column, saturating in variants:
        def build(g, ta=ta, tb=tb, ty=ty, brange=brange, ashape=ashape, bshape=bshape, per_column=per_column, saturating=saturating):
            a, sa, za, b, sb, zb = qmatmul_operands(g, ta, tb, brange, ashape, bshape, per_column, saturating)
            acc = matmul_exact(a, za, b, zb)
            real = acc * (sa.astype(np.float64) * sb.astype(np.float64))
            sy, zy = fit(real, ty)
            (y,) = g.node("QLinearMatMul", [g.input(a), g.const(sa), g.const(za), g.const(b), g.const(sb), g.const(zb), g.const(sy), g.const(zy)])
            exact = requant(acc, (np.float64(sa) * sb.astype(np.float64)) / np.float64(sy), zy, ty)
            if saturating:
                return {y: "quant"}, lambda ref: shows_saturation(np.abs(ref[0].astype(np.int64) - exact).max() > 1)
            return {y: "quant"}

        CASES.append(Case(f"QLinearMatMul/{name}", build))

    qgemm = [
        ("u8s8-7bit/float-out", np.uint8, np.int8, None, {}, False, False),
        ("u8s8-7bit/float-out/bias/alpha/transB", np.uint8, np.int8, None, {"transB": 1, "alpha": 0.75}, True, False),
        ("u8s8-7bit/u8-out/bias/per-column", np.uint8, np.int8, np.uint8, {}, True, True),
        ("u8s8-7bit/u8-out/transA", np.uint8, np.int8, np.uint8, {"transA": 1}, False, False),
        ("u8s8-saturating/float-out", np.uint8, np.int8, None, {}, False, False),
        ("s8s8/s8-out/bias", np.int8, np.int8, np.int8, {}, True, False),
        ("u8u8/u8-out", np.uint8, np.uint8, np.uint8, {"transB": 1}, False, True),
    ]
    for name, ta, tb, ty, attrs, bias, per_column in qgemm:
        def build(g, name=name, ta=ta, tb=tb, ty=ty, attrs=attrs, bias=bias, per_column=per_column):
            m, k, n = 6, 19, 11
            brange = (-64, 63) if "7bit" in name else None
            a, sa, za, b, sb, zb = qmatmul_operands(g, ta, tb, brange, (m, k), (k, n), per_column, "saturating" in name)
            acc = matmul_exact(a, za, b, zb)
            if attrs.get("transA"):
                a = np.ascontiguousarray(a.T)
            if attrs.get("transB"):
                b = np.ascontiguousarray(b.T)
            ins = [g.input(a), g.const(sa), g.const(za), g.const(b), g.const(sb), g.const(zb)]
            if bias:
                c = g.rng.integers(-5000, 5000, size=(n,)).astype(np.int32)
                ins.append(g.const(c))
                acc = acc + c
            elif ty is not None:
                ins.append("")
            real = acc * (sa.astype(np.float64) * sb.astype(np.float64)) * attrs.get("alpha", 1.0)
            if ty is not None:
                sy, zy = fit(real, ty)
                ins += [g.const(sy), g.const(zy)]
            (y,) = g.node("QGemm", ins, domain="com.microsoft", **attrs)
            kind = "float" if ty is None else "quant"
            if "saturating" in name:
                return {y: kind}, lambda ref: shows_saturation(max_abs_err(ref[0], real) > 1e-3 * max_abs(real))
            return {y: kind}

        CASES.append(Case(f"com.microsoft.QGemm/{name}", build))


add_qlinear_matmul_cases()


# --- QLinearConv


def add_qlinear_conv_cases():
    variants = [
        # name, x type, w type, w range, x shape, (M, kh, kw), attrs, per-channel, bias, saturating
        ("u8s8-7bit/pad", np.uint8, np.int8, (-64, 63), (1, 5, 9, 11), (7, 3, 3), {"pads": [1, 1, 1, 1]}, False, False, False),
        ("u8s8-7bit/stride-2/asymmetric-pads", np.uint8, np.int8, (-64, 63), (2, 6, 10, 9), (5, 3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 2]}, False, True, False),
        ("u8s8-7bit/dilation-2", np.uint8, np.int8, (-64, 63), (1, 4, 11, 13), (6, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, False, False, False),
        ("u8s8-7bit/group-3/per-channel/bias", np.uint8, np.int8, (-64, 63), (1, 9, 8, 7), (6, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}, True, True, False),
        ("u8s8-7bit/depthwise/stride-2/per-channel/bias", np.uint8, np.int8, (-64, 63), (1, 12, 13, 13), (12, 3, 3), {"group": 12, "strides": [2, 2], "pads": [1, 1, 1, 1]}, True, True, False),
        ("u8s8-7bit/pointwise/per-channel/bias", np.uint8, np.int8, (-64, 63), (1, 24, 7, 5), (10, 1, 1), {}, True, True, False),
        ("u8s8-7bit/5x5/stride-2/dilation-2", np.uint8, np.int8, (-64, 63), (1, 3, 17, 15), (4, 5, 5), {"strides": [2, 1], "dilations": [1, 2], "pads": [2, 4, 2, 4]}, False, True, False),
        ("u8s8-7bit/1d", np.uint8, np.int8, (-64, 63), (2, 5, 23), (6, 3), {"pads": [1, 1]}, True, True, False),
        ("u8s8-saturating/per-channel/bias", np.uint8, np.int8, None, (1, 16, 6, 7), (8, 3, 3), {"pads": [1, 1, 1, 1]}, True, True, True),
        ("u8s8-saturating/group-8/multiplier-2", np.uint8, np.int8, None, (1, 8, 7, 9), (16, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, False, True, True),
        # Depthwise with channel multiplier 1 (group == C == M) is exact in
        # ORT: no pair saturation, even on the same data.
        ("u8s8-fullrange/depthwise/no-saturation", np.uint8, np.int8, None, (1, 8, 7, 9), (8, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, False, False, "exact"),
        ("u8u8/per-channel/bias", np.uint8, np.uint8, None, (1, 5, 9, 11), (7, 3, 3), {"pads": [1, 1, 1, 1]}, True, True, False),
        ("s8s8/per-channel/bias", np.int8, np.int8, None, (1, 5, 9, 11), (7, 3, 3), {"pads": [1, 1, 1, 1]}, True, True, False),
        ("s8s8/depthwise/per-channel", np.int8, np.int8, None, (1, 8, 9, 10), (8, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, True, False, False),
    ]
    for name, tx, tw, wrange, xshape, (m, *kernel), attrs, per_channel, bias, saturating in variants:
        def build(g, tx=tx, tw=tw, wrange=wrange, xshape=xshape, m=m, kernel=kernel, attrs=attrs, per_channel=per_channel, bias=bias, saturating=saturating):
            group = attrs.get("group", 1)
            x = g.ints(tx, xshape, 128, 255) if saturating else g.ints(tx, xshape)
            w = g.ints(tw, (m, xshape[1] // group, *kernel), *(wrange or (None, None)))
            if saturating:
                # Large weights of either sign: most same-sign pairs overflow int16.
                w = (g.ints(np.int8, w.shape, 90, 127) * g.rng.choice([-1, 1], size=w.shape)).astype(np.int8)
            sx, zx = g.scale(), g.zp(tx, (), 10)
            sw = g.scale((m,) if per_channel else ())
            zw = np.zeros((m,) if per_channel else (), tw) if tw == np.int8 else g.zp(tw, (m,) if per_channel else (), 10)
            two_d = len(kernel) == 2
            x4 = x if two_d else x[:, :, None, :]
            w4 = w if two_d else w[:, :, None, :]
            pads = attrs.get("pads", [0] * (2 * len(kernel)))
            pads4 = pads if two_d else [0, pads[0], 0, pads[1]]
            strides = attrs.get("strides", [1] * len(kernel))
            dil = attrs.get("dilations", [1] * len(kernel))
            acc = conv_exact(x4, zx, w4, zw, strides if two_d else [1] + strides, pads4, dil if two_d else [1] + dil, group)
            ins_bias = []
            if bias:
                bvec = g.rng.integers(-3000, 3000, size=(m,)).astype(np.int32)
                acc = acc + bvec.reshape(1, -1, 1, 1)
                ins_bias = [g.const(bvec)]
            mult = (np.float64(sx) * sw.astype(np.float64)).reshape(1, -1, 1, 1) if per_channel else np.float64(sx) * np.float64(sw)
            real = acc * mult
            sy, zy = fit(real, tx)
            (y,) = g.node("QLinearConv", [g.input(x), g.const(sx), g.const(zx), g.const(w), g.const(sw), g.const(zw), g.const(sy), g.const(zy), *ins_bias],
                          kernel_shape=list(kernel), **attrs)
            exact = requant(acc, mult / np.float64(sy), zy, tx)
            if not two_d:
                exact = exact[:, :, 0, :]
            if saturating is True:
                return {y: "quant"}, lambda ref: shows_saturation(np.abs(ref[0].astype(np.int64) - exact).max() > 1)
            return {y: "quant"}, lambda ref: None if np.abs(ref[0].astype(np.int64) - exact).max() <= 1 else "ORT differs from the exact convolution by more than 1"

        CASES.append(Case(f"QLinearConv/{name}", build))


add_qlinear_conv_cases()


# --- DynamicQuantizeMatMul, MatMulIntegerToFloat


def add_float_out_cases():
    dqmm = [
        ("s8-7bit", np.int8, (-64, 63), False, False, (6, 19)),
        ("s8-7bit/per-column/bias", np.int8, (-64, 63), True, True, (6, 19)),
        ("s8-7bit/batched-3d-A/bias", np.int8, (-64, 63), False, True, (2, 5, 19)),
        ("s8-saturating/bias", np.int8, None, False, True, (6, 64)),
        ("u8/per-column/bias", np.uint8, None, True, True, (6, 19)),
    ]
    for name, tb, brange, per_column, bias, ashape in dqmm:
        def build(g, name=name, tb=tb, brange=brange, per_column=per_column, bias=bias, ashape=ashape):
            k, n = ashape[-1], 11
            a = (g.rng.standard_normal(ashape) * 2).astype(np.float32)
            b = g.ints(tb, (k, n), *(brange or (None, None)))
            if "saturating" in name:
                # Positive activations in the upper half of their range
                # (quantized to 128..255) and large weights of either sign:
                # most same-sign pairs overflow int16.
                a = g.rng.uniform(0.5, 1.0, size=ashape).astype(np.float32)
                b = (g.ints(np.int8, (k, n), 90, 127) * g.rng.choice([-1, 1], size=(k, n))).astype(np.int8)
            sb = g.scale((n,) if per_column else ())
            zb = (g.rng.integers(-5, 6, size=sb.shape).astype(tb) if tb == np.int8 else g.zp(tb, sb.shape, 10))
            ins = [g.input(a), g.const(b), g.const(sb), g.const(zb)]
            bv = np.zeros(n, np.float32)
            if bias:
                bv = g.rng.standard_normal(n).astype(np.float32)
                ins.append(g.const(bv))
            (y,) = g.node("DynamicQuantizeMatMul", ins, domain="com.microsoft")
            if "saturating" in name:
                real = a.astype(np.float64) @ ((b.astype(np.float64) - zb) * sb) + bv
                return {y: "float"}, lambda ref: shows_saturation(max_abs_err(ref[0], real) > 0.05 * max_abs(real))
            return {y: "float"}

        CASES.append(Case(f"com.microsoft.DynamicQuantizeMatMul/{name}", build))

    mmif = [
        ("u8s8-7bit", np.uint8, np.int8, (-64, 63), False, False, (7, 13)),
        ("u8s8-7bit/per-column/bias", np.uint8, np.int8, (-64, 63), True, True, (7, 13)),
        ("u8s8-7bit/batched-3d-A", np.uint8, np.int8, (-64, 63), False, True, (2, 4, 21)),
        ("u8s8-saturating", np.uint8, np.int8, None, False, False, (6, 64)),
        ("u8u8/bias", np.uint8, np.uint8, None, False, True, (7, 13)),
        ("s8s8/per-column", np.int8, np.int8, None, True, False, (7, 13)),
    ]
    for name, ta, tb, brange, per_column, bias, ashape in mmif:
        def build(g, name=name, ta=ta, tb=tb, brange=brange, per_column=per_column, bias=bias, ashape=ashape):
            n = 9
            a, sa, za, b, sb, zb = qmatmul_operands(g, ta, tb, brange, ashape, (ashape[-1], n), per_column, "saturating" in name)
            ins = [g.input(a), g.const(b), g.const(sa), g.const(sb), g.const(za), g.const(zb)]
            real = matmul_exact(a, za, b, zb) * (np.float64(sa) * sb.astype(np.float64))
            if bias:
                bv = g.rng.standard_normal(n).astype(np.float32)
                ins.append(g.const(bv))
                real = real + bv
            (y,) = g.node("MatMulIntegerToFloat", ins, domain="com.microsoft")
            if "saturating" in name:
                return {y: "float"}, lambda ref: shows_saturation(max_abs_err(ref[0], real) > 1e-3 * max_abs(real))
            return {y: "float"}

        CASES.append(Case(f"com.microsoft.MatMulIntegerToFloat/{name}", build))


add_float_out_cases()


# --- com.microsoft element-wise, pooling, concat, softmax


def qparams(g: Graph, dt, n: int):
    return [(g.scale((), 0.01, 0.1), g.zp(dt, (), 30)) for _ in range(n)]


def add_contrib_cases():
    for tname, dt in (("u8", np.uint8), ("s8", np.int8)):
        for op in ("QLinearAdd", "QLinearMul"):
            for shapes, label in [(((3, 5, 7), (3, 5, 7)), "same-shape"), (((2, 3, 5, 9), (3, 1, 9)), "broadcast"),
                                  (((4, 33),), "scalar-b"), (((1, 70),), "scalar-a")]:
                def build(g, dt=dt, op=op, shapes=shapes, label=label):
                    (sa, za), (sb, zb), (sc, zc) = qparams(g, dt, 3)
                    if op == "QLinearMul":
                        sc = np.float32(sc * 0.05)
                    if label == "scalar-b":
                        a, b = g.ints(dt, shapes[0]), g.ints(dt, ())
                    elif label == "scalar-a":
                        a, b = g.ints(dt, ()), g.ints(dt, shapes[0])
                    else:
                        a, b = g.ints(dt, shapes[0]), g.ints(dt, shapes[1])
                    (y,) = g.node(op, [g.input(a), g.const(sa), g.const(za), g.input(b), g.const(sb), g.const(zb), g.const(sc), g.const(zc)], domain="com.microsoft")
                    return {y: "quant"}

                CASES.append(Case(f"com.microsoft.{op}/{tname}/{label}", build))

        for op, attrs in (("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})):
            def build(g, dt=dt, op=op, attrs=attrs):
                lo, hi = INFO[dt]
                x = np.concatenate([np.arange(lo, hi + 1), g.ints(dt, (77,)).astype(np.int64)]).astype(dt).reshape(3, 111)
                (sx, zx), (sy, zy) = qparams(g, dt, 2)
                if op == "QLinearSigmoid":
                    sy, zy = np.float32(1 / 256), np.array(lo, dt)
                (y,) = g.node(op, [g.input(x), g.const(sx), g.const(zx), g.const(sy), g.const(zy)], domain="com.microsoft", **attrs)
                return {y: "quant"}

            CASES.append(Case(f"com.microsoft.{op}/{tname}", build))

        for channels_last in (0, 1):
            def build(g, dt=dt, channels_last=channels_last):
                x = g.ints(dt, (2, 5, 7, 9) if not channels_last else (2, 7, 9, 5))
                (sx, zx), (sy, zy) = qparams(g, dt, 2)
                (y,) = g.node("QLinearGlobalAveragePool", [g.input(x), g.const(sx), g.const(zx), g.const(sy), g.const(zy)],
                              domain="com.microsoft", channels_last=channels_last)
                return {y: "quant"}

            CASES.append(Case(f"com.microsoft.QLinearGlobalAveragePool/{tname}/{'nhwc' if channels_last else 'nchw'}", build))

        pools = [
            ("3x3/stride-2/pad/count-include-pad", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
            ("3x3/stride-2/pad/exclude-pad", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 0}),
            ("2x3/ceil-mode", {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
            ("2x2/nhwc", {"kernel_shape": [2, 2], "strides": [1, 1], "channels_last": 1}),
        ]
        for label, attrs in pools:
            def build(g, dt=dt, attrs=attrs):
                x = g.ints(dt, (1, 9, 11, 6) if attrs.get("channels_last") else (2, 6, 9, 11))
                (sx, zx), (sy, zy) = qparams(g, dt, 2)
                (y,) = g.node("QLinearAveragePool", [g.input(x), g.const(sx), g.const(zx), g.const(sy), g.const(zy)], domain="com.microsoft", **attrs)
                return {y: "quant"}

            CASES.append(Case(f"com.microsoft.QLinearAveragePool/{tname}/{label}", build))

        for label, axis, shapes in [("axis1/3-inputs", 1, [(2, 3, 5), (2, 4, 5), (2, 1, 5)]), ("axis-1", -1, [(3, 7), (3, 2)])]:
            def build(g, dt=dt, axis=axis, shapes=shapes):
                (sy, zy), *params = qparams(g, dt, 1 + len(shapes))
                ins = [g.const(sy), g.const(zy)]
                for shape, (s, z) in zip(shapes, params):
                    ins += [g.input(g.ints(dt, shape)), g.const(s), g.const(z)]
                (y,) = g.node("QLinearConcat", ins, domain="com.microsoft", axis=axis)
                return {y: "quant"}

            CASES.append(Case(f"com.microsoft.QLinearConcat/{tname}/{label}", build))

        def build(g, dt=dt):
            lo, _ = INFO[dt]
            x = g.ints(dt, (2, 3, 11))
            sx, zx = np.float32(0.08), g.zp(dt, (), 30)
            (y,) = g.node("QLinearSoftmax", [g.input(x), g.const(sx), g.const(zx), g.const(np.float32(1 / 256)), g.const(np.array(lo, dt))],
                          domain="com.microsoft", axis=-1, opset=13)
            return {y: "quant"}

        CASES.append(Case(f"com.microsoft.QLinearSoftmax/{tname}/axis-1", build))


add_contrib_cases()


# --- the runner


def compare(kind: str, got: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    if got.shape != want.shape or got.dtype != want.dtype:
        return False, f"{got.dtype}{list(got.shape)}, ORT {want.dtype}{list(want.shape)}"
    if kind == "exact":
        ok = np.array_equal(got, want)
        return ok, "equal" if ok else f"differ in {int((got != want).sum())} of {want.size}"
    if kind == "quant":
        d = np.abs(got.astype(np.int64) - want.astype(np.int64))
        worst = int(d.max()) if d.size else 0
        return worst <= 1, "equal" if worst == 0 else f"max {worst} apart ({int((d > 0).sum())} of {want.size} differ)"
    err = max_abs_err(got, want)
    scale = max(max_abs(want), 1e-30)
    return err <= FLOAT_RTOL * scale, f"rel err {err / scale:.2e}"


def run_case(binary: str, c: Case, work: Path, seed: int, modes, threads: int, verbose: bool) -> list[str]:
    import onnx
    import onnxruntime as ort

    g = Graph(seed)
    built = c.build(g)
    kinds, sanity = (built, None) if isinstance(built, dict) else built
    model = g.model(list(kinds))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    # Declare the outputs' types and shapes as ORT computes them (onnx has
    # no schemas of the com.microsoft operators to infer them from).
    probe = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    for out, value in zip(model.graph.output, probe.run([o.name for o in model.graph.output], g.feeds)):
        elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        out.CopyFrom(onnx.helper.make_tensor_value_info(out.name, elem, list(value.shape)))
    onnx.checker.check_model(model)
    path = work / "model.onnx"
    onnx.save(model, str(path))
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    ref_list = sess.run(list(kinds), g.feeds)
    if sanity is not None:
        problem = sanity(ref_list)
        if problem:
            raise RuntimeError(problem)
    ref = dict(zip(kinds, ref_list))
    inp = work / "in.npz"
    write_npz(inp, g.feeds)
    failures, notes = [], []
    for mode in modes:
        out = work / f"out-{mode}.npz"
        try:
            run_cli(binary, path, inputs=inp, outputs=out, threads=threads, mode=mode, timeout=60)
        except RunFailed as e:
            failures.append(f"{mode}: {e}")
            break  # a refusal is the same in every mode
        ours = read_npz(out)
        for name, kind in kinds.items():
            got = ours.get(name)
            if got is None:
                failures.append(f"{mode}: output {name} missing")
                continue
            ok, what = compare(kind, got, ref[name])
            notes.append(f"{mode} {kind} {what}")
            if not ok:
                failures.append(f"{mode}: {kind} output {what}")
    status = "FAIL" if failures else "ok"
    detail = failures[0] if failures else "; ".join(sorted(set(notes)))
    if failures or verbose:
        print(f"  {c.name:<68} {status}  {detail}")
    return failures


def seed_of(name: str) -> int:
    """A seed per model or case that does not move when others are added."""
    return zlib.crc32(name.encode())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", type=Path, default=Path(__file__).resolve().parents[1] / "models" / "quant")
    ap.add_argument("--only", default="", help="comma-separated substrings of model folder or case names")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--skip-nodes", action="store_true")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="leave each model's and case's files under DIR")
    ap.add_argument("--list", action="store_true", help="list the models and cases and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print passed cases too")
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s]
    keep = lambda name: not only or any(s in name for s in only)  # noqa: E731
    models = [] if args.skip_models else [m for m in sorted(args.models.glob("*/model.onnx")) if keep(m.parent.name)]
    cases = [] if args.skip_nodes else [c for c in CASES if keep(c.name)]
    if args.list:
        for m in models:
            print(f"model {m.parent.name}")
        for c in cases:
            print(f"case  {c.name}")
        print(f"{len(models)} models, {len(cases)} cases")
        return 0
    if not models and not cases:
        print("nothing selected", file=sys.stderr)
        return 2
    if not binary_exists(args.bin):
        print(f"error: {args.bin} not found", file=sys.stderr)
        return 2
    modes = [m for m in args.modes.split(",") if m]
    failed: dict[str, list[str]] = {}
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="quantized_models-"))
    root = args.keep or tmp
    try:
        for model in models:
            work = root / "models" / model.parent.name
            work.mkdir(parents=True, exist_ok=True)
            try:
                f, row = check_model(args.bin, model, work, seed_of(model.parent.name), modes, args.threads)
            except Exception as e:  # noqa: BLE001 - one model's harness error is that model's failure
                f, row = [f"harness: {e}"], {"model": model.parent.name, "rtol": np.nan, "spread": np.nan, "worst": np.inf, "top1": "?", "ok": False}
                print(f"  FAILED {e}")
            rows.append(row)
            if f:
                failed[model.parent.name] = f
        if rows:
            print(f"\n{'model':<28} {'ORT spread':>10} {'tolerance':>10} {'worst rel err':>14} {'top-1':>8}  result")
            for r in rows:
                worst = "refused" if r["worst"] == np.inf else f"{r['worst']:.2e}"
                print(f"{r['model']:<28} {r['spread']:>10.2e} {r['rtol']:>10.2e} {worst:>14} {r['top1']:>8}  {'ok' if r['ok'] else 'FAIL'}")
        if cases:
            print(f"\n== {len(cases)} single-operator cases ({','.join(modes)})")
        case_failed = 0
        for c in cases:
            work = root / "cases" / c.name.replace("/", "_")
            work.mkdir(parents=True, exist_ok=True)
            try:
                f = run_case(args.bin, c, work, seed_of(c.name), modes, args.threads, args.verbose)
            except Exception as e:  # noqa: BLE001 - a harness error is that case's failure
                f = [f"harness: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"]
                print(f"  {c.name:<68} FAIL  {f[0]}")
            if f:
                failed[c.name] = f
                case_failed += 1
        if cases:
            print(f"cases: {len(cases) - case_failed} passed, {case_failed} failed")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    total = len(models) + len(cases)
    print(f"\n{total - len(failed)} passed, {len(failed)} failed")
    for name, f in failed.items():
        print(f"  {name}: {f[0]}" + (f" (+{len(f) - 1} more)" if len(f) > 1 else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
