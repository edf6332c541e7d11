#!/usr/bin/env python3
"""What ONNX Runtime (CPU EP, default options) computes where integer
semantics are implementation-defined: integer Pow (negative exponents,
overflow, the x*x / x*x*x shortcut for a scalar exponent of 2 or 3) and Cast
of NaN, infinities and out-of-range floats to the integer types and bool.

The kernel tests compare against these results (they are never computed by
the code under test). Run with the packages of tools/requirements.txt:

    python tools/ort_integer_semantics.py pow     # cases the Pow tests inline
    python tools/ort_integer_semantics.py cast > kernels/tests/data/ort_cast.txt

Every case is a one-node model run by an onnxruntime InferenceSession with
default options (a bfloat16 input is fed as an OrtValue of its bits: a
float-to-bfloat16 Cast in front would be folded into the second Cast).
"""

import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper

OPSET = 19


def bf16_bits(x32):
    """The bfloat16 bits of float32 `x32`, rounded to nearest even (NaN and
    the infinities kept)."""
    b = np.asarray(x32, np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def run(nodes, inputs, out_type):
    """Runs `nodes` (inputs x0, x1, ...; output y) on `inputs`: numpy
    arrays, or ("bf16", uint16 bits) for a bfloat16 tensor."""
    feeds, infos = {}, []
    for i, a in enumerate(inputs):
        if isinstance(a, tuple):
            a = a[1]
            elem = TP.BFLOAT16
            feeds[f"x{i}"] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                a, onnx_element_type=elem
            )
        else:
            elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            feeds[f"x{i}"] = ort.OrtValue.ortvalue_from_numpy(a)
        infos.append(helper.make_tensor_value_info(f"x{i}", elem, a.shape))
    graph = helper.make_graph(
        nodes, "g", infos, [helper.make_tensor_value_info("y", out_type, None)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    session = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run_with_ort_values(["y"], feeds)[0].numpy()


def pow_(base, exp, out_type):
    return run([helper.make_node("Pow", ["x0", "x1"], ["y"])], [base, exp], out_type)


INT_TYPES = [(np.int32, TP.INT32), (np.int64, TP.INT64)]
EXP_TYPES = [np.int32, np.int64, np.float32, np.float64]


def pow_cases():
    print(f"# Pow, ONNX Runtime {ort.__version__} (CPU EP) on x86-64")
    base = [2, -2, 1, -1, 0, 3, -3, 2, 2, -2, 5, 7, 0, 1, -1, 2]
    exp = [-1, -1, -5, -3, -1, 40, 41, 31, 63, 63, -2, 0, 0, -4, -4, 64]
    print("elementwise base", base)
    print("elementwise exp ", exp)
    for bt, bty in INT_TYPES:
        for et in EXP_TYPES:
            y = pow_(np.array(base, bt), np.array(exp, et), bty)
            print(f"  {bt.__name__} ^ {et.__name__}: {y.tolist()}")
    base64 = [3, 2**53 + 1, -(2**53) - 1, 3037000499, 3037000500]
    exp64 = [39, 1, 1, 2, 2]
    print("int64 precision base", base64, "exp", exp64)
    for et in EXP_TYPES:
        y = pow_(np.array(base64, np.int64), np.array(exp64, et), TP.INT64)
        print(f"  int64 ^ {et.__name__}: {y.tolist()}")
    fbase = [2, 4, -8, -2, 0, 9, 100000, 3, 2]
    fexp = [0.5, -0.5, 1 / 3, 0.5, -1.5, 1.5, 3.0, 100.0, float("nan")]
    print("fractional base", fbase, "exp", fexp)
    for bt, bty in INT_TYPES:
        for et in [np.float32, np.float64]:
            y = pow_(np.array(fbase, bt), np.array(fexp, et), bty)
            print(f"  {bt.__name__} ^ {et.__name__}: {y.tolist()}")
    for bt, bty in INT_TYPES:
        big = 65536 if bt == np.int32 else 2**32
        b = np.array([big, 3, -big, 2_000_000], bt)
        print(f"scalar exponent, {bt.__name__} base {b.tolist()}")
        for e in [2, 3, 4]:
            for et in [np.int64, np.float32]:
                one = pow_(b, np.array([e], et), bty).tolist()
                rank0 = pow_(b, np.array(e, et), bty).tolist()
                full = pow_(b, np.full(4, e, et), bty).tolist()
                print(f"  ^{e} ({et.__name__}) [1]: {one} []: {rank0} full: {full}")
        b2 = np.array([[big, 3], [big, 3]], bt)
        print("  [2,2] ^ [2,1] [[2],[3]]:", pow_(b2, np.array([[2], [3]], np.int64), bty).tolist())
        print("  [2,2] ^ [1,2] [[2,2]]:", pow_(b2, np.array([[2, 2]], np.int64), bty).tolist())
        print("  [1] ^ [1] [2]:", pow_(np.array([big], bt), np.array([2], np.int64), bty).tolist())
        print("  [1] ^ [2] [2,2]:", pow_(np.array([big], bt), np.array([2, 2], np.int64), bty).tolist())
    x = np.array([1.1, 1.3, 1.7, 1.9], np.float32)
    print("f32 cube", [hex(v) for v in x.view(np.uint32).tolist()])
    for label, e in [("[1]", np.array([3.0], np.float32)), ("full", np.full(4, 3.0, np.float32))]:
        y = pow_(x, e, TP.FLOAT)
        print(f"  ^3 {label}: {[hex(v) for v in y.view(np.uint32).tolist()]}")


CAST_VALUES = [
    float("nan"), float("inf"), float("-inf"), 1e10, -1e10, 300.5, -300.5, 65535.9,
    70000.0, -1.0, -0.5, 0.5, 2.0**31, -(2.0**31) - 1000, 2.0**32, 2.0**32 + 5000,
    2.0**63, 2.0**64, 1e20, -1e20, 127.9, 128.0, -129.0, 255.5,
    256.0, 3e9, -3e9, -(2.0**63), 2.0**53, -0.0, 1e-40, 65504.0,
]  # fmt: skip
TAIL_VALUES = [float("nan"), float("-inf"), -1e10, -3e9, 2.0**32 + 5000, 1e20]
TARGETS = [
    ("i8", TP.INT8), ("i16", TP.INT16), ("i32", TP.INT32), ("i64", TP.INT64),
    ("u8", TP.UINT8), ("u16", TP.UINT16), ("u32", TP.UINT32), ("u64", TP.UINT64),
    ("bool", TP.BOOL),
]  # fmt: skip


def cast(x, to):
    """Cast of `x` (a `run` input) to `to`."""
    return run([helper.make_node("Cast", ["x0"], ["y"], to=to)], [x], to)


def source_values(source, values):
    """(the `run` input of `values` in `source`, its exact values as f64)."""
    if source == "bf16":
        bits = bf16_bits(np.array(values, np.float32))
        exact = (bits.astype(np.uint32) << 16).view(np.float32)
        return ("bf16", bits), exact.astype(np.float64)
    np_type = {"f32": np.float32, "f64": np.float64, "f16": np.float16}[source]
    x = np.array(values, np_type)
    return x, x.astype(np.float64)


def words(values):
    return " ".join(str(int(v)) for v in values)


def cast_table():
    print(f"# Cast results of ONNX Runtime {ort.__version__} (CPU EP, default options)")
    print("# on x86-64, written by tools/ort_integer_semantics.py cast; do not edit.")
    print("# `values SRC v...`: the source elements (exact, as f64);")
    print("# `SRC DST r...`: Cast of those elements, in order (bool as 0/1);")
    print("# `tail SRC DST v r...`: Cast of 7 and of 11 copies of v (the u32 target")
    print("# converts groups of 4 or 8 elements one way, the rest another).")
    with np.errstate(over="ignore"):
        for source in ["f32", "f64", "f16", "bf16"]:
            x, exact = source_values(source, CAST_VALUES)
            print(f"values {source} " + " ".join(repr(float(v)) for v in exact))
            for name, to in TARGETS:
                print(f"{source} {name} {words(cast(x, to))}")
        for source in ["f32", "f64", "f16", "bf16"]:
            for v in TAIL_VALUES:
                results = []
                for n in (7, 11):
                    x, exact = source_values(source, [v] * n)
                    results.append(words(cast(x, TP.UINT32)))
                print(f"tail {source} u32 {float(exact[0])!r} {' '.join(results)}")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "pow"
    print(f"# onnx {onnx.__version__}, onnxruntime {ort.__version__}", file=sys.stderr)
    {"pow": pow_cases, "cast": cast_table}[what]()
