"""The exceptions of onnx_prepared: one class per kind of runtime error, all
subclasses of `Error`, whose `kind` attribute names the kind (the Rust
`ErrorKind`). An error of a run or a preparation also names the task that
failed (`failed_task`: "run", or the preparation task, e.g. a weight's read)
and that task's own message (`failure`).

Bad inputs raise `InputError`, which is also a `ValueError`. Each class
also derives from the exception onnxruntime raises for the same failure
(`onnx_prepared.capi.onnxruntime_pybind11_state`), so code written for
onnxruntime catches it."""

from __future__ import annotations

from .capi import onnxruntime_pybind11_state as _ort


class Error(Exception):
    """Any error of the runtime."""

    kind = "error"

    def __init__(self, message: str = "", *, failed_task: str | None = None, failure: str | None = None):
        super().__init__(message)
        self.message = message
        self.failed_task = failed_task
        self.failure = failure


class ModelError(Error, _ort.InvalidProtobuf):
    """The model file cannot be read or decoded."""

    kind = "model"


class ExternalDataError(Error, _ort.Fail):
    """An external data reference is invalid or its file cannot be opened."""

    kind = "external_data"


class PayloadError(Error, _ort.Fail):
    """A weight's bytes cannot be read, or fail their checksum."""

    kind = "payload"


class ResolveError(Error, _ort.NotImplemented):
    """The graph cannot be resolved: unsupported operators, types or attributes."""

    kind = "resolve"


class InputError(Error, _ort.InvalidArgument, ValueError):
    """Bad inputs to a run: unknown or missing names, wrong types or shapes."""

    kind = "input"


class KernelError(Error, _ort.RuntimeException):
    """A kernel failed while running."""

    kind = "kernel"


class BudgetError(Error, _ort.RuntimeException):
    """A memory limit refused an allocation."""

    kind = "budget"


class PreparationError(Error, _ort.RuntimeException):
    """A prepared object (a read and prepacked weight) the run needed could not be produced."""

    kind = "preparation"


class Cancelled(Error, _ort.Fail):
    """The run or preparation was cancelled."""

    kind = "cancelled"


class SystemResourceError(Error, _ort.RuntimeException):
    """The system refused a resource other than memory (a thread)."""

    kind = "system"


class CacheError(Error, _ort.Fail):
    """The prepared cache cannot be used."""

    kind = "cache"


class Terminated(Cancelled, RuntimeError):
    """A run ended by `RunOptions.terminate` (onnxruntime raises `Fail`
    from `run` and a `RuntimeError` from `run_with_iobinding`: this is
    both)."""

    kind = "cancelled"


class Unsupported(Error, _ort.NotImplemented, NotImplementedError):
    """An onnxruntime feature this runtime refuses (custom operator
    libraries, other execution providers' device memory, sparse tensors):
    the message says what to do instead."""

    kind = "unsupported"


__all__ = [
    "Error",
    "ModelError",
    "ExternalDataError",
    "PayloadError",
    "ResolveError",
    "InputError",
    "KernelError",
    "BudgetError",
    "PreparationError",
    "Cancelled",
    "SystemResourceError",
    "CacheError",
    "Terminated",
    "Unsupported",
]
