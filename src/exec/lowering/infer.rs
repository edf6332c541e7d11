//! Pass 1 of lowering (cold path): every value's type and shape or
//! constant value, nodes that depend only on shapes and constants folded,
//! and what each node came to — kept as a [`Memo`] so that the next
//! lowering of the same model redoes only the nodes whose inputs changed.

use std::collections::HashSet;
use std::sync::Arc;

use onnx_prepared_kernels::{ElementType, InputInfo, KernelError, Tensor};

use super::late::{ShapeOperand, shape_operand};
use super::{AllocationGate, NeedsValue};
use crate::exec::RunError as Error;
use crate::model::{
    Operand as Source, ResolveError, ResolvedModel, fold_node, folded_bytes as folded_bytes_of,
};

/// What lowering knows about each value.
#[derive(Debug, Clone)]
pub(super) enum Known {
    Unknown,
    Const(Arc<Tensor>),
    Dynamic(ElementType, Vec<usize>),
    /// Computed by a late node: shape and type are known only during the
    /// run ([`super::late`]).
    Late,
}

/// The dimensions of each weight, by weight index.
pub(super) fn weight_dims(resolved: &ResolvedModel) -> Vec<Vec<usize>> {
    resolved
        .model()
        .weights()
        .iter()
        .map(|w| w.dims().iter().map(|&d| d as usize).collect())
        .collect()
}

/// What pass 1 of lowering knows: every value's shape or constant value
/// (or that it is late), the nodes left to run, and the bytes folded and
/// one kernel's largest temporary.
pub(super) struct Shapes {
    pub(super) known: Vec<Known>,
    pub(super) dynamic_nodes: Vec<usize>,
    pub(super) folded_bytes: usize,
    pub(super) most_scratch: usize,
    /// What each node came to, for the next lowering ([`Memo`]).
    pub(super) facts: Vec<NodeFact>,
}

/// What pass 1 made of one node.
#[derive(Debug, Clone, Copy)]
pub(super) enum NodeFact {
    /// Folded into constants of these many bytes.
    Folded(usize),
    /// Runs, with this largest temporary.
    Dynamic(usize),
    /// Runs with output shapes known only during the run.
    Late,
    /// Not reached (a lowering that stopped early).
    Unknown,
}

/// One lowering's pass 1, kept with it: the next lowering of the same
/// model (a decoder's next step, whose inputs differ in a few shapes)
/// takes the outputs of every node whose inputs are what they were, and
/// infers or folds only the others.
#[derive(Debug)]
pub(crate) struct Memo {
    known: Vec<Known>,
    facts: Vec<NodeFact>,
}

/// Whether `a` (this lowering) is `b` (the memo's) for every node reading it.
fn same(a: &Known, b: &Known) -> bool {
    match (a, b) {
        (Known::Const(x), Known::Const(y)) => Arc::ptr_eq(x, y) || **x == **y,
        (Known::Dynamic(d, s), Known::Dynamic(e, t)) => d == e && s == t,
        (Known::Late, Known::Late) | (Known::Unknown, Known::Unknown) => true,
        _ => false,
    }
}

/// Whether every input of `node` is what it was in `memo`.
fn unchanged(node: &crate::model::ResolvedNode, known: &[Known], memo: &Memo) -> bool {
    node.inputs.iter().flatten().all(|op| match op {
        Source::Value(id) => {
            let i = id.0 as usize;
            memo.known.get(i).is_some_and(|m| same(&known[i], m))
        }
        // Model constants and weights: the same in every lowering.
        Source::Inline(_) | Source::Prepared(_) | Source::Consumed(_) => true,
    })
}

impl Shapes {
    /// The memo of this pass (for the next lowering).
    pub(super) fn into_memo(self) -> Memo {
        Memo {
            known: self.known,
            facts: self.facts,
        }
    }

    /// Node `n` came to `fact`.
    fn record(&mut self, n: usize, fact: NodeFact) {
        match fact {
            NodeFact::Folded(bytes) => self.folded_bytes = self.folded_bytes.saturating_add(bytes),
            NodeFact::Dynamic(scratch) => {
                self.most_scratch = self.most_scratch.max(scratch);
                self.dynamic_nodes.push(n);
            }
            NodeFact::Late | NodeFact::Unknown => self.dynamic_nodes.push(n),
        }
        self.facts[n] = fact;
    }

    /// Marks `node` (node `n`) late.
    fn late(&mut self, n: usize, node: &crate::model::ResolvedNode) {
        late(node, &mut self.known);
        self.record(n, NodeFact::Late);
    }
}

