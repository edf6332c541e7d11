//! NumPy arrays to tensors and back (hot path of every run).
//!
//! * In: a C-contiguous, aligned, native-order array of a supported dtype
//!   becomes a shared tensor over the array's own buffer
//!   ([`Tensor::shared`]: no copy), the tensor holding a reference to the
//!   array for as long as it lives. Anything else (a list, a scalar, a
//!   strided view, another byte order) goes through `numpy.asarray` /
//!   `astype` first, at the input's declared type when it is not an array;
//!   `bool` arrays are copied (the runtime's `bool` is checked per byte).
//! * Out: a run hands its output tensors over without a copy; each is
//!   copied once into the vector the NumPy array owns from then on
//!   (`IntoPyArray`). The runtime's buffers start on 64-byte boundaries,
//!   which a vector handed to NumPy cannot keep.
//!
//! As with onnxruntime, an input array must not be written by another
//! thread while a run that reads it is in flight.

use std::sync::Arc;

use numpy::ndarray::{ArrayD, IxDyn};
use numpy::{
    Element, IntoPyArray, PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use onnx_prepared::{ElementType, Tensor};
use onnx_prepared_kernels::{SharedBytes, TensorData};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

use crate::errors;

static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))?
        .bind(py))
}

/// The buffer of a NumPy array, borrowed by a shared tensor and kept alive
/// by the reference it holds.
struct ArrayBytes {
    /// Keeps the array, and so its buffer, alive.
    array: Py<PyUntypedArray>,
    /// The buffer's address (exposed provenance) and length.
    addr: usize,
    len: usize,
}

impl std::fmt::Debug for ArrayBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrayBytes")
            .field("array", &self.array.as_ptr())
            .field("len", &self.len)
            .finish()
    }
}

impl SharedBytes for ArrayBytes {
    fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        let ptr = std::ptr::with_exposed_provenance::<u8>(self.addr);
        // SAFETY:
        // * `addr`/`len` are the data pointer and byte length of the
        //   C-contiguous array `self.array` (checked in `tensor_from_numpy`),
        //   which this value keeps alive: NumPy frees or moves an array's
        //   buffer only when the array dies, or on an in-place `resize`,
        //   which it refuses while another reference (this one) exists.
        // * The bytes are only read, never written through this slice; a
        //   Python thread writing the array while a run reads it is the
        //   documented misuse onnxruntime shares (module docs).
        unsafe { std::slice::from_raw_parts(ptr, self.len) }
    }
}

/// The runtime's element type of a NumPy dtype, if it has one.
fn element_type(dtype: &Bound<'_, PyArrayDescr>) -> Option<ElementType> {
    use ElementType as T;
    Some(match (dtype.kind(), dtype.itemsize()) {
        (b'f', 4) => T::F32,
        (b'f', 8) => T::F64,
        (b'f', 2) => T::F16,
        (b'i', 1) => T::I8,
        (b'i', 2) => T::I16,
        (b'i', 4) => T::I32,
        (b'i', 8) => T::I64,
        (b'u', 1) => T::U8,
        (b'u', 2) => T::U16,
        (b'u', 4) => T::U32,
        (b'u', 8) => T::U64,
        (b'b', 1) => T::Bool,
        // ml_dtypes' bfloat16 (a user-defined dtype).
        (_, 2) if dtype.typeobj().name().ok()?.to_cow().ok()? == "bfloat16" => T::BF16,
        _ => return None,
    })
}

/// The NumPy dtype a non-array value of a `declared` input is converted to.
fn numpy_dtype(py: Python<'_>, declared: ElementType) -> Option<Bound<'_, PyArrayDescr>> {
    use ElementType as T;
    Some(match declared {
        T::F32 => f32::get_dtype(py),
        T::F64 => f64::get_dtype(py),
        T::F16 => half::f16::get_dtype(py),
        T::I8 => i8::get_dtype(py),
        T::I16 => i16::get_dtype(py),
        T::I32 => i32::get_dtype(py),
        T::I64 => i64::get_dtype(py),
        T::U8 => u8::get_dtype(py),
        T::U16 => u16::get_dtype(py),
        T::U32 => u32::get_dtype(py),
        T::U64 => u64::get_dtype(py),
        T::Bool => bool::get_dtype(py),
        _ => return None,
    })
}

/// Input `name`'s value as a tensor (no copy for a suitable array).
pub fn tensor_from_numpy(
    py: Python<'_>,
    name: &str,
    value: &Bound<'_, PyAny>,
    declared: Option<ElementType>,
) -> PyResult<Tensor> {
    let mut array = match value.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => {
            let dtype = declared.and_then(|d| numpy_dtype(py, d));
            numpy(py)?
                .call_method1("asarray", (value, dtype))
                .and_then(|a| Ok(a.cast_into::<PyUntypedArray>()?))
                .map_err(|e| {
                    errors::input(
                        py,
                        format!("input `{name}`: not convertible to an array: {e}"),
                    )
                })?
        }
    };
    let dtype = array.dtype();
    if element_type(&dtype).is_none() {
        return Err(errors::input(
            py,
            format!("input `{name}`: NumPy dtype {dtype} is not supported"),
        ));
    }
    if !is_plain(&array) {
        // A copy in native order, C order, aligned.
        let native = dtype.call_method1("newbyteorder", ("=",))?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("order", "C")?;
        array = array
            .call_method("astype", (native,), Some(&kwargs))?
            .cast_into::<PyUntypedArray>()?;
    }
    tensor_over_array(py, &format!("input `{name}`"), &array, None)
}

