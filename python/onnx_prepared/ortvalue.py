"""`OrtValue`: onnxruntime's value type, a tensor on the CPU.

A value made from a NumPy array (`ortvalue_from_numpy`, or a bound CPU
input) uses the array's buffer in place, as onnxruntime does: writes to the
array show in the value and `numpy()` returns a view of it. A value a run
produced (`run_with_ort_values`, `IOBinding.get_outputs()`) holds the
run's output where the run left it; binding it as another run's input (a
KV cache) is free. Its first `numpy()` copies it once into an array, which
the value uses from then on (later `numpy()` calls are views)."""

from __future__ import annotations

import numpy as np

from ._onnx_prepared import _Value
from .errors import InputError, Unsupported

# ONNX TensorProto element types and their NumPy dtypes.
ONNX_TO_NUMPY = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    4: np.uint16,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
    12: np.uint32,
    13: np.uint64,
}
NUMPY_TO_ONNX = {np.dtype(t): code for code, t in ONNX_TO_NUMPY.items()}
# Stored as 16-bit integers, read as bfloat16 (NumPy has no bfloat16).
BFLOAT16 = 16

TYPE_NAMES = {
    1: "float",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "double",
    12: "uint32",
    13: "uint64",
    16: "bfloat16",
}


def check_cpu(device_type: str) -> None:
    if str(device_type).lower() != "cpu":
        raise Unsupported(f"onnx_prepared runs on the CPU: device_type {device_type!r} is not available, use 'cpu'")


def storage_dtype(element_type) -> tuple[np.dtype, int | None]:
    """The NumPy dtype that holds `element_type` (a NumPy type or an ONNX
    type number), and the ONNX type to read it as when NumPy has none."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        code = int(element_type)
        if code == BFLOAT16:
            return np.dtype(np.uint16), BFLOAT16
        if code not in ONNX_TO_NUMPY:
            raise InputError(f"ONNX element type {code} is not supported")
        return np.dtype(ONNX_TO_NUMPY[code]), None
    try:
        return np.dtype(element_type), None
    except TypeError as e:
        raise InputError(f"element type {element_type!r}: {e}") from None


def contiguous(array) -> np.ndarray:
    """`array` as a C-contiguous, aligned, native-order array (itself when
    it is one already)."""
    a = np.asarray(array)
    if not (a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative):
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
    return a


class OrtValue:
    """A tensor on the CPU (onnxruntime's `OrtValue`)."""

    __slots__ = ("_ortvalue", "_numpy_obj", "__weakref__")

    def __init__(self, ortvalue: _Value, numpy_obj: np.ndarray | None = None) -> None:
        if not isinstance(ortvalue, _Value):
            raise TypeError("OrtValue wraps a value made by onnx_prepared; use OrtValue.ortvalue_from_numpy")
        self._ortvalue = ortvalue
        # The array whose buffer the value uses, if any.
        self._numpy_obj = numpy_obj

    @classmethod
    def ortvalue_from_numpy(cls, numpy_obj, /, device_type="cpu", device_id=0, vendor_id=-1) -> OrtValue:
        """A value over `numpy_obj`'s buffer (no copy when it is
        C-contiguous, aligned and in native byte order)."""
        check_cpu(device_type)
        a = contiguous(numpy_obj)
        return cls(_Value.from_array(a), a)

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data, /, onnx_element_type: int) -> OrtValue:
        """A value over `data`'s buffer whose elements are read as ONNX
        type `onnx_element_type` (same element size: bfloat16 over uint16)."""
        a = contiguous(data)
        return cls(_Value.from_array(a, int(onnx_element_type)), a)

    @classmethod
    def ortvalue_from_shape_and_type(
        cls, shape, element_type, device_type="cpu", device_id=0, vendor_id=-1, memory_info=None
    ) -> OrtValue:
        """A zeroed value of `shape` and `element_type` (a NumPy type or an
        ONNX type number)."""
        check_cpu(device_type)
        dtype, onnx_type = storage_dtype(element_type)
        a = np.zeros(tuple(int(d) for d in shape), dtype)
        return cls(_Value.from_array(a, onnx_type), a)

    @classmethod
    def ort_value_from_sparse_tensor(cls, sparse_tensor) -> OrtValue:
        raise Unsupported("onnx_prepared has no sparse tensors: pass a dense array")

    @classmethod
    def from_dlpack(cls, data, /) -> OrtValue:
        """A value over a DLPack CPU tensor's memory (through NumPy, no copy)."""
        return cls.ortvalue_from_numpy(np.from_dlpack(data))

    def as_sparse_tensor(self):
        raise Unsupported("onnx_prepared has no sparse tensors: this value is dense")

    def data_ptr(self) -> int:
        return self._ortvalue.data_ptr()

    def device_name(self) -> str:
        return "cpu"

    def shape(self) -> list[int]:
        return self._ortvalue.shape()

    def data_type(self) -> str:
        return f"tensor({TYPE_NAMES.get(self.element_type(), 'undefined')})"

    def element_type(self) -> int:
        return self._ortvalue.onnx_type()

    def tensor_size_in_bytes(self) -> int:
        return self._ortvalue.nbytes()

    def has_value(self) -> bool:
        return True

    def is_tensor(self) -> bool:
        return True

    def is_sparse_tensor(self) -> bool:
        return False

    def is_tensor_sequence(self) -> bool:
        return False

    def numpy(self) -> np.ndarray:
        """The elements as a NumPy array that shares the value's memory."""
        if self._numpy_obj is None:
            # A run's output: copied once into an array the value uses
            # from then on.
            a = self._ortvalue.to_numpy()
            onnx_type = self.element_type()
            if onnx_type == BFLOAT16 and a.dtype != np.uint16:
                a = a.view(np.uint16)
            self._ortvalue = _Value.from_array(a, onnx_type if onnx_type == BFLOAT16 else None)
            self._numpy_obj = a
        return self._numpy_obj.view()

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        a = self.numpy()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __dlpack__(self, *, stream=None):
        return self.numpy().__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

    def update_inplace(self, data) -> None:
        """Copies `data` (an array or an OrtValue of the same shape and
        type) into the value's memory."""
        source = data.numpy() if isinstance(data, OrtValue) else np.asarray(data)
        target = self.numpy()
        if list(source.shape) != list(target.shape) or source.dtype != target.dtype:
            raise InputError(
                f"update_inplace: {source.dtype}{list(source.shape)} does not fit the value's "
                f"{target.dtype}{list(target.shape)}"
            )
        np.copyto(target, source)

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, shape={self.shape()})"
