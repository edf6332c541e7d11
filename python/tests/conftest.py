"""Shared fixtures of the onnx_prepared Python tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _models import FIXTURES, fixtures

import onnx_prepared


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    fixtures()  # raises with instructions when they were not generated
    return FIXTURES


@pytest.fixture(scope="session")
def gemm_chain(fixture_dir: Path) -> Path:
    return fixture_dir / "gemm-chain.onnx"


@pytest.fixture(scope="session")
def tiny_llm(fixture_dir: Path) -> Path:
    return fixture_dir / "tiny-llm.onnx"


def one_thread(**fields) -> onnx_prepared.SessionOptions:
    opts = onnx_prepared.SessionOptions()
    opts.intra_op_num_threads = 1
    for k, v in fields.items():
        setattr(opts, k, v)
    return opts


def tiny_llm_feeds(t: int, p: int = 0, seed: int = 0) -> dict:
    """tiny-llm's inputs: T random token ids, the causal bias, zero pasts of P positions."""
    rng = np.random.default_rng(seed)
    bias = np.zeros((1, 1, t, p + t), np.float32)
    for i in range(t):
        bias[0, 0, i, p + i + 1 :] = -10000.0
    feeds = {"input_ids": rng.integers(0, 8192, size=(1, t), dtype=np.int64), "attn_bias": bias}
    for layer in range(4):
        for kv in ("key", "value"):
            feeds[f"past_{kv}_{layer}"] = np.zeros((1, 8, p, 64), np.float32)
    return feeds
