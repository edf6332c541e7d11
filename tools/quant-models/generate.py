#!/usr/bin/env python3
"""Small int8-quantized models from ONNX Runtime's quantization tools.

Sources (no torch):

* the committed float vision models `tests/models/vision/resnet-dynamo` (a
  ResNet-style CNN: Conv, Relu, residual Add, MaxPool, ReduceMean, Gemm) and
  `tests/models/vision/mobilenetv3-torchscript` (depthwise convolutions,
  squeeze-excitation with GlobalAveragePool, Mul, HardSigmoid/HardSwish),
  preprocessed by `onnxruntime.quantization.shape_inference.quant_pre_process`;
* a BERT-like encoder built here with onnx.helper from seeded numpy weights
  (token and position embeddings, LayerNormalization, 2 layers of 4-head
  self-attention with an additive mask from `attention_mask`, an Erf GELU
  feed-forward, a tanh pooler and a 4-class classifier; hidden 64, sequence
  length dynamic).

Forms (ONNX Runtime's `quantize_static` with MinMax calibration over seeded
random inputs, and `quantize_dynamic`):

* `<cnn>-qdq`             QDQ, per-tensor: uint8 activations, int8 weights;
* `<cnn>-qdq-perchannel`  QDQ, per-channel int8 weights;
* `<cnn>-qdq-s8s8`        QDQ, symmetric int8 activations, per-channel weights;
* `<cnn>-qop-perchannel`  QOperator: QLinearConv, com.microsoft QLinearAdd,
                          QLinearMul, QLinearGlobalAveragePool, QGemm, ...
                          (ONNX Runtime's ORT_ENABLE_EXTENDED optimization
                          leaves these graphs as they are, so no optimized
                          copy is kept);
* `encoder`               the float encoder itself (the plumbing reference);
* `encoder-dynamic`       quantize_dynamic: DynamicQuantizeLinear +
                          MatMulInteger, int8 weights;
* `encoder-dynamic-ort`   the latter optimized by ONNX Runtime (fused
                          com.microsoft ops);
* `encoder-qdq`           quantize_static QDQ, uint8 activations, int8 weights;
* `encoder-qdq-ort`       the latter optimized by ONNX Runtime (QLinearMatMul,
                          com.microsoft QLinearAdd, QLinearMul, QLinearSoftmax).

"Optimized by ONNX Runtime": what its CPU execution provider makes of the
model at ORT_ENABLE_EXTENDED (SessionOptions.optimized_model_filepath),
saved; kept only where onnx.checker accepts it or ONNX Runtime reloads it.

Every file lands in `OUT/<name>/model.onnx` (each under 2 MB); `versions.json`
records the package versions, each model's source, size and operator
histogram, and any form that failed. The output is the same bytes on every
run: calibration data come from fixed seeds, producer versions and doc
strings are cleared and unused opset imports dropped. Run by hand (see
README.md); CI only checks the committed files
(tests/conformance/quantized_models.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

ROOT = Path(__file__).resolve().parents[2]
VISION = ROOT / "tests" / "models" / "vision"
MAX_BYTES = 2_000_000

# The encoder's dimensions.
VOCAB, HIDDEN, HEADS, FFN, LAYERS, MAX_POS, CLASSES = 128, 64, 4, 128, 2, 64, 4
CALIB_SAMPLES = 8


class Reader(CalibrationDataReader):
    """Seeded calibration batches: `make(rng)` gives one feed dict."""

    def __init__(self, make, seed: int, count: int = CALIB_SAMPLES):
        rng = np.random.default_rng(seed)
        self.feeds = [make(rng) for _ in range(count)]
        self.next = 0

    def get_next(self):
        if self.next >= len(self.feeds):
            return None
        self.next += 1
        return self.feeds[self.next - 1]

    def rewind(self):
        self.next = 0


def image_feed(rng) -> dict:
    return {"image": rng.standard_normal([1, 3, 64, 64]).astype(np.float32)}


def encoder_feed(rng, batch: int = 2, seq: int = 16) -> dict:
    ids = rng.integers(0, VOCAB, size=[batch, seq]).astype(np.int64)
    mask = np.ones([batch, seq], np.int64)
    # The second sequence is padded: its last quarter is masked out.
    mask[1:, seq - seq // 4 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


# ---------------------------------------------------------------- encoder


class Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, value: np.ndarray, prefix: str = "w") -> str:
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def node(self, op: str, inputs: list[str], outputs: int = 1, **attrs):
        outs = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=outs[0], **attrs))
        return outs[0] if outputs == 1 else outs

    def weight(self, rows: int, cols: int, prefix: str) -> str:
        w = self.rng.standard_normal([rows, cols]) / np.sqrt(rows)
        return self.const(w.astype(np.float32), prefix)

    def vector(self, n: int, std: float, prefix: str, mean: float = 0.0) -> str:
        return self.const((mean + std * self.rng.standard_normal(n)).astype(np.float32), prefix)

    def dense(self, x: str, rows: int, cols: int, prefix: str) -> str:
        y = self.node("MatMul", [x, self.weight(rows, cols, prefix + ".weight")])
        return self.node("Add", [y, self.vector(cols, 0.1, prefix + ".bias")])

    def layer_norm(self, x: str, prefix: str) -> str:
        g = self.const(self.rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32), prefix + ".gamma")
        b = self.vector(HIDDEN, 0.1, prefix + ".beta")
        return self.node("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-12)

    def gelu(self, x: str) -> str:
        # 0.5 * x * (1 + erf(x / sqrt(2))), as BERT exporters write it.
        e = self.node("Erf", [self.node("Div", [x, self.const(np.array(np.sqrt(2.0), np.float32), "sqrt2")])])
        one_plus = self.node("Add", [e, self.const(np.array(1.0, np.float32), "one")])
        return self.node("Mul", [self.node("Mul", [x, one_plus]), self.const(np.array(0.5, np.float32), "half")])


def build_encoder() -> onnx.ModelProto:
    b = Builder(seed=1234)
    head = HIDDEN // HEADS
    ids, mask = "input_ids", "attention_mask"
    # Embeddings: tokens, positions 0..S-1 (S from the input's shape).
    tok = b.node("Gather", [b.const((0.5 * b.rng.standard_normal([VOCAB, HIDDEN])).astype(np.float32), "word_embeddings"), ids])
    seq = b.node("Gather", [b.node("Shape", [ids]), b.const(np.array(1, np.int64), "one_i")], axis=0)
    positions = b.node("Range", [b.const(np.array(0, np.int64), "zero_i"), seq, b.const(np.array(1, np.int64), "step")])
    pos = b.node("Gather", [b.const((0.5 * b.rng.standard_normal([MAX_POS, HIDDEN])).astype(np.float32), "position_embeddings"), positions])
    x = b.layer_norm(b.node("Add", [tok, pos]), "embeddings.norm")
    # Additive mask [B, 1, 1, S]: 0 where attended, -10000 where masked.
    m = b.node("Unsqueeze", [b.node("Cast", [mask], to=TensorProto.FLOAT), b.const(np.array([1, 2], np.int64), "axes")])
    m = b.node("Mul", [b.node("Sub", [b.const(np.array(1.0, np.float32), "one"), m]), b.const(np.array(-10000.0, np.float32), "neg")])
    split = b.const(np.array([0, 0, HEADS, head], np.int64), "split_heads")
    merge = b.const(np.array([0, 0, HIDDEN], np.int64), "merge_heads")
    scale = b.const(np.array(1.0 / np.sqrt(head), np.float32), "scale")
    for i in range(LAYERS):
        p = f"layer{i}"

        def heads(t: str, perm: list[int]) -> str:
            return b.node("Transpose", [b.node("Reshape", [t, split])], perm=perm)

        q = heads(b.dense(x, HIDDEN, HIDDEN, p + ".query"), [0, 2, 1, 3])
        k = heads(b.dense(x, HIDDEN, HIDDEN, p + ".key"), [0, 2, 3, 1])
        v = heads(b.dense(x, HIDDEN, HIDDEN, p + ".value"), [0, 2, 1, 3])
        scores = b.node("Add", [b.node("Mul", [b.node("MatMul", [q, k]), scale]), m])
        ctx = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
        ctx = b.node("Reshape", [b.node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge])
        x = b.layer_norm(b.node("Add", [b.dense(ctx, HIDDEN, HIDDEN, p + ".output"), x]), p + ".attention.norm")
        h = b.dense(b.gelu(b.dense(x, HIDDEN, FFN, p + ".intermediate")), FFN, HIDDEN, p + ".ffn.output")
        x = b.layer_norm(b.node("Add", [h, x]), p + ".ffn.norm")
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="last_hidden_state"))
    first = b.node("Gather", [x, b.const(np.array(0, np.int64), "first")], axis=1)
    pooled = b.node("Tanh", [b.dense(first, HIDDEN, HIDDEN, "pooler")])
    logits = b.dense(pooled, HIDDEN, CLASSES, "classifier")
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="logits"))
    graph = helper.make_graph(
        b.nodes,
        "encoder",
        [
            helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "sequence"]),
        ],
        [
            helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", HIDDEN]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES]),
        ],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="quant-models")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


# ---------------------------------------------------------------- helpers


def clean(model: onnx.ModelProto) -> onnx.ModelProto:
    """Same bytes every run, nothing the models do not use: no producer
    version, doc strings or metadata, no opset import of an unused domain."""
    model.producer_version = ""
    model.doc_string = ""
    del model.metadata_props[:]
    model.graph.doc_string = ""
    for node in model.graph.node:
        node.doc_string = ""
        del node.metadata_props[:]
    used = {n.domain for n in model.graph.node} | {""}
    keep = [o for o in model.opset_import if o.domain in used or (o.domain == "ai.onnx" and "" in used)]
    del model.opset_import[:]
    model.opset_import.extend(keep)
    return model


def op_histogram(model: onnx.ModelProto) -> dict[str, int]:
    counts = collections.Counter(
        (f"{n.domain}:" if n.domain not in ("", "ai.onnx") else "") + n.op_type for n in model.graph.node
    )
    return dict(sorted(counts.items()))


def check(path: Path) -> str:
    """onnx.checker on the file; else ONNX Runtime must reload it. Returns
    which of the two accepted it; raises if neither does."""
    try:
        onnx.checker.check_model(str(path), full_check=False)
        return "onnx.checker"
    except Exception as e:  # noqa: BLE001 - fall back to ORT reloading it
        checker_error = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return f"onnxruntime reload (onnx.checker: {checker_error})"


def save(model: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(clean(model), str(path))


def ort_optimized(src: Path, dst: Path) -> None:
    """What ONNX Runtime's CPU EP makes of `src` at ORT_ENABLE_EXTENDED."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    opts.optimized_model_filepath = str(dst)
    opts.intra_op_num_threads = 1
    ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
    save(onnx.load(str(dst)), dst)


