#!/usr/bin/env python3
"""Checks the fixture models written by `make-fixtures` against the reference
tools: the ONNX checker, ONNX Runtime, and an independent numpy interpreter.

Usage: python tools/check_fixtures.py DIR

For every *.onnx in DIR (sorted):
  1. the common format rules (IR version, opsets, producer, typed graph
     inputs/outputs, initializers not listed as inputs, unique node names,
     external data: one file, 64-byte aligned, standard keys in order, and
     checksum == sha256 of exactly the tensor's bytes);
  2. onnx.checker.check_model(path, full_check=True);
  3. an onnxruntime CPU session run on deterministic random inputs (tiny-llm:
     T=4, P=0 with a causal bias, then T=3, P=2), all outputs finite and of
     the declared shapes;
  4. the same inputs through a small numpy interpreter of the graph (which
     spells out the MatMulNBits layout the fixtures document); its outputs
     must match onnxruntime's.

Prints one line per model; exits non-zero if any model fails.
"""

import hashlib
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

IR_VERSION = 11
PRODUCER = "onnx-prepared-fixtures"
ALIGNMENT = 64
THRESHOLD = 1024
EXTERNAL_KEYS = ["location", "offset", "length", "checksum"]
MASK = -10000.0


class CheckError(Exception):
    pass


def require(cond, msg):
    if not cond:
        raise CheckError(msg)


# --- 1. format rules -------------------------------------------------------


def check_format(path: Path):
    model = onnx.load(str(path), load_external_data=False)
    require(model.ir_version == IR_VERSION, f"ir_version {model.ir_version}")
    require(model.producer_name == PRODUCER, f"producer {model.producer_name!r}")
    opsets = {o.domain: o.version for o in model.opset_import}
    require(opsets.get("") == 23, f"ai.onnx opset {opsets.get('')}")
    domains = {n.domain for n in model.graph.node}
    if "com.microsoft" in domains:
        require(opsets.get("com.microsoft") == 1, "com.microsoft opset")
    g = model.graph
    names = [n.name for n in g.node]
    require(all(names), "unnamed node")
    require(len(set(names)) == len(names), "duplicate node names")
    init_names = {t.name for t in g.initializer}
    for vi in g.input:
        require(vi.name not in init_names, f"initializer {vi.name} is a graph input")
    for vi in list(g.input) + list(g.output):
        tt = vi.type.tensor_type
        require(tt.elem_type != 0, f"{vi.name}: no elem_type")
        require(tt.HasField("shape"), f"{vi.name}: no shape")
        for d in tt.shape.dim:
            require(d.HasField("dim_value") or d.dim_param, f"{vi.name}: unknown dim")

    data_files = set()
    spans = []
    for t in g.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            keys = [e.key for e in t.external_data]
            require(keys == EXTERNAL_KEYS, f"{t.name}: external keys {keys}")
            info = {e.key: e.value for e in t.external_data}
            require("/" not in info["location"], f"{t.name}: location not bare")
            data_files.add(info["location"])
            offset, length = int(info["offset"]), int(info["length"])
            require(offset % ALIGNMENT == 0, f"{t.name}: offset {offset} not aligned")
            require(length >= THRESHOLD, f"{t.name}: {length} bytes should be inline")
            with open(path.parent / info["location"], "rb") as f:
                f.seek(offset)
                payload = f.read(length)
            require(len(payload) == length, f"{t.name}: data file too short")
            digest = "sha256:" + hashlib.sha256(payload).hexdigest()
            require(info["checksum"] == digest, f"{t.name}: checksum mismatch")
            spans.append((offset, length, t.name))
        else:
            require(t.HasField("raw_data"), f"{t.name}: inline tensor without raw_data")
            require(len(t.raw_data) < THRESHOLD, f"{t.name}: {len(t.raw_data)} bytes should be external")
    require(len(data_files) <= 1, f"several data files {sorted(data_files)}")
    if data_files:
        require(data_files == {path.stem + ".data"}, f"data file {data_files}")
    spans.sort()
    for (o0, l0, n0), (o1, _, n1) in zip(spans, spans[1:]):
        require(o0 + l0 <= o1, f"{n0} overlaps {n1}")
    return model


# --- 3. inputs -------------------------------------------------------------


def resolve(shape, dims):
    out = []
    for d in shape:
        if isinstance(d, int):
            out.append(d)
        else:
            require(d in dims, f"unexpected symbolic dim {d!r}")
            out.append(dims[d])
    return out


def causal_bias(t, p):
    bias = np.zeros((1, 1, t, p + t), dtype=np.float32)
    for i in range(t):
        bias[0, 0, i, p + i + 1 :] = MASK
    return bias


