#!/usr/bin/env python3
"""Single quantized convolutions at the sizes of full-size CNN layers, for
timing the integer kernels against ONNX Runtime one node at a time
(BENCHMARKS.md section 16). Not committed: written under --out.

    target/venv/bin/python tools/quant-models/node_bench.py --out target/quant-nodes
    for m in target/quant-nodes/*.onnx; do
        target/venv/bin/python tests/conformance/compare_speed.py \\
            --bin target/release/onnx-prepared --model $m --threads 1,2 --repeat 20
    done

Each model is one QLinearConv: uint8 input (zero point 128), per-channel
int8 weights in [-60, 60] (seeded), int32 bias, uint8 output; `same`
padding.
"""

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

# name: (in channels, out channels, input size, kernel, group, stride)
CASES = {
    "conv3x3-64-56": (64, 64, 56, 3, 1, 1),  # resnet18 layer1
    "conv3x3-256-14": (256, 256, 14, 3, 1, 1),  # resnet18 layer3
    "conv1x1-128-28": (128, 128, 28, 1, 1, 1),  # a pointwise projection
    "depthwise3x3-96-56": (96, 96, 56, 3, 96, 1),  # mobilenet_v2 block 2
    # mobilenet_v2's layer shapes
    "pw16-96-112": (16, 96, 112, 1, 1, 1),
    "pw24-144-56": (24, 144, 56, 1, 1, 1),
    "pw96-24-56": (96, 24, 56, 1, 1, 1),
    "dw32-112": (32, 32, 112, 3, 32, 1),
    "dw96-112s2": (96, 96, 112, 3, 96, 2),
    "dw144-56s2": (144, 144, 56, 3, 144, 2),
    "dw192-28": (192, 192, 28, 3, 192, 1),
    "dw384-14": (384, 384, 14, 3, 384, 1),
    "dw576-14s2": (576, 576, 14, 3, 576, 2),
    "dw960-7": (960, 960, 7, 3, 960, 1),
}


def conv(out: Path, name: str, c: int, m: int, size: int, k: int, group: int, stride: int = 1) -> None:
    rng = np.random.default_rng(sum(map(ord, name)))
    w = rng.integers(-60, 60, (m, c // group, k, k), dtype=np.int8)
    inits = [
        nh.from_array(np.array(0.02, np.float32), "sx"),
        nh.from_array(np.array(128, np.uint8), "zx"),
        nh.from_array(w, "w"),
        nh.from_array((rng.random(m) * 0.01 + 0.001).astype(np.float32), "sw"),
        nh.from_array(np.zeros(m, np.int8), "zw"),
        nh.from_array(np.array(0.05, np.float32), "sy"),
        nh.from_array(np.array(0, np.uint8), "zy"),
        nh.from_array(rng.integers(-1000, 1000, m).astype(np.int32), "b"),
    ]
    node = h.make_node(
        "QLinearConv",
        ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"],
        ["y"],
        pads=[k // 2] * 4,
        group=group,
        strides=[stride, stride],
    )
    osize = (size + 2 * (k // 2) - k) // stride + 1
    graph = h.make_graph(
        [node],
        name,
        [h.make_tensor_value_info("x", TP.UINT8, [1, c, size, size])],
        [h.make_tensor_value_info("y", TP.UINT8, [1, m, osize, osize])],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out / f"{name}.onnx")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, case in CASES.items():
        conv(args.out, name, *case)
        print(args.out / f"{name}.onnx")


if __name__ == "__main__":
    main()
