//! Convolution chains (cold path: resolution only).
//!
//! `Conv [-> BatchNormalization] [-> Add(residual)] [-> activation]`, each
//! intermediate value read by the next node alone and not a graph output,
//! runs as one operator ([`onnx_prepared_kernels::ops::conv::fused`]): the
//! normalization folds into the convolution's packed weights (one prepack
//! that reads the weight and the normalization's parameters), and the
//! residual addend and the activation are applied in the convolution's
//! output loop. This pass only finds candidate chains in the graph;
//! resolution checks their types, constants and shapes when it reaches
//! the chain's last node (where every operand is defined) and resolves the
//! nodes one by one when a check fails.

use std::collections::{HashMap, HashSet};

use onnx_prepared_kernels::Attributes;
use onnx_prepared_proto::NodeProto;

use super::{Model, NodeAttributes};

/// The activation ending a chain, as the graph writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActKind {
    Relu,
    LeakyRelu,
    Clip,
    HardSigmoid,
    HardSwish,
    Sigmoid,
    /// `Mul(x, HardSigmoid(x))`.
    MulHardSigmoid,
    /// `Mul(x, Sigmoid(x))`.
    Silu,
}

/// One candidate chain.
#[derive(Debug, Clone)]
pub(crate) struct ConvChain {
    /// Every node of the chain in graph order; the Conv first.
    pub(crate) nodes: Vec<usize>,
    /// The BatchNormalization node.
    pub(crate) batch_norm: Option<usize>,
    /// The residual addend's name.
    pub(crate) residual: Option<String>,
    /// The activation and the node that holds its attributes or bounds
    /// (HardSigmoid, Sigmoid, Clip, LeakyRelu).
    pub(crate) activation: Option<(ActKind, usize)>,
    /// The value the chain defines.
    pub(crate) output: String,
}

/// The chains of a graph: the nodes inside one (resolved at its anchor)
/// and each chain by its anchor, its last node.
#[derive(Debug, Default)]
pub(crate) struct ConvChains {
    pub(crate) inner: HashSet<usize>,
    pub(crate) by_anchor: HashMap<usize, ConvChain>,
}

fn is_op(node: &NodeProto, op: &str) -> bool {
    matches!(node.domain.as_deref(), None | Some("" | "ai.onnx"))
        && node.op_type.as_deref() == Some(op)
}

/// The one output of a node (others absent or omitted).
fn single_output(node: &NodeProto) -> Option<&str> {
    let first = node.output.first().filter(|o| !o.is_empty())?;
    node.output[1..]
        .iter()
        .all(String::is_empty)
        .then_some(first.as_str())
}

/// Who reads each value: `(node, input position)`; graph outputs count as
/// readers at `usize::MAX`.
struct Readers<'g>(HashMap<&'g str, Vec<(usize, usize)>>);

impl<'g> Readers<'g> {
    fn of(model: &'g Model) -> Self {
        let graph = model.graph();
        let mut map: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
        for (j, node) in graph.node.iter().enumerate() {
            for (pos, i) in node.input.iter().enumerate() {
                if !i.is_empty() {
                    map.entry(i.as_str()).or_default().push((j, pos));
                }
            }
        }
        for o in &graph.output {
            map.entry(o.name.as_deref().unwrap_or_default())
                .or_default()
                .push((usize::MAX, 0));
        }
        Self(map)
    }

    fn get(&self, value: &str) -> &[(usize, usize)] {
        self.0.get(value).map_or(&[], Vec::as_slice)
    }

    /// The one node that reads `value` (once), when only one does.
    fn only(&self, value: &str) -> Option<(usize, usize)> {
        match self.get(value) {
            &[(j, pos)] if j != usize::MAX => Some((j, pos)),
            _ => None,
        }
    }
}

/// Attributes of `node` are all among `allowed` and their values as
/// `check` wants.
fn attributes_ok(
    node: &NodeProto,
    allowed: &[&str],
    check: impl Fn(&NodeAttributes) -> bool,
) -> bool {
    NodeAttributes::new(node)
        .is_ok_and(|a| a.names().iter().all(|n| allowed.contains(&n.as_str())) && check(&a))
}

