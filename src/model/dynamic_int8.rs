//! Dynamically quantized products run as one operator (cold path:
//! resolution only), as ONNX Runtime's MatMulIntegerToFloat fusion does.
//!
//! ONNX Runtime's `quantize_dynamic` writes each MatMul as
//!
//! ```text
//! DynamicQuantizeLinear(x) -> (x_q, x_scale, x_zp)
//! MatMulInteger(x_q, w_q, x_zp?, w_zp?) -> Cast(to = float)
//!     -> Mul(., Mul(x_scale, w_scale)) [-> Add(., bias)]
//! ```
//!
//! Resolution runs such a chain as `com.microsoft` MatMulIntegerToFloat
//! `(x_q, w_q, x_scale, w_scale, x_zp, w_zp, bias)`: the int32 product is
//! scaled, and the bias added, in the product's output loop, instead of
//! an int32 tensor converted, multiplied and added in three more passes.
//! The operator computes `(float)c * (x_scale * w_scale[n]) + bias[n]`,
//! the chain's own f32 operations in the same order, so its values are
//! the chain's.
//!
//! A chain qualifies when `x_scale` is a DynamicQuantizeLinear's scale
//! (one value), `w_scale` an f32 initializer of one value or one per
//! column of an initializer `w_q`, the bias an f32 initializer of one
//! value per column, and every value between the MatMulInteger and the
//! chain's end is read by the next node alone and is not a graph output.

use onnx_prepared_proto::NodeProto;

use super::qdq_int8::{Groups, Uses, is_default, op, other};
use super::{ElementType, Model};

/// What one chain is made of.
struct Chain<'a> {
    /// MatMulInteger, Cast, the scaling Mul, the Add (if any).
    nodes: Vec<usize>,
    /// The Mul that multiplies the two scales, when only the chain reads
    /// its product.
    scales: Option<usize>,
    /// The node the fused operator replaces: the chain's last.
    anchor: usize,
    inputs: Vec<String>,
    output: &'a [String],
}

/// Adds the chains of `model` to `groups`, leaving out any node that a
/// group already holds.
pub(crate) fn add(model: &Model, groups: &mut Groups) {
    let nodes = &model.graph().node;
    let uses = Uses::of(model);
    for j in 0..nodes.len() {
        let Some(chain) = chain(model, nodes, &uses, j) else {
            continue;
        };
        let mut all = chain.nodes.iter().chain(&chain.scales);
        if all.any(|i| groups.skip.contains(i) || groups.replace.contains_key(i)) {
            continue;
        }
        for &i in chain.nodes.iter().chain(&chain.scales) {
            if i != chain.anchor {
                groups.skip.insert(i);
            }
        }
        let anchor = &nodes[chain.anchor];
        groups.replace.insert(
            chain.anchor,
            NodeProto {
                input: chain.inputs,
                output: chain.output.to_vec(),
                name: anchor.name.clone(),
                op_type: Some("MatMulIntegerToFloat".into()),
                domain: Some("com.microsoft".into()),
                ..NodeProto::default()
            },
        );
    }
}

/// The chain starting at node `j`, if it is a MatMulInteger that begins
/// one.
fn chain<'a>(
    model: &Model,
    nodes: &'a [NodeProto],
    uses: &Uses<'_>,
    j: usize,
) -> Option<Chain<'a>> {
    let mmi = &nodes[j];
    if !(is_default(mmi) && op(mmi) == "MatMulInteger") || mmi.input.len() < 2 {
        return None;
    }
    let int32 = mmi.output.first()?;
    let c = uses.sole_reader(int32)?;
    let cast = &nodes[c];
    let to_float = cast
        .attribute
        .iter()
        .any(|a| a.name.as_deref() == Some("to") && a.i == Some(1));
    if !(is_default(cast) && op(cast) == "Cast" && to_float) {
        return None;
    }
    let float = cast.output.first()?;
    let u = uses.sole_reader(float)?;
    let mul = &nodes[u];
    if !(is_default(mul) && op(mul) == "Mul") {
        return None;
    }
    let product = other(mul, float)?;
    // The scales' product: x_scale (a DynamicQuantizeLinear's) times
    // w_scale (an initializer).
    let k = *uses.producer.get(product)?;
    let scale_mul = &nodes[k];
    if !(is_default(scale_mul) && op(scale_mul) == "Mul") {
        return None;
    }
    let dynamic_scale = |v: &str| {
        uses.producer.get(v).is_some_and(|&d| {
            let d = &nodes[d];
            is_default(d)
                && op(d) == "DynamicQuantizeLinear"
                && d.output.get(1).is_some_and(|s| s == v)
        })
    };
    let [p, q] = scale_mul.input.as_slice() else {
        return None;
    };
    let (x_scale, w_scale) = if dynamic_scale(p) {
        (p, q)
    } else if dynamic_scale(q) {
        (q, p)
    } else {
        return None;
    };
    // Columns: the last dim of an initializer w_q.
    let columns = model
        .initializer(&mmi.input[1])
        .and_then(|(_, dims)| (dims.len() == 2).then(|| dims[1]));
    let per_column = |name: &str| {
        model.initializer(name).is_some_and(|(t, dims)| {
            let count: u64 = dims.iter().product();
            t == ElementType::F32 && dims.len() <= 1 && (count == 1 || Some(count) == columns)
        })
    };
    if !per_column(w_scale) {
        return None;
    }
    let mut inputs = vec![
        mmi.input[0].clone(),
        mmi.input[1].clone(),
        x_scale.clone(),
        w_scale.clone(),
        mmi.input.get(2).cloned().unwrap_or_default(),
        mmi.input.get(3).cloned().unwrap_or_default(),
    ];
    let mut chain = vec![j, c, u];
    let mut anchor = u;
    // A bias of one value per column.
    let scaled = mul.output.first()?;
    if let Some(a) = uses.sole_reader(scaled)
        && is_default(&nodes[a])
        && op(&nodes[a]) == "Add"
        && let Some(bias) = other(&nodes[a], scaled)
        && columns.is_some()
        && model.initializer(bias).is_some_and(|(t, dims)| {
            t == ElementType::F32 && dims.len() == 1 && Some(dims[0]) == columns
        })
    {
        inputs.push(bias.to_owned());
        chain.push(a);
        anchor = a;
    }
    let scales = (uses.sole_reader(product) == Some(u)).then_some(k);
    Some(Chain {
        nodes: chain,
        scales,
        anchor,
        inputs,
        output: &nodes[anchor].output,
    })
}
