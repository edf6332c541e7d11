"""The models the tests run and the inputs they feed them (not a test).

* fixtures: the `make-fixtures` output, `$ONNX_PREPARED_FIXTURES` or
  `target/fixtures` (CI writes it before these tests);
* real models: every `tests/models/real/*/model.onnx` (tiny exported Llama,
  Qwen2, Phi-3 and Mistral decoders), as `tests/common/mod.rs` and
  `tests/conformance/real_models.py` find them.

Inputs are made from what a session's `get_inputs()` says (names, types,
shapes), by role as `tests/conformance/real_models.py` makes them, so the
same code feeds onnxruntime and onnx_prepared.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("ONNX_PREPARED_FIXTURES", REPO / "target" / "fixtures"))
REAL = REPO / "tests" / "models" / "real"

# Tolerances of tests/conformance (README there): max|ours - ORT| <= rtol *
# max|ORT| per output; tiny-llm's 4 blocks of K up to 2048 get 2e-4.
RTOL = 1e-4
RTOL_TINY_LLM = 2e-4
MASK = -10000.0

NP_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def fixtures() -> list[Path]:
    models = sorted(FIXTURES.glob("*.onnx"))
    if not models:
        raise FileNotFoundError(
            f"no fixtures in {FIXTURES}: run `cargo run -p onnx-prepared-fixtures --bin make-fixtures "
            f"-- --out target/fixtures` (or set ONNX_PREPARED_FIXTURES)"
        )
    return models


def real_models() -> list[Path]:
    return sorted(REAL.glob("*/model.onnx"))


def label(model: Path) -> str:
    return model.parent.name if model.name == "model.onnx" else model.stem


def rtol_of(model: Path) -> float:
    return RTOL_TINY_LLM if model.stem == "tiny-llm" else RTOL


def role(name: str) -> str:
    n = name.lower()
    if "position_ids" in n:
        return "positions"
    if "input_ids" in n:
        return "ids"
    if "attention_mask" in n:
        return "mask"
    if "attn_bias" in n:
        return "bias"
    if "seqlens_k" in n:
        return "seqlens"
    if "total_sequence_length" in n:
        return "total"
    if ("past" in n or "cache" in n) and ("key" in n or "value" in n):
        return "past"
    return "other"


def head_size(model: Path) -> int | None:
    """The KV head size a GenAI-builder model declares symbolically."""
    config = model.parent / "genai_config.json"
    if config.exists():
        return json.loads(config.read_text())["model"]["decoder"]["head_size"]
    return None


def vocab_of(outputs) -> int:
    for o in outputs:
        if "logits" in o.name and isinstance(o.shape[-1], int):
            return o.shape[-1]
    return 256


def is_decoder(inputs) -> bool:
    return any(role(i.name) == "ids" for i in inputs)


def sliding_capacity(model: Path) -> int:
    """window_size + cache_slack of the folder's genai_config.json, as
    onnxruntime-genai sizes a sliding-window layer's KV buffer."""
    config = json.loads((model.parent / "genai_config.json").read_text())
    w = config["model"]["decoder"]["sliding_window"]
    return w["window_size"] + w.get("cache_slack", 0)


