//! The phases of resolution, in order (see [`ResolvedModel::resolve`]):
//!
//! 1. **weights** ([`Resolver::new`]): small embedded initializers become
//!    inline constants (readable at resolution); every other initializer a
//!    weight that only a requirement reads;
//! 2. **graph inputs** ([`Resolver::graph_inputs`]): values `0..n`, probed
//!    with placeholder dims;
//! 3. **nodes** ([`Resolver::node`], per node in graph order): a kernel
//!    chosen (QDQ groups fused first), types probed, nodes whose inputs are
//!    all constants folded (budgeted), every operator without a kernel
//!    listed;
//! 4. **liveness** ([`Resolver::live`]): nodes no graph output needs drop;
//! 5. **requirements** ([`Requirements`], [`Resolver::link`]): each live
//!    node's initializer inputs become prepared requirements (a prepack's
//!    layout over its consumed sources, or the source as is), deduplicated
//!    by [`PreparedKey`];
//! 6. **manifest**: exactly the external entries those requirements read.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use onnx_prepared_kernels::{
    ElementType, InputInfo, KernelError, KernelOptions, NodeSpec, Operator, OutputInfo, Prepack,
    Tensor, registry,
};
use onnx_prepared_proto::NodeProto;
use sha2::{Digest, Sha256};

use super::probe::{Known, ProbeView, embedded_tensor, hash_source, probe_evaluate};
use super::{
    InlineId, Operand, PreparedKey, Requirement, RequirementIndex, ResolveOptions, ResolvedNode,
    SOURCE_LAYOUT, ValueId, scope_of,
};
use crate::model::qdq::QdqMatMul;
use crate::model::{
    Dim, GraphInput, LoadError, Model, NodeAttributes, ResolveError, UnsupportedOperator, WeightId,
    WeightSource,
};

/// The graph outputs by name, with what each is.
pub(super) type GraphOutputs = Vec<(String, Known)>;

/// A node with its kernel, before liveness and requirements.
pub(super) struct Pending {
    name: String,
    scope: String,
    op: Box<dyn Operator>,
    inputs: Vec<Option<Known>>,
    outputs: Vec<ValueId>,
    probe_outputs: Vec<OutputInfo>,
}

/// The state resolution builds up over phases 1–4.
pub(super) struct Resolver<'m> {
    model: &'m Model,
    options: &'m ResolveOptions,
    pub(super) value_names: Vec<String>,
    known: HashMap<String, Known>,
    /// Values whose type and shape the probe could not infer.
    unprobed: HashSet<ValueId>,
    probe_values: HashMap<ValueId, Arc<Tensor>>,
    weight_dims: Vec<Vec<usize>>,
    pub(super) inline: Vec<Arc<Tensor>>,
    /// Inline constants that are initializers: a prepack may consume them
    /// (read once through the payload source, packed once).
    inline_weights: HashMap<u32, WeightId>,
    pending: Vec<Pending>,
    folded_bytes: usize,
    unsupported: Vec<UnsupportedOperator>,
}

/// A [`ProbeView`] over the resolver's fields (a macro, so that the borrow
/// is of the fields, not of the whole resolver).
macro_rules! view {
    ($r:expr) => {
        ProbeView {
            inline: &$r.inline,
            weights: $r.model.weights(),
            weight_dims: &$r.weight_dims,
            unprobed: &$r.unprobed,
            probe_values: &$r.probe_values,
        }
    };
}

mod chain;

impl<'m> Resolver<'m> {
    /// Phase 1: every initializer known as an inline constant or a weight.
    pub(super) fn new(model: &'m Model, options: &'m ResolveOptions) -> Result<Self, LoadError> {
        let mut r = Self {
            model,
            options,
            value_names: Vec::new(),
            known: HashMap::new(),
            unprobed: HashSet::new(),
            probe_values: HashMap::new(),
            weight_dims: model
                .weights()
                .iter()
                .map(|w| w.dims().iter().map(|&d| d as usize).collect())
                .collect(),
            inline: Vec::new(),
            inline_weights: HashMap::new(),
            pending: Vec::new(),
            folded_bytes: 0,
            unsupported: Vec::new(),
        };
        for w in model.weights() {
            match w.source() {
                WeightSource::Embedded { .. }
                    if w.byte_len() <= crate::limits::MAX_INLINE_CONSTANT_BYTES =>
                {
                    let proto_free = embedded_tensor(model, w.id())?;
                    r.inline_weights.insert(r.inline.len() as u32, w.id());
                    let id = r.push_inline(proto_free);
                    r.known.insert(w.name().to_owned(), Known::Inline(id));
                }
                _ => {
                    r.known.insert(w.name().to_owned(), Known::Weight(w.id()));
                }
            }
        }
        Ok(r)
    }

