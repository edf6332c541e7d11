"""onnx_prepared: an ONNX runtime whose first inference starts before the
model has finished loading, with onnxruntime's Python interface.

A script written for onnxruntime runs unchanged after swapping the import::

    import numpy as np
    import onnx_prepared as ort  # was: import onnxruntime as ort

    sess = ort.InferenceSession("model.onnx")
    x = sess.get_inputs()[0]
    y = sess.run(None, {x.name: np.zeros([1, 16], np.float32)})

Beyond onnxruntime:

* ``SessionOptions`` has ``cache_dir`` / ``cache_policy`` (the prepared
  cache: packed weights for the next process), ``memory_limits`` (bytes per
  memory domain), ``map_weights``, ``portable`` and ``int8_activations``;
* ``run_async`` returns a ``RunHandle``: ``await`` it in asyncio, or call
  ``.result()``; ``.cancel()`` stops it;
* ``prepare()`` reads and prepacks every weight now (else the first run
  streams them in); ``generate(prompt_ids, max_new_tokens)`` decodes
  greedily; ``stats()`` reports bytes read, prepacks, cache hits and peak
  live bytes per memory domain.

The GIL is released while a run, a preparation or a wait goes on. Errors
are ``onnx_prepared.Error`` subclasses whose ``kind`` names the runtime's
error kind (``onnx_prepared.errors``).
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from enum import IntEnum

from . import errors
from ._onnx_prepared import MAX_NEW_TOKENS
from ._onnx_prepared import InferenceSession as _NativeSession
from .errors import (
    BudgetError,
    CacheError,
    Cancelled,
    Error,
    ExternalDataError,
    InputError,
    KernelError,
    ModelError,
    PayloadError,
    PreparationError,
    ResolveError,
    SystemResourceError,
)

__version__ = "0.1.0"

__all__ = [
    "InferenceSession",
    "SessionOptions",
    "RunHandle",
    "NodeArg",
    "GraphOptimizationLevel",
    "get_available_providers",
    "get_device",
    "MAX_NEW_TOKENS",
    "errors",
    *errors.__all__,
]

CPU_PROVIDER = "CPUExecutionProvider"


def get_available_providers() -> list[str]:
    """The execution providers this runtime has: the CPU."""
    return [CPU_PROVIDER]


def get_device() -> str:
    return "CPU"


class NodeArg:
    """A graph input or output as onnxruntime describes it: ``name``,
    ``type`` (``"tensor(float)"``) and ``shape`` (ints for fixed dims, the
    parameter's name for symbolic ones, ``None`` for unknown ones)."""

    __slots__ = ("name", "type", "shape")

    def __init__(self, name: str, type: str, shape: list):  # noqa: A002 - onnxruntime's name
        self.name = name
        self.type = type
        self.shape = shape

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class GraphOptimizationLevel(IntEnum):
    """onnxruntime's levels, accepted for compatibility: this runtime
    always lowers the whole graph the same way."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class SessionOptions:
    """How a session runs.

    onnxruntime's fields:

    * ``intra_op_num_threads``: threads per run (the calling thread plus
      ``n - 1`` helpers); 0 (the default): one per core.
    * ``inter_op_num_threads``, ``graph_optimization_level``,
      ``log_severity_level`` and config entries: accepted, no effect.

    This runtime's own:

    * ``cache_dir``: the prepared cache's folder (packed weights written by
      one process, read by the next); ``cache_policy``: ``"disabled"``,
      ``"read-only"``, ``"build-if-missing"`` (the default with a
      ``cache_dir``) or ``"require-complete"``; ``cache_copy_in``: copy
      each cache payload into memory instead of mapping it (for cache
      folders other programs write: a mapped payload truncated while in
      use would kill the process);
    * ``memory_limits``: bytes per memory domain, e.g.
      ``{"prepared": 64 << 20, "total": 256 << 20}`` (domains
      ``preparation``, ``prepared``, ``execution``, ``io``; ``total`` for
      all of them);
    * ``map_weights``: map external data read-only and use aligned weights
      in place;
    * ``resident_tables``: read large tables that only row gathers read
      (embeddings) whole and keep them in memory; by default a run reads
      the rows it picks from the model's data file and the table never
      counts in the process's memory (a run after the data file was
      written, truncated or touched in place fails with an error saying it
      changed: open the model again);
    * ``portable``: scalar kernels and portable layouts instead of the CPU's
      SIMD ones;
    * ``int8_activations``: quantize MatMulNBits activations to int8 where
      the model asks for it (``accuracy_level = 4``), as onnxruntime does;
    * ``io_workers``: threads reading weights (0: the default, 2).
    """

    __slots__ = (
        "intra_op_num_threads",
        "inter_op_num_threads",
        "graph_optimization_level",
        "log_severity_level",
        "cache_dir",
        "cache_policy",
        "cache_copy_in",
        "memory_limits",
        "map_weights",
        "resident_tables",
        "portable",
        "int8_activations",
        "io_workers",
        "_config",
    )

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.log_severity_level = 2
        self.cache_dir = None
        self.cache_policy = None
        self.cache_copy_in = False
        self.memory_limits = None
        self.map_weights = False
        self.resident_tables = False
        self.portable = False
        self.int8_activations = False
        self.io_workers = 0
        self._config: dict[str, str] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[key] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        return self._config[key]


class RunHandle:
    """A run (or preparation) in flight, from ``run_async`` or
    ``prepare_async``: ``await handle`` in asyncio, or ``handle.result()``
    (blocks, the GIL released). ``cancel()`` stops it: its result then
    raises ``onnx_prepared.Cancelled``. Cancelling the asyncio task that
    awaits it cancels the run."""

    __slots__ = ("_handle",)

    def __init__(self, handle) -> None:
        self._handle = handle

    def done(self) -> bool:
        """Whether it finished (``result()`` would not block)."""
        return self._handle.done()

    def wait(self) -> None:
        """Blocks until it finished."""
        self._handle.wait()

    def cancel(self) -> None:
        self._handle.cancel()

    def result(self):
        """The outputs (a list of arrays, as ``run``; ``None`` for a
        preparation), or its error raised."""
        return self._handle.result()

    def __await__(self):
        if not self._handle.done():
            loop = asyncio.get_running_loop()
            finished = loop.create_future()
            threading.Thread(
                target=_notify, args=(self._handle, loop, finished), name="onnx_prepared-await", daemon=True
            ).start()
            try:
                yield from finished.__await__()
            except asyncio.CancelledError:
                self._handle.cancel()
                raise
        return self._handle.result()

    def __repr__(self) -> str:
        return f"<RunHandle {'done' if self.done() else 'running'}>"


def _notify(handle, loop, finished) -> None:
    """Waits (the GIL released) and wakes the awaiting task."""
    handle.wait()
    try:
        loop.call_soon_threadsafe(_settle, finished)
    except RuntimeError:  # the loop closed meanwhile: nobody awaits it
        pass


def _call_back(handle: RunHandle, callback, user_data) -> None:
    try:
        outputs, error = handle.result(), ""
    except Error as e:
        outputs, error = None, str(e)
    callback(outputs, user_data, error)


def _settle(finished) -> None:
    if not finished.done():
        finished.set_result(None)


class InferenceSession(_NativeSession):
    """``InferenceSession(path, sess_options=None, providers=None)``, as
    onnxruntime's: opens the model (its weights are read by the first run or
    by ``prepare()``); ``run(output_names, input_feed)`` returns a list of
    NumPy arrays.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs) -> None:
        # The model was opened by the native __new__ with these arguments.
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._inputs = [NodeArg(*a) for a in self._declared_inputs()]
        self._outputs = [NodeArg(*a) for a in self._declared_outputs()]
        if providers:
            names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers]
            if CPU_PROVIDER not in names:
                warnings.warn(
                    f"onnx_prepared runs on the CPU: {names} not available, using {CPU_PROVIDER}",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return []

    def get_session_options(self):
        return self._sess_options

    def get_provider_options(self) -> dict:
        return {CPU_PROVIDER: {}}

    def run_async(self, output_names, input_feed, callback=None, user_data=None, run_options=None) -> RunHandle:
        """Starts a run and returns at once (see ``RunHandle``). With
        ``callback`` (onnxruntime's form), ``callback(outputs, user_data,
        error)`` is called on another thread once the run finished:
        ``outputs`` a list of arrays and ``error`` ``""``, or ``outputs``
        ``None`` and ``error`` the message."""
        handle = RunHandle(super().run_async(output_names, input_feed, run_options))
        if callback is not None:
            threading.Thread(
                target=_call_back, args=(handle, callback, user_data), name="onnx_prepared-callback", daemon=True
            ).start()
        return handle

    def prepare_async(self) -> RunHandle:
        """Starts reading and prepacking every weight; returns at once."""
        return RunHandle(super().prepare_async())
