#!/usr/bin/env python3
"""Full-size int8 models for the speed comparison (never committed).

* `resnet18-qdq`, `mobilenet_v2-qdq`: torchvision's resnet18 and
  mobilenet_v2 (random weights, batch 1, 224x224, made by
  `tools/vision-models/generate.py --full-size`), preprocessed by
  `quant_pre_process`, then `quantize_static` in QDQ form as ONNX Runtime's
  documentation recommends for CNNs: per-channel int8 weights, uint8
  activations, MinMax calibration over 4 seeded standard-normal images;
* `mobilenet_v2-qop`: the same in QOperator form;
* `bert`, `bert-dynamic`: generate.py's encoder at the size of the common
  sentence encoders (all-MiniLM-L6-v2: vocabulary 30522, hidden 384, 12
  heads, FFN 1536, 6 layers, 512 positions), in float and through
  `quantize_dynamic` (DynamicQuantizeLinear + MatMulInteger, int8 weights);
  `bert-128.npz` beside it holds one batch of sequence 128 (seeded ids,
  all attended) for `compare_speed.py --feeds`.

Each lands in `OUT/<name>/model.onnx`, and the float sources beside them.

    target/venv/bin/python tools/quant-models/full_size.py \
        --vision target/vision-bench --out target/quant-bench
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # noqa: E402  (the encoder builder and calibration reader)

SEQ = 128


def cnn(vision: Path, name: str, out: Path, tmp: Path) -> None:
    src = vision / f"{name}-dynamo" / "model.onnx"
    if not src.exists():
        print(f"skip {name}: {src} missing (tools/vision-models/generate.py --full-size)", file=sys.stderr)
        return
    pre = tmp / f"{name}-pre.onnx"
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    input_name = onnx.load(str(pre), load_external_data=False).graph.input[0].name

    def feed(rng):
        return {input_name: rng.standard_normal([1, 3, 224, 224]).astype(np.float32)}

    forms = [("qdq", QuantFormat.QDQ)] + ([("qop", QuantFormat.QOperator)] if name == "mobilenet_v2" else [])
    for suffix, fmt in forms:
        dst = out / f"{name}-{suffix}" / "model.onnx"
        dst.parent.mkdir(parents=True, exist_ok=True)
        quantize_static(
            str(pre), str(dst), generate.Reader(feed, seed=7, count=4), quant_format=fmt, per_channel=True,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
        )
        print(f"{dst}: {dst.stat().st_size / 1e6:.1f} MB")
    flt = out / name / "model.onnx"
    flt.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(onnx.load(str(src)), str(flt))


def bert(out: Path) -> None:
    (generate.VOCAB, generate.HIDDEN, generate.HEADS, generate.FFN, generate.LAYERS, generate.MAX_POS) = (
        30522, 384, 12, 1536, 6, 512)
    flt = out / "bert" / "model.onnx"
    flt.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(generate.build_encoder(), str(flt))
    dyn = out / "bert-dynamic" / "model.onnx"
    dyn.parent.mkdir(parents=True, exist_ok=True)
    quantize_dynamic(str(flt), str(dyn), weight_type=QuantType.QInt8)
    rng = np.random.default_rng(5)
    feeds = {
        "input_ids": rng.integers(0, generate.VOCAB, size=[1, SEQ]).astype(np.int64),
        "attention_mask": np.ones([1, SEQ], np.int64),
    }
    np.savez(out / f"bert-{SEQ}.npz", **feeds)
    for p in (flt, dyn):
        print(f"{p}: {p.stat().st_size / 1e6:.1f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vision", type=Path, default=generate.ROOT / "target" / "vision-bench")
    ap.add_argument("--out", type=Path, default=generate.ROOT / "target" / "quant-bench")
    ap.add_argument("--only", default="resnet18,mobilenet_v2,bert")
    args = ap.parse_args()
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory() as tmpdir:
        for name in ("resnet18", "mobilenet_v2"):
            if name in only:
                cnn(args.vision, name, args.out, Path(tmpdir))
    if "bert" in only:
        bert(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
