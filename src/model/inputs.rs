//! Graph inputs as declared by the model (cold path): each input's name,
//! element type and dims, read from its `ValueInfoProto` at resolution.

use onnx_prepared_kernels::ElementType;
use onnx_prepared_proto::tensor_shape_proto::dimension::Value as DimValue;
use onnx_prepared_proto::type_proto::Value as TypeValue;

use super::LoadError;
use super::element_type_from_onnx;
use crate::model::ResolveError;

/// One declared dimension of a graph input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A named symbolic size (`T`, `batch`).
    Symbolic(String),
    /// Neither.
    Unknown,
}

/// A graph input: its name, element type and declared dims.
#[derive(Debug, Clone)]
pub struct GraphInput {
    /// The input's name.
    pub name: String,
    /// Declared element type.
    pub dtype: ElementType,
    /// Declared dims; `None` when the model declares no shape.
    pub dims: Option<Vec<Dim>>,
}

fn tensor_type(v: &onnx_prepared_proto::ValueInfoProto) -> Option<(i32, Option<Vec<Dim>>)> {
    match v.r#type.as_ref()?.value.as_ref()? {
        TypeValue::TensorType(t) => Some((
            t.elem_type.unwrap_or_default(),
            t.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(DimValue::DimValue(n)) if *n >= 0 => Dim::Fixed(*n as usize),
                        Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Symbolic(p.clone()),
                        _ => Dim::Unknown,
                    })
                    .collect()
            }),
        )),
        _ => None,
    }
}

/// A graph input's declared name, type and dims.
pub(crate) fn graph_input(
    v: &onnx_prepared_proto::ValueInfoProto,
) -> Result<GraphInput, LoadError> {
    let name = v.name.clone().unwrap_or_default();
    let (elem, dims) = tensor_type(v).ok_or_else(|| ResolveError::InputNotTensor {
        input: name.clone(),
    })?;
    let dtype = element_type_from_onnx(elem).ok_or_else(|| ResolveError::InputType {
        input: name.clone(),
        dtype: super::onnx_type_name(elem),
    })?;
    Ok(GraphInput { name, dtype, dims })
}