def make_inputs(sess, dims, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in sess.get_inputs():
        shape = resolve(inp.shape, dims)
        if inp.name == "input_ids":
            vocab = dims["vocab"]
            feeds[inp.name] = rng.integers(0, vocab, size=shape, dtype=np.int64)
        elif inp.name == "attn_bias":
            feeds[inp.name] = causal_bias(dims["T"], dims["P"])
        else:
            require(inp.type == "tensor(float)", f"{inp.name}: type {inp.type}")
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


# --- 4. numpy reference ----------------------------------------------------


def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def matmul_nbits(a, b, scales, k, n, block_size):
    # B[n][blk][j]: element blk*bs + 2j in the low nibble, +1 in the high one;
    # zero point 8; scales[n * blocks + blk].
    blocks = k // block_size
    b = b.reshape(n, blocks, block_size // 2)
    nib = np.empty((n, blocks, block_size), dtype=np.float32)
    nib[:, :, 0::2] = (b & 0x0F).astype(np.float32)
    nib[:, :, 1::2] = (b >> 4).astype(np.float32)
    w = (nib - 8.0) * scales.reshape(n, blocks, 1)
    w = w.reshape(n, k)  # W^T
    return (a.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32)


def run_reference(model, feeds):
    g = model.graph
    env = {name: value for name, value in feeds.items()}
    for t in g.initializer:
        env[t.name] = numpy_helper.to_array(t)
    for node in g.node:
        x = [env[i] for i in node.input]
        at = attrs_of(node)
        op = node.op_type
        if op == "Gather":
            y = [np.take(x[0], x[1], axis=at.get("axis", 0))]
        elif op == "Cast":
            y = [x[0].astype(onnx.helper.tensor_dtype_to_np_dtype(at["to"]))]
        elif op == "RMSNormalization":
            v = x[0].astype(np.float64)
            ms = np.mean(v * v, axis=at.get("axis", -1), keepdims=True)
            y = [(v / np.sqrt(ms + at.get("epsilon", 1e-5)) * x[1]).astype(np.float32)]
        elif op == "MatMulNBits":
            require(at["bits"] == 4 and len(x) == 3, "MatMulNBits form")
            y = [matmul_nbits(x[0], x[1], x[2], at["K"], at["N"], at["block_size"])]
        elif op == "Split":
            y = np.split(x[0], at["num_outputs"], axis=at.get("axis", 0))
        elif op == "Reshape":
            shape = [d if d != 0 else x[0].shape[i] for i, d in enumerate(x[1].tolist())]
            y = [x[0].reshape(shape)]
        elif op == "Transpose":
            y = [np.transpose(x[0], at["perm"])]
        elif op == "Concat":
            y = [np.concatenate(x, axis=at["axis"])]
        elif op == "MatMul":
            y = [(x[0].astype(np.float64) @ x[1].astype(np.float64)).astype(np.float32)]
        elif op == "Mul":
            y = [x[0] * x[1]]
        elif op == "Add":
            y = [x[0] + x[1]]
        elif op == "Softmax":
            v = x[0].astype(np.float64)
            v = np.exp(v - v.max(axis=at.get("axis", -1), keepdims=True))
            y = [(v / v.sum(axis=at.get("axis", -1), keepdims=True)).astype(np.float32)]
        elif op == "Sigmoid":
            y = [(1.0 / (1.0 + np.exp(-x[0].astype(np.float64)))).astype(np.float32)]
        elif op == "Gemm":
            b = x[1].T if at.get("transB", 0) else x[1]
            a = x[0].T if at.get("transA", 0) else x[0]
            v = at.get("alpha", 1.0) * (a.astype(np.float64) @ b.astype(np.float64))
            if len(x) > 2:
                v = v + at.get("beta", 1.0) * x[2]
            y = [v.astype(np.float32)]
        else:
            raise CheckError(f"reference has no {op}")
        for name, value in zip(node.output, y):
            env[name] = value
    return [env[o.name] for o in g.output]


# --- driver ----------------------------------------------------------------


def scenarios(model):
    """(dims, seed) pairs to run; tiny-llm also with a non-empty cache."""
    g = model.graph
    if any(i.name == "input_ids" for i in g.input):
        logits = next(o for o in g.output if o.name == "logits")
        vocab = logits.type.tensor_type.shape.dim[2].dim_value
        return [
            ({"T": 4, "P": 0, "total": 4, "vocab": vocab}, 1),
            ({"T": 3, "P": 2, "total": 5, "vocab": vocab}, 2),
        ]
    return [({"batch": 3}, 1)]


def check(path: Path):
    start = time.monotonic()
    check_format(path)
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))  # with external data, for the reference
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for dims, seed in scenarios(model):
        feeds = make_inputs(sess, dims, seed)
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(names, feeds)
        refs = run_reference(model, feeds)
        for meta, out, ref in zip(sess.get_outputs(), outs, refs):
            require(np.all(np.isfinite(out)), f"{meta.name}: non-finite output")
            require(list(out.shape) == resolve(meta.shape, dims), f"{meta.name}: shape {out.shape}")
            scale = max(float(np.max(np.abs(ref))), 1e-6)
            require(float(np.max(np.abs(out))) > 1e-3, f"{meta.name}: output all ~0")
            err = float(np.max(np.abs(out - ref))) / scale
            require(err < 1e-3, f"{meta.name}: differs from reference by {err:.2e} (relative)")
            worst = max(worst, err)
    elapsed = time.monotonic() - start
    return f"max rel diff vs reference {worst:.1e}, {elapsed:.2f}s"


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    directory = Path(argv[1])
    models = sorted(directory.glob("*.onnx"))
    if not models:
        print(f"no *.onnx in {directory}", file=sys.stderr)
        return 1
    failed = 0
    for path in models:
        try:
            detail = check(path)
            print(f"ok    {path.name}: {detail}")
        except Exception as e:  # any failure of any tool fails this model
            failed += 1
            print(f"FAIL  {path.name}: {type(e).__name__}: {e}")
    print(f"{len(models) - failed}/{len(models)} models passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
