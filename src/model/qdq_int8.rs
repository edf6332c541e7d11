//! Int8 QDQ groups run as one integer operator (cold path: resolution
//! only), as ONNX Runtime's QDQ transformer does.
//!
//! ONNX Runtime's quantizer in QDQ form writes float operators between
//! `DequantizeLinear` and `QuantizeLinear` nodes:
//! `DQ(x_q) -> Conv <- DQ(w_q) [<- DQ(bias_q)] -> [Relu] -> Q`. Resolution
//! recognizes such a group and resolves it as the integer operator that
//! computes it (the `DQ` and `Q` of the group are not run):
//!
//! | float operator | integer operator |
//! |---|---|
//! | Conv (int32 bias) | QLinearConv |
//! | MatMul | QLinearMatMul, or MatMulIntegerToFloat without `Q` |
//! | Gemm | `com.microsoft` QGemm (quantized or float output) |
//! | Add, Mul | `com.microsoft` QLinearAdd, QLinearMul |
//! | Sigmoid, LeakyRelu | `com.microsoft` QLinearSigmoid, QLinearLeakyRelu |
//! | GlobalAveragePool, AveragePool | `com.microsoft` QLinearGlobalAveragePool, QLinearAveragePool |
//! | Concat | `com.microsoft` QLinearConcat |
//! | MaxPool (the same scale and zero point on both sides) | MaxPool on the 8-bit values |
//!
//! A group qualifies only when its 8-bit values are per-tensor (weights of
//! Conv, MatMul and Gemm may be per output channel), every scale and zero
//! point is an initializer, the float operator's output feeds only the
//! `Q` (through a Relu only when the `Q`'s zero point is its type's
//! minimum, so that saturation is the Relu), and no value of the group
//! other than its inputs and output is read elsewhere or is a graph output.
//! A `DQ` whose output other nodes also read keeps running for them.

use std::collections::{HashMap, HashSet};

use onnx_prepared_proto::{AttributeProto, NodeProto};

use super::{ElementType, Model};

/// The recognized groups: the nodes that no longer run and, by the index
/// of each group's float operator, the integer node that replaces it.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    pub(crate) skip: HashSet<usize>,
    pub(crate) replace: HashMap<usize, NodeProto>,
}

/// Who reads each value.
pub(super) struct Uses<'a> {
    readers: HashMap<&'a str, Vec<usize>>,
    outputs: HashSet<&'a str>,
    pub(super) producer: HashMap<&'a str, usize>,
}

impl<'a> Uses<'a> {
    pub(super) fn of(model: &'a Model) -> Self {
        let graph = model.graph();
        let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut producer = HashMap::new();
        for (j, node) in graph.node.iter().enumerate() {
            for i in node.input.iter().filter(|i| !i.is_empty()) {
                readers.entry(i.as_str()).or_default().push(j);
            }
            for o in &node.output {
                producer.insert(o.as_str(), j);
            }
        }
        let outputs = graph
            .output
            .iter()
            .filter_map(|o| o.name.as_deref())
            .collect();
        Self {
            readers,
            outputs,
            producer,
        }
    }

    /// The one node reading `value`, when exactly one does and it is not a
    /// graph output.
    pub(super) fn sole_reader(&self, value: &str) -> Option<usize> {
        match self.readers.get(value).map(Vec::as_slice) {
            Some(&[j]) if !self.outputs.contains(value) => Some(j),
            _ => None,
        }
    }
}

pub(super) fn is_default(node: &NodeProto) -> bool {
    matches!(node.domain.as_deref(), None | Some("" | "ai.onnx"))
}

pub(super) fn op(node: &NodeProto) -> &str {
    node.op_type.as_deref().unwrap_or_default()
}

/// A `DequantizeLinear` or `QuantizeLinear` with its parameters.
struct QParams<'a> {
    index: usize,
    node: &'a NodeProto,
    data: &'a str,
    scale: &'a str,
    zero: Option<&'a str>,
}

impl Model {
    /// The element type and dims of initializer `name`.
    pub(super) fn initializer(&self, name: &str) -> Option<(ElementType, Vec<u64>)> {
        let w = self.weight_by_name(name)?;
        Some((w.element_type(), w.dims().to_vec()))
    }
}

fn int_attr(node: &NodeProto, name: &str) -> Option<i64> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
        .and_then(|a| a.i)
}