# ---------------------------------------------------------------- forms


def cnn_forms(src_name: str, short: str, tmp: Path) -> dict:
    """name -> callable(out_path) for the forms of one vision model."""
    src = VISION / src_name / "model.onnx"
    pre = tmp / f"{short}-pre.onnx"

    def prep():
        if not pre.exists():
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
        return pre

    def static(fmt, per_channel, act=QuantType.QUInt8, extra=None):
        def make(out: Path):
            quantize_static(
                str(prep()), str(out), Reader(image_feed, seed=7), quant_format=fmt, per_channel=per_channel,
                activation_type=act, weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                extra_options=extra or {},
            )
        return make

    origin = f"tests/models/vision/{src_name}"
    return {
        f"{short}-qdq": (origin, static(QuantFormat.QDQ, False)),
        f"{short}-qdq-perchannel": (origin, static(QuantFormat.QDQ, True)),
        f"{short}-qdq-s8s8": (origin, static(QuantFormat.QDQ, True, QuantType.QInt8, {"ActivationSymmetric": True})),
        f"{short}-qop-perchannel": (origin, static(QuantFormat.QOperator, True)),
    }


def encoder_forms(tmp: Path) -> dict:
    flt = tmp / "encoder.onnx"

    def float_model():
        if not flt.exists():
            onnx.save(build_encoder(), str(flt))
        return flt

    def write_float(out: Path):
        save(onnx.load(str(float_model())), out)

    def dynamic(out: Path):
        quantize_dynamic(str(float_model()), str(out), weight_type=QuantType.QInt8)

    def dynamic_ort(out: Path):
        dyn = tmp / "encoder-dynamic.onnx"
        dynamic(dyn)
        save(onnx.load(str(dyn)), dyn)
        ort_optimized(dyn, out)

    def qdq(out: Path):
        quantize_static(
            str(float_model()), str(out), Reader(encoder_feed, seed=11), quant_format=QuantFormat.QDQ,
            per_channel=False, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
        )

    def qdq_ort(out: Path):
        q = tmp / "encoder-qdq.onnx"
        qdq(q)
        save(onnx.load(str(q)), q)
        ort_optimized(q, out)

    src = "tools/quant-models/generate.py build_encoder"
    return {
        "encoder": (src, write_float),
        "encoder-dynamic": (src, dynamic),
        "encoder-dynamic-ort": (src, dynamic_ort),
        "encoder-qdq": (src, qdq),
        "encoder-qdq-ort": (src, qdq_ort),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "models" / "quant")
    ap.add_argument("--only", default="", help="comma-separated model names")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    failed, models = {}, {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        forms = {}
        forms.update(cnn_forms("resnet-dynamo", "resnet", tmp))
        forms.update(cnn_forms("mobilenetv3-torchscript", "mobilenetv3", tmp))
        forms.update(encoder_forms(tmp))
        for name, (source, make) in forms.items():
            if only and name not in only:
                continue
            path = args.out / name / "model.onnx"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                raw = tmp / f"{name}.raw.onnx"
                make(raw)
                save(onnx.load(str(raw)), path)
                accepted = check(path)
                size = path.stat().st_size
                if size > MAX_BYTES:
                    raise RuntimeError(f"{size} bytes: over the 2 MB a committed model may take")
                hist = op_histogram(onnx.load(str(path)))
                models[name] = {"source": source, "bytes": size, "accepted_by": accepted, "ops": hist}
                print(f"{path}: {size / 1e6:.3f} MB ({accepted})")
                print("    " + ", ".join(f"{k} {v}" for k, v in hist.items()))
            except Exception as e:  # noqa: BLE001 - one form's failure is recorded, the rest go on
                traceback.print_exc()
                message = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines()[0][:300] if str(e) else ""
                failed[name] = f"{type(e).__name__}: {message}"
                if path.exists():
                    path.unlink()
                    path.parent.rmdir()
    total = sum(m["bytes"] for m in models.values())
    print(f"{len(models)} models, {total / 1e6:.2f} MB in all")
    versions = {
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "numpy": np.__version__,
        "models": models,
        "failed": failed,
    }
    if not only:
        (args.out / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
    print(json.dumps({"failed": failed}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