/// Whether `array`'s buffer can be viewed as it is: C-contiguous, aligned,
/// in native byte order.
fn is_plain(array: &Bound<'_, PyUntypedArray>) -> bool {
    array.is_c_contiguous()
        && array.is_aligned()
        && array.dtype().is_native_byteorder() != Some(false)
}

/// A tensor over `array`'s buffer, which it keeps alive (no copy; `bool`
/// is copied): the array must be C-contiguous, aligned and in native byte
/// order. Its elements are read as `element` when given (an element type
/// of the same size, e.g. bfloat16 over `uint16`), else as its dtype.
pub fn tensor_over_array(
    py: Python<'_>,
    name: &str,
    array: &Bound<'_, PyUntypedArray>,
    element: Option<ElementType>,
) -> PyResult<Tensor> {
    let dtype = array.dtype();
    let Some(element) = element.or_else(|| element_type(&dtype)) else {
        return Err(errors::input(
            py,
            format!("{name}: NumPy dtype {dtype} is not supported"),
        ));
    };
    if !is_plain(array) {
        return Err(errors::input(
            py,
            format!("{name}: the array must be C-contiguous, aligned and in native byte order"),
        ));
    }
    let shape = array.shape().to_vec();
    let len = array.len() * dtype.itemsize();
    // SAFETY: `as_array_ptr` is the live array object `array` holds; its
    // `data` field is the buffer's address, read under the GIL.
    let data = unsafe { (*array.as_array_ptr()).fields.data };
    let bytes = Arc::new(ArrayBytes {
        array: array.clone().unbind(),
        addr: data.cast::<u8>().expose_provenance(),
        len,
    });
    if let Some(t) = Tensor::shared(shape.clone(), element, bytes.clone(), 0) {
        return Ok(t);
    }
    // `bool` (and anything the shared view refuses): a checked copy.
    TensorData::from_le_bytes(element, bytes.bytes())
        .ok_or_else(|| format!("{name}: {element} elements cannot be read"))
        .and_then(|d| Tensor::new(shape, d).map_err(|e| format!("{name}: {e}")))
        .map_err(|m| errors::input(py, m))
}

fn array<'py, T: Element>(
    py: Python<'py>,
    shape: &[usize],
    values: Vec<T>,
) -> PyResult<Bound<'py, PyAny>> {
    let a = ArrayD::from_shape_vec(IxDyn(shape), values)
        .map_err(|e| errors::input(py, format!("an output of shape {shape:?}: {e}")))?;
    Ok(a.into_pyarray(py).into_any())
}

/// Output `name` as a NumPy array owning its elements (one copy, none for
/// a tensor that already holds a vector).
pub fn tensor_to_numpy<'py>(
    py: Python<'py>,
    name: &str,
    tensor: Tensor,
) -> PyResult<Bound<'py, PyAny>> {
    let (shape, data) = tensor.into_parts();
    match data {
        TensorData::F32(v) => array(py, &shape, v),
        TensorData::F64(v) => array(py, &shape, v),
        TensorData::F16(v) => array(py, &shape, v),
        TensorData::I8(v) => array(py, &shape, v),
        TensorData::I16(v) => array(py, &shape, v),
        TensorData::I32(v) => array(py, &shape, v),
        TensorData::I64(v) => array(py, &shape, v),
        TensorData::U8(v) => array(py, &shape, v),
        TensorData::U16(v) => array(py, &shape, v),
        TensorData::U32(v) => array(py, &shape, v),
        TensorData::U64(v) => array(py, &shape, v),
        TensorData::Bool(v) => array(py, &shape, v),
        TensorData::BF16(v) => {
            // NumPy has no bfloat16 of its own: the bits, viewed as
            // ml_dtypes' bfloat16 where that package is installed.
            let bits: Vec<u16> = v.iter().map(|x| x.to_bits()).collect();
            let dtype = PyArrayDescr::new(py, "bfloat16").map_err(|_| {
                errors::input(
                    py,
                    format!(
                        "output `{name}` is bfloat16, which NumPy holds only with the \
                         ml_dtypes package installed"
                    ),
                )
            })?;
            array(py, &shape, bits)?.call_method1("view", (dtype,))
        }
    }
}
