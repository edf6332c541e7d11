//! Node attributes as the kernels see them (cold path: resolution only).
//!
//! [`NodeAttributes`] is the one attribute reader of every operator: a node
//! that names an attribute twice, or declares an attribute's type UNDEFINED
//! (or a number ONNX does not define), is refused when the reader is built;
//! a typed getter that finds its name declared with another type (Gemm
//! `transB` as a FLOAT, Softmax `axis` as INTS) or without a value is an
//! error, never the operator's default. These are the checks ONNX Runtime
//! applies through the ONNX checker and schema.

use std::collections::HashSet;

use onnx_prepared_kernels::{Attributes, KernelError, Tensor};
use onnx_prepared_proto::attribute_proto::AttributeType;
use onnx_prepared_proto::{AttributeProto, NodeProto};

/// The attributes of one node, read through [`Attributes`].
#[derive(Debug, Clone, Copy)]
pub struct NodeAttributes<'a> {
    node: &'a NodeProto,
}

impl<'a> NodeAttributes<'a> {
    /// Attributes of `node`; [`KernelError::DuplicateAttribute`] when it
    /// names one attribute twice, [`KernelError::UndeclaredAttributeType`]
    /// when one declares no attribute type (for every attribute, read by
    /// the operator or not, as the ONNX checker refuses them).
    pub fn new(node: &'a NodeProto) -> Result<Self, KernelError> {
        let mut seen = HashSet::with_capacity(node.attribute.len());
        for a in &node.attribute {
            let name = a.name.as_deref().unwrap_or_default();
            if !seen.insert(name) {
                return Err(KernelError::DuplicateAttribute {
                    name: name.to_owned(),
                });
            }
            if let Err(declared) = declared_type(a) {
                return Err(KernelError::UndeclaredAttributeType {
                    name: name.to_owned(),
                    declared,
                    holds: field_type(a).map_or("no value", |t| t.as_str_name()),
                });
            }
        }
        Ok(Self { node })
    }

    /// The attribute `name` when present, checked to be declared `kind`.
    fn get(
        &self,
        name: &str,
        kind: AttributeType,
    ) -> Result<Option<&'a AttributeProto>, KernelError> {
        let Some(a) = self
            .node
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name))
        else {
            return Ok(None);
        };
        match declared_type(a) {
            Ok(t) if t == kind => Ok(Some(a)),
            Ok(t) => Err(self.mismatch(name, kind, t.as_str_name())),
            // Refused by `new`.
            Err(declared) => Err(self.mismatch(name, kind, declared)),
        }
    }

    fn mismatch(&self, name: &str, kind: AttributeType, found: &'static str) -> KernelError {
        KernelError::AttributeType {
            name: name.to_owned(),
            expected: kind.as_str_name(),
            found,
        }
    }

    /// The scalar field `field` of attribute `name` of type `kind`: a
    /// scalar attribute without its value is refused.
    fn value<T>(
        &self,
        name: &str,
        kind: AttributeType,
        field: impl FnOnce(&'a AttributeProto) -> Option<T>,
    ) -> Result<Option<T>, KernelError> {
        match self.get(name, kind)? {
            None => Ok(None),
            Some(a) => match field(a) {
                Some(v) => Ok(Some(v)),
                None => Err(self.mismatch(name, kind, "no value")),
            },
        }
    }
}

fn op_type(node: &NodeProto) -> String {
    node.op_type.clone().unwrap_or_default()
}

/// The type `a` declares; `Err` (what it declares instead) for UNDEFINED,
/// an absent type, or a number ONNX does not define.
fn declared_type(a: &AttributeProto) -> Result<AttributeType, &'static str> {
    match a.r#type.map(AttributeType::try_from) {
        None | Some(Ok(AttributeType::Undefined)) => Err("UNDEFINED"),
        Some(Ok(t)) => Ok(t),
        Some(Err(_)) => Err("an unknown number"),
    }
}

/// The type of the first value field `a` sets (for the error of an
/// attribute that declares no type); `None`: none.
fn field_type(a: &AttributeProto) -> Option<AttributeType> {
    [
        (a.f.is_some(), AttributeType::Float),
        (a.i.is_some(), AttributeType::Int),
        (a.s.is_some(), AttributeType::String),
        (a.t.is_some(), AttributeType::Tensor),
        (a.g.is_some(), AttributeType::Graph),
        (a.sparse_tensor.is_some(), AttributeType::SparseTensor),
        (a.tp.is_some(), AttributeType::TypeProto),
        (!a.floats.is_empty(), AttributeType::Floats),
        (!a.ints.is_empty(), AttributeType::Ints),
        (!a.strings.is_empty(), AttributeType::Strings),
        (!a.tensors.is_empty(), AttributeType::Tensors),
        (!a.graphs.is_empty(), AttributeType::Graphs),
        (!a.sparse_tensors.is_empty(), AttributeType::SparseTensors),
        (!a.type_protos.is_empty(), AttributeType::TypeProtos),
    ]
    .into_iter()
    .find_map(|(set, t)| set.then_some(t))
}

impl Attributes for NodeAttributes<'_> {
    fn names(&self) -> Vec<String> {
        self.node
            .attribute
            .iter()
            .map(|a| a.name.clone().unwrap_or_default())
            .collect()
    }

    fn int(&self, name: &str) -> Result<Option<i64>, KernelError> {
        self.value(name, AttributeType::Int, |a| a.i)
    }

    fn float(&self, name: &str) -> Result<Option<f32>, KernelError> {
        self.value(name, AttributeType::Float, |a| a.f)
    }

    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, KernelError> {
        Ok(self.get(name, AttributeType::Ints)?.map(|a| a.ints.clone()))
    }

    fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, KernelError> {
        Ok(self
            .get(name, AttributeType::Floats)?
            .map(|a| a.floats.clone()))
    }

    fn string(&self, name: &str) -> Result<Option<String>, KernelError> {
        self.value(name, AttributeType::String, |a| {
            a.s.as_ref()
                .map(|s| String::from_utf8_lossy(s).into_owned())
        })
    }

    fn tensor(&self, name: &str) -> Result<Option<Tensor>, KernelError> {
        let Some(t) = self.value(name, AttributeType::Tensor, |a| a.t.as_ref())? else {
            return Ok(None);
        };
        super::decode_embedded_tensor(name, t)
            .map(Some)
            .map_err(|e| KernelError::Invalid {
                op: "attribute",
                detail: format!(
                    "{}: attribute `{name}`: cannot decode the tensor: {e}",
                    op_type(self.node)
                ),
            })
    }
}