/// The parameters of a Q or DQ node (`op_type`) whose scale and zero
/// point are initializers; `per_channel` allows a 1-D scale (with an axis
/// and no blocks), else the scale must hold one value.
fn params<'a>(
    model: &Model,
    nodes: &'a [NodeProto],
    index: usize,
    op_type: &str,
    per_channel: bool,
) -> Option<QParams<'a>> {
    let node = &nodes[index];
    if !is_default(node) || op(node) != op_type || node.output.len() != 1 {
        return None;
    }
    let known = [
        "axis",
        "block_size",
        "output_dtype",
        "saturate",
        "precision",
    ];
    if node
        .attribute
        .iter()
        .any(|a| !known.contains(&a.name.as_deref().unwrap_or_default()))
        || int_attr(node, "block_size").is_some_and(|b| b != 0)
        || int_attr(node, "output_dtype").is_some_and(|t| !matches!(t, 0..=3))
    {
        return None;
    }
    let scale = node.input.get(1)?.as_str();
    let (st, sd) = model.initializer(scale)?;
    let count: u64 = sd.iter().product();
    let scalar = count == 1 && sd.len() <= 1;
    if st != ElementType::F32 || !(scalar || per_channel && sd.len() == 1) {
        return None;
    }
    let zero = node
        .input
        .get(2)
        .map(String::as_str)
        .filter(|z| !z.is_empty());
    if let Some(z) = zero {
        let (zt, zd) = model.initializer(z)?;
        let same = zd == sd || zd.iter().product::<u64>() == 1 && scalar;
        if !matches!(zt, ElementType::U8 | ElementType::I8 | ElementType::I32) || !same {
            return None;
        }
    }
    Some(QParams {
        index,
        node,
        data: node.input.first()?.as_str(),
        scale,
        zero,
    })
}

/// The group's pieces for one float node: the DQ of each data input, the
/// Q of its output (and a Relu between).
struct Found<'a> {
    dqs: Vec<QParams<'a>>,
    q: Option<QParams<'a>>,
    relu: Option<usize>,
}

/// Whether zero point `zero` (an initializer, or absent: 0 of uint8) is the
/// minimum of its type.
fn zero_is_min(model: &Model, zero: Option<&str>) -> bool {
    let Some(z) = zero else { return true };
    let Some(w) = model.weight_by_name(z) else {
        return false;
    };
    let min = match w.element_type() {
        ElementType::U8 => 0u8,
        ElementType::I8 => 0x80,
        _ => return false,
    };
    match w.source() {
        super::WeightSource::Embedded { bytes } => bytes.iter().all(|&b| b == min),
        _ => false,
    }
}

/// The DQ producing each of `inputs` (all of them) and the Q reading the
/// node's one output.
fn find_group<'a>(
    model: &Model,
    nodes: &'a [NodeProto],
    uses: &Uses<'_>,
    node: &'a NodeProto,
    inputs: &[usize],
    per_channel: &[usize],
    need_q: bool,
) -> Option<Found<'a>> {
    let mut dqs = Vec::new();
    for &i in inputs {
        let name = node.input.get(i)?.as_str();
        let &p = uses.producer.get(name)?;
        dqs.push(params(
            model,
            nodes,
            p,
            "DequantizeLinear",
            per_channel.contains(&i),
        )?);
    }
    let out = node.output.first()?.as_str();
    if node.output.len() != 1 {
        return None;
    }
    let mut relu = None;
    let mut q = None;
    if let Some(mut j) = uses.sole_reader(out) {
        if is_default(&nodes[j]) && op(&nodes[j]) == "Relu" {
            relu = Some(j);
            j = uses.sole_reader(nodes[j].output.first()?)?;
        }
        q = params(model, nodes, j, "QuantizeLinear", false);
        if q.as_ref()
            .is_some_and(|q| relu.is_some() && !zero_is_min(model, q.zero))
        {
            return None;
        }
    }
    if relu.is_some() && q.is_none() || need_q && q.is_none() {
        return None;
    }
    Some(Found { dqs, q, relu })
}

fn attr_f(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(1),
        ..AttributeProto::default()
    }
}

