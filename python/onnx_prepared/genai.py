"""onnxruntime-genai's Python API over onnx_prepared.

A script written for onnxruntime-genai runs unchanged after swapping the
import::

    import onnx_prepared.genai as og  # was: import onnxruntime_genai as og

    model = og.Model("qwen2-genai-int4")
    tokenizer = og.Tokenizer(model)
    stream = tokenizer.create_stream()
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=64)
    generator = og.Generator(model, params)
    generator.append_tokens(tokenizer.encode("Hello"))
    while not generator.is_done():
        generator.generate_next_token()
        print(stream.decode(generator.get_next_tokens()[0]), end="", flush=True)

``Model`` takes a model folder (its ``genai_config.json`` decoder, else
``model.onnx``, with ``tokenizer.json`` beside it) or a ``Config`` of one.
Search options come from the folder and ``set_search_options``
(``max_length``, ``do_sample``, ``temperature``, ``top_k``, ``top_p``,
``min_p``, ``repetition_penalty``, ``random_seed``; others are accepted and
ignored). The GIL is released while the model runs.
"""

from __future__ import annotations

import json
import os

import numpy as np

from ._onnx_prepared import GenaiGenerator as _NativeGenerator
from ._onnx_prepared import GenaiModel as _NativeModel
from ._onnx_prepared import GenaiTokenizerStream as _NativeStream

__all__ = ["Config", "Model", "Tokenizer", "TokenizerStream", "GeneratorParams", "Generator"]

_SEARCH_KEYS = {"max_length", "do_sample", "temperature", "top_k", "top_p", "min_p",
                "repetition_penalty", "random_seed"}


class Config:
    """A model folder's configuration (``og.Config(path)``); execution
    providers are accepted and ignored: this runtime runs on the CPU."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.threads = 1

    def clear_providers(self) -> None:
        pass

    def append_provider(self, name: str) -> None:
        pass

    def set_provider_option(self, provider: str, key: str, value: str) -> None:
        pass

    def overlay(self, json_text: str) -> None:
        """Accepts `session_options.intra_op_num_threads` (other keys are
        ignored)."""
        overlay = json.loads(json_text)
        opts = overlay.get("model", {}).get("decoder", {}).get("session_options", {})
        if "intra_op_num_threads" in opts:
            self.threads = int(opts["intra_op_num_threads"])


class Model:
    """A decoder model folder (``og.Model(path_or_config)``)."""

    def __init__(self, path_or_config: str | os.PathLike | Config):
        config = path_or_config if isinstance(path_or_config, Config) else Config(path_or_config)
        self._native = _NativeModel(config.path, config.threads)
        self.device_type = "cpu"

    @property
    def type(self) -> str:
        return "decoder"


def _ids(tokens) -> list[int]:
    a = np.asarray(tokens)
    if a.ndim > 1:
        if a.shape[0] != 1:
            raise ValueError(f"batch {a.shape[0]}: onnx_prepared.genai generates one sequence at a time")
        a = a[0]
    return [int(t) for t in a.reshape(-1)]


class TokenizerStream:
    """Text as tokens arrive (``tokenizer.create_stream()``)."""

    def __init__(self, model: Model):
        self._native = _NativeStream(model._native)

    def decode(self, token: int) -> str:
        return self._native.decode(int(token))


class Tokenizer:
    """The folder's ``tokenizer.json`` (``og.Tokenizer(model)``)."""

    def __init__(self, model: Model):
        self._model = model
        model._native.encode("")  # a folder without tokenizer.json fails here

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._model._native.encode(text), dtype=np.int32)

    def decode(self, tokens) -> str:
        return self._model._native.decode(_ids(tokens))

    def encode_batch(self, texts: list[str]) -> np.ndarray:
        rows = [self._model._native.encode(t) for t in texts]
        width = max((len(r) for r in rows), default=0)
        out = np.zeros((len(rows), width), dtype=np.int32)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return out

    def decode_batch(self, tokens) -> list[str]:
        return [self._model._native.decode([int(t) for t in row]) for row in np.asarray(tokens)]

    def to_token_id(self, token: str) -> int:
        found = self._model._native.token_id(token)
        if found is None:
            raise ValueError(f"{token!r} is not in the vocabulary")
        return found

    def create_stream(self) -> TokenizerStream:
        return TokenizerStream(self._model)

    def apply_chat_template(self, messages: str, template_str: str | None = None,
                            add_generation_prompt: bool = True, **_: object) -> str:
        if not isinstance(messages, str):
            messages = json.dumps(messages)
        return self._model._native.apply_chat_template(messages, add_generation_prompt, template_str)


class GeneratorParams:
    """Search options for a generator (``og.GeneratorParams(model)``)."""

    def __init__(self, model: Model):
        self._model = model
        self.search_options: dict = {}

    def set_search_options(self, **options) -> None:
        self.search_options.update({k: v for k, v in options.items() if k in _SEARCH_KEYS})


class Generator:
    """One sequence generated step by step (``og.Generator(model, params)``)."""

    def __init__(self, model: Model, params: GeneratorParams):
        self._native = _NativeGenerator(model._native, dict(params.search_options))

    def append_tokens(self, tokens) -> None:
        self._native.append_tokens(_ids(tokens))

    def generate_next_token(self) -> None:
        self._native.generate_next_token()

    def get_next_tokens(self) -> np.ndarray:
        return np.asarray(self._native.get_next_tokens(), dtype=np.int32)

    def get_sequence(self, index: int = 0) -> np.ndarray:
        if index != 0:
            raise IndexError(f"sequence {index}: onnx_prepared.genai generates one sequence")
        return np.asarray(self._native.get_sequence(), dtype=np.int32)

    def is_done(self) -> bool:
        return self._native.is_done()

    def rewind_to(self, new_length: int) -> None:
        self._native.rewind_to(int(new_length))
