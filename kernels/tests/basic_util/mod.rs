//! Shared helpers for the basic-operator tests: an in-memory `Attributes`,
//! a node builder that runs infer + execute through the registry, a
//! splitmix64 PRNG and float comparison.

#![allow(dead_code)]

use std::collections::BTreeMap;

use onnx_prepared_kernels::{
    Attributes, ElementType, InputInfo, KernelError, NodeSpec, Operator, Sequential, Tensor,
    TensorData, registry,
};

/// One attribute value.
#[derive(Debug, Clone)]
pub enum AttrValue {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Str(String),
    Tensor(Tensor),
}

/// Attributes held in a map.
#[derive(Debug, Clone, Default)]
pub struct TestAttrs(pub BTreeMap<String, AttrValue>);

impl TestAttrs {
    /// The value of `name` through `pick`; present with another variant is
    /// the reader's typed error, as the runtime's reader reports it.
    fn typed<T>(
        &self,
        name: &str,
        expected: &'static str,
        pick: impl FnOnce(&AttrValue) -> Option<T>,
    ) -> Result<Option<T>, KernelError> {
        let Some(v) = self.0.get(name) else {
            return Ok(None);
        };
        pick(v).map(Some).ok_or_else(|| KernelError::AttributeType {
            name: name.into(),
            expected,
            found: "another type",
        })
    }
}

impl Attributes for TestAttrs {
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn int(&self, name: &str) -> Result<Option<i64>, KernelError> {
        self.typed(name, "INT", |v| match v {
            AttrValue::Int(v) => Some(*v),
            _ => None,
        })
    }
    fn float(&self, name: &str) -> Result<Option<f32>, KernelError> {
        self.typed(name, "FLOAT", |v| match v {
            AttrValue::Float(v) => Some(*v),
            _ => None,
        })
    }
    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, KernelError> {
        self.typed(name, "INTS", |v| match v {
            AttrValue::Ints(v) => Some(v.clone()),
            _ => None,
        })
    }
    fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, KernelError> {
        self.typed(name, "FLOATS", |v| match v {
            AttrValue::Floats(v) => Some(v.clone()),
            _ => None,
        })
    }
    fn string(&self, name: &str) -> Result<Option<String>, KernelError> {
        self.typed(name, "STRING", |v| match v {
            AttrValue::Str(v) => Some(v.clone()),
            _ => None,
        })
    }
    fn tensor(&self, name: &str) -> Result<Option<Tensor>, KernelError> {
        self.typed(name, "TENSOR", |v| match v {
            AttrValue::Tensor(v) => Some(v.clone()),
            _ => None,
        })
    }
}

/// An input for [`Node::run`].
#[derive(Debug, Clone)]
pub enum In {
    /// A runtime value (not known at infer).
    Var(Tensor),
    /// A constant (known at infer).
    Const(Tensor),
    /// An omitted optional input.
    Absent,
}

impl In {
    pub fn tensor(&self) -> Option<&Tensor> {
        match self {
            In::Var(t) | In::Const(t) => Some(t),
            In::Absent => None,
        }
    }
}

/// A node under test.
#[derive(Debug, Clone)]
pub struct Node {
    pub op_type: String,
    pub domain: String,
    pub opset: i64,
    pub attrs: TestAttrs,
    pub outputs: usize,
}