/// The integer node for `found` around float node `node`.
fn build(
    node: &NodeProto,
    found: &Found<'_>,
    op_type: &str,
    domain: &str,
    inputs: Vec<String>,
    keep: &[&str],
) -> NodeProto {
    let output = match &found.q {
        Some(q) => q.node.output.clone(),
        None => node.output.clone(),
    };
    NodeProto {
        input: inputs,
        output,
        name: node.name.clone(),
        op_type: Some(op_type.into()),
        domain: (!domain.is_empty()).then(|| domain.to_owned()),
        attribute: node
            .attribute
            .iter()
            .filter(|a| keep.contains(&a.name.as_deref().unwrap_or_default()))
            .cloned()
            .collect(),
        ..NodeProto::default()
    }
}

/// `[data, scale, zero]` of a Q/DQ (an absent zero point stays empty).
fn triple(p: &QParams<'_>) -> [String; 3] {
    [
        p.data.to_owned(),
        p.scale.to_owned(),
        p.zero.unwrap_or_default().to_owned(),
    ]
}

/// What the recognizers read: the model, its nodes and who reads what.
struct Cx<'a, 'u> {
    model: &'a Model,
    nodes: &'a [NodeProto],
    uses: &'u Uses<'a>,
}

impl<'a> Cx<'a, '_> {
    fn group(
        &self,
        node: &'a NodeProto,
        inputs: &[usize],
        per_channel: &[usize],
        need_q: bool,
    ) -> Option<Found<'a>> {
        find_group(
            self.model,
            self.nodes,
            self.uses,
            node,
            inputs,
            per_channel,
            need_q,
        )
    }

    /// The DQ producing `value`, per channel allowed.
    fn dq(&self, value: &str) -> Option<QParams<'a>> {
        params(
            self.model,
            self.nodes,
            *self.uses.producer.get(value)?,
            "DequantizeLinear",
            true,
        )
    }

    /// Whether `p` dequantizes an 8-bit initializer.
    fn weight_ok(&self, p: &QParams<'_>) -> bool {
        self.model
            .initializer(p.data)
            .is_some_and(|(t, _)| matches!(t, ElementType::U8 | ElementType::I8))
    }
}

/// The integer node replacing float node `j`, with the group's pieces.
fn recognize<'a>(
    model: &'a Model,
    nodes: &'a [NodeProto],
    uses: &Uses<'a>,
    j: usize,
) -> Option<(NodeProto, Found<'a>)> {
    let node = &nodes[j];
    if !is_default(node) {
        return None;
    }
    let cx = Cx { model, nodes, uses };
    match op(node) {
        "Conv" => conv(&cx, node),
        "MatMul" => matmul(&cx, node),
        "Gemm" => gemm(&cx, node),
        kind @ ("Add" | "Mul") => binary(&cx, node, kind),
        kind @ ("Sigmoid" | "LeakyRelu" | "GlobalAveragePool" | "AveragePool") => {
            unary(&cx, node, kind)
        }
        "Concat" => concat(&cx, node),
        "MaxPool" => max_pool(&cx, node),
        _ => None,
    }
}

/// The bytes of initializer `name` when they are in the model file.
pub(super) fn embedded<'m>(model: &'m Model, name: &str) -> Option<(ElementType, &'m [u8])> {
    let w = model.weight_by_name(name)?;
    match w.source() {
        super::WeightSource::Embedded { bytes } => Some((w.element_type(), bytes)),
        _ => None,
    }
}

/// The one f32 value of initializer `name`, when it is in the model file.
pub(super) fn scalar_f32(model: &Model, name: &str) -> Option<f32> {
    match embedded(model, name)? {
        (ElementType::F32, &[a, b, c, d]) => Some(f32::from_le_bytes([a, b, c, d])),
        _ => None,
    }
}

/// The input of two-input `node` other than `value` (which it reads
/// once).
pub(super) fn other<'a>(node: &'a NodeProto, value: &str) -> Option<&'a str> {
    match node.input.as_slice() {
        [a, b] if a == value && b != value => Some(b),
        [a, b] if b == value && a != value => Some(a),
        _ => None,
    }
}

