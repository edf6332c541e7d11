//! The `graph` case: a few nodes of supported operators over small graph
//! inputs and small inline initializers, with fuzzer-chosen attributes.
//!
//! Sizes stay small by construction: at most three graph inputs of rank ≤ 4
//! with dims ≤ 4, at most four initializers of at most eight elements whose
//! integers lie in `-2..=3`, at most four nodes, attribute integers in `i8`.
//! Variadic operators (`Concat`, `Max`, `Min`) take up to 40 inputs.

use arbitrary::Arbitrary;
use onnx_prepared::model::proto::attribute_proto::AttributeType;
use onnx_prepared::model::proto::tensor_proto::DataType;
use onnx_prepared::model::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};
use onnx_prepared_kernels::tensor::TensorData;
use onnx_prepared_kernels::{ElementType, Tensor};

/// `(domain, op type, most inputs)` of every operator the kernels'
/// registry implements.
pub const OPS: &[(&str, &str, usize)] = &[
    ("", "Add", 2),
    ("", "Sub", 2),
    ("", "Mul", 2),
    ("", "Div", 2),
    ("", "Pow", 2),
    ("", "Sigmoid", 1),
    ("", "Neg", 1),
    ("", "Sqrt", 1),
    ("", "Reciprocal", 1),
    ("", "Softmax", 1),
    ("", "LayerNormalization", 3),
    ("", "RMSNormalization", 2),
    ("com.microsoft", "SimplifiedLayerNormalization", 2),
    ("com.microsoft", "SkipLayerNormalization", 5),
    ("com.microsoft", "SkipSimplifiedLayerNormalization", 4),
    ("", "Gather", 2),
    ("", "Transpose", 1),
    ("", "Reshape", 2),
    ("", "Squeeze", 2),
    ("", "Unsqueeze", 2),
    ("", "Identity", 1),
    ("", "Split", 2),
    ("", "Concat", 40),
    ("", "Slice", 5),
    ("", "Cast", 1),
    ("", "Constant", 0),
    ("", "Equal", 2),
    ("", "Less", 2),
    ("", "LessOrEqual", 2),
    ("", "Greater", 2),
    ("", "GreaterOrEqual", 2),
    ("", "And", 2),
    ("", "Or", 2),
    ("", "Xor", 2),
    ("", "Not", 1),
    ("", "IsNaN", 1),
    ("", "IsInf", 1),
    ("", "Max", 40),
    ("", "Min", 40),
    ("", "Mod", 2),
    ("", "Clip", 3),
    ("", "Abs", 1),
    ("", "Exp", 1),
    ("", "Log", 1),
    ("", "Cos", 1),
    ("", "Sin", 1),
    ("", "Tanh", 1),
    ("", "Erf", 1),
    ("", "Gelu", 1),
    ("", "Relu", 1),
    ("", "Floor", 1),
    ("", "Ceil", 1),
    ("", "Round", 1),
    ("", "Sign", 1),
    ("", "ReduceSum", 2),
    ("", "ReduceMean", 2),
    ("", "ReduceMax", 2),
    ("", "ReduceMin", 2),
    ("", "ReduceProd", 2),
    ("", "ArgMax", 1),
    ("", "ArgMin", 1),
    ("", "Attention", 6),
    ("", "RotaryEmbedding", 4),
    ("com.microsoft", "RotaryEmbedding", 4),
    ("com.microsoft", "GroupQueryAttention", 9),
    ("", "MatMul", 2),
    ("", "Gemm", 3),
    ("com.microsoft", "MatMulNBits", 6),
    ("", "DequantizeLinear", 3),
    ("com.microsoft", "GatherBlockQuantized", 4),
    ("", "Shape", 1),
    ("", "Size", 1),
    ("", "Flatten", 1),
    ("", "ConstantOfShape", 1),
    ("", "Range", 3),
    ("", "Expand", 2),
    ("", "Tile", 2),
    ("", "Where", 3),
    ("", "GatherND", 2),
    ("", "GatherElements", 2),
    ("", "ScatterND", 3),
    ("", "ScatterElements", 3),
    ("", "Trilu", 2),
    ("", "CumSum", 2),
    ("", "Pad", 4),
];

/// Attribute names the operators read.
pub const ATTRIBUTES: &[&str] = &[
    "axis",
    "axes",
    "perm",
    "transA",
    "transB",
    "alpha",
    "beta",
    "keepdims",
    "noop_with_empty_axes",
    "select_last_index",
    "epsilon",
    "stash_type",
    "to",
    "value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "split",
    "num_outputs",
    "start",
    "end",
    "allowzero",
    "batch_dims",
    "upper",
    "exclusive",
    "reverse",
    "mode",
    "reduction",
    "fmod",
    "min",
    "max",
    "approximate",
    "detect_negative",
    "detect_positive",
    "num_heads",
    "kv_num_heads",
    "q_num_heads",
    "is_causal",
    "scale",
    "softcap",
    "softmax_precision",
    "qk_matmul_output_mode",
    "interleaved",
    "rotary_embedding_dim",
    "do_rotary",
    "local_window_size",
    "K",
    "N",
    "bits",
    "block_size",
    "accuracy_level",
    "quantize_axis",
    "gather_axis",
    "output_dtype",
    "saturate",
    "round_mode",
    "broadcast",
];

