//! Node attributes as the kernels see them (cold path: resolution only).

use onnx_prepared_kernels::{Attributes, KernelError, Tensor};
use onnx_prepared_proto::attribute_proto::AttributeType;
use onnx_prepared_proto::{AttributeProto, NodeProto};

/// The attributes of one node, read through [`Attributes`].
#[derive(Debug, Clone, Copy)]
pub struct NodeAttributes<'a> {
    node: &'a NodeProto,
}

impl<'a> NodeAttributes<'a> {
    /// Attributes of `node`.
    pub fn new(node: &'a NodeProto) -> Self {
        Self { node }
    }

    fn get(&self, name: &str, kind: AttributeType) -> Option<&'a AttributeProto> {
        self.node
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(name) && a.r#type.is_none_or(|t| t == kind as i32))
    }
}

impl Attributes for NodeAttributes<'_> {
    fn names(&self) -> Vec<String> {
        self.node
            .attribute
            .iter()
            .map(|a| a.name.clone().unwrap_or_default())
            .collect()
    }

    fn int(&self, name: &str) -> Option<i64> {
        self.get(name, AttributeType::Int).and_then(|a| a.i)
    }

    fn float(&self, name: &str) -> Option<f32> {
        self.get(name, AttributeType::Float).and_then(|a| a.f)
    }

    fn ints(&self, name: &str) -> Option<Vec<i64>> {
        self.get(name, AttributeType::Ints).map(|a| a.ints.clone())
    }

    fn floats(&self, name: &str) -> Option<Vec<f32>> {
        self.get(name, AttributeType::Floats)
            .map(|a| a.floats.clone())
    }

    fn string(&self, name: &str) -> Option<String> {
        self.get(name, AttributeType::String)
            .and_then(|a| a.s.as_ref())
            .map(|s| String::from_utf8_lossy(s).into_owned())
    }

    fn tensor(&self, name: &str) -> Option<Result<Tensor, KernelError>> {
        let t = self.get(name, AttributeType::Tensor)?.t.as_ref()?;
        Some(
            super::decode_embedded_tensor(name, t).map_err(|e| KernelError::Attribute {
                op: "Constant",
                name: "value",
                detail: e.to_string(),
            }),
        )
    }
}