    fn new_value(&mut self, name: String) -> ValueId {
        self.value_names.push(name);
        ValueId((self.value_names.len() - 1) as u32)
    }

    fn push_inline(&mut self, t: Tensor) -> InlineId {
        self.inline.push(Arc::new(t));
        InlineId((self.inline.len() - 1) as u32)
    }

    /// Phase 2: graph inputs (not initializers) are values `0..n`, in
    /// order, probed with the options' dims (1 where none is given).
    pub(super) fn graph_inputs(&mut self) -> Result<Vec<GraphInput>, LoadError> {
        let mut inputs = Vec::new();
        for v in &self.model.graph().input {
            let name = v.name.clone().unwrap_or_default();
            if self.model.weight_by_name(&name).is_some() {
                continue;
            }
            let input = crate::model::graph_input(v)?;
            let shape: Vec<usize> = input
                .dims
                .iter()
                .flatten()
                .map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Symbolic(p) => self.options.probe_dims.get(p).copied().unwrap_or(1),
                    Dim::Unknown => 1,
                })
                .collect();
            let id = self.new_value(name.clone());
            self.known
                .insert(name, Known::Value(id, input.dtype, shape));
            inputs.push(input);
        }
        Ok(inputs)
    }

    /// Phase 3 for every node, then the list of operators without a kernel
    /// as one error.
    pub(super) fn nodes(&mut self) -> Result<(), LoadError> {
        let model = self.model;
        let (qdq_skip, qdq_fused) = crate::model::qdq::find(model);
        let chains = crate::model::conv_chain::find(model);
        let mut int8 = crate::model::qdq_int8::find(model);
        crate::model::dynamic_int8::add(model, &mut int8);
        crate::model::gelu_chain::add(model, &mut int8);
        let nodes = &model.graph().node;
        for (index, node) in nodes.iter().enumerate() {
            if qdq_skip.contains(&index)
                || chains.inner.contains(&index)
                || int8.skip.contains(&index)
            {
                continue; // runs inside a fused operator
            }
            if let Some(integer) = int8.replace.get(&index) {
                self.node(index, integer, None)?;
                continue;
            }
            if let Some(chain) = chains.by_anchor.get(&index) {
                if let Some((name, op, inputs)) = self.fuse_chain(chain) {
                    self.place(name, op, &inputs, std::slice::from_ref(&chain.output))?;
                } else {
                    for &i in &chain.nodes {
                        self.node(i, &nodes[i], qdq_fused.get(&i))?;
                    }
                }
                continue;
            }
            self.node(index, node, qdq_fused.get(&index))?;
        }
        if !self.unsupported.is_empty() {
            let unsupported = std::mem::take(&mut self.unsupported);
            return Err(ResolveError::UnsupportedOperators(unsupported).into());
        }
        Ok(())
    }

    /// Phase 3 for one node: its kernel, then [`Resolver::place`].
    fn node(
        &mut self,
        index: usize,
        node: &NodeProto,
        fused: Option<&QdqMatMul>,
    ) -> Result<(), LoadError> {
        let name = node_name(index, node);
        let Some(op) = self.kernel(node, &name, fused)? else {
            return Ok(());
        };
        let input_names: &[String] = fused.map_or(&node.input, |f| &f.inputs);
        self.place(name, op, input_names, &node.output)
    }

    /// An operator over named inputs: folded, or probed and kept for
    /// phase 4.
    fn place(
        &mut self,
        name: String,
        op: Box<dyn Operator>,
        input_names: &[String],
        output_names: &[String],
    ) -> Result<(), LoadError> {
        let mut node_inputs = Vec::with_capacity(input_names.len());
        for input in input_names {
            if input.is_empty() {
                node_inputs.push(None);
                continue;
            }
            let k = self
                .known
                .get(input)
                .cloned()
                .ok_or_else(|| ResolveError::UndefinedValue {
                    node: name.clone(),
                    value: input.clone(),
                })?;
            node_inputs.push(Some(k));
        }
        let view = view!(self);
        let infos: Vec<Option<InputInfo<'_>>> = node_inputs
            .iter()
            .map(|k| k.as_ref().and_then(|k| view.info(k)))
            .collect();
        let foldable = node_inputs
            .iter()
            .flatten()
            .all(|k| matches!(k, Known::Inline(_)));
        // Probing types with placeholder dims is best effort: shapes that
        // depend on input values, or on real sizes, are inferred when the
        // graph is lowered for actual inputs. Only constant folding must
        // succeed here.
        let probed = node_inputs
            .iter()
            .flatten()
            .all(|k| !matches!(k, Known::Value(id, ..) if self.unprobed.contains(id)));
        let outs = match probed.then(|| op.infer_checked(&infos)) {
            Some(Ok(outs)) => Some(outs),
            Some(Err(source)) if foldable => {
                return Err(ResolveError::Kernel { node: name, source }.into());
            }
            _ => None,
        };
        if foldable {
            let outs = outs.expect("foldable nodes are probed");
            return self.fold(&*op, &name, &node_inputs, &outs, output_names);
        }
        let probe_out = probe_evaluate(&*op, &infos, outs.as_deref(), &node_inputs, |k| match k {
            Known::Inline(i) => Some(&*self.inline[i.0 as usize]),
            Known::Value(id, ..) => self.probe_values.get(id).map(|t| &**t),
            Known::Weight(_) => None,
        });
        let outputs = self.define_outputs(&name, output_names, outs.as_deref())?;
        if let Some(values) = probe_out {
            for (id, t) in outputs.iter().zip(values) {
                self.probe_values.insert(*id, Arc::new(t));
            }
        }
        self.pending.push(Pending {
            scope: scope_of(&name),
            name,
            op,
            inputs: node_inputs,
            outputs,
            probe_outputs: outs.unwrap_or_default(),
        });
        Ok(())
    }

    /// The node's kernel; `None` for an operator without one (listed, its
    /// outputs defined unprobed, so resolution goes on and one error names
    /// every such operator).
    fn kernel(
        &mut self,
        node: &NodeProto,
        name: &str,
        fused: Option<&QdqMatMul>,
    ) -> Result<Option<Box<dyn Operator>>, LoadError> {
        let domain = node.domain.as_deref().unwrap_or_default();
        // The integer operators of recognized QDQ groups are com.microsoft
        // version 1 where the model imports no such domain.
        let opset = self
            .model
            .opset_version(domain)
            .or_else(|| (domain == "com.microsoft").then_some(1))
            .ok_or_else(|| ResolveError::MissingOpset {
                node: name.to_owned(),
                domain: domain.to_owned(),
            })?;
        let attributes = NodeAttributes::new(node).map_err(|source| ResolveError::Kernel {
            node: name.to_owned(),
            source,
        })?;
        let spec = NodeSpec {
            domain,
            op_type: node.op_type.as_deref().unwrap_or_default(),
            opset,
            attributes: &attributes,
            inputs: node.input.len(),
            outputs: node.output.len(),
        };
        let looked_up = match fused {
            Some(f) => f.operator(self.options.cpu),
            None => registry::operator_with(
                &spec,
                KernelOptions {
                    int8_activations: self.options.int8_activations,
                    cpu: Some(self.options.cpu),
                },
            ),
        };
        match looked_up {
            Ok(op) => Ok(Some(op)),
            Err(KernelError::UnsupportedOp {
                domain,
                op_type,
                opset,
            }) => {
                match self
                    .unsupported
                    .iter_mut()
                    .find(|u| u.domain == domain && u.op_type == op_type)
                {
                    Some(u) => u.nodes += 1,
                    None => self.unsupported.push(UnsupportedOperator {
                        domain,
                        op_type,
                        opset,
                        nodes: 1,
                        first_node: name.to_owned(),
                    }),
                }
                for out in &node.output {
                    if !out.is_empty() && !self.known.contains_key(out) {
                        let id = self.new_value(out.clone());
                        self.unprobed.insert(id);
                        self.known
                            .insert(out.clone(), Known::Value(id, ElementType::F32, Vec::new()));
                    }
                }
                Ok(None)
            }
            Err(source) => Err(ResolveError::Kernel {
                node: name.to_owned(),
                source,
            }
            .into()),
        }
    }

    /// Folds a node whose inputs are all inline constants: its outputs
    /// become inline constants. Folded values are budgeted (checked before
    /// allocating) and a kernel panic is an error naming the node, as in
    /// lowering.
    fn fold(
        &mut self,
        op: &dyn Operator,
        name: &str,
        node_inputs: &[Option<Known>],
        outs: &[OutputInfo],
        output_names: &[String],
    ) -> Result<(), LoadError> {
        self.folded_bytes = self
            .folded_bytes
            .saturating_add(crate::model::folded_bytes(outs));
        let ceiling = self
            .options
            .fold_limit
            .min(crate::arena::Ceiling::process().limit());
        if self.folded_bytes > ceiling {
            return Err(crate::arena::ArenaError::AboveCeiling {
                domain: crate::arena::Domain::Preparation,
                what: format!("values folded through node `{name}`"),
                requested: self.folded_bytes,
                limit: ceiling,
            }
            .into());
        }
        let ins: Vec<Option<&Tensor>> = node_inputs
            .iter()
            .map(|k| match k {
                Some(Known::Inline(i)) => Some(&*self.inline[i.0 as usize]),
                _ => None,
            })
            .collect();
        let tensors =
            crate::model::fold_node(op, name, &ins, outs).map_err(ResolveError::Folding)?;
        for (out, t) in output_names.iter().zip(tensors) {
            let id = self.push_inline(t);
            self.known.insert(out.clone(), Known::Inline(id));
        }
        Ok(())
    }

    /// A node's outputs as new values (an omitted output gets a name of
    /// its own), with their probed types where known.
    fn define_outputs(
        &mut self,
        name: &str,
        output_names: &[String],
        outs: Option<&[OutputInfo]>,
    ) -> Result<Vec<ValueId>, LoadError> {
        let mut outputs = Vec::with_capacity(output_names.len());
        for (i, out) in output_names.iter().enumerate() {
            let label = if out.is_empty() {
                format!("{name}:unused{i}")
            } else {
                out.clone()
            };
            if self.known.contains_key(&label) {
                return Err(ResolveError::Redefined {
                    node: name.to_owned(),
                    value: label,
                }
                .into());
            }
            let id = self.new_value(label.clone());
            let (dtype, shape) = match outs.and_then(|o| o.get(i)) {
                Some(info) => (info.dtype, info.shape.clone()),
                None => {
                    self.unprobed.insert(id);
                    (ElementType::F32, Vec::new())
                }
            };
            self.known.insert(label, Known::Value(id, dtype, shape));
            outputs.push(id);
        }
        Ok(outputs)
    }

    /// Phase 4: the graph outputs, and which pending nodes they need.
    pub(super) fn live(&self) -> Result<(GraphOutputs, Vec<bool>), LoadError> {
        let mut graph_outputs = Vec::with_capacity(self.model.graph().output.len());
        for v in &self.model.graph().output {
            let name = v.name.clone().unwrap_or_default();
            let k = self
                .known
                .get(&name)
                .cloned()
                .ok_or_else(|| ResolveError::UndefinedValue {
                    node: "graph output".into(),
                    value: name.clone(),
                })?;
            graph_outputs.push((name, k));
        }
        let mut needed: HashSet<ValueId> = graph_outputs
            .iter()
            .filter_map(|(_, k)| match k {
                Known::Value(id, ..) => Some(*id),
                _ => None,
            })
            .collect();
        let mut live = vec![false; self.pending.len()];
        for (i, p) in self.pending.iter().enumerate().rev() {
            if p.outputs.iter().any(|o| needed.contains(o)) {
                live[i] = true;
                needed.extend(p.inputs.iter().flatten().filter_map(|k| match k {
                    Known::Value(id, ..) => Some(*id),
                    _ => None,
                }));
            }
        }
        Ok((graph_outputs, live))
    }

    /// Phase 5: live nodes with their operands and requirements, and the
    /// graph outputs' operands.
    pub(super) fn link(
        &mut self,
        live: &[bool],
        graph_outputs: GraphOutputs,
        reqs: &mut Requirements<'_>,
    ) -> (Vec<ResolvedNode>, Vec<(String, Operand)>) {
        let pending = std::mem::take(&mut self.pending);
        let mut nodes = Vec::new();
        for (p, &live) in pending.into_iter().zip(live) {
            if live {
                nodes.push(self.link_node(p, reqs));
            }
        }
        let outputs = graph_outputs
            .into_iter()
            .map(|(name, k)| {
                let op = match k {
                    Known::Value(id, ..) => Operand::Value(id),
                    Known::Inline(i) => Operand::Inline(i),
                    Known::Weight(w) => Operand::Prepared(reqs.source(w)),
                };
                (name, op)
            })
            .collect();
        (nodes, outputs)
    }

    /// One live node: its prepack (when its consumed inputs are
    /// initializers) and an operand per input.
    fn link_node(&self, p: Pending, reqs: &mut Requirements<'_>) -> ResolvedNode {
        let view = view!(self);
        let infos: Vec<Option<InputInfo<'_>>> = p
            .inputs
            .iter()
            .map(|k| k.as_ref().and_then(|k| view.info(k)))
            .collect();
        let mut consumed: Vec<usize> = Vec::new();
        let mut packed = None;
        if let Some(prepack) = p.op.prepack(&infos, self.options.cpu) {
            let sources: Option<Vec<WeightId>> = prepack
                .consumes()
                .iter()
                .map(|&i| match p.inputs.get(i) {
                    Some(Some(Known::Weight(w))) => Some(*w),
                    Some(Some(Known::Inline(c))) => self.inline_weights.get(&c.0).copied(),
                    _ => None,
                })
                .collect();
            // Packing applies to initializers (external or embedded, inline
            // or not); a layout over a folded value would be prepared every
            // run.
            if let Some(sources) = sources {
                consumed = prepack.consumes().to_vec();
                packed = Some(reqs.packed(&p.name, prepack, sources));
            }
        }
        let mut operands = Vec::with_capacity(p.inputs.len());
        for (i, k) in p.inputs.iter().enumerate() {
            let op = match k {
                None => None,
                Some(Known::Weight(w)) if consumed.contains(&i) => Some(Operand::Consumed(*w)),
                Some(Known::Inline(c)) if consumed.contains(&i) => {
                    self.inline_weights.get(&c.0).map(|w| Operand::Consumed(*w))
                }
                Some(_) if consumed.contains(&i) => None,
                Some(Known::Value(id, ..)) => Some(Operand::Value(*id)),
                Some(Known::Inline(c)) => Some(Operand::Inline(*c)),
                Some(Known::Weight(w)) => Some(Operand::Prepared(reqs.source(*w))),
            };
            operands.push(op);
        }
        ResolvedNode {
            name: p.name,
            scope: p.scope,
            op: p.op,
            inputs: operands,
            outputs: p.outputs,
            packed,
            probe_outputs: p.probe_outputs,
        }
    }
}

