#!/usr/bin/env python3
"""ONNX Runtime parity on the committed vision models (tests/models/vision).

Every `*/model.onnx` under --models (small random-weight ResNet-,
MobileNetV3- and ViT-style classifiers, a segmentation head and a detection
tail, each exported by torch's dynamo and TorchScript exporters; see
tools/vision-models/) runs through `onnx-prepared run` in the eager,
streaming and hot modes, and every output must lie within
`max|ours - ORT| <= 1e-4 * max|ORT|`.

Image inputs are standard normal with a seed per model. A model whose
inputs are `boxes` and `scores` is a detection tail: its boxes and scores
are drawn so that no decision is near a threshold — every best score is at
least SCORE_MARGIN away from the score threshold and from the box's second
best class, the scores TopK ranks are at least SCORE_MARGIN apart, and the
IoU of every pair of one class NMS compares is at least IOU_MARGIN away
from the IoU threshold — and the script asserts those margins on the inputs before it
compares: the same count of detections, the same labels, boxes and scores
within 1e-4 relative.

    target/venv/bin/python tests/conformance/vision_models.py --bin target/debug/onnx-prepared
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RunFailed, max_abs, max_abs_err, read_npz, run_cli, write_npz  # noqa: E402

RTOL = 1e-4
MODES = ("eager", "streaming", "hot")

# The detection tail's constants (tools/vision-models/generate.py).
SCORE_THRESHOLD = 0.3
IOU_THRESHOLD = 0.5
TOP = 100
# Scores reach every decision unchanged (max, compare, sort); IoUs are
# computed, in each runtime's own order of operations.
SCORE_MARGIN = 1e-4
IOU_MARGIN = 1e-3


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` with every box of `b` ([x1, y1, x2, y2])."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(axis=2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def detection_margins(boxes: np.ndarray, scores: np.ndarray) -> list[str]:
    """What is too close to a decision in these inputs (empty: nothing)."""
    problems = []
    best = scores.max(axis=1)
    if np.abs(best - SCORE_THRESHOLD).min() < SCORE_MARGIN:
        problems.append("a best score is within the margin of the score threshold")
    labels = scores.argmax(axis=1)
    top2 = np.sort(scores, axis=1)[:, -2:]
    if (top2[:, 1] - top2[:, 0]).min() < SCORE_MARGIN:
        problems.append("a box's two best classes are within the margin (its label is a tie)")
    cand = np.flatnonzero(best > SCORE_THRESHOLD)
    order = cand[np.argsort(-best[cand], kind="stable")]
    ranked = best[order]
    k = min(TOP, len(order))
    gaps = -np.diff(ranked[: min(k + 1, len(ranked))])
    if len(gaps) and gaps.min() < SCORE_MARGIN:
        problems.append("two scores TopK ranks are within the margin (a tie)")
    kept = order[:k]
    ious = iou(boxes[kept], boxes[kept])
    same = labels[kept][:, None] == labels[kept][None, :]
    off_diagonal = ~np.eye(len(kept), dtype=bool)
    near = np.abs(ious - IOU_THRESHOLD) < IOU_MARGIN
    if (near & same & off_diagonal).any():
        problems.append("two boxes of one class have an IoU within the margin of the IoU threshold")
    return problems


def detection_inputs(seed: int) -> dict:
    """Crowded boxes and per-class scores on a grid of distinct values,
    redrawn until every margin holds."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        n, classes = 512, 4
        # Crowded: boxes of one class overlap, so NMS suppresses some.
        xy = rng.uniform(0, 160, size=(n, 2)).astype(np.float32)
        wh = rng.uniform(16, 64, size=(n, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + wh], axis=1)
        # Distinct scores 1/2048 apart, shuffled over boxes and classes;
        # all but about 80 boxes scaled under the score threshold, so
        # that TopK's k (the candidate count, at most 100) follows the
        # inputs.
        grid = (np.arange(n * classes, dtype=np.float32) + 0.5) / (n * classes)
        scores = rng.permutation(grid).reshape(n, classes).astype(np.float32)
        low = rng.permutation(n)[: n - 80]
        scores[low] *= np.float32(0.29)
        if not detection_margins(boxes, scores):
            return {"boxes": boxes, "scores": scores}
    raise RuntimeError("no detection inputs with every margin in 100 draws")


