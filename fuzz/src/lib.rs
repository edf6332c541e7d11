//! Shared pieces of the fuzz targets (cold path): a scratch folder per
//! input, ONNX protobuf builders, and the structured cases the
//! `external_data` and `graph` targets decode their input into.
//!
//! Every target writes only inside the [`tempfile::TempDir`] it creates for
//! one input; every size a case can reach is small by construction, so a
//! large allocation is the runtime's doing, never the case's.

pub mod external;
pub mod graph;

use onnx_prepared::model::proto::tensor_shape_proto::{Dimension, dimension};
use onnx_prepared::model::proto::{
    GraphProto, ModelProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
    type_proto,
};

/// A fresh scratch folder; removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("onnx-prepared-fuzz")
        .tempdir()
        .expect("a scratch folder in the temp dir")
}

/// A tensor value info of element type `elem` (ONNX `DataType`) and fixed
/// `dims`.
pub fn value_info(name: &str, elem: i32, dims: &[usize]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(dimension::Value::DimValue(d as i64)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A model of `graph` importing `ai.onnx` at `opset` (and `com.microsoft`
/// version 1).
pub fn model(graph: GraphProto, opset: i64) -> ModelProto {
    let import = |domain: &str, version| OperatorSetIdProto {
        domain: Some(domain.into()),
        version: Some(version),
    };
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![import("", opset), import("com.microsoft", 1)],
        producer_name: Some("onnx-prepared-fuzz".into()),
        graph: Some(graph),
        ..Default::default()
    }
}
