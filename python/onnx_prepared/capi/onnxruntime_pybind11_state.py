"""onnxruntime's exception classes, by its names, so that code written for
onnxruntime catches this runtime's errors: every `onnx_prepared.Error`
subclass also derives from the class onnxruntime raises for the same
failure (`InputError` is an `InvalidArgument`, a run ended by
`RunOptions.terminate` a `Fail`, an unsupported operator a
`NotImplemented`, a model that cannot be decoded an `InvalidProtobuf`).

As in onnxruntime, each derives from `Exception` only."""

from __future__ import annotations


class Fail(Exception):
    pass


class InvalidArgument(Exception):
    pass


class NoSuchFile(Exception):
    pass


class NoModel(Exception):
    pass


class EngineError(Exception):
    pass


class RuntimeException(Exception):
    pass


class InvalidProtobuf(Exception):
    pass


class ModelLoaded(Exception):
    pass


class NotImplemented(Exception):  # noqa: A001 - onnxruntime's name
    pass


class InvalidGraph(Exception):
    pass


class EPFail(Exception):
    pass


class ModelLoadCanceled(Exception):
    pass


class ModelRequiresCompilation(Exception):
    pass


class NotFound(Exception):
    pass


class DeviceReset(Exception):
    pass


EXCEPTIONS = (
    Fail,
    InvalidArgument,
    NoSuchFile,
    NoModel,
    EngineError,
    RuntimeException,
    InvalidProtobuf,
    ModelLoaded,
    NotImplemented,
    InvalidGraph,
    EPFail,
    ModelLoadCanceled,
    ModelRequiresCompilation,
    NotFound,
    DeviceReset,
)
