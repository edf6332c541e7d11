"""Small models the client contract tests run (not a test), written into a
temporary folder with the onnx package: fixed seeds, so every run builds
the same bytes.

* `detector`: an Ultralytics-style export — input `images`, one output,
  and the metadata an Ultralytics export writes (`stride`, `task`,
  `names`, `imgsz`, ...) in `metadata_props`;
* `long_chain`: 48 MatMuls of a [n, 1024] activation by one 1024 x 1024
  weight (a run of a few seconds at n = 1024 on one thread; short at
  small n), to cancel while it runs;
* `vad`: a silero-VAD-shaped recurrent step — `input` [1, 512], `state`
  [2, 1, 128], a 0-d int64 `sr` — returning a probability and the next
  state (no `.onnx` extension, as silero's validator names its file).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]

DETECTOR_METADATA = {
    "description": "Ultralytics YOLO11n model trained on coco.yaml",
    "author": "Ultralytics",
    "stride": "32",
    "task": "detect",
    "batch": "1",
    "imgsz": "[32, 32]",
    "names": "{0: 'person', 1: 'bicycle', 2: 'car'}",
    "args": "{'batch': 1, 'half': False, 'dynamic': False, 'nms': False}",
}


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save_model(model, str(path))
    return path


def detector(folder: Path) -> Path:
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array((rng.standard_normal((7, 3, 3, 3)) * 0.2).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(7).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, 7, -1], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["images", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Reshape", ["s", "shape"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 7, 256])],
        [w, b, shape],
        doc_string="the detector's graph",
    )
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="pytorch", producer_version="2.5.0")
    model.doc_string = DETECTOR_METADATA["description"]
    model.domain = "ai.ultralytics"
    model.model_version = 3
    helper.set_model_props(model, DETECTOR_METADATA)
    return _save(model, folder / "detector.onnx")


def long_chain(folder: Path, nodes: int = 48) -> Path:
    rng = np.random.default_rng(11)
    # Orthogonal: activations keep their scale through every product.
    q, _ = np.linalg.qr(rng.standard_normal((1024, 1024)))
    w = numpy_helper.from_array(q.astype(np.float32), "w")
    names = ["x"] + [f"h{i}" for i in range(nodes - 1)] + ["y"]
    graph = helper.make_graph(
        [helper.make_node("MatMul", [names[i], "w"], [names[i + 1]]) for i in range(nodes)],
        "long_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1024])],
        [w],
    )
    return _save(helper.make_model(graph, opset_imports=OPSET), folder / "long-chain.onnx")


def vad(folder: Path) -> Path:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((512, 1)) * 0.05).astype(np.float32), "w")
    scale = numpy_helper.from_array(np.array(1e-5, np.float32), "scale")
    nodes = [
        helper.make_node("MatMul", ["input", "w"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["output"]),
        helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["srf", "scale"], ["bump"]),
        helper.make_node("ReduceMean", ["input"], ["level"], keepdims=0),
        helper.make_node("Add", ["state", "bump"], ["s1"]),
        helper.make_node("Add", ["s1", "level"], ["s2"]),
        helper.make_node("Tanh", ["s2"], ["stateN"]),
    ]
    graph = helper.make_graph(
        nodes,
        "vad",
        [
            helper.make_tensor_value_info("input", TensorProto.FLOAT, [None, 512]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, None, 128]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("output", TensorProto.FLOAT, [None, 1]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, None, 128]),
        ],
        [w, scale],
    )
    return _save(helper.make_model(graph, opset_imports=OPSET), folder / "silero_vad_like")