/// Strings for string attributes.
const STRINGS: &[&str] = &[
    "none", "tanh", "constant", "reflect", "edge", "add", "mul", "max",
];

/// The whole case.
#[derive(Arbitrary, Debug)]
pub struct GraphCase {
    /// Index into [`OPSETS`].
    pub opset: u8,
    /// At most three graph inputs.
    pub inputs: Vec<ValueCase>,
    /// At most four inline initializers.
    pub inits: Vec<InitCase>,
    /// At most four nodes.
    pub nodes: Vec<NodeCase>,
    /// Graph outputs: indices into the values defined (at least one).
    pub outputs: Vec<u8>,
    /// Seed of the generated input values.
    pub seed: u8,
}

/// `ai.onnx` opsets a case can import.
pub const OPSETS: [i64; 5] = [13, 17, 18, 21, 23];

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Elem {
    F32,
    I64,
    I32,
    Bool,
    U8,
    F16,
}

impl Elem {
    fn onnx(self) -> i32 {
        (match self {
            Elem::F32 => DataType::Float,
            Elem::I64 => DataType::Int64,
            Elem::I32 => DataType::Int32,
            Elem::Bool => DataType::Bool,
            Elem::U8 => DataType::Uint8,
            Elem::F16 => DataType::Float16,
        }) as i32
    }

    fn element(self) -> ElementType {
        match self {
            Elem::F32 => ElementType::F32,
            Elem::I64 => ElementType::I64,
            Elem::I32 => ElementType::I32,
            Elem::Bool => ElementType::Bool,
            Elem::U8 => ElementType::U8,
            Elem::F16 => ElementType::F16,
        }
    }

    /// Little-endian bytes of `v` (a small integer or a float made from
    /// it) in this type.
    fn bytes(self, v: i8, float: bool) -> Vec<u8> {
        let small = i64::from(v.rem_euclid(6)) - 2; // -2..=3
        let f = if float {
            f32::from(v) / 8.0
        } else {
            small as f32
        };
        match self {
            Elem::F32 => f.to_le_bytes().to_vec(),
            Elem::I64 => small.to_le_bytes().to_vec(),
            Elem::I32 => (small as i32).to_le_bytes().to_vec(),
            Elem::Bool => vec![u8::from(small > 0)],
            Elem::U8 => vec![small.unsigned_abs() as u8],
            Elem::F16 => half_bits(f).to_le_bytes().to_vec(),
        }
    }
}

/// The IEEE half bits of `f` (values here are small multiples of 1/8).
fn half_bits(f: f32) -> u16 {
    let bits = f.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    if f == 0.0 {
        return sign;
    }
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = ((bits >> 13) & 0x3ff) as u16;
    if exp <= 0 {
        sign
    } else if exp >= 31 {
        sign | 0x7c00
    } else {
        sign | ((exp as u16) << 10) | mant
    }
}

/// A graph input.
#[derive(Arbitrary, Debug)]
pub struct ValueCase {
    pub elem: Elem,
    /// At most rank 4; each dim modulo 5.
    pub dims: Vec<u8>,
}

impl ValueCase {
    fn dims(&self) -> Vec<usize> {
        self.dims
            .iter()
            .take(4)
            .map(|&d| usize::from(d % 5))
            .collect()
    }
}

/// An inline initializer.
#[derive(Arbitrary, Debug)]
pub struct InitCase {
    pub elem: Elem,
    /// At most rank 3; each dim modulo 3 (at most eight elements kept).
    pub dims: Vec<u8>,
    pub values: Vec<i8>,
    /// Floats from the values (`v / 8`) rather than small integers.
    pub float: bool,
}

impl InitCase {
    fn proto(&self, name: String) -> TensorProto {
        let dims: Vec<i64> = self
            .dims
            .iter()
            .take(3)
            .map(|&d| i64::from(d % 3))
            .collect();
        let count = dims.iter().product::<i64>() as usize;
        let raw: Vec<u8> = (0..count)
            .flat_map(|i| {
                let v = self.values.get(i % self.values.len().max(1)).copied();
                self.elem.bytes(v.unwrap_or(1), self.float)
            })
            .collect();
        TensorProto {
            name: Some(name),
            data_type: Some(self.elem.onnx()),
            dims,
            raw_data: Some(raw.into()),
            ..Default::default()
        }
    }
}

/// One node.
#[derive(Arbitrary, Debug)]
pub struct NodeCase {
    /// Index into [`OPS`].
    pub op: u8,
    /// Inputs: `None` an omitted optional input (`""`), else an index into
    /// the values defined so far.
    pub inputs: Vec<Option<u8>>,
    /// Outputs (1..=3).
    pub outputs: u8,
    /// At most four attributes.
    pub attrs: Vec<AttrCase>,
}

#[derive(Arbitrary, Debug)]
pub struct AttrCase {
    /// Index into [`ATTRIBUTES`].
    pub name: u8,
    pub value: AttrValue,
}

