//! Declared graph inputs and outputs as onnxruntime's `NodeArg` spells them
//! (cold path: read once when a session opens): `type` as
//! `tensor(float)`, `shape` with an int per fixed dim, the parameter's name
//! for a symbolic one and `None` for an unknown one.

use onnx_prepared::model::proto::ValueInfoProto;
use onnx_prepared::model::proto::tensor_shape_proto::dimension::Value as DimValue;
use onnx_prepared::model::proto::type_proto::Value as TypeValue;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// One declared dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    Fixed(i64),
    Symbolic(String),
    Unknown,
}

/// A declared graph input or output.
#[derive(Debug, Clone)]
pub struct ValueMeta {
    pub name: String,
    /// onnxruntime's type string, e.g. `tensor(float)`.
    pub type_name: String,
    /// `None` when the model declares no shape.
    pub shape: Option<Vec<Dim>>,
}

impl ValueMeta {
    /// `name`'s declaration among `infos` (a value without one: its name,
    /// an unknown type and no shape).
    pub fn of(name: &str, infos: &[ValueInfoProto]) -> Self {
        let info = infos.iter().find(|v| v.name.as_deref() == Some(name));
        let (type_name, shape) = match info.and_then(|v| v.r#type.as_ref()?.value.as_ref()) {
            Some(TypeValue::TensorType(t)) => (
                format!("tensor({})", onnx_type_name(t.elem_type.unwrap_or(0))),
                t.shape.as_ref().map(|s| {
                    s.dim
                        .iter()
                        .map(|d| match &d.value {
                            Some(DimValue::DimValue(n)) => Dim::Fixed(*n),
                            Some(DimValue::DimParam(p)) => Dim::Symbolic(p.clone()),
                            None => Dim::Unknown,
                        })
                        .collect()
                }),
            ),
            Some(TypeValue::SequenceType(_)) => ("seq".to_owned(), None),
            Some(TypeValue::MapType(_)) => ("map".to_owned(), None),
            Some(TypeValue::OptionalType(_)) => ("optional".to_owned(), None),
            Some(TypeValue::SparseTensorType(_)) => ("sparse_tensor".to_owned(), None),
            Some(TypeValue::OpaqueType(_)) => ("opaque".to_owned(), None),
            None => ("tensor(undefined)".to_owned(), None),
        };
        Self {
            name: name.to_owned(),
            type_name,
            shape,
        }
    }

    /// `(name, type, shape)` for the Python `NodeArg`: shape a list of
    /// ints, strings and `None`s (empty when undeclared).
    pub fn to_python<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(String, String, Bound<'py, PyList>)> {
        let shape = PyList::empty(py);
        for d in self.shape.iter().flatten() {
            match d {
                Dim::Fixed(n) => shape.append(n)?,
                Dim::Symbolic(s) => shape.append(s)?,
                Dim::Unknown => shape.append(py.None())?,
            }
        }
        Ok((self.name.clone(), self.type_name.clone(), shape))
    }
}

/// onnxruntime's name of an ONNX `TensorProto.DataType`.
fn onnx_type_name(elem_type: i32) -> &'static str {
    match elem_type {
        1 => "float",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "string",
        9 => "bool",
        10 => "float16",
        11 => "double",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        16 => "bfloat16",
        17 => "float8e4m3fn",
        18 => "float8e4m3fnuz",
        19 => "float8e5m2",
        20 => "float8e5m2fnuz",
        21 => "uint4",
        22 => "int4",
        23 => "float4e2m1",
        _ => "undefined",
    }
}