/// What pass 1 knows of the graph inputs before any node: the values of
/// `value_inputs`, the types and shapes of the others (the memo's own
/// constant where one is equal, so that nodes reading it compare pointers).
fn input_knowns(
    resolved: &ResolvedModel,
    inputs: &[&Tensor],
    value_inputs: &HashSet<usize>,
    memo: Option<&Memo>,
) -> Vec<Known> {
    let mut known = vec![Known::Unknown; resolved.value_count()];
    for (i, t) in inputs.iter().enumerate() {
        known[i] = if value_inputs.contains(&i) {
            // Kept with the lowering after the run: never a view of
            // bytes lent for one run.
            Known::Const(Arc::new(t.to_owned_elements()))
        } else {
            Known::Dynamic(t.dtype(), t.shape().to_vec())
        };
        if let Some(m) = memo
            && same(&known[i], &m.known[i])
        {
            known[i] = m.known[i].clone();
        }
    }
    known
}

/// Pass 1: infer every shape, fold what depends only on shapes and
/// constants.
///
/// With `memo` (an earlier lowering's pass 1 of the same model), a node
/// whose inputs are unchanged takes its outputs from the memo.
pub(super) fn infer_and_fold(
    resolved: &ResolvedModel,
    inputs: &[&Tensor],
    value_inputs: &HashSet<usize>,
    gate: AllocationGate<'_>,
    weight_dims: &[Vec<usize>],
    memo: Option<&Memo>,
) -> Result<Result<Shapes, Error>, NeedsValue> {
    let fail = |node: &str, source: KernelError| -> Result<Result<Shapes, Error>, NeedsValue> {
        Ok(Err(ResolveError::Kernel {
            node: node.to_owned(),
            source,
        }
        .into()))
    };
    let memo = memo.filter(|m| {
        m.known.len() == resolved.value_count() && m.facts.len() == resolved.nodes().len()
    });
    let mut shapes = Shapes {
        known: input_knowns(resolved, inputs, value_inputs, memo),
        dynamic_nodes: Vec::new(),
        folded_bytes: 0,
        // The largest temporary one kernel allocates while it runs (nodes
        // run one at a time; see `Operator::scratch_bytes`).
        most_scratch: 0,
        facts: vec![NodeFact::Unknown; resolved.nodes().len()],
    };
    for (n, node) in resolved.nodes().iter().enumerate() {
        if let Some(m) = memo
            && !matches!(m.facts[n], NodeFact::Unknown)
            && unchanged(node, &shapes.known, m)
        {
            for id in &node.outputs {
                shapes.known[id.0 as usize] = m.known[id.0 as usize].clone();
            }
            shapes.record(n, m.facts[n]);
            continue;
        }
        let known = &shapes.known;
        let reads_late = node.inputs.iter().flatten().any(
            |op| matches!(op, Source::Value(id) if matches!(known[id.0 as usize], Known::Late)),
        );
        if reads_late {
            shapes.late(n, node);
            continue;
        }
        let infos = input_infos(resolved, node, known, weight_dims);
        if let Some(folded) = fold_shapes(node, &infos) {
            let tensors = match folded {
                Ok(t) => t,
                Err(source) => return fail(&node.name, source),
            };
            let mut bytes = 0usize;
            for (id, t) in node.outputs.iter().zip(tensors) {
                bytes = bytes.saturating_add(t.byte_len());
                shapes.known[id.0 as usize] = Known::Const(Arc::new(t));
            }
            shapes.record(n, NodeFact::Folded(bytes));
            continue;
        }
        let outs = match node.op.infer_checked(&infos) {
            Ok(o) => o,
            Err(KernelError::ValueDependent { .. }) => {
                shapes.late(n, node);
                continue;
            }
            Err(KernelError::NeedsConstant { input, .. }) => {
                match needs_constant(resolved, node, input, inputs, value_inputs) {
                    Ok(()) => {
                        shapes.late(n, node);
                        continue;
                    }
                    Err(stop) => return stop,
                }
            }
            Err(source) => return fail(&node.name, source),
        };
        if outs.len() != node.outputs.len() {
            let detail = format!("{} outputs inferred for {}", outs.len(), node.outputs.len());
            return fail(&node.name, KernelError::Shape(detail));
        }
        if let Some(ins) = constant_inputs(resolved, node, known) {
            let bytes = folded_bytes_of(&outs);
            let total = shapes.folded_bytes.saturating_add(bytes);
            if let Err(e) = gate(&format!("folding node `{}`", node.name), total) {
                return Ok(Err(e));
            }
            let tensors = match fold_node(&*node.op, &node.name, &ins, &outs) {
                Ok(t) => t,
                Err(e) => return Ok(Err(e.into())),
            };
            for (id, t) in node.outputs.iter().zip(tensors) {
                shapes.known[id.0 as usize] = Known::Const(Arc::new(t));
            }
            shapes.record(n, NodeFact::Folded(bytes));
            continue;
        }
        let scratch = node.op.scratch_bytes(&infos);
        for (id, o) in node.outputs.iter().zip(outs) {
            shapes.known[id.0 as usize] = Known::Dynamic(o.dtype, o.shape);
        }
        shapes.record(n, NodeFact::Dynamic(scratch));
    }
    Ok(Ok(shapes))
}