/// MaxPool between a DQ and a Q of the same positive scale and the same
/// 8-bit zero point -> MaxPool on the 8-bit values (the maximum commutes
/// with a monotonic dequantization, and the Q gives back the values it
/// was dequantized from), as ONNX Runtime drops such a pair.
fn max_pool<'a>(cx: &Cx<'a, '_>, node: &'a NodeProto) -> Option<(NodeProto, Found<'a>)> {
    let f = cx.group(node, &[0], &[], true)?;
    let (dq, q) = (&f.dqs[0], f.q.as_ref()?);
    let positive = scalar_f32(cx.model, dq.scale).is_some_and(|s| s > 0.0 && s.is_finite());
    let (zt, zero) = embedded(cx.model, dq.zero?)?;
    let same = |a: &str, b: &str| embedded(cx.model, a) == embedded(cx.model, b);
    if !(positive
        && matches!(zt, ElementType::U8 | ElementType::I8)
        && zero.len() == 1
        && same(dq.scale, q.scale)
        && same(dq.zero?, q.zero?)
        && f.relu.is_none())
    {
        return None;
    }
    let keep = [
        "auto_pad",
        "ceil_mode",
        "dilations",
        "kernel_shape",
        "pads",
        "storage_order",
        "strides",
    ];
    let inputs = vec![dq.data.to_owned()];
    Some((build(node, &f, "MaxPool", "", inputs, &keep), f))
}

/// Conv -> QLinearConv.
fn conv<'a>(cx: &Cx<'a, '_>, node: &'a NodeProto) -> Option<(NodeProto, Found<'a>)> {
    let f = cx.group(node, &[0, 1], &[1], true)?;
    if !cx.weight_ok(&f.dqs[1])
        || int_attr(f.dqs[1].node, "axis").unwrap_or(1) != 0
            && f.dqs[1]
                .node
                .input
                .get(1)
                .and_then(|s| cx.model.initializer(s))
                .is_some_and(|(_, d)| d.iter().product::<u64>() > 1)
    {
        return None;
    }
    let q = f.q.as_ref()?;
    let mut inputs: Vec<String> = triple(&f.dqs[0]).into();
    inputs.extend(triple(&f.dqs[1]));
    inputs.extend(triple(q)[1..].iter().cloned());
    if let Some(b) = node.input.get(2).filter(|b| !b.is_empty()) {
        let bp = cx.dq(b.as_str())?;
        if cx.model.initializer(bp.data)?.0 != ElementType::I32 {
            return None;
        }
        inputs.push(bp.data.to_owned());
        let mut f = f;
        f.dqs.push(bp);
        let n = build(
            node,
            &f,
            "QLinearConv",
            "",
            inputs,
            &[
                "auto_pad",
                "dilations",
                "group",
                "kernel_shape",
                "pads",
                "strides",
            ],
        );
        return Some((n, f));
    }
    let n = build(
        node,
        &f,
        "QLinearConv",
        "",
        inputs,
        &[
            "auto_pad",
            "dilations",
            "group",
            "kernel_shape",
            "pads",
            "strides",
        ],
    );
    Some((n, f))
}

/// MatMul -> QLinearMatMul, or MatMulIntegerToFloat without a Q.
fn matmul<'a>(cx: &Cx<'a, '_>, node: &'a NodeProto) -> Option<(NodeProto, Found<'a>)> {
    let f = cx.group(node, &[0, 1], &[1], false)?;
    let [a, b] = [&f.dqs[0], &f.dqs[1]];
    match &f.q {
        Some(q) => {
            let mut inputs: Vec<String> = triple(a).into();
            inputs.extend(triple(b));
            inputs.extend(triple(q)[1..].iter().cloned());
            Some((build(node, &f, "QLinearMatMul", "", inputs, &[]), f))
        }
        None => {
            let inputs = vec![
                a.data.to_owned(),
                b.data.to_owned(),
                a.scale.to_owned(),
                b.scale.to_owned(),
                a.zero.unwrap_or_default().to_owned(),
                b.zero.unwrap_or_default().to_owned(),
            ];
            Some((
                build(
                    node,
                    &f,
                    "MatMulIntegerToFloat",
                    "com.microsoft",
                    inputs,
                    &[],
                ),
                f,
            ))
        }
    }
}

