//! What the test binaries share: the default fixture models, small
//! hand-built models for the model-loading tests, tiny-llm inputs and runs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use onnx_prepared::model::proto::tensor_proto::{DataLocation, DataType};
use onnx_prepared::model::proto::{
    GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto,
};

/// One initializer of a test model.
#[derive(Clone, Debug)]
pub struct Init {
    pub name: String,
    pub data_type: i32,
    pub dims: Vec<i64>,
    /// `Some(entries)`: external with these `external_data` entries.
    pub external: Option<Vec<(String, String)>>,
    pub raw: Option<Vec<u8>>,
    pub data_location: Option<DataLocation>,
}

impl Init {
    /// An f32 tensor stored externally with `entries`.
    pub fn external(name: &str, dims: &[i64], entries: &[(&str, &str)]) -> Self {
        Self {
            name: name.into(),
            data_type: DataType::Float as i32,
            dims: dims.to_vec(),
            external: Some(
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            raw: None,
            data_location: Some(DataLocation::External),
        }
    }

    /// An f32 tensor with embedded raw bytes.
    pub fn embedded(name: &str, dims: &[i64], raw: Vec<u8>) -> Self {
        Self {
            name: name.into(),
            data_type: DataType::Float as i32,
            dims: dims.to_vec(),
            external: None,
            raw: Some(raw),
            data_location: None,
        }
    }

    pub fn data_type(mut self, t: DataType) -> Self {
        self.data_type = t as i32;
        self
    }

    fn to_proto(&self) -> TensorProto {
        TensorProto {
            name: Some(self.name.clone()),
            data_type: Some(self.data_type),
            dims: self.dims.clone(),
            raw_data: self.raw.clone().map(Into::into),
            data_location: self.data_location.map(|d| d as i32),
            external_data: self
                .external
                .iter()
                .flatten()
                .map(|(k, v)| StringStringEntryProto {
                    key: Some(k.clone()),
                    value: Some(v.clone()),
                })
                .collect(),
            ..Default::default()
        }
    }
}

/// Encodes a model whose graph holds `inits` and one Identity node per init.
pub fn model_bytes(inits: &[Init]) -> Vec<u8> {
    let graph = GraphProto {
        name: Some("test".into()),
        initializer: inits.iter().map(Init::to_proto).collect(),
        node: inits
            .iter()
            .map(|i| NodeProto {
                op_type: Some("Identity".into()),
                input: vec![i.name.clone()],
                output: vec![format!("{}.out", i.name)],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(11),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(23),
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Writes `model.onnx` with `inits` into `dir` and returns its path.
pub fn write_model(dir: &Path, inits: &[Init]) -> PathBuf {
    let path = dir.join("model.onnx");
    std::fs::write(&path, model_bytes(inits)).expect("write model");
    path
}

/// Writes a data file of `len` bytes (byte i = i % 251) into `dir`.
pub fn write_data(dir: &Path, name: &str, len: usize) -> PathBuf {
    let path = dir.join(name);
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, bytes).expect("write data");
    path
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// tiny-llm prefill inputs: `T` tokens, no cache (`P = 0`), a causal bias.
pub fn tiny_llm_prefill(t: usize) -> Vec<(String, onnx_prepared_kernels::Tensor)> {
    use onnx_prepared_kernels::Tensor;
    let mut inputs = vec![
        (
            "input_ids".to_owned(),
            Tensor::from_i64(vec![1, t], (0..t as i64).map(|i| i * 97 % 8192).collect()).unwrap(),
        ),
        (
            "attn_bias".to_owned(),
            Tensor::from_f32(
                vec![1, 1, t, t],
                (0..t * t)
                    .map(|k| if k % t <= k / t { 0.0 } else { -10000.0 })
                    .collect(),
            )
            .unwrap(),
        ),
    ];
    for b in 0..4 {
        for kv in ["key", "value"] {
            inputs.push((
                format!("past_{kv}_{b}"),
                Tensor::from_f32(vec![1, 8, 0, 64], vec![]).unwrap(),
            ));
        }
    }
    inputs
}

/// Writes the default tiny-llm fixture into `dir`; returns the model's path.
pub fn tiny_llm_in(dir: &Path) -> PathBuf {
    use onnx_prepared_fixtures::{TinyLlmConfig, WriteMode, tiny_llm, write_fixture};
    let fixture = tiny_llm(&TinyLlmConfig::default()).expect("generates");
    write_fixture(dir, &fixture, WriteMode::Verify).expect("writes")[0].clone()
}

/// The bits of every f32 output, to compare runs exactly.
pub fn f32_bits(outputs: &[(String, onnx_prepared_kernels::Tensor)]) -> Vec<Vec<u32>> {
    outputs
        .iter()
        .map(|(_, t)| t.as_f32().unwrap().iter().map(|x| x.to_bits()).collect())
        .collect()
}

/// One prefill run of tiny-llm (T = 8, no cache) on `session`: its outputs.
pub fn run_tiny_llm(
    session: &onnx_prepared::RuntimeSession,
) -> Vec<(String, onnx_prepared_kernels::Tensor)> {
    let mut ctx = onnx_prepared::RuntimeContext::new(session);
    for (name, t) in tiny_llm_prefill(8) {
        ctx = ctx.with_input(&name, t).unwrap();
    }
    session.run(ctx).unwrap().outputs().to_vec()
}

/// Every committed real model (`tests/models/real/*/model.onnx`), sorted.
pub fn real_models() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/models/real");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/models/real")
        .filter_map(|e| {
            let p = e.ok()?.path().join("model.onnx");
            p.exists().then_some(p)
        })
        .collect();
    out.sort();
    out
}

/// The default fixtures' folder, with every fixture written (verified when
/// already there).
pub fn fixtures() -> PathBuf {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    dir
}

/// The default fixture `name` (`gemm-chain`, `tiny-llm`, ...).
pub fn fixture(name: &str) -> PathBuf {
    fixtures().join(format!("{name}.onnx"))
}

/// A tensor graph input or output `name` of ONNX element type `elem`
/// (`1`: float) with `dims` (`Ok(n)` fixed, `Err(name)` symbolic; `None`:
/// no shape).
pub fn tensor_value(
    name: &str,
    elem: i32,
    dims: Option<&[Result<i64, &str>]>,
) -> onnx_prepared::model::proto::ValueInfoProto {
    use onnx_prepared::model::proto::tensor_shape_proto::{Dimension, dimension};
    use onnx_prepared::model::proto::{TensorShapeProto, TypeProto, ValueInfoProto, type_proto};
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: dims.map(|dims| TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(match d {
                                Ok(n) => dimension::Value::DimValue(*n),
                                Err(p) => dimension::Value::DimParam((*p).into()),
                            }),
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

/// Fixed dims for [`tensor_value`].
pub fn fixed(dims: &[i64]) -> Vec<Result<i64, &'static str>> {
    dims.iter().map(|&n| Ok(n)).collect()
}
