//! Writes the seed corpus of the `model_open` and `npz` targets (the other
//! targets' seeds are inputs their own runs found) into `corpus/<target>/`
//! below the folder given (default: the current folder).
//!
//! `cargo run --release --example make-seeds -- .` from `fuzz/`.

use std::path::PathBuf;

use onnx_prepared::model::proto::tensor_proto::{DataLocation, DataType};
use onnx_prepared::model::proto::{
    AttributeProto, GraphProto, Message, NodeProto, StringStringEntryProto, TensorProto,
    attribute_proto::AttributeType,
};
use onnx_prepared::npz::{write_npy, write_npz};
use onnx_prepared_fuzz::value_info;
use onnx_prepared_kernels::Tensor;
use onnx_prepared_kernels::tensor::TensorData;

fn f32_tensor(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(DataType::Float as i32),
        dims: dims.to_vec(),
        raw_data: Some(
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
                .into(),
        ),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str, attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        name: Some(output.into()),
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| (*s).to_owned()).collect(),
        output: vec![output.into()],
        attribute,
        ..Default::default()
    }
}

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into())).join("corpus");
    let float = DataType::Float as i32;

    // model_open: a Gemm + Add + Softmax model with embedded weights, and one
    // whose weight is external (its data file is absent in the scratch folder).
    let dir = root.join("model_open");
    std::fs::create_dir_all(&dir)?;
    let trans_b = AttributeProto {
        name: Some("transB".into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(1),
        ..Default::default()
    };
    let graph = GraphProto {
        name: Some("gemm".into()),
        node: vec![
            node("Gemm", &["x", "w"], "h", vec![trans_b]),
            node("Add", &["h", "b"], "s", vec![]),
            node("Softmax", &["s"], "y", vec![]),
        ],
        initializer: vec![
            f32_tensor("w", &[3, 4], &[0.5; 12]),
            f32_tensor("b", &[3], &[0.0, 1.0, -1.0]),
        ],
        input: vec![value_info("x", float, &[2, 4])],
        output: vec![value_info("y", float, &[2, 3])],
        ..Default::default()
    };
    let model = onnx_prepared_fuzz::model(graph, 23);
    std::fs::write(dir.join("gemm-embedded.onnx"), model.encode_to_vec())?;
    let mut external = model.clone();
    let g = external.graph.as_mut().expect("a graph");
    g.initializer[0].raw_data = None;
    g.initializer[0].data_location = Some(DataLocation::External as i32);
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    g.initializer[0].external_data = vec![
        entry("location", "w.data"),
        entry("offset", "0"),
        entry("length", "48"),
    ];
    std::fs::write(dir.join("gemm-external.onnx"), external.encode_to_vec())?;

    // npz: mode 0 (a whole .npz from the runtime's writer) and modes 1 and 2
    // (one .npy member, stored and deflated).
    let dir = root.join("npz");
    std::fs::create_dir_all(&dir)?;
    let arrays = vec![
        (
            "x".to_owned(),
            Tensor::from_f32(vec![2, 3], vec![0.0, 1.5, -2.0, 3.25, 4.0, -0.5]).expect("f32"),
        ),
        (
            "ids".to_owned(),
            Tensor::from_i64(vec![3], vec![1, 2, 3]).expect("i64"),
        ),
        (
            "mask".to_owned(),
            Tensor::new(vec![2], TensorData::Bool(vec![true, false])).expect("bool"),
        ),
        (
            "s".to_owned(),
            Tensor::from_f32(vec![], vec![7.0]).expect("scalar"),
        ),
    ];
    let tmp = tempfile::tempdir()?;
    let npz = tmp.path().join("seed.npz");
    write_npz(&npz, &arrays).map_err(std::io::Error::other)?;
    let mut bytes = vec![0u8];
    bytes.extend(std::fs::read(&npz)?);
    std::fs::write(dir.join("writer.npz.seed"), bytes)?;
    for (mode, (name, tensor)) in [(1u8, &arrays[0]), (2, &arrays[2])] {
        let mut bytes = vec![mode];
        bytes.extend(write_npy(name, tensor).map_err(std::io::Error::other)?);
        std::fs::write(dir.join(format!("{name}.npy.mode{mode}.seed")), bytes)?;
    }
    Ok(())
}