def feeds_for(model: Path, inputs, outputs, t: int, p: int, seed: int, pasts: dict | None = None) -> dict:
    """Inputs for T new positions after P past ones (a decoder), or
    standard-normal values with every symbolic dim 3 (anything else)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    if not is_decoder(inputs):
        for i in inputs:
            shape = [d if isinstance(d, int) else 3 for d in i.shape]
            dtype = NP_TYPES[i.type]
            if np.issubdtype(dtype, np.floating):
                feeds[i.name] = rng.standard_normal(shape).astype(dtype)
            else:
                feeds[i.name] = rng.integers(0, 10, size=shape).astype(dtype)
        return feeds
    vocab = vocab_of(outputs)
    for i in inputs:
        dtype = NP_TYPES[i.type]
        r = role(i.name)
        if r == "ids":
            feeds[i.name] = rng.integers(0, vocab, size=(1, t)).astype(dtype)
        elif r == "mask":
            feeds[i.name] = np.ones((1, p + t), dtype=dtype)
        elif r == "positions":
            feeds[i.name] = np.arange(p, p + t, dtype=dtype).reshape(1, t)
        elif r == "seqlens":
            feeds[i.name] = np.full((1,), p + t - 1, dtype=dtype)
        elif r == "total":
            feeds[i.name] = np.array(p + t, dtype=dtype)
        elif r == "bias":
            bias = np.zeros((1, 1, t, p + t), dtype=dtype)
            for row in range(t):
                bias[0, 0, row, p + row + 1 :] = MASK
            feeds[i.name] = bias
        elif r == "past":
            if pasts is not None:
                feeds[i.name] = pasts[i.name]
            else:
                shape = [d if isinstance(d, int) else 1 for d in i.shape]
                # A sliding-window layer's window-sized buffer (GenAI's
                # `past_sliding_length`) holds at least the window.
                shape[0] = 1
                shape[2] = sliding_capacity(model) if "sliding" in str(i.shape[2]) else 0
                if not isinstance(i.shape[3], int):
                    shape[3] = head_size(model)
                feeds[i.name] = np.zeros(shape, dtype=dtype)
        else:
            raise ValueError(f"{model}: input {i.name} has no role")
    return feeds


def present_to_past(inputs, outputs) -> dict:
    """present output name -> past input name (same layer number and kind)."""
    pasts = [i.name for i in inputs if role(i.name) == "past"]
    pairs = {}
    for o in outputs:
        if "present" not in o.name:
            continue
        kind = "key" if o.name.rfind("key") > o.name.rfind("value") else "value"
        num = re.findall(r"\d+", o.name)
        for p in pasts:
            pk = "key" if p.rfind("key") > p.rfind("value") else "value"
            if pk == kind and re.findall(r"\d+", p) == num:
                pairs[o.name] = p
    return pairs


def exact_activations_copy(model: Path, work: Path) -> Path:
    """`model`, or a copy in `work` whose MatMulNBits nodes have
    accuracy_level 0: onnxruntime's default int4 path quantizes activations
    to int8 (about 1 % of max|logit| from exact f32), ours computes them in
    f32; at level 0 (plus the session option, set by the scripts) both are
    exact (tests/conformance/README.md)."""
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    changed = False
    for node in proto.graph.node:
        if node.op_type == "MatMulNBits":
            for a in node.attribute:
                if a.name == "accuracy_level" and a.i != 0:
                    a.i = 0
                    changed = True
    if not changed:
        return model
    copy = work / model.parent.name
    shutil.copytree(model.parent, copy, dirs_exist_ok=True)
    onnx.save(proto, str(copy / model.name))
    return copy / model.name


def max_rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max|got - want| / max|want| in float64 (0 for empty arrays)."""
    if want.size == 0:
        return 0.0
    a = got.astype(np.float64)
    b = want.astype(np.float64)
    err = float(np.max(np.abs(a - b)))
    scale = float(np.max(np.abs(b)))
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


def assert_close(names: list[str], got: list, want: list, rtol: float, what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} outputs, ORT {len(want)}"
    for name, g, w in zip(names, got, want):
        assert isinstance(g, np.ndarray), f"{what}: {name} is a {type(g)}"
        assert g.dtype == w.dtype, f"{what}: {name} dtype {g.dtype}, ORT {w.dtype}"
        assert g.shape == w.shape, f"{what}: {name} shape {g.shape}, ORT {w.shape}"
        rel = max_rel_err(g, w)
        assert rel <= rtol, f"{what}: {name} max|err| / max|ORT| = {rel:.3e} > {rtol:.0e}"
