"""`patch_onnxruntime()`: makes code written for onnxruntime, unchanged,
run on this runtime in this process; `unpatch_onnxruntime()` undoes it.

With onnxruntime installed, its public classes and functions
(`InferenceSession`, `SessionOptions`, `RunOptions`, `IOBinding`,
`OrtValue`, `get_available_providers`, ...) and its exception classes
(`onnxruntime.capi.onnxruntime_pybind11_state.Fail`, ...) are replaced by
this package's wherever they are bound: in onnxruntime's own modules and in
every module already imported that took them by name (`from onnxruntime
import InferenceSession`), so a library imported before the call is
covered too. Without onnxruntime, `import onnxruntime` gives a module made
of this package's classes (its `__version__` is the onnxruntime release
whose Python API this package follows)."""

from __future__ import annotations

import sys
import threading
import types

from . import binding, options, ortvalue, session
from .capi import onnxruntime_pybind11_state as _state

ORT_API_VERSION = session.ORT_API_VERSION

_REPLACEMENTS = {
    "InferenceSession": session.InferenceSession,
    "SessionOptions": options.SessionOptions,
    "RunOptions": options.RunOptions,
    "IOBinding": binding.IOBinding,
    "SessionIOBinding": binding.IOBinding,
    "OrtValue": ortvalue.OrtValue,
    "NodeArg": session.NodeArg,
    "ModelMetadata": session.ModelMetadata,
    "GraphOptimizationLevel": options.GraphOptimizationLevel,
    "ExecutionMode": options.ExecutionMode,
    "ExecutionOrder": options.ExecutionOrder,
    "get_available_providers": session.get_available_providers,
    "get_all_providers": session.get_all_providers,
    "get_device": session.get_device,
}

_lock = threading.Lock()
# (namespace dict, key, original) of every replacement made, to undo.
_undo: list[tuple[dict, str, object]] = []
_shim_modules: list[str] = []


def _originals() -> dict[int, object]:
    """onnxruntime's objects (by id) and what replaces each."""
    import onnxruntime  # noqa: PLC0415 - only when patching
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state  # noqa: PLC0415

    out = {}
    for name, ours in _REPLACEMENTS.items():
        for where in (onnxruntime, ort_state):
            theirs = getattr(where, name, None)
            if theirs is not None and theirs is not ours:
                out[id(theirs)] = (theirs, ours)
    for cls in _state.EXCEPTIONS:
        theirs = getattr(ort_state, cls.__name__, None)
        if theirs is not None:
            out[id(theirs)] = (theirs, cls)
    return out


def patch_onnxruntime() -> None:
    """Makes `import onnxruntime` code use this runtime (see the module
    docs). Calling it again rebinds what was imported since."""
    with _lock:
        try:
            originals = _originals()
        except ImportError:
            _install_shim()
            return
        for module in list(sys.modules.values()):
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict) or module is None:
                continue
            if getattr(module, "__name__", "").startswith("onnx_prepared"):
                continue
            for key, value in list(namespace.items()):
                hit = originals.get(id(value))
                if hit is not None and hit[0] is value:
                    namespace[key] = hit[1]
                    _undo.append((namespace, key, value))


def unpatch_onnxruntime() -> None:
    """Restores what `patch_onnxruntime` replaced."""
    with _lock:
        while _undo:
            namespace, key, original = _undo.pop()
            namespace[key] = original
        for name in _shim_modules:
            sys.modules.pop(name, None)
        _shim_modules.clear()


def _install_shim() -> None:
    """`onnxruntime` (and its `capi` exception module) made of this
    package, for a process without onnxruntime."""
    if "onnxruntime" in sys.modules:
        return
    root = types.ModuleType("onnxruntime", "onnx_prepared standing in for onnxruntime")
    for name, ours in _REPLACEMENTS.items():
        setattr(root, name, ours)
    root.__version__ = ORT_API_VERSION
    for name in session.MODULE_FUNCTIONS:
        setattr(root, name, getattr(session, name))
    capi = types.ModuleType("onnxruntime.capi")
    capi.onnxruntime_pybind11_state = _state
    root.capi = capi
    root.__path__ = []  # a package, so that submodule imports resolve here
    capi.__path__ = []
    for name, module in (
        ("onnxruntime", root),
        ("onnxruntime.capi", capi),
        ("onnxruntime.capi.onnxruntime_pybind11_state", _state),
    ):
        sys.modules[name] = module
        _shim_modules.append(name)


__all__ = ["patch_onnxruntime", "unpatch_onnxruntime"]
