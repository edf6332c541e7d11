//! The QDQ 4-bit MatMul pattern (cold path: resolution only).
//!
//! ONNX Runtime's `MatMulNBitsQuantizer` in QDQ form writes
//! `DequantizeLinear(W: INT4/UINT4 [K, N], scale [K/bs, N], zero_point?,
//! axis=0, block_size=bs) -> MatMul(A, W')`. Resolution recognizes the pair
//! and runs it as one operator whose prepared object packs weight, scales
//! and zero points into the MatMulNBits layout, so the fast 4-bit kernels
//! run it and the dequantized f32 weight is never materialized.

use std::collections::{HashMap, HashSet};

use onnx_prepared_kernels::{Attributes, CpuFeatures, ElementType, KernelError, Operator};

use super::{Model, NodeAttributes};

/// One recognized pair.
#[derive(Debug, Clone)]
pub(crate) struct QdqMatMul {
    /// Inputs of the fused operator: `[A, W, scale, zero_point?]`.
    pub(crate) inputs: Vec<String>,
    block_size: usize,
    k: usize,
    n: usize,
    signed: bool,
}

impl QdqMatMul {
    /// The fused operator.
    pub(crate) fn operator(&self, cpu: CpuFeatures) -> Result<Box<dyn Operator>, KernelError> {
        onnx_prepared_kernels::ops::quant::qdq_matmul_with_cpu(
            self.block_size,
            self.k,
            self.n,
            self.signed,
            cpu,
        )
    }
}

/// The pairs of `model`: the `DequantizeLinear` nodes to skip (by index)
/// and the fused operator of each `MatMul` (by index). A pair qualifies
/// only when the dequantized weight feeds that one MatMul's second input
/// and nothing else (not a graph output), and weight, scale and zero point
/// are initializers of the shapes above.
pub(crate) fn find(model: &Model) -> (HashSet<usize>, HashMap<usize, QdqMatMul>) {
    let graph = model.graph();
    let mut uses: HashMap<&str, usize> = HashMap::new();
    for node in &graph.node {
        for i in node.input.iter().filter(|i| !i.is_empty()) {
            *uses.entry(i.as_str()).or_default() += 1;
        }
    }
    for o in &graph.output {
        *uses
            .entry(o.name.as_deref().unwrap_or_default())
            .or_default() += 1;
    }
    let mut consumer: HashMap<&str, usize> = HashMap::new();
    for (j, node) in graph.node.iter().enumerate() {
        let default_domain = matches!(node.domain.as_deref(), None | Some("" | "ai.onnx"));
        if default_domain
            && node.op_type.as_deref() == Some("MatMul")
            && let Some(b) = node.input.get(1)
        {
            consumer.insert(b.as_str(), j);
        }
    }
    let mut skip = HashSet::new();
    let mut fused = HashMap::new();
    for (i, node) in graph.node.iter().enumerate() {
        let default_domain = matches!(node.domain.as_deref(), None | Some("" | "ai.onnx"));
        if !default_domain || node.op_type.as_deref() != Some("DequantizeLinear") {
            continue;
        }
        let Some(out) = node.output.first() else {
            continue;
        };
        let Some(&j) = consumer.get(out.as_str()) else {
            continue;
        };
        if uses.get(out.as_str()) != Some(&1) || node.output.len() != 1 {
            continue;
        }
        if let Some(pair) = recognize(model, node, &graph.node[j].input) {
            skip.insert(i);
            fused.insert(j, pair);
        }
    }
    (skip, fused)
}

fn recognize(
    model: &Model,
    dq: &onnx_prepared_proto::NodeProto,
    matmul_inputs: &[String],
) -> Option<QdqMatMul> {
    // A malformed DequantizeLinear is left unfused: its own kernel reports it.
    let attrs = NodeAttributes::new(dq).ok()?;
    let known = ["axis", "block_size", "output_dtype"];
    if attrs.names().iter().any(|n| !known.contains(&n.as_str())) {
        return None;
    }
    let w = model.weight_by_name(dq.input.first()?)?;
    let signed = match w.element_type() {
        ElementType::I4 => true,
        ElementType::U4 => false,
        _ => return None,
    };
    let &[k, n] = w.dims() else { return None };
    let (k, n) = (usize::try_from(k).ok()?, usize::try_from(n).ok()?);
    // 0 (from the scale) or 1: FLOAT, the fused operator's output type.
    if !matches!(attrs.int("output_dtype").ok()?, None | Some(0 | 1)) {
        return None;
    }
    let axis = attrs.int("axis").ok()?.unwrap_or(1);
    if axis != 0 && axis != -2 {
        return None;
    }
    let block_size = usize::try_from(attrs.int("block_size").ok()??)
        .ok()
        .filter(|&b| b > 0)?;
    let blocks = k.div_ceil(block_size);
    let scale_name = dq.input.get(1)?;
    let scale = model.weight_by_name(scale_name)?;
    if scale.element_type() != ElementType::F32 || scale.dims() != [blocks as u64, n as u64] {
        return None;
    }
    let mut inputs = vec![
        matmul_inputs.first()?.clone(),
        dq.input[0].clone(),
        scale_name.clone(),
    ];
    if let Some(zp) = dq.input.get(2).filter(|z| !z.is_empty()) {
        let z = model.weight_by_name(zp)?;
        if z.element_type() != w.element_type() || z.dims() != scale.dims() {
            return None;
        }
        inputs.push(zp.clone());
    }
    Some(QdqMatMul {
        inputs,
        block_size,
        k,
        n,
        signed,
    })
}