/// Gemm -> QGemm.
fn gemm<'a>(cx: &Cx<'a, '_>, node: &'a NodeProto) -> Option<(NodeProto, Found<'a>)> {
    let mut f = cx.group(node, &[0, 1], &[1], false)?;
    let has_c = node.input.get(2).is_some_and(|c| !c.is_empty());
    if int_attr(node, "transA").unwrap_or(0) != 0 {
        return None;
    }
    let beta = node
        .attribute
        .iter()
        .find(|a| a.name.as_deref() == Some("beta"))
        .and_then(|a| a.f);
    if has_c && beta.is_some_and(|b| b != 1.0) {
        return None;
    }
    let mut inputs: Vec<String> = triple(&f.dqs[0]).into();
    inputs.extend(triple(&f.dqs[1]));
    if has_c {
        let c = node.input.get(2)?.as_str();
        let cp = cx.dq(c)?;
        if cx.model.initializer(cp.data)?.0 != ElementType::I32 {
            return None;
        }
        inputs.push(cp.data.to_owned());
        f.dqs.push(cp);
    } else {
        inputs.push(String::new());
    }
    if let Some(q) = &f.q {
        inputs.extend(triple(q)[1..].iter().cloned());
    }
    let mut n = build(
        node,
        &f,
        "QGemm",
        "com.microsoft",
        inputs,
        &["alpha", "transB"],
    );
    if !n
        .attribute
        .iter()
        .any(|a| a.name.as_deref() == Some("alpha"))
    {
        n.attribute.push(attr_f("alpha", 1.0));
    }
    Some((n, f))
}

/// Add, Mul -> QLinearAdd, QLinearMul.
fn binary<'a>(cx: &Cx<'a, '_>, node: &'a NodeProto, kind: &str) -> Option<(NodeProto, Found<'a>)> {
    let f = cx.group(node, &[0, 1], &[], true)?;
    let mut inputs: Vec<String> = triple(&f.dqs[0]).into();
    inputs.extend(triple(&f.dqs[1]));
    inputs.extend(triple(f.q.as_ref()?)[1..].iter().cloned());
    let name = if kind == "Add" {
        "QLinearAdd"
    } else {
        "QLinearMul"
    };
    Some((build(node, &f, name, "com.microsoft", inputs, &[]), f))
}

/// Sigmoid, LeakyRelu and the average pools -> their QLinear forms.
fn unary<'a>(cx: &Cx<'a, '_>, node: &'a NodeProto, kind: &str) -> Option<(NodeProto, Found<'a>)> {
    let f = cx.group(node, &[0], &[], true)?;
    let mut inputs: Vec<String> = triple(&f.dqs[0]).into();
    inputs.extend(triple(f.q.as_ref()?)[1..].iter().cloned());
    let keep: &[&str] = match kind {
        "LeakyRelu" => &["alpha"],
        "AveragePool" => &[
            "auto_pad",
            "ceil_mode",
            "count_include_pad",
            "kernel_shape",
            "pads",
            "strides",
        ],
        _ => &[],
    };
    let name = format!("QLinear{kind}");
    if kind == "AveragePool" && int_attr(node, "dilations").is_some() {
        return None;
    }
    Some((build(node, &f, &name, "com.microsoft", inputs, keep), f))
}

/// Concat -> QLinearConcat.
fn concat<'a>(cx: &Cx<'a, '_>, node: &'a NodeProto) -> Option<(NodeProto, Found<'a>)> {
    let all: Vec<usize> = (0..node.input.len()).collect();
    let f = cx.group(node, &all, &[], true)?;
    let q = f.q.as_ref()?;
    let mut inputs: Vec<String> = triple(q)[1..].to_vec();
    for d in &f.dqs {
        inputs.extend(triple(d));
    }
    Some((
        build(
            node,
            &f,
            "QLinearConcat",
            "com.microsoft",
            inputs,
            &["axis"],
        ),
        f,
    ))
}

/// The groups of `model`.
pub(crate) fn find(model: &Model) -> Groups {
    let nodes = &model.graph().node;
    let uses = Uses::of(model);
    let mut groups = Groups::default();
    let mut claimed: HashSet<usize> = HashSet::new();
    for j in 0..nodes.len() {
        let Some((node, found)) = recognize(model, nodes, &uses, j) else {
            continue;
        };
        // Q/DQ nodes serve one group at most.
        let own: Vec<usize> = found.q.iter().map(|q| q.index).chain(found.relu).collect();
        if own.iter().any(|i| claimed.contains(i)) {
            continue;
        }
        for i in own {
            claimed.insert(i);
            groups.skip.insert(i);
        }
        // A DQ read only by this node stops running.
        for d in &found.dqs {
            let out = d.node.output[0].as_str();
            if uses.sole_reader(out) == Some(j) {
                groups.skip.insert(d.index);
            }
        }
        groups.replace.insert(j, node);
    }
    groups
}
