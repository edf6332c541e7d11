//! Gelu written out as element-wise nodes runs as one Gelu (cold path:
//! resolution only), as ONNX Runtime's Gelu fusion does.
//!
//! Exporters write the exact Gelu `x * 0.5 * (1 + erf(x / sqrt(2)))` as
//! five nodes, each a pass over the tensor:
//!
//! ```text
//! Div(x, sqrt(2)) | Mul(x, 1/sqrt(2)) -> Erf -> Add(., 1)
//!     -> Mul(x, .) -> Mul(., 0.5)        (or Mul(Mul(x, 0.5), .))
//! ```
//!
//! Resolution runs such a chain as `com.microsoft` Gelu on `x`: one pass.
//! Its value differs from the chain's by the rounding of the steps (a few
//! ulp). Every constant must be a one-value f32 initializer within 1e-6
//! of its value, and every value between `x` and the chain's end must be
//! read by the next node alone and not be a graph output.

use onnx_prepared_proto::NodeProto;

use super::Model;
use super::qdq_int8::{Groups, Uses, is_default, op, other, scalar_f32};

/// Whether `node` is a default-domain `kind` node.
fn is(node: &NodeProto, kind: &str) -> bool {
    is_default(node) && op(node) == kind
}

/// Adds the Gelu chains of `model` to `groups`, leaving out any node that
/// a group already holds.
pub(crate) fn add(model: &Model, groups: &mut Groups) {
    let nodes = &model.graph().node;
    let uses = Uses::of(model);
    let near = |name: &str, want: f64| {
        scalar_f32(model, name).is_some_and(|v| (v as f64 - want).abs() <= 1e-6 * want.abs())
    };
    for (j, erf) in nodes.iter().enumerate() {
        if !is(erf, "Erf") || erf.input.len() != 1 || erf.output.len() != 1 {
            continue;
        }
        let Some(found) = chain(nodes, &uses, &near, j) else {
            continue;
        };
        let (x, mut members, anchor) = found;
        if members
            .iter()
            .any(|i| groups.skip.contains(i) || groups.replace.contains_key(i))
        {
            continue;
        }
        members.retain(|&i| i != anchor);
        groups.skip.extend(members);
        groups.replace.insert(
            anchor,
            NodeProto {
                input: vec![x.to_owned()],
                output: nodes[anchor].output.clone(),
                name: nodes[anchor].name.clone(),
                op_type: Some("Gelu".into()),
                domain: Some("com.microsoft".into()),
                ..NodeProto::default()
            },
        );
    }
}

/// The chain around Erf node `j`: its input `x`, its nodes, and its last
/// node.
fn chain<'a>(
    nodes: &'a [NodeProto],
    uses: &Uses<'_>,
    near: &dyn Fn(&str, f64) -> bool,
    j: usize,
) -> Option<(&'a str, Vec<usize>, usize)> {
    let erf = &nodes[j];
    // x / sqrt(2), or x * (1 / sqrt(2)).
    let scaled = erf.input[0].as_str();
    let d = *uses.producer.get(scaled)?;
    if uses.sole_reader(scaled) != Some(j) {
        return None;
    }
    let div = &nodes[d];
    let x = match div.input.as_slice() {
        [x, c] if is(div, "Div") && near(c, std::f64::consts::SQRT_2) => x.as_str(),
        [_, _] if is(div, "Mul") => {
            let [a, b] = [&div.input[0], &div.input[1]];
            if near(b, std::f64::consts::FRAC_1_SQRT_2) {
                a.as_str()
            } else if near(a, std::f64::consts::FRAC_1_SQRT_2) {
                b.as_str()
            } else {
                return None;
            }
        }
        _ => return None,
    };
    // 1 + erf.
    let a = uses.sole_reader(&erf.output[0])?;
    if !is(&nodes[a], "Add") || !near(other(&nodes[a], &erf.output[0])?, 1.0) {
        return None;
    }
    let plus = nodes[a].output.first()?.as_str();
    let m = uses.sole_reader(plus)?;
    if !is(&nodes[m], "Mul") {
        return None;
    }
    let factor = other(&nodes[m], plus)?;
    let product = nodes[m].output.first()?.as_str();
    if factor == x {
        // x * (1 + erf), then * 0.5.
        let h = uses.sole_reader(product)?;
        if !is(&nodes[h], "Mul") || !near(other(&nodes[h], product)?, 0.5) {
            return None;
        }
        return Some((x, vec![d, j, a, m, h], h));
    }
    // (x * 0.5) * (1 + erf).
    let h = *uses.producer.get(factor)?;
    if uses.sole_reader(factor) != Some(m)
        || !is(&nodes[h], "Mul")
        || other(&nodes[h], x).is_none_or(|c| !near(c, 0.5))
    {
        return None;
    }
    Some((x, vec![h, d, j, a, m], m))
}
