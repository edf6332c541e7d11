#!/usr/bin/env python3
"""The ONNX backend node tests, run through `onnx-prepared run`.

    python tests/conformance/node_tests.py --bin PATH [--ops Add,Sub,...]
        [--keep DIR] [-j N] [--threads N] [--portable | --isa scalar|avx2|avx512] [-v]

Takes the node test cases of the installed onnx package
(onnx.backend.test.case.node.collect_testcases(): each a model and data sets
of (inputs, expected outputs) with rtol/atol) and selects those whose graph
uses only supported operators (--ops, default the runtime's operator list
below; `_expanded` cases, whose graph is a function body of several nodes,
are selected when every node's op is in the list). For each selected case
and data set: onnx.save the model, write the inputs to an .npz named by the
graph inputs, `onnx-prepared run --inputs --outputs`, and compare every graph
output with the expected one the way onnx's backend runner does: same shape,
same dtype, np.testing.assert_allclose(rtol=case.rtol, atol=case.atol)
(1e-3 / 1e-7 for all node tests), NaN equal to NaN.

Outcomes:
  passed   every output matches;
  skipped  the case needs something the .npz interface cannot carry (a
           string, bfloat16, float8, 4/2-bit or complex tensor, a sequence or
           optional input), or the runtime refused it with an explicit
           "not supported" error (unsupported attribute, dtype or opset) -
           the reason is printed, so the gaps stay visible;
  failed   a crash, a timeout, any other error, or a wrong output.

Prints one line per failed or skipped case, then `N passed, N failed,
N skipped`; exits non-zero if any case failed. Cases run in parallel (-j,
default 2): each is its own `onnx-prepared` process.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # keep tests/conformance free of __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RunFailed,
    binary_exists,
    last_error_line,
    npz_representable,
    read_npz,
    run_cli,
    write_npz,
)

# The operators the runtime implements (default --ops). MatMulNBits is in
# the com.microsoft domain; every other name means the default ONNX domain.
DEFAULT_OPS = (
    "Gemm,MatMul,com.microsoft::MatMulNBits,Add,Sub,Mul,Div,Sigmoid,Neg,Sqrt,Pow,"
    "Reciprocal,Softmax,RMSNormalization,LayerNormalization,Gather,Transpose,"
    "Reshape,Split,Concat,Slice,Squeeze,Unsqueeze,Cast,Constant,Identity,"
    # shape and indexing
    "Shape,Size,ConstantOfShape,Range,Expand,Tile,Flatten,GatherND,GatherElements,"
    "ScatterND,ScatterElements,Trilu,CumSum,Where,Pad,"
    # comparison and logic
    "Equal,Less,LessOrEqual,Greater,GreaterOrEqual,And,Or,Not,Xor,IsNaN,IsInf,"
    # math
    "Max,Min,Abs,Exp,Log,Cos,Sin,Tanh,Erf,Gelu,Relu,Clip,Floor,Ceil,Round,Mod,Sign,"
    # activations
    "LeakyRelu,Elu,Selu,Celu,HardSigmoid,HardSwish,Softplus,Softsign,Mish,ThresholdedRelu,Shrink,"
    # convolution and pooling
    "Conv,ConvTranspose,MaxPool,AveragePool,LpPool,GlobalAveragePool,GlobalMaxPool,"
    # normalization
    "BatchNormalization,InstanceNormalization,GroupNormalization,LRN,LpNormalization,"
    "MeanVarianceNormalization,PRelu,Swish,LogSoftmax,Hardmax,"
    # reductions
    "ReduceMean,ReduceSum,ReduceMax,ReduceMin,ReduceProd,ArgMax,ArgMin,"
    "ReduceL1,ReduceL2,ReduceLogSum,ReduceLogSumExp,ReduceSumSquare,"
    # image geometry
    "Resize,Upsample,DepthToSpace,SpaceToDepth,CenterCropPad,GridSample,AffineGrid,Col2Im,"
    # detection post-processing (NonZero, NonMaxSuppression, Compress and
    # Unique have shapes that follow values: late nodes)
    "TopK,OneHot,RoiAlign,NonZero,NonMaxSuppression,Compress,Unique,"
    # attention and quantization
    "Attention,RotaryEmbedding,DequantizeLinear,QuantizeLinear,DynamicQuantizeLinear,"
    "MatMulInteger,QLinearMatMul,ConvInteger,QLinearConv"
)
KNOWN_DOMAINS = {"MatMulNBits": "com.microsoft"}

# Graph input/output element types the .npz interface carries (TensorProto
# enum: FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, BOOL, FLOAT16,
# DOUBLE, UINT32, UINT64).
NPZ_ELEM_TYPES = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13}

# Runtime errors that mean "this runtime does not implement that", not "it
# computed something wrong": counted as skipped, with the message shown.
UNSUPPORTED = re.compile(r"is not supported|does not support|does not read|which no kernel reads")

CASE_TIMEOUT_S = 60.0


@dataclass
class Outcome:
    name: str
    status: str  # "passed", "failed", "skipped"
    reason: str = ""


def parse_ops(text: str) -> set[tuple[str, str]]:
    ops = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "::" in item:
            domain, op = item.split("::", 1)
        else:
            domain, op = KNOWN_DOMAINS.get(item, ""), item
        ops.add(("" if domain == "ai.onnx" else domain, op))
    return ops


def graph_ops(graph) -> set[tuple[str, str]]:
    """(domain, op_type) of every node, subgraphs included."""
    import onnx

    ops = set()
    for node in graph.node:
        domain = "" if node.domain == "ai.onnx" else node.domain
        ops.add((domain, node.op_type))
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops |= graph_ops(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    ops |= graph_ops(g)
    return ops


def collect(ops: set[tuple[str, str]]):
    """(selected cases, number of cases in the onnx package)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    selected = [
        c for c in cases
        if c.model is not None and c.model.graph.node and graph_ops(c.model.graph) <= ops
    ]
    return sorted(selected, key=lambda c: c.name), len(cases)