impl Node {
    pub fn new(op_type: &str, opset: i64) -> Self {
        Self {
            op_type: op_type.into(),
            domain: String::new(),
            opset,
            attrs: TestAttrs::default(),
            outputs: 1,
        }
    }
    pub fn domain(mut self, d: &str) -> Self {
        self.domain = d.into();
        self
    }
    fn attr(mut self, name: &str, v: AttrValue) -> Self {
        self.attrs.0.insert(name.into(), v);
        self
    }
    pub fn int(self, name: &str, v: i64) -> Self {
        self.attr(name, AttrValue::Int(v))
    }
    pub fn float(self, name: &str, v: f32) -> Self {
        self.attr(name, AttrValue::Float(v))
    }
    pub fn ints(self, name: &str, v: &[i64]) -> Self {
        self.attr(name, AttrValue::Ints(v.to_vec()))
    }
    pub fn floats(self, name: &str, v: &[f32]) -> Self {
        self.attr(name, AttrValue::Floats(v.to_vec()))
    }
    pub fn string(self, name: &str, v: &str) -> Self {
        self.attr(name, AttrValue::Str(v.into()))
    }
    pub fn tensor(self, name: &str, v: Tensor) -> Self {
        self.attr(name, AttrValue::Tensor(v))
    }
    pub fn outputs(mut self, n: usize) -> Self {
        self.outputs = n;
        self
    }

    /// The operator, through the registry.
    pub fn build(&self, inputs: usize) -> Result<Box<dyn Operator>, KernelError> {
        let spec = NodeSpec {
            domain: &self.domain,
            op_type: &self.op_type,
            opset: self.opset,
            attributes: &self.attrs,
            inputs,
            outputs: self.outputs,
        };
        registry::operator(&spec)
    }

    /// Infers, allocates zeroed outputs and executes.
    pub fn run(&self, inputs: &[In]) -> Result<Vec<Tensor>, KernelError> {
        let op = self.build(inputs.len())?;
        run_op(op.as_ref(), inputs)
    }

    /// Like `run`, for a single output.
    pub fn run1(&self, inputs: &[In]) -> Result<Tensor, KernelError> {
        let mut out = self.run(inputs)?;
        assert_eq!(out.len(), 1, "expected one output");
        Ok(out.remove(0))
    }
}

/// Infers, allocates zeroed outputs and executes `op`.
pub fn run_op(op: &dyn Operator, inputs: &[In]) -> Result<Vec<Tensor>, KernelError> {
    let infos: Vec<Option<InputInfo<'_>>> = inputs
        .iter()
        .map(|i| match i {
            In::Var(t) => Some(InputInfo {
                dtype: t.dtype(),
                shape: t.shape(),
                value: None,
                constant: false,
            }),
            In::Const(t) => Some(InputInfo {
                dtype: t.dtype(),
                shape: t.shape(),
                value: Some(t),
                constant: true,
            }),
            In::Absent => None,
        })
        .collect();
    let infos_out = op.infer(&infos)?;
    let mut outputs = infos_out
        .iter()
        .map(|o| Tensor::zeros(o.dtype, o.shape.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let tensors: Vec<Option<&Tensor>> = inputs.iter().map(In::tensor).collect();
    op.execute(&tensors, None, &mut outputs, &Sequential)?;
    for (t, info) in outputs.iter().zip(&infos_out) {
        assert_eq!(t.shape(), info.shape.as_slice());
        assert_eq!(t.dtype(), info.dtype);
    }
    Ok(outputs)
}

pub fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::from_f32(shape.to_vec(), v.to_vec()).unwrap()
}

pub fn f64t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::F64(v.to_vec())).unwrap()
}

pub fn i64t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_i64(shape.to_vec(), v.to_vec()).unwrap()
}

pub fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::I32(v.to_vec())).unwrap()
}

/// A 1-D i64 constant.
pub fn ints(v: &[i64]) -> In {
    In::Const(i64t(&[v.len()], v))
}

pub fn var(t: Tensor) -> In {
    In::Var(t)
}

/// splitmix64.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of flat position `i`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan());
        assert!(ok, "element {i}: got {g}, want {w}");
    }
}

/// The attribute an attribute error names (a bad value, or the wrong type).
pub fn attribute_error(e: KernelError) -> String {
    match e {
        KernelError::Attribute { name, .. } => name.to_owned(),
        KernelError::AttributeType { name, .. } => name,
        other => panic!("expected an attribute error, got {other:?}"),
    }
}

pub fn dtype_of(t: &Tensor) -> ElementType {
    t.dtype()
}