/// The candidate chains of `model`.
pub(crate) fn find(model: &Model) -> ConvChains {
    let nodes = &model.graph().node;
    let readers = Readers::of(model);
    let mut chains = ConvChains::default();
    // Nodes of some chain: a node joins one chain at most.
    let mut claimed: HashSet<usize> = HashSet::new();
    for (i, node) in nodes.iter().enumerate() {
        if !is_op(node, "Conv") {
            continue;
        }
        let Some(mut cur) = single_output(node) else {
            continue;
        };
        let mut chain = ConvChain {
            nodes: vec![i],
            batch_norm: None,
            residual: None,
            activation: None,
            output: String::new(),
        };
        if let Some((j, 0)) = readers.only(cur)
            && !claimed.contains(&j)
            && is_op(&nodes[j], "BatchNormalization")
            && nodes[j].input.len() == 5
            && nodes[j].input.iter().all(|n| !n.is_empty())
            && let Some(out) = single_output(&nodes[j])
            && attributes_ok(
                &nodes[j],
                &["epsilon", "momentum", "training_mode", "spatial"],
                |a| {
                    matches!(a.int("training_mode"), Ok(None | Some(0)))
                        && matches!(a.int("spatial"), Ok(None | Some(1)))
                },
            )
        {
            chain.nodes.push(j);
            chain.batch_norm = Some(j);
            cur = out;
        }
        if let Some((j, pos)) = readers.only(cur)
            && !claimed.contains(&j)
            && is_op(&nodes[j], "Add")
            && nodes[j].input.len() == 2
            && let Some(out) = single_output(&nodes[j])
        {
            let other = &nodes[j].input[1 - pos];
            if other != cur && model.weight_by_name(other).is_none() {
                chain.nodes.push(j);
                chain.residual = Some(other.clone());
                cur = out;
            }
        }
        if let Some((kind, holder, last, out)) = activation(nodes, &readers, cur)
            && !claimed.contains(&holder)
            && !claimed.contains(&last)
        {
            chain.nodes.push(holder);
            if last != holder {
                chain.nodes.push(last);
            }
            chain.activation = Some((kind, holder));
            cur = out;
        }
        if chain.nodes.len() > 1 {
            chain.output = cur.to_owned();
            let anchor = *chain.nodes.last().expect("not empty");
            claimed.extend(chain.nodes.iter().copied());
            chains
                .inner
                .extend(chain.nodes[..chain.nodes.len() - 1].iter().copied());
            chains.by_anchor.insert(anchor, chain);
        }
    }
    chains
}

/// The activation reading `x`: its kind, the node with its attributes,
/// the last node and the value it defines.
fn activation<'m>(
    nodes: &'m [NodeProto],
    readers: &Readers<'_>,
    x: &str,
) -> Option<(ActKind, usize, usize, &'m str)> {
    if let &[(a, pa), (b, pb)] = readers.get(x) {
        // x * Sigmoid(x) or x * HardSigmoid(x), in either order; a graph
        // output (usize::MAX) among the readers stops the chain.
        if a == usize::MAX || b == usize::MAX {
            return None;
        }
        let (gate, mul, mul_pos) = if is_op(&nodes[b], "Mul") {
            (a, b, pb)
        } else {
            (b, a, pa)
        };
        let gate_pos = if gate == a { pa } else { pb };
        if gate_pos == 0
            && is_op(&nodes[mul], "Mul")
            && nodes[mul].input.len() == 2
            && let Some(g_out) = single_output(&nodes[gate])
            && nodes[mul].input[1 - mul_pos] == g_out
            && readers.only(g_out) == Some((mul, 1 - mul_pos))
            && gate < mul
            && let Some(out) = single_output(&nodes[mul])
        {
            let kind = if is_op(&nodes[gate], "Sigmoid") {
                Some(ActKind::Silu)
            } else if is_op(&nodes[gate], "HardSigmoid")
                && attributes_ok(&nodes[gate], &["alpha", "beta"], |_| true)
            {
                Some(ActKind::MulHardSigmoid)
            } else {
                None
            };
            return kind.map(|k| (k, gate, mul, out));
        }
        return None;
    }
    let (j, 0) = readers.only(x)? else {
        return None;
    };
    let node = &nodes[j];
    let out = single_output(node)?;
    let kind = if is_op(node, "Relu") {
        ActKind::Relu
    } else if is_op(node, "LeakyRelu") && attributes_ok(node, &["alpha"], |_| true) {
        ActKind::LeakyRelu
    } else if is_op(node, "HardSigmoid") && attributes_ok(node, &["alpha", "beta"], |_| true) {
        ActKind::HardSigmoid
    } else if is_op(node, "HardSwish") {
        ActKind::HardSwish
    } else if is_op(node, "Sigmoid") {
        ActKind::Sigmoid
    } else if is_op(node, "Clip") && attributes_ok(node, &["min", "max"], |_| true) {
        ActKind::Clip
    } else {
        return None;
    };
    // Relu, HardSwish and Sigmoid of old opsets carry `consumed_inputs`:
    // left unfused, their own kernels read it.
    if matches!(kind, ActKind::Relu | ActKind::HardSwish | ActKind::Sigmoid)
        && !attributes_ok(node, &[], |_| true)
    {
        return None;
    }
    Some((kind, j, j, out))
}