def value_info_problem(vi) -> str | None:
    """Why a graph input/output cannot cross the .npz interface, or None."""
    import onnx

    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        return f"`{vi.name}` is a {kind or 'untyped value'}, not a tensor"
    elem = vi.type.tensor_type.elem_type
    if elem not in NPZ_ELEM_TYPES:
        return f"`{vi.name}` has element type {onnx.TensorProto.DataType.Name(elem)}"
    return None


def normalize(value):
    """As onnx's runner does: TensorProto data -> numpy; a numpy scalar
    (test_matmul_1d_1d's output) -> a 0-d array."""
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def array_problem(name: str, value) -> str | None:
    if not isinstance(value, np.ndarray):
        return f"`{name}` is a {type(value).__name__}, not a tensor"
    if not npz_representable(value):
        return f"`{name}` has dtype {value.dtype}"
    return None


def compare(name: str, out: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> str | None:
    if out.shape != ref.shape:
        return f"output `{name}`: shape {list(out.shape)}, expected {list(ref.shape)}"
    if out.dtype != ref.dtype:
        return f"output `{name}`: dtype {out.dtype}, expected {ref.dtype}"
    try:
        np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError:
        if ref.dtype == np.bool_:
            bad = out != ref
        else:
            o, r = out.astype(np.float64), ref.astype(np.float64)
            bad = ~np.isclose(o, r, rtol=rtol, atol=atol, equal_nan=True)
        index = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.any() else ()
        detail = f"{int(bad.sum())} of {out.size} elements differ"
        if bad.any():
            detail += f", first at {list(index)}: got {out[index].item()!r}, expected {ref[index].item()!r}"
        return f"output `{name}`: not close (rtol={rtol}, atol={atol}): {detail}"
    return None


def run_case(case, binary: str, workdir: Path, threads: int, portable: bool,
             isa: str | None = None) -> Outcome:
    import onnx

    graph = case.model.graph
    initializers = {t.name for t in graph.initializer}
    inputs = [vi for vi in graph.input if vi.name not in initializers]
    for vi in list(inputs) + list(graph.output):
        problem = value_info_problem(vi)
        if problem:
            return Outcome(case.name, "skipped", f"type: {problem}")
    casedir = workdir / case.name
    casedir.mkdir(parents=True, exist_ok=True)
    model_path = casedir / "model.onnx"
    onnx.save(case.model, str(model_path))
    for i, (in_values, ref_values) in enumerate(case.data_sets):
        in_values = [normalize(v) for v in in_values]
        ref_values = [normalize(v) for v in ref_values]
        if len(in_values) != len(inputs) or len(ref_values) != len(graph.output):
            return Outcome(
                case.name, "failed",
                f"harness: data set {i} has {len(in_values)} inputs / {len(ref_values)} outputs, "
                f"the graph {len(inputs)} / {len(graph.output)}",
            )
        for vi, value in zip(list(inputs) + list(graph.output), list(in_values) + list(ref_values)):
            problem = array_problem(vi.name, value)
            if problem:
                return Outcome(case.name, "skipped", f"type: {problem}")
        in_path = casedir / f"input_{i}.npz"
        out_path = casedir / f"output_{i}.npz"
        write_npz(in_path, {vi.name: v for vi, v in zip(inputs, in_values)})
        try:
            run_cli(binary, model_path, in_path, out_path, threads=threads,
                    portable=portable, timeout=CASE_TIMEOUT_S,
                    extra=("--isa", isa) if isa else ())
        except RunFailed as e:
            line = last_error_line(e.stderr)
            if e.rc is not None and e.rc == 1 and UNSUPPORTED.search(line) and "panicked" not in line:
                return Outcome(case.name, "skipped", f"unsupported: {line}")
            reason = line if e.rc is not None else f"timed out after {CASE_TIMEOUT_S:.0f}s"
            return Outcome(case.name, "failed", f"exit {e.rc}: {reason}")
        try:
            ours = read_npz(out_path)
        except Exception as e:  # noqa: BLE001
            return Outcome(case.name, "failed", f"unreadable outputs: {type(e).__name__}: {e}")
        for vi, ref in zip(graph.output, ref_values):
            if vi.name not in ours:
                return Outcome(case.name, "failed", f"output `{vi.name}` missing")
            problem = compare(vi.name, ours[vi.name], ref, case.rtol, case.atol)
            if problem:
                if len(case.data_sets) > 1:
                    problem = f"data set {i}: {problem}"
                return Outcome(case.name, "failed", problem)
    return Outcome(case.name, "passed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="the onnx-prepared binary")
    parser.add_argument("--ops", default=DEFAULT_OPS,
                        help="comma-separated operators to test (DOMAIN::Op for other domains)")
    parser.add_argument("--keep", type=Path,
                        help="write each case's model.onnx / input_i.npz / output_i.npz under DIR/CASE and keep them")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="cases run in parallel (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="--threads passed to the runtime (default 1)")
    parser.add_argument("--portable", action="store_true", help="pass --portable (scalar kernels)")
    parser.add_argument("--isa", choices=("scalar", "avx2", "avx512"),
                        help="pass --isa (the kernel family every operator uses)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print passed cases")
    args = parser.parse_args()

    if not binary_exists(args.bin):
        print(f"error: {args.bin} not found", file=sys.stderr)
        return 2
    start = time.monotonic()
    cases, total = collect(parse_ops(args.ops))
    print(f"{len(cases)} of {total} node test cases use only the selected operators "
          f"(collected in {time.monotonic() - start:.1f}s)")
    if not cases:
        print("error: no case selected", file=sys.stderr)
        return 2

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        workdir = args.keep
    else:
        workdir = Path(tempfile.mkdtemp(prefix="node-tests-"))

    def one(case) -> Outcome:
        try:
            return run_case(case, args.bin, workdir, args.threads, args.portable, args.isa)
        except Exception as e:  # noqa: BLE001 - a harness error fails the case, loudly
            return Outcome(case.name, "failed", f"harness: {type(e).__name__}: {e}")
        finally:
            if not args.keep:
                shutil.rmtree(workdir / case.name, ignore_errors=True)

    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            outcomes = list(pool.map(one, cases))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    for o in outcomes:
        if o.status == "failed":
            print(f"FAILED   {o.name}: {o.reason}")
    for o in outcomes:
        if o.status == "skipped":
            print(f"SKIPPED  {o.name}: {o.reason}")
    if args.verbose:
        for o in outcomes:
            if o.status == "passed":
                print(f"passed   {o.name}")
    counts = {s: sum(o.status == s for o in outcomes) for s in ("passed", "failed", "skipped")}
    print(f"({time.monotonic() - start:.1f}s)")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