NP_TYPES = {"tensor(float)": np.float32, "tensor(int64)": np.int64}


def make_inputs(sess, seed: int) -> dict:
    names = [i.name for i in sess.get_inputs()]
    if names == ["boxes", "scores"]:
        feeds = detection_inputs(seed)
        problems = detection_margins(feeds["boxes"], feeds["scores"])
        assert not problems, problems
        return feeds
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = rng.standard_normal(shape).astype(NP_TYPES[i.type])
    return feeds


def compare(label: str, ours: dict, ref: dict) -> list[str]:
    failures = []
    for name, want in ref.items():
        got = ours.get(name)
        if got is None:
            failures.append(f"{label}: output {name} missing")
            continue
        if got.shape != want.shape or got.dtype != want.dtype:
            failures.append(f"{label}: {name} {got.dtype}{list(got.shape)} != ORT {want.dtype}{list(want.shape)}")
            print(f"  {label:<12} {name:<14} FAIL shape {list(got.shape)} ORT {list(want.shape)}")
            continue
        if want.dtype.kind in "iub":
            ok = np.array_equal(got, want)
            print(f"  {label:<12} {name:<14} {list(want.shape)} {'equal' if ok else 'FAIL: differ'}")
            if not ok:
                failures.append(f"{label}: {name} differs")
            continue
        err = max_abs_err(got, want)
        scale = max(max_abs(want), 1e-30)
        ok = err <= RTOL * scale
        print(f"  {label:<12} {name:<14} {list(want.shape)} max|err| {err:.3e} rel {err / scale:.2e} {'OK' if ok else 'FAIL'}")
        if not ok:
            failures.append(f"{label}: {name} rel err {err / scale:.2e}")
    return failures


def check_model(binary: str, model: Path, work: Path, seed: int) -> list[str]:
    import onnxruntime as ort

    print(f"== {model.parent.name}")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
    feeds = make_inputs(sess, seed)
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(None, feeds)))
    inp = work / "in.npz"
    write_npz(inp, feeds)
    failures = []
    for mode in MODES:
        out = work / f"out-{mode}.npz"
        try:
            run_cli(binary, model, inputs=inp, outputs=out, threads=1, mode=mode)
        except RunFailed as e:
            failures.append(f"{mode}: {e}")
            print(f"  {mode}: FAILED {e}")
            continue
        failures += compare(mode, read_npz(out), ref)
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", type=Path, default=Path(__file__).resolve().parents[1] / "models" / "vision")
    ap.add_argument("--only", default="", help="comma-separated model folder names")
    args = ap.parse_args()
    models = sorted(args.models.glob("*/model.onnx"))
    if args.only:
        keep = set(args.only.split(","))
        models = [m for m in models if m.parent.name in keep]
    if not models:
        print(f"no models under {args.models}", file=sys.stderr)
        return 2
    failed = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed, model in enumerate(models):
            work = Path(tmp) / model.parent.name
            work.mkdir()
            try:
                f = check_model(args.bin, model, work, seed)
            except Exception as e:  # noqa: BLE001 - one model's harness error is that model's failure
                f = [f"harness: {e}"]
                print(f"  FAILED {e}")
            if f:
                failed[model.parent.name] = f
    print(f"\n{len(models) - len(failed)} passed, {len(failed)} failed")
    for name, f in failed.items():
        print(f"  {name}: {f[0]}" + (f" (+{len(f) - 1} more)" if len(f) > 1 else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
