"""`InferenceSession` (onnxruntime's, over the runtime's session), its
`NodeArg` and `ModelMetadata` descriptions, and the `RunHandle` of an
asynchronous run."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
import warnings

from ._onnx_prepared import InferenceSession as _NativeSession
from .binding import IOBinding
from .errors import Error, InputError, Unsupported
from .options import SessionOptions
from .ortvalue import OrtValue

CPU_PROVIDER = "CPUExecutionProvider"
# The onnxruntime release whose Python API this package follows.
ORT_API_VERSION = "1.32.0"


def get_available_providers() -> list[str]:
    """The execution providers this runtime has: the CPU."""
    return [CPU_PROVIDER]


def get_all_providers() -> list[str]:
    return [CPU_PROVIDER]


def get_device() -> str:
    return "CPU"


def get_version_string() -> str:
    """The onnxruntime release whose Python API this package follows."""
    return ORT_API_VERSION


def get_build_info() -> str:
    return f"onnx_prepared (onnxruntime {ORT_API_VERSION} Python API), CPU"


def set_default_logger_severity(severity: int) -> None:
    """Accepted, no effect: the runtime reports through exceptions."""


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accepted, no effect."""


def set_seed(seed: int) -> None:
    """Accepted, no effect: no kernel here draws random numbers."""


def disable_telemetry_events() -> None:
    """Accepted, no effect: this runtime sends no telemetry."""


def enable_telemetry_events() -> None:
    """Accepted, no effect: this runtime sends no telemetry."""


def preload_dlls(*args, **kwargs) -> None:
    """Accepted, no effect: there are no provider libraries to load."""


def get_ep_devices() -> list:
    """No execution provider devices: every run is on the CPU."""
    return []


# onnxruntime's module functions this package has with no counterpart of
# its own (no-ops or fixed answers); `patch` gives its shim module these too.
MODULE_FUNCTIONS = (
    "get_version_string",
    "get_build_info",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_seed",
    "disable_telemetry_events",
    "enable_telemetry_events",
    "preload_dlls",
    "get_ep_devices",
)


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


class ModelMetadata:
    """The model's metadata (onnxruntime's ``get_modelmeta()``):
    ``producer_name``, ``graph_name``, ``domain``, ``description`` (the
    model's doc string), ``graph_description``, ``version`` and
    ``custom_metadata_map`` (the model's ``metadata_props``, a dict)."""

    __slots__ = (
        "producer_name",
        "graph_name",
        "domain",
        "description",
        "graph_description",
        "version",
        "custom_metadata_map",
    )

    def __init__(self, **fields) -> None:
        for k in self.__slots__:
            setattr(self, k, fields[k])

    def __repr__(self) -> str:
        return f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r})"


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


def _provider_names(providers) -> list[str]:
    return [p[0] if isinstance(p, (tuple, list)) else str(p) for p in providers or []]


def _check_providers(providers, stacklevel: int) -> None:
    names = _provider_names(providers)
    others = [n for n in names if n != CPU_PROVIDER]
    if others:
        warnings.warn(
            f"onnx_prepared runs on the CPU: {others} not available, using {CPU_PROVIDER}",
            RuntimeWarning,
            stacklevel=stacklevel + 1,
        )


