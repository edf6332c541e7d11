//! What a model declares: wrongly typed, untyped (UNDEFINED) or repeated
//! attributes are refused by the one attribute reader (for every operator,
//! naming the node, the attribute, the expected and the stored type), and a
//! model that imports one operator-set domain twice is refused when it is
//! opened.

use crate::support;

use onnx_prepared::Error;
use onnx_prepared::error::ResolveError;
use onnx_prepared::model::proto::attribute_proto::AttributeType;
use onnx_prepared::model::proto::{
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto,
};
use onnx_prepared::model::{Model, ModelError, ResolveOptions, ResolvedModel};
use onnx_prepared_kernels::KernelError;

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    support::tensor_value(name, 1, Some(&support::fixed(dims)))
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

fn opset(domain: &str, version: i64) -> OperatorSetIdProto {
    OperatorSetIdProto {
        domain: Some(domain.into()),
        version: Some(version),
    }
}

/// A one-node model `y = op(x[, w])`, `x` `[2, 3]`, `w` a `[3, 3]`
/// initializer when the op takes two inputs.
fn model(op: &str, attrs: Vec<AttributeProto>, opsets: Vec<OperatorSetIdProto>) -> ModelProto {
    let two = op == "Gemm";
    let mut input = vec!["x".to_owned()];
    let mut initializer = Vec::new();
    if two {
        input.push("w".into());
        initializer.push(TensorProto {
            name: Some("w".into()),
            data_type: Some(1),
            dims: vec![3, 3],
            float_data: (0..9).map(|i| i as f32).collect(),
            ..Default::default()
        });
    }
    ModelProto {
        ir_version: Some(10),
        opset_import: opsets,
        graph: Some(GraphProto {
            node: vec![NodeProto {
                name: Some("the_node".into()),
                op_type: Some(op.into()),
                input,
                output: vec!["y".into()],
                attribute: attrs,
                ..Default::default()
            }],
            initializer,
            input: vec![value("x", &[2, 3])],
            output: vec![ValueInfoProto {
                name: Some("y".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn open(model: &ModelProto) -> Result<Model, Error> {
    let dir = support::tempdir();
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    Ok(Model::open(&path)?)
}

fn resolve(op: &str, attrs: Vec<AttributeProto>) -> Result<ResolvedModel, Error> {
    let model = open(&model(op, attrs, vec![opset("", 21)]))?;
    Ok(ResolvedModel::resolve(model, &ResolveOptions::default())?)
}

/// The attribute type error resolution reports, with its node.
fn type_error(op: &str, attrs: Vec<AttributeProto>) -> (String, KernelError) {
    match resolve(op, attrs) {
        Err(Error::Resolve(ResolveError::Kernel { node, source })) => (node, source),
        other => panic!("{op}: expected an attribute error, got {other:?}"),
    }
}

fn assert_type_error(op: &str, attrs: Vec<AttributeProto>, attr: &str, want: &str, stored: &str) {
    let (node, source) = type_error(op, attrs);
    assert_eq!(node, "the_node");
    let message = source.to_string();
    match source {
        KernelError::AttributeType {
            name,
            expected,
            found,
        } => {
            assert_eq!(name, attr, "{op}");
            assert_eq!((expected, found), (want, stored), "{op}");
        }
        other => panic!("{op}: expected AttributeType, got {other:?}"),
    }
    assert!(message.contains(attr) && message.contains(want) && message.contains(stored));
}

#[test]
fn well_typed_attributes_resolve() {
    resolve(
        "Gemm",
        vec![int("transB", 1), float("alpha", 0.5), float("beta", 1.0)],
    )
    .unwrap();
    resolve("Softmax", vec![int("axis", -1)]).unwrap();
}

#[test]
fn gemm_trans_b_stored_as_a_float_is_refused() {
    assert_type_error("Gemm", vec![float("transB", 1.0)], "transB", "INT", "FLOAT");
}

#[test]
fn gemm_alpha_stored_as_an_int_is_refused() {
    assert_type_error("Gemm", vec![int("alpha", 2)], "alpha", "FLOAT", "INT");
}

#[test]
fn softmax_axis_stored_as_a_float_is_refused() {
    assert_type_error("Softmax", vec![float("axis", 0.0)], "axis", "INT", "FLOAT");
}

#[test]
fn an_attribute_without_its_value_is_refused() {
    let mut empty = int("transB", 0);
    empty.i = None;
    assert_type_error("Gemm", vec![empty], "transB", "INT", "no value");
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// An attribute declaring `declared` (`None`: no type field at all).
fn declaring(mut a: AttributeProto, declared: Option<i32>) -> AttributeProto {
    a.r#type = declared;
    a
}

fn assert_undeclared(
    op: &str,
    attrs: Vec<AttributeProto>,
    attr: &str,
    declared: &str,
    holds: &str,
) {
    let (node, source) = type_error(op, attrs);
    assert_eq!(node, "the_node");
    let message = source.to_string();
    match source {
        KernelError::UndeclaredAttributeType {
            name,
            declared: d,
            holds: h,
        } => assert_eq!((name.as_str(), d, h), (attr, declared, holds), "{op}"),
        other => panic!("{op}: expected UndeclaredAttributeType, got {other:?}"),
    }
    assert!(message.contains(attr) && message.contains(declared) && message.contains(holds));
}

// ONNX Runtime 1.32 (x86-64) refuses every model below at session creation:
// "Field 'type' of 'attr' is required but missing" for an UNDEFINED type,
// "Mismatched attribute type in 'the_node : axis'. Expected: 'INT',
// actual: 'INTS'" for a declared type the operator does not read.

#[test]
fn an_attribute_declared_undefined_is_refused_though_its_field_is_set() {
    let undefined = Some(AttributeType::Undefined as i32);
    for declared in [None, undefined] {
        let axis = declaring(int("axis", 0), declared);
        assert_undeclared("Softmax", vec![axis], "axis", "UNDEFINED", "INT");
        let trans_b = declaring(int("transB", 1), declared);
        assert_undeclared("Gemm", vec![trans_b], "transB", "UNDEFINED", "INT");
        let alpha = declaring(float("alpha", 2.0), declared);
        assert_undeclared("Gemm", vec![alpha], "alpha", "UNDEFINED", "FLOAT");
        let perm = declaring(ints("perm", &[1, 0]), declared);
        assert_undeclared("Transpose", vec![perm], "perm", "UNDEFINED", "INTS");
        let empty = declaring(ints("perm", &[]), declared);
        assert_undeclared("Transpose", vec![empty], "perm", "UNDEFINED", "no value");
    }
}

#[test]
fn an_attribute_declaring_an_unknown_type_number_is_refused() {
    let axis = declaring(int("axis", 0), Some(99));
    assert_undeclared("Softmax", vec![axis], "axis", "an unknown number", "INT");
}

#[test]
fn an_attribute_declared_with_another_type_than_the_operator_reads_is_refused() {
    assert_type_error("Softmax", vec![ints("axis", &[0])], "axis", "INT", "INTS");
    assert_type_error("Transpose", vec![int("perm", 1)], "perm", "INTS", "INT");
    assert_type_error("Gemm", vec![ints("transB", &[1])], "transB", "INT", "INTS");
    // A declared type decides, whatever field is set.
    let mut axis = int("axis", 0);
    axis.i = None;
    axis.f = Some(0.0);
    assert_type_error("Softmax", vec![axis], "axis", "INT", "no value");
    let mut axis = float("axis", 0.0);
    axis.i = Some(0);
    assert_type_error("Softmax", vec![axis], "axis", "INT", "FLOAT");
}

#[test]
fn a_repeated_attribute_is_refused() {
    for (op, attrs) in [
        ("Gemm", vec![int("transB", 0), int("transB", 1)]),
        ("Softmax", vec![int("axis", 0), int("axis", 1)]),
    ] {
        let (node, source) = type_error(op, attrs);
        assert_eq!(node, "the_node");
        let want = if op == "Gemm" { "transB" } else { "axis" };
        assert!(
            matches!(&source, KernelError::DuplicateAttribute { name } if name == want),
            "{op}: {source:?}"
        );
    }
}

#[test]
fn a_domain_imported_twice_is_refused_at_open() {
    let softmax = |opsets| model("Softmax", vec![], opsets);
    open(&softmax(vec![opset("", 21), opset("com.microsoft", 1)])).unwrap();
    for opsets in [
        vec![opset("", 13), opset("", 21)],
        vec![opset("", 21), opset("ai.onnx", 13)],
        vec![opset("ai.onnx", 21), opset("ai.onnx", 21)],
        vec![
            opset("com.microsoft", 1),
            opset("", 21),
            opset("com.microsoft", 1),
        ],
    ] {
        let err = open(&softmax(opsets.clone())).unwrap_err();
        let first = &opsets[0];
        match err {
            Error::Model(ModelError::DuplicateOpsetImport {
                domain,
                first: v1,
                second,
                ..
            }) => {
                let want = match first.domain.as_deref() {
                    Some("") => "ai.onnx",
                    d => d.unwrap(),
                };
                assert_eq!(domain, want);
                assert_eq!(v1, first.version.unwrap());
                assert_eq!(second, opsets.last().unwrap().version.unwrap());
            }
            other => panic!("{opsets:?}: expected DuplicateOpsetImport, got {other:?}"),
        }
    }
}