#[derive(Arbitrary, Debug)]
pub enum AttrValue {
    Int(i8),
    Float(i8),
    Ints(Vec<i8>),
    Floats(Vec<i8>),
    String(u8),
    Tensor(InitCase),
}

impl AttrCase {
    fn proto(&self) -> AttributeProto {
        let name = Some(ATTRIBUTES[usize::from(self.name) % ATTRIBUTES.len()].to_owned());
        let kind = |t: AttributeType| Some(t as i32);
        match &self.value {
            AttrValue::Int(i) => AttributeProto {
                name,
                r#type: kind(AttributeType::Int),
                i: Some(i64::from(*i)),
                ..Default::default()
            },
            AttrValue::Float(f) => AttributeProto {
                name,
                r#type: kind(AttributeType::Float),
                f: Some(f32::from(*f) / 8.0),
                ..Default::default()
            },
            AttrValue::Ints(v) => AttributeProto {
                name,
                r#type: kind(AttributeType::Ints),
                ints: v.iter().take(6).map(|&i| i64::from(i)).collect(),
                ..Default::default()
            },
            AttrValue::Floats(v) => AttributeProto {
                name,
                r#type: kind(AttributeType::Floats),
                floats: v.iter().take(6).map(|&f| f32::from(f) / 8.0).collect(),
                ..Default::default()
            },
            AttrValue::String(s) => AttributeProto {
                name,
                r#type: kind(AttributeType::String),
                s: Some(
                    STRINGS[usize::from(*s) % STRINGS.len()]
                        .as_bytes()
                        .to_vec()
                        .into(),
                ),
                ..Default::default()
            },
            AttrValue::Tensor(t) => AttributeProto {
                name,
                r#type: kind(AttributeType::Tensor),
                t: Some(t.proto("value".into())),
                ..Default::default()
            },
        }
    }
}

/// A built case: the model and one input tensor per graph input.
#[derive(Debug)]
pub struct Built {
    pub model: ModelProto,
    pub inputs: Vec<(String, Tensor)>,
}

impl GraphCase {
    /// The model and its inputs, or `None` when the case defines no node.
    pub fn build(&self) -> Option<Built> {
        let mut values: Vec<String> = Vec::new();
        let mut graph_inputs: Vec<ValueInfoProto> = Vec::new();
        let mut inputs = Vec::new();
        for (i, v) in self.inputs.iter().take(3).enumerate() {
            let name = format!("x{i}");
            let dims = v.dims();
            let count: usize = dims.iter().product();
            let raw: Vec<u8> = (0..count)
                .flat_map(|k| {
                    let s = (k as u32).wrapping_mul(2_654_435_761) ^ u32::from(self.seed);
                    v.elem.bytes((s >> 24) as u8 as i8, true)
                })
                .collect();
            let data = TensorData::from_le_bytes(v.elem.element(), &raw)?;
            inputs.push((name.clone(), Tensor::new(dims.clone(), data).ok()?));
            graph_inputs.push(crate::value_info(&name, v.elem.onnx(), &dims));
            values.push(name);
        }
        let mut initializer = Vec::new();
        for (i, init) in self.inits.iter().take(4).enumerate() {
            let name = format!("c{i}");
            initializer.push(init.proto(name.clone()));
            values.push(name);
        }
        let mut node = Vec::new();
        for (n, case) in self.nodes.iter().take(4).enumerate() {
            let (domain, op, most) = OPS[usize::from(case.op) % OPS.len()];
            let input = case
                .inputs
                .iter()
                .take(most)
                .map(|i| match i {
                    Some(i) if !values.is_empty() => values[usize::from(*i) % values.len()].clone(),
                    _ => String::new(),
                })
                .collect();
            let output: Vec<String> = (0..1 + case.outputs % 3)
                .map(|o| format!("n{n}.{o}"))
                .collect();
            values.extend(output.iter().cloned());
            node.push(NodeProto {
                name: Some(format!("n{n}")),
                op_type: Some(op.into()),
                domain: Some(domain.into()),
                input,
                output,
                attribute: case.attrs.iter().take(4).map(AttrCase::proto).collect(),
                ..Default::default()
            });
        }
        if node.is_empty() {
            return None;
        }
        let mut output: Vec<ValueInfoProto> = Vec::new();
        for &o in self.outputs.iter().take(3) {
            let name = &values[usize::from(o) % values.len()];
            if !output.iter().any(|v| v.name.as_deref() == Some(name)) {
                output.push(ValueInfoProto {
                    name: Some(name.clone()),
                    ..Default::default()
                });
            }
        }
        if output.is_empty() {
            output.push(ValueInfoProto {
                name: values.last().cloned(),
                ..Default::default()
            });
        }
        let graph = GraphProto {
            name: Some("graph".into()),
            node,
            initializer,
            input: graph_inputs,
            output,
            ..Default::default()
        };
        let opset = OPSETS[usize::from(self.opset) % OPSETS.len()];
        Some(Built {
            model: crate::model(graph, opset),
            inputs,
        })
    }
}