class InferenceSession(_NativeSession):
    """``InferenceSession(path, sess_options=None, providers=None)``, as
    onnxruntime's: opens the model (its weights are read by the first run or
    by ``prepare()``); ``run(output_names, input_feed)`` returns a list of
    NumPy arrays.
    """

    def __new__(cls, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        if isinstance(sess_options, SessionOptions):
            sess_options._report()
        folder = None
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            # A serialized model (no external data): written to a file of
            # its own, which the session reads its weights from and which
            # goes when the session does.
            folder = tempfile.TemporaryDirectory(prefix="onnx_prepared-")
            path = os.path.join(folder.name, "model.onnx")
            with open(path, "wb") as f:
                f.write(path_or_bytes)
            path_or_bytes = path
        elif isinstance(path_or_bytes, os.PathLike):
            path_or_bytes = os.fspath(path_or_bytes)
        try:
            self = super().__new__(cls, path_or_bytes, sess_options, providers, provider_options, **kwargs)
        except BaseException:
            if folder is not None:
                folder.cleanup()
            raise
        self._model_folder = folder
        self._model_path = path_or_bytes
        return self

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs) -> None:
        # The model was opened by the native __new__ (which set
        # `_model_path`, the file it opened).
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._enable_fallback = bool(kwargs.get("enable_fallback", True))
        self._profiling_start_ns = time.monotonic_ns() if getattr(self._sess_options, "enable_profiling", False) else 0
        self._inputs = [NodeArg(*a) for a in self._declared_inputs()]
        self._outputs = [NodeArg(*a) for a in self._declared_outputs()]
        self._set_providers(providers, provider_options, stacklevel=2)

    def _set_providers(self, providers, provider_options, stacklevel: int) -> None:
        _check_providers(providers, stacklevel + 1)
        options = {}
        for i, p in enumerate(providers or []):
            if isinstance(p, (tuple, list)) and len(p) > 1:
                options[p[0]] = {str(k): str(v) for k, v in dict(p[1]).items()}
            elif provider_options and i < len(provider_options):
                options[str(p)] = {str(k): str(v) for k, v in dict(provider_options[i]).items()}
        self._providers = [CPU_PROVIDER]
        self._provider_options = {CPU_PROVIDER: options.get(CPU_PROVIDER, {})}

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> list[NodeArg]:
        return []

    def get_session_options(self):
        return self._sess_options

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata(**self._model_meta())

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict:
        return {k: dict(v) for k, v in self._provider_options.items()}

    def set_providers(self, providers=None, provider_options=None) -> None:
        """Accepted: the session keeps running on the CPU (another provider
        warns, as in the constructor)."""
        self._set_providers(providers, provider_options, stacklevel=2)

    def enable_fallback(self) -> None:
        """Accepted: there is no other provider to fall back from."""
        self._enable_fallback = True

    def disable_fallback(self) -> None:
        """Accepted: there is no other provider to fall back from."""
        self._enable_fallback = False

    def end_profiling(self) -> str:
        """Writes the trace recorded since the session opened to a new file
        and returns its name (once: later calls return ``""``, as
        onnxruntime's); ``""`` when ``SessionOptions.enable_profiling`` was
        off."""
        if getattr(self, "_profiling_ended", False):
            return ""
        self._profiling_ended = True
        prefix = getattr(self._sess_options, "profile_file_prefix", None) or "onnxruntime_profile_"
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        for n in range(1000):
            path = f"{prefix}_{stamp}.json" if n == 0 else f"{prefix}_{stamp}_{n}.json"
            if os.path.exists(path):
                continue
            return path if self._end_profiling(path) else ""
        raise OSError(f"no free profile file name for prefix {prefix!r}")

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (``time.monotonic_ns()``), 0 when off."""
        return self._profiling_start_ns

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

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None) -> list[OrtValue]:
        """``run`` on ``OrtValue`` inputs (used in place), returning
        ``OrtValue`` outputs (the run's own, not copied)."""
        feeds = {}
        for name, v in input_dict_ort_values.items():
            if not isinstance(v, OrtValue):
                raise TypeError(f"input `{name}`: an onnx_prepared.OrtValue is expected")
            feeds[name] = v._ortvalue
        return [OrtValue(v) for v in self._run_values(output_names or None, feeds, run_options)]

    def run_with_ortvaluevector(self, run_options, feed_names, feeds, fetch_names, fetches, fetch_devices) -> None:
        """``run_with_ort_values`` in onnxruntime's low-level form: the
        outputs replace the contents of the list ``fetches``."""
        if len(feed_names) != len(feeds):
            raise InputError(f"{len(feed_names)} feed names for {len(feeds)} values")
        outputs = self.run_with_ort_values(list(fetch_names), dict(zip(feed_names, feeds)), run_options)
        fetches[:] = outputs

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options=None) -> None:
        """Runs on the binding's inputs; its outputs come back through
        ``iobinding.get_outputs()`` (or the values and buffers bound)."""
        if not isinstance(iobinding, IOBinding):
            raise TypeError("run_with_iobinding: an onnx_prepared.IOBinding is expected")
        if iobinding._session is not self:
            raise ValueError("IOBinding must be used with the session that created it.")
        iobinding._run(run_options)

    def create_ortvalue_from_shape_and_type(self, shape, element_type, device_type, device_id=0, vendor_id=-1) -> OrtValue:
        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type, device_id)

    def get_tuning_results(self) -> list:
        """No kernel tuning results: the runtime tunes nothing per session."""
        return []

    def set_tuning_results(self, results, *, error_on_invalid=False) -> None:
        """Accepted, no effect (see ``get_tuning_results``)."""

    def release_captured_graph(self, graph_annotation_id: int = 0) -> None:
        """Accepted, no effect: no device graph is captured."""

    def get_input_memory_infos(self):
        raise Unsupported("get_input_memory_infos: every input lives in CPU memory")

    def get_output_memory_infos(self):
        raise Unsupported("get_output_memory_infos: every output lives in CPU memory")

    def get_input_epdevices(self):
        raise Unsupported("get_input_epdevices: this runtime has no execution provider devices, only the CPU")

    def get_provider_graph_assignment_info(self):
        raise Unsupported("get_provider_graph_assignment_info: every node runs on the CPU")

    def set_ep_dynamic_options(self, options: dict) -> None:
        raise Unsupported("set_ep_dynamic_options: there is no execution provider to configure")
