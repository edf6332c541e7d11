"""The exceptions of onnx_prepared: one class per kind of runtime error, all
subclasses of `Error`, whose `kind` attribute names the kind (the Rust
`ErrorKind`). An error of a run or a preparation also names the task that
failed (`failed_task`: "run", or the preparation task, e.g. a weight's read)
and that task's own message (`failure`).

Bad inputs raise `InputError`, which is also a `ValueError`."""

from __future__ import annotations


class Error(Exception):
    """Any error of the runtime."""

    kind = "error"

    def __init__(self, message: str = "", *, failed_task: str | None = None, failure: str | None = None):
        super().__init__(message)
        self.message = message
        self.failed_task = failed_task
        self.failure = failure


class ModelError(Error):
    """The model file cannot be read or decoded."""

    kind = "model"


class ExternalDataError(Error):
    """An external data reference is invalid or its file cannot be opened."""

    kind = "external_data"


class PayloadError(Error):
    """A weight's bytes cannot be read, or fail their checksum."""

    kind = "payload"


class ResolveError(Error):
    """The graph cannot be resolved: unsupported operators, types or attributes."""

    kind = "resolve"


class InputError(Error, ValueError):
    """Bad inputs to a run: unknown or missing names, wrong types or shapes."""

    kind = "input"


class KernelError(Error):
    """A kernel failed while running."""

    kind = "kernel"


class BudgetError(Error):
    """A memory limit refused an allocation."""

    kind = "budget"


class PreparationError(Error):
    """A prepared object (a read and prepacked weight) the run needed could not be produced."""

    kind = "preparation"


class Cancelled(Error):
    """The run or preparation was cancelled."""

    kind = "cancelled"


class SystemResourceError(Error):
    """The system refused a resource other than memory (a thread)."""

    kind = "system"


class CacheError(Error):
    """The prepared cache cannot be used."""

    kind = "cache"


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
]