/// A node's name, or `#index op_type` for an unnamed one.
fn node_name(index: usize, node: &NodeProto) -> String {
    let op_type = node.op_type.as_deref().unwrap_or_default();
    node.name
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("#{index} {op_type}"))
}

/// Phase 5's requirements, deduplicated by [`PreparedKey`].
pub(super) struct Requirements<'m> {
    model: &'m Model,
    pub(super) list: Vec<Requirement>,
    by_key: HashMap<PreparedKey, RequirementIndex>,
}

impl<'m> Requirements<'m> {
    pub(super) fn new(model: &'m Model) -> Self {
        Self {
            model,
            list: Vec::new(),
            by_key: HashMap::new(),
        }
    }

    /// The lineage of a set of sources: what their bytes are, never where
    /// they are.
    fn lineage(&self, sources: &[WeightId]) -> [u8; 32] {
        let mut h = Sha256::new();
        for &w in sources {
            hash_source(&mut h, self.model, w);
        }
        let mut out = [0u8; 32];
        out.copy_from_slice(&h.finalize());
        out
    }

    fn require(&mut self, key: PreparedKey, req: Requirement) -> RequirementIndex {
        let list = &mut self.list;
        *self.by_key.entry(key).or_insert_with(|| {
            list.push(req);
            RequirementIndex((list.len() - 1) as u32)
        })
    }

