#!/usr/bin/env python3
"""Small random-weight vision models from the usual producers.

Each architecture is built in torch at reduced width with a fixed seed and
exported twice: by `torch.onnx.export` with the dynamo exporter at opset 18
and by the TorchScript exporter at opset 17. The models cover the operator
families of a vision runtime — convolution (stem, grouped, depthwise,
pointwise, dilated, transposed), pooling, normalization, Resize, the
activations of MobileNet, attention over patch embeddings and detection
post-processing with shapes that follow values:

* `resnet`       — ResNet-style: 7x7 stem, BatchNorm, MaxPool, basic blocks
                   with a strided 1x1 downsample, global average pool, Linear;
* `mobilenetv3`  — torchvision's mobilenet_v3_small at width 0.25: depthwise
                   convolutions, squeeze-excitation, HardSwish/HardSigmoid;
* `vit`          — a ViT-style patch embedding (strided Conv), class token,
                   position embedding, one pre-norm encoder layer, head;
* `segmentation` — a dilated backbone with an ASPP-style head (image pool
                   branch resized back), ConvTranspose, InstanceNorm and a
                   bilinear Resize to the input size;
* `detection`    — a detection tail: scores -> NonZero -> Gather, TopK with
                   k computed from the candidate count, class-aware NMS ->
                   Gather of boxes, scores and labels.

Every file lands in `OUT/<arch>-<producer>/model.onnx` (under 2 MB each);
`versions.json` records the versions used and any export that failed.
Run by hand (see README.md); CI only checks the committed files
(tests/conformance/vision_models.py).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import traceback
from pathlib import Path

import numpy as np
import onnx
import torch
import torchvision
from torch import nn
from torch.nn import functional as F
from torchvision.models.detection._utils import _topk_min
from torchvision.models.resnet import BasicBlock


class ResNetSmall(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        down = nn.Sequential(nn.Conv2d(16, 32, 1, stride=2, bias=False), nn.BatchNorm2d(32))
        self.layers = nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 32, stride=2, downsample=down))
        self.pool = nn.AdaptiveAvgPool2d(1)
        # A BatchNormalization no exporter folds into a convolution.
        self.norm = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.norm(self.pool(x)), 1))


class ViTSmall(nn.Module):
    def __init__(self, dim: int = 32, patch: int = 8, image: int = 32, classes: int = 10):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        tokens = (image // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.encoder = nn.TransformerEncoderLayer(
            dim, 2, dim_feedforward=64, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.encoder(x))
        return self.head(x[:, 0])


class SegmentationSmall(nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=2), nn.InstanceNorm2d(32, affine=True), nn.ReLU(),
        )
        self.atrous = nn.Sequential(nn.Conv2d(32, 16, 3, padding=2, dilation=2), nn.ReLU())
        self.image_pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(32, 16, 1), nn.ReLU())
        self.up = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.classify = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        size = x.shape[-2:]
        f = self.backbone(x)
        pooled = F.interpolate(self.image_pool(f), size=f.shape[-2:], mode="bilinear", align_corners=False)
        y = self.up(torch.cat([self.atrous(f), pooled], dim=1))
        y = F.interpolate(self.classify(y), size=size, mode="bilinear", align_corners=False)
        return y, F.interpolate(y, scale_factor=0.5, mode="nearest")


class DetectionTail(nn.Module):
    """Candidates above a score threshold (NonZero), the best `k` of them by
    score with `k = min(100, candidates)` (TopK with a computed k), then
    class-aware NMS (NonMaxSuppression) and the kept boxes, scores and
    labels (Gather)."""

    def __init__(self, score_threshold: float = 0.3, iou_threshold: float = 0.5, top: int = 100):
        super().__init__()
        self.score_threshold = score_threshold
        self.iou_threshold = iou_threshold
        self.top = top

    def forward(self, boxes, scores):
        best, labels = scores.max(dim=1)
        keep = torch.nonzero(best > self.score_threshold).squeeze(1)
        boxes, best, labels = boxes[keep], best[keep], labels[keep]
        k = _topk_min(best, self.top, 0)
        best, order = best.topk(k)
        boxes, labels = boxes[order], labels[order]
        # batched_nms's coordinate trick, written out: torchvision's own
        # scripts an emptiness check into an `If` around the NMS.
        offsets = labels.to(boxes) * (boxes.max() + 1)
        kept = torchvision.ops.nms(boxes + offsets[:, None], best, self.iou_threshold)
        return boxes[kept], best[kept], labels[kept]


def detection_inputs(n: int = 512, classes: int = 4, seed: int = 0):
    """Boxes scattered over a 512x512 image and per-class scores: example
    inputs for the export (tests/conformance/vision_models.py draws the
    inputs it checks with, with margins from every threshold)."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 480, size=(n, 2)).astype(np.float32)
    wh = rng.uniform(8, 64, size=(n, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + wh], axis=1)
    scores = rng.uniform(0, 1, size=(n, classes)).astype(np.float32)
    return boxes, scores


