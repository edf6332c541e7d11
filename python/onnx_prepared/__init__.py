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

The rest of onnxruntime's Python surface is here too: ``OrtValue``,
``IOBinding`` (bound values used in place; a decoder's KV cache moves from
one step to the next with no copy), ``RunOptions`` (``terminate`` cancels),
``get_modelmeta()``, profiling. ``patch_onnxruntime()`` makes code that
imports onnxruntime use this runtime.

The GIL is released while a run, a preparation or a wait goes on. Errors
are ``onnx_prepared.Error`` subclasses whose ``kind`` names the runtime's
error kind (``onnx_prepared.errors``); each is also the exception class
onnxruntime raises for the same failure.
"""

from __future__ import annotations

from . import errors
from ._onnx_prepared import MAX_NEW_TOKENS
from .binding import IOBinding
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
    Terminated,
    Unsupported,
)
from .options import (
    ConfigEntryIgnored,
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    RunOptions,
    SessionOptions,
)
from .ortvalue import OrtValue
from .patch import patch_onnxruntime, unpatch_onnxruntime
from .session import (
    MODULE_FUNCTIONS,
    InferenceSession,
    ModelMetadata,
    NodeArg,
    RunHandle,
    disable_telemetry_events,
    enable_telemetry_events,
    get_all_providers,
    get_available_providers,
    get_build_info,
    get_device,
    get_ep_devices,
    get_version_string,
    preload_dlls,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_seed,
)

__version__ = "0.1.0"

__all__ = [
    "InferenceSession",
    "SessionOptions",
    "RunOptions",
    "RunHandle",
    "IOBinding",
    "OrtValue",
    "NodeArg",
    "ModelMetadata",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "ExecutionOrder",
    "ConfigEntryIgnored",
    "get_available_providers",
    "get_all_providers",
    "get_device",
    *MODULE_FUNCTIONS,
    "patch_onnxruntime",
    "unpatch_onnxruntime",
    "MAX_NEW_TOKENS",
    "errors",
    *errors.__all__,
]