/// Every input of `node` when all are constants in memory and no packed
/// object consumes one (the node folds); `None` otherwise.
fn constant_inputs<'a>(
    resolved: &'a ResolvedModel,
    node: &crate::model::ResolvedNode,
    known: &'a [Known],
) -> Option<Vec<Option<&'a Tensor>>> {
    if node.packed.is_some() {
        return None;
    }
    node.inputs
        .iter()
        .map(|op| match op {
            None => Some(None),
            Some(Source::Value(id)) => match &known[id.0 as usize] {
                Known::Const(t) => Some(Some(&**t)),
                _ => None,
            },
            Some(Source::Inline(i)) => Some(Some(&**resolved.inline(*i))),
            Some(Source::Prepared(_) | Source::Consumed(_)) => None,
        })
        .collect()
}

/// Marks `node`'s outputs late.
fn late(node: &crate::model::ResolvedNode, known: &mut [Known]) {
    for id in &node.outputs {
        known[id.0 as usize] = Known::Late;
    }
}

/// Shape-only operators (Shape, Size) fold for this shape set even when
/// their inputs are run-time values: `None` when `node` does not.
fn fold_shapes(
    node: &crate::model::ResolvedNode,
    infos: &[Option<InputInfo<'_>>],
) -> Option<Result<Vec<Tensor>, KernelError>> {
    if infos.len() != node.inputs.len()
        || !infos
            .iter()
            .zip(&node.inputs)
            .all(|(i, op)| i.is_some() == op.is_some())
    {
        return None;
    }
    Some(node.op.fold_shapes(infos)?.and_then(|t| {
        if t.len() == node.outputs.len() {
            Ok(t)
        } else {
            Err(KernelError::Shape(format!(
                "{} outputs folded for {}",
                t.len(),
                node.outputs.len()
            )))
        }
    }))
}

/// What shape inference sees of each input of `node`: a known constant, a
/// run-time value's type and shape, or an unloaded weight's.
fn input_infos<'a>(
    resolved: &'a ResolvedModel,
    node: &crate::model::ResolvedNode,
    known: &'a [Known],
    weight_dims: &'a [Vec<usize>],
) -> Vec<Option<InputInfo<'a>>> {
    let weights = resolved.model().weights();
    let unloaded = |w: crate::model::WeightId| {
        InputInfo::unloaded(
            weights[w.index()].element_type().compute(),
            &weight_dims[w.index()],
        )
    };
    node.inputs
        .iter()
        .map(|op| {
            op.and_then(|op| match op {
                Source::Value(id) => match &known[id.0 as usize] {
                    Known::Const(t) => Some(InputInfo::known(t)),
                    Known::Dynamic(d, s) => Some(InputInfo::dynamic(*d, s)),
                    Known::Unknown | Known::Late => None,
                },
                Source::Inline(i) => Some(InputInfo::known(resolved.inline(i))),
                Source::Prepared(r) => {
                    Some(unloaded(resolved.requirements()[r.0 as usize].sources[0]))
                }
                Source::Consumed(w) => Some(unloaded(w)),
            })
        })
        .collect()
}

/// A node's shape needs the value of its input `input`: when that value
/// comes from small graph inputs through nodes lowering could evaluate,
/// lower again with those inputs known, keyed by their values
/// (`Err(Err(NeedsValue))`); when it comes from large inputs or weights,
/// the node is late (`Ok`); otherwise a typed error.
#[allow(clippy::type_complexity)]
fn needs_constant<T>(
    resolved: &ResolvedModel,
    node: &crate::model::ResolvedNode,
    input: usize,
    inputs: &[&Tensor],
    value_inputs: &HashSet<usize>,
) -> Result<(), Result<Result<T, Error>, NeedsValue>> {
    if let Some(Some(Source::Value(id))) = node.inputs.get(input) {
        match shape_operand(resolved, *id, inputs, value_inputs) {
            ShapeOperand::Rekey(sources) => return Err(Err(NeedsValue(sources))),
            ShapeOperand::Late => return Ok(()),
            ShapeOperand::Missing => {}
        }
    }
    Err(Ok(Err(ResolveError::Kernel {
        node: node.name.clone(),
        source: KernelError::NeedsConstant {
            op: node.op.name(),
            input,
        },
    }
    .into())))
}

