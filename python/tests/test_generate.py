"""generate(prompt_ids, max_new_tokens): greedy decoding, against
onnxruntime's greedy tokens on real exported decoders (every exporter's
cache convention, the GenAI builder's shared buffer included)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from _models import REAL, exact_activations_copy, feeds_for, present_to_past

import onnx_prepared

NEW_TOKENS = 8
MODELS = ["llama-torchscript", "qwen2-optimum", "phi3-genai-fp32", "mistral-genai-int4", "qwen2-nbits-qdq"]


def ort_greedy(model: Path, path: Path, prompt: np.ndarray, n: int) -> list[int]:
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    sess = onnxruntime.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    inputs, outputs = sess.get_inputs(), sess.get_outputs()
    pairs = present_to_past(inputs, outputs)
    names = [o.name for o in outputs]
    logits = next(o for o in names if "logits" in o)
    ids, p, pasts, tokens = prompt, 0, None, []
    for _ in range(n):
        feeds = feeds_for(model, inputs, outputs, t=len(ids), p=p, seed=0, pasts=pasts)
        feeds[next(i.name for i in inputs if "input_ids" in i.name)] = ids.reshape(1, -1)
        outs = dict(zip(names, sess.run(None, feeds)))
        tok = int(np.argmax(outs[logits][0, -1]))
        tokens.append(tok)
        pasts = {pairs[o]: outs[o] for o in pairs}
        p += len(ids)
        ids = np.array([tok], np.int64)
    return tokens


@pytest.mark.parametrize("name", MODELS)
def test_generate_gives_onnxruntime_greedy_tokens(name: str, tmp_path: Path):
    model = REAL / name / "model.onnx"
    prompt = np.random.default_rng(7).integers(0, 256, size=12, dtype=np.int64)
    want = ort_greedy(model, exact_activations_copy(model, tmp_path), prompt, NEW_TOKENS)
    opts = onnx_prepared.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = onnx_prepared.InferenceSession(str(model), opts)
    got = sess.generate(prompt.tolist(), NEW_TOKENS)
    assert got == want
    # A NumPy prompt works too, and the session keeps generating the same.
    assert sess.generate(prompt, NEW_TOKENS) == want