def architectures():
    torch.manual_seed(0)
    mobilenet = torchvision.models.mobilenet_v3_small(width_mult=0.25, num_classes=10)
    boxes, scores = detection_inputs()
    return {
        "resnet": (ResNetSmall(), (torch.randn(1, 3, 64, 64),), ["image"], ["logits"]),
        "mobilenetv3": (mobilenet, (torch.randn(1, 3, 64, 64),), ["image"], ["logits"]),
        "vit": (ViTSmall(), (torch.randn(1, 3, 32, 32),), ["image"], ["logits"]),
        "segmentation": (SegmentationSmall(), (torch.randn(1, 3, 64, 64),), ["image"], ["masks", "masks_half"]),
        "detection": (
            DetectionTail(),
            (torch.from_numpy(boxes), torch.from_numpy(scores)),
            ["boxes", "scores"],
            ["kept_boxes", "kept_scores", "kept_labels"],
        ),
    }


def full_size():
    """The benchmark models (batch 1, 224x224; not committed): torchvision's
    resnet18, mobilenet_v2, mobilenet_v3_small and efficientnet_b0 with
    random weights."""
    torch.manual_seed(0)
    image = (torch.randn(1, 3, 224, 224),)
    return {
        name: (getattr(torchvision.models, name)(weights=None), image, ["image"], ["logits"])
        for name in ("resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0")
    }


def randomize_norms(model: nn.Module) -> None:
    """Running statistics away from the identity, so that a folded or
    skipped normalization shows."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d)) and m.affine:
            with torch.no_grad():
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)


def export(model, args, names_in, names_out, path: Path, producer: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if producer == "dynamo":
        program = torch.onnx.export(
            model, args, dynamo=True, opset_version=18, input_names=names_in, output_names=names_out,
            optimize=True, external_data=False,
        )
        program.save(str(path), external_data=False)
    else:
        torch.onnx.export(
            model, args, str(path), dynamo=False, opset_version=17, input_names=names_in,
            output_names=names_out, do_constant_folding=True,
        )
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    # Same bytes every run: no producer version, no per-node metadata (the
    # dynamo exporter names Python objects by address there).
    proto.producer_version = ""
    for node in proto.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    onnx.save(proto, str(path))


def main() -> int:
    # The fused encoder fast path has no TorchScript ONNX symbolic.
    torch.backends.mha.set_fastpath_enabled(False)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="", help="comma-separated architectures")
    ap.add_argument("--producers", default="dynamo,torchscript")
    ap.add_argument("--full-size", action="store_true",
                    help="the full-size benchmark models instead (tens of MB each; not for committing)")
    args = ap.parse_args()
    failed = {}
    archs = full_size() if args.full_size else architectures()
    only = set(filter(None, args.only.split(",")))
    for arch, (model, inputs, names_in, names_out) in archs.items():
        if only and arch not in only:
            continue
        randomize_norms(model)
        model.eval()
        for producer in args.producers.split(","):
            path = args.out / f"{arch}-{producer}" / "model.onnx"
            try:
                with torch.no_grad():
                    export(model, inputs, names_in, names_out, path, producer)
                size = path.stat().st_size
                print(f"{path}: {size / 1e6:.2f} MB")
                if size > 2_000_000 and not args.full_size:
                    raise RuntimeError(f"{size} bytes: over the 2 MB a committed model may take")
            except Exception as e:  # noqa: BLE001 - one producer's failure is recorded, the rest go on
                traceback.print_exc()
                message = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).splitlines()[0][:300]
                failed[f"{arch}-{producer}"] = f"{type(e).__name__}: {message}"
                if path.exists():
                    path.unlink()
    versions = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "onnx": onnx.__version__,
        "failed": failed,
    }
    (args.out / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
    print(json.dumps(versions, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
