//! `_Value`: the native side of `onnx_prepared.OrtValue` — one tensor, used
//! in place by runs. A value made from a NumPy array views the array's
//! buffer (the tensor keeps the array alive); a value a run produced holds
//! the run's output tensor behind shared bytes, so binding it as the next
//! run's input (a KV cache, say) is a reference count, never a copy.

use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use onnx_prepared::model::{element_type_from_onnx, element_type_to_onnx};
use onnx_prepared::{ElementType, Tensor};
use pyo3::prelude::*;

use crate::convert::{tensor_over_array, tensor_to_numpy};
use crate::errors;

/// A tensor held for Python.
#[pyclass(module = "onnx_prepared._onnx_prepared", name = "_Value", frozen)]
#[derive(Debug)]
pub struct Value {
    tensor: Tensor,
}

impl Value {
    /// A run's output, moved behind shared bytes.
    pub fn from_output(tensor: Tensor) -> Self {
        Self {
            tensor: tensor.into_shared(),
        }
    }

    /// The tensor for a run's input (shares the bytes).
    pub fn tensor(&self) -> Tensor {
        self.tensor.clone()
    }
}

#[pymethods]
impl Value {
    /// A value over `array`'s buffer (C-contiguous, aligned, native order:
    /// the Python side makes it so), its elements read as ONNX type
    /// `onnx_type` when given (same element size), else as the array's
    /// dtype.
    #[staticmethod]
    #[pyo3(signature = (array, onnx_type=None))]
    fn from_array(
        py: Python<'_>,
        array: &Bound<'_, PyUntypedArray>,
        onnx_type: Option<i32>,
    ) -> PyResult<Self> {
        let element = match onnx_type {
            None => None,
            Some(code) => {
                let t = element_type_from_onnx(code)
                    .filter(|t| t.byte_len(1) == Some(array.dtype().itemsize() as u64))
                    .ok_or_else(|| {
                        errors::input(
                            py,
                            format!(
                                "ONNX element type {code} cannot view an array of {} \
                                 ({}-byte elements)",
                                array.dtype(),
                                array.dtype().itemsize()
                            ),
                        )
                    })?;
                Some(t)
            }
        };
        Ok(Self {
            tensor: tensor_over_array(py, "an OrtValue", array, element)?,
        })
    }

    /// The dimensions.
    fn shape(&self) -> Vec<usize> {
        self.tensor.shape().to_vec()
    }

    /// The ONNX `TensorProto` element type.
    fn onnx_type(&self) -> i32 {
        element_type_to_onnx(self.tensor.dtype())
    }

    /// Bytes of the elements.
    fn nbytes(&self) -> usize {
        self.tensor.byte_len()
    }

    /// The address of the first element.
    fn data_ptr(&self) -> usize {
        self.tensor.data().into_bytes().as_ptr().addr()
    }

    /// A NumPy array holding a copy of the elements.
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        tensor_to_numpy(py, "value", self.tensor.clone())
    }

    /// Whether both values view the same bytes.
    fn shares_bytes_with(&self, other: &Self) -> bool {
        self.tensor.shares_bytes_with(&other.tensor)
    }

    fn __repr__(&self) -> String {
        format!(
            "_Value({} {:?})",
            ElementType::name(self.tensor.dtype()),
            self.tensor.shape()
        )
    }
}
