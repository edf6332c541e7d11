"""`IOBinding`: onnxruntime's binding of a session's inputs and outputs to
values, for `InferenceSession.run_with_iobinding`.

Bound inputs are used in place (a NumPy array's buffer, a raw CPU buffer,
or an `OrtValue`, which may be a previous run's output: no copy). Outputs
bound by name only come back as `OrtValue`s holding the run's outputs where
it left them, so a decoder loop that binds each step's `present` outputs as
the next step's `past` inputs never copies its KV cache. An output bound to
a preallocated value or buffer receives a copy of the result.

`bind_input` and `bind_output` with a `buffer_ptr` read and write raw
memory, as onnxruntime does: a wrong pointer, shape or type there can crash
the process. It is the one call of this package where that is so."""

from __future__ import annotations

import ctypes
import math

import numpy as np

from .errors import InputError
from .ortvalue import OrtValue, check_cpu, storage_dtype


def _raw_array(buffer_ptr: int, element_type, shape) -> np.ndarray:
    """An array over `buffer_ptr`'s memory (not a copy): the caller vouches
    for the address, shape and type."""
    dtype, onnx_type = storage_dtype(element_type)
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise InputError(f"shape {list(shape)} has a negative dimension")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype), onnx_type
    if not buffer_ptr:
        raise InputError("buffer_ptr is null")
    raw = (ctypes.c_byte * nbytes).from_address(int(buffer_ptr))
    return np.frombuffer(raw, dtype).reshape(shape), onnx_type


class IOBinding:
    """Inputs and outputs bound for `session.run_with_iobinding(binding)`;
    `IOBinding(session)` or `session.io_binding()`."""

    def __init__(self, session) -> None:
        self._session = session
        self._inputs: dict[str, OrtValue] = {}
        # Output name to the value it is written into (None: the run's own).
        self._outputs: dict[str, OrtValue | None] = {}
        self._results: list[OrtValue] = []

    def bind_cpu_input(self, name: str, arr_on_cpu) -> None:
        """Binds input `name` to a NumPy array, used in place."""
        self._inputs[name] = OrtValue.ortvalue_from_numpy(arr_on_cpu)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr) -> None:
        """Binds input `name` to `shape` elements of `element_type` (a NumPy
        type or an ONNX type number) at `buffer_ptr`, used in place."""
        check_cpu(device_type)
        a, onnx_type = _raw_array(buffer_ptr, element_type, shape)
        if onnx_type is None:
            self._inputs[name] = OrtValue.ortvalue_from_numpy(a)
        else:
            self._inputs[name] = OrtValue.ortvalue_from_numpy_with_onnx_type(a, onnx_type)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_input({name!r}): an onnx_prepared.OrtValue is expected")
        self._inputs[name] = ortvalue

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: inputs live in CPU memory."""

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None) -> None:
        """Binds output `name`: to the run's own value, or with
        `buffer_ptr` (and `element_type` and `shape`) to that memory,
        which receives a copy of the result."""
        check_cpu(device_type)
        if buffer_ptr is None:
            self._outputs[name] = None
            return
        if element_type is None or shape is None:
            raise ValueError("`element_type` and `shape` are to be provided if pre-allocated memory is provided")
        a, onnx_type = _raw_array(buffer_ptr, element_type, shape)
        value = (
            OrtValue.ortvalue_from_numpy(a)
            if onnx_type is None
            else OrtValue.ortvalue_from_numpy_with_onnx_type(a, onnx_type)
        )
        self._outputs[name] = value

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Binds output `name` to `ortvalue`, which receives a copy of the
        result (same shape and type)."""
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_output({name!r}): an onnx_prepared.OrtValue is expected")
        self._outputs[name] = ortvalue

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: outputs live in CPU memory."""

    def get_outputs(self) -> list[OrtValue]:
        """The bound outputs of the last run, in binding order."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> list[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        """The bound outputs of the last run as NumPy arrays (copies)."""
        return [np.array(v.numpy()) for v in self._results]

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def _run(self, run_options) -> None:
        """One run of the session on the bound values
        (`InferenceSession.run_with_iobinding`)."""
        if not self._outputs:
            raise InputError("run_with_iobinding: no output is bound (bind_output or bind_ortvalue_output first)")
        names = list(self._outputs)
        feeds = {n: v._ortvalue for n, v in self._inputs.items()}
        values = self._session._run_values(names, feeds, run_options)
        results = []
        for name, produced in zip(names, values):
            target = self._outputs[name]
            if target is None:
                results.append(OrtValue(produced))
                continue
            result = OrtValue(produced).numpy()
            dest = target.numpy()
            if dest.shape != result.shape or dest.dtype != result.dtype:
                raise InputError(
                    f"output `{name}` is {result.dtype}{list(result.shape)} but the bound buffer is "
                    f"{dest.dtype}{list(dest.shape)}"
                )
            np.copyto(dest, result)
            results.append(target)
        self._results = results


__all__ = ["IOBinding"]