    /// Weight `w` as stored (no prepack).
    fn source(&mut self, w: WeightId) -> RequirementIndex {
        let d = &self.model.weights()[w.index()];
        let key = PreparedKey {
            lineage: self.lineage(&[w]),
            layout: SOURCE_LAYOUT.into(),
            device: 0,
        };
        let req = Requirement {
            key: key.clone(),
            sources: vec![w],
            prepack: None,
            source_bytes: d.byte_len(),
            name: d.name().to_owned(),
        };
        self.require(key, req)
    }

    /// `sources` packed by `prepack` for node `node`.
    fn packed(
        &mut self,
        node: &str,
        prepack: Box<dyn Prepack>,
        sources: Vec<WeightId>,
    ) -> RequirementIndex {
        let key = PreparedKey {
            lineage: self.lineage(&sources),
            layout: prepack.layout().to_owned(),
            device: 0,
        };
        let descriptors = self.model.weights();
        let source_bytes = sources
            .iter()
            .map(|w| descriptors[w.index()].byte_len())
            .sum();
        let name = format!("{node}:{}", prepack.layout());
        let req = Requirement {
            key: key.clone(),
            sources,
            prepack: Some(Arc::from(prepack)),
            source_bytes,
            name,
        };
        self.require(key, req)
    }
}
