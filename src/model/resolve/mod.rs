//! Resolution (cold path): from a metadata-only [`Model`] to a frozen
//! [`ResolvedModel`] — a kernel per node, the prepared requirements each node
//! needs, dead nodes and unused initializers dropped, constant subgraphs of
//! embedded values folded, and the payload manifest (exactly the external
//! entries some eligible recipe may read) frozen. No payload byte is read.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use onnx_prepared_kernels::{
    CpuFeatures, ElementType, InputInfo, KernelError, KernelOptions, NodeSpec, Operator,
    OutputInfo, Prepack, Tensor, registry,
};
use sha2::{Digest, Sha256};

use super::{Dim, GraphInput, Model, NodeAttributes, WeightId, WeightSource};
use crate::model::LoadError;
use crate::model::{ResolveError, UnsupportedOperator};

mod probe;

pub(crate) use probe::hash_source_identity;
use probe::{ProbeView, embedded_tensor, hash_source, probe_evaluate};

/// Index of a value (graph input or node output) of a [`ResolvedModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValueId(pub u32);

/// Index of an inline constant (embedded initializer or folded value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InlineId(pub u32);

/// Index of a prepared requirement of a [`ResolvedModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequirementIndex(pub u32);

/// What a node input reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    /// A graph input or another node's output.
    Value(ValueId),
    /// A constant already in memory (embedded initializer, folded value).
    Inline(InlineId),
    /// The prepared object of a requirement: a packed weight, or an external
    /// weight's source tensor as is.
    Prepared(RequirementIndex),
    /// A weight consumed by the node's packed requirement: known to shape
    /// inference (type and dims), never read by the kernel itself.
    Consumed(WeightId),
}

/// Identity of a prepared object: the ordered lineage of its sources, the
/// packed layout, and the device. Two kernels asking for the same key share
/// one object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PreparedKey {
    /// SHA-256 over the ordered sources: name, type, dims and content identity.
    pub lineage: [u8; 32],
    /// The layout key (`source` for a weight used as is).
    pub layout: String,
    /// Device index (0 = CPU).
    pub device: u16,
}

impl std::fmt::Display for PreparedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short: String = self.lineage[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        write!(f, "{short}/{}/dev{}", self.layout, self.device)
    }
}

/// The layout name of a requirement that publishes a source tensor unchanged.
pub const SOURCE_LAYOUT: &str = "source";

/// One prepared object the model needs.
#[derive(Debug, Clone)]
pub struct Requirement {
    /// Its identity.
    pub key: PreparedKey,
    /// The source weights, in the order the layout consumes them.
    pub sources: Vec<WeightId>,
    /// How to pack the sources; `None` publishes the single source as is.
    pub prepack: Option<Arc<dyn Prepack>>,
    /// Bytes of the sources.
    pub source_bytes: u64,
    /// A readable name (`layer0.attn.qkv:matmul-nbits-…` or the weight's name).
    pub name: String,
}

/// A node with its kernel and operands.
#[derive(Debug)]
pub struct ResolvedNode {
    /// The node's name (or `#index op_type` when unnamed).
    pub name: String,
    /// Its name scope: consecutive nodes of one scope form one invocation step.
    pub scope: String,
    /// The kernel.
    pub op: Box<dyn Operator>,
    /// Operands; `None` for omitted optional inputs.
    pub inputs: Vec<Option<Operand>>,
    /// Output values.
    pub outputs: Vec<ValueId>,
    /// The packed requirement that replaces some inputs, if any.
    pub packed: Option<RequirementIndex>,
    /// Types of inputs and outputs as inferred with probe shapes (dumps only).
    pub probe_outputs: Vec<OutputInfo>,
}

impl ResolvedNode {
    /// Every requirement this node reads (packed and as-is).
    pub fn requirements(&self) -> impl Iterator<Item = RequirementIndex> + '_ {
        self.packed
            .into_iter()
            .chain(self.inputs.iter().filter_map(|i| match i {
                Some(Operand::Prepared(r)) => Some(*r),
                _ => None,
            }))
    }
}

/// Options of [`ResolvedModel::resolve`].
#[derive(Debug, Clone)]
pub struct ResolveOptions {
    /// CPU features that pick kernels and layouts.
    pub cpu: CpuFeatures,
    /// Sizes for symbolic input dims while probing types (others are 1).
    pub probe_dims: HashMap<String, usize>,
    /// Most bytes the values folded while resolving (nodes whose inputs are
    /// all constants) may hold together; more is an
    /// [`ArenaError::AboveCeiling`](crate::arena::ArenaError::AboveCeiling)
    /// naming the node. Never above the default allocation ceiling.
    /// Default: [`MAX_RESOLUTION_FOLD_BYTES`](crate::limits::MAX_RESOLUTION_FOLD_BYTES).
    pub fold_limit: usize,
    /// `com.microsoft` MatMulNBits nodes with `accuracy_level = 4` quantize
    /// their activations to int8 per block (symmetric, `max|a| / 127`) and
    /// use integer dot products, as ONNX Runtime's CPU provider does by
    /// default. Outputs then differ from the exact f32 computation by up to
    /// about 1–2 % of the largest output magnitude (0.55 % on random
    /// products, see BENCHMARKS.md for a real model); the packed weights
    /// are the same. Default `false`: exact f32.
    pub int8_activations: bool,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        Self {
            cpu: CpuFeatures::detect(),
            probe_dims: HashMap::new(),
            fold_limit: crate::limits::MAX_RESOLUTION_FOLD_BYTES,
            int8_activations: false,
        }
    }
}

/// The external entries recipes may read: nothing else is ever read.
#[derive(Debug, Clone, Default)]
pub struct PayloadManifest {
    weights: BTreeSet<WeightId>,
}

impl PayloadManifest {
    /// Whether `weight` may be read.
    pub fn contains(&self, weight: WeightId) -> bool {
        self.weights.contains(&weight)
    }

    /// The weights, ascending.
    pub fn weights(&self) -> impl Iterator<Item = WeightId> + '_ {
        self.weights.iter().copied()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// Whether nothing may be read.
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }
}

/// A model with kernels chosen and requirements known; immutable.
#[derive(Debug)]
pub struct ResolvedModel {
    model: Model,
    nodes: Vec<ResolvedNode>,
    inputs: Vec<GraphInput>,
    outputs: Vec<(String, Operand)>,
    value_names: Vec<String>,
    inline: Vec<Arc<Tensor>>,
    requirements: Vec<Requirement>,
    manifest: PayloadManifest,
    cpu: CpuFeatures,
}

/// What resolution knows about a name.
#[derive(Clone)]
enum Known {
    /// A graph input or node output, with its probed type and shape.
    Value(ValueId, ElementType, Vec<usize>),
    /// An inline constant.
    Inline(InlineId),
    /// An initializer not loaded at resolution.
    Weight(WeightId),
}

impl ResolvedModel {
    /// Resolves `model` (consumed: the resolved model owns it).
    pub fn resolve(model: Model, options: &ResolveOptions) -> Result<Self, LoadError> {
        let graph = model.graph();
        let mut ids: HashMap<String, ValueId> = HashMap::new();
        let mut value_names: Vec<String> = Vec::new();
        let new_value = |name: String, names: &mut Vec<String>| {
            names.push(name);
            ValueId((names.len() - 1) as u32)
        };

        let mut known: HashMap<String, Known> = HashMap::new();
        // Values whose type and shape the probe could not infer.
        let mut unprobed: HashSet<ValueId> = HashSet::new();
        let mut probe_values: HashMap<ValueId, Arc<Tensor>> = HashMap::new();
        let weight_dims: Vec<Vec<usize>> = model
            .weights()
            .iter()
            .map(|w| w.dims().iter().map(|&d| d as usize).collect())
            .collect();
        let mut inline: Vec<Arc<Tensor>> = Vec::new();
        // Inline constants that are initializers: a prepack may consume them
        // (read once through the payload source, packed once).
        let mut inline_weights: HashMap<u32, WeightId> = HashMap::new();
        for w in model.weights() {
            match w.source() {
                WeightSource::Embedded { .. }
                    if w.byte_len() <= crate::limits::MAX_INLINE_CONSTANT_BYTES =>
                {
                    let proto_free = embedded_tensor(&model, w.id())?;
                    inline_weights.insert(inline.len() as u32, w.id());
                    inline.push(Arc::new(proto_free));
                    known.insert(
                        w.name().to_owned(),
                        Known::Inline(InlineId((inline.len() - 1) as u32)),
                    );
                }
                _ => {
                    known.insert(w.name().to_owned(), Known::Weight(w.id()));
                }
            }
        }

        let mut inputs = Vec::new();
        for v in &graph.input {
            let name = v.name.clone().unwrap_or_default();
            if model.weight_by_name(&name).is_some() {
                continue;
            }
            let input = super::graph_input(v)?;
            let shape: Vec<usize> = input
                .dims
                .iter()
                .flatten()
                .map(|d| match d {
                    Dim::Fixed(n) => *n,
                    Dim::Symbolic(p) => options.probe_dims.get(p).copied().unwrap_or(1),
                    Dim::Unknown => 1,
                })
                .collect();
            // Graph inputs are values 0..inputs.len(), in order.
            let id = new_value(name.clone(), &mut value_names);
            ids.insert(name.clone(), id);
            known.insert(name, Known::Value(id, input.dtype, shape));
            inputs.push(input);
        }

        // Kernels, probe types, folding.
        struct Pending {
            name: String,
            scope: String,
            op: Box<dyn Operator>,
            inputs: Vec<Option<Known>>,
            outputs: Vec<ValueId>,
            probe_outputs: Vec<OutputInfo>,
        }
        let mut pending: Vec<Pending> = Vec::new();
        let mut folded_bytes = 0usize;
        let mut unsupported: Vec<UnsupportedOperator> = Vec::new();
        let (qdq_skip, qdq_fused) = super::qdq::find(&model);
        for (index, node) in graph.node.iter().enumerate() {
            if qdq_skip.contains(&index) {
                continue; // runs inside its MatMul's fused operator
            }
            let fused = qdq_fused.get(&index);
            let input_names: &[String] = fused.map_or(&node.input, |f| &f.inputs);
            let op_type = node.op_type.as_deref().unwrap_or_default();
            let name = node
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| format!("#{index} {op_type}"));
            let domain = node.domain.as_deref().unwrap_or_default();
            let opset = model
                .opset_version(domain)
                .ok_or_else(|| ResolveError::MissingOpset {
                    node: name.clone(),
                    domain: domain.to_owned(),
                })?;
            let attributes = NodeAttributes::new(node).map_err(|source| ResolveError::Kernel {
                node: name.clone(),
                source,
            })?;
            let spec = NodeSpec {
                domain,
                op_type,
                opset,
                attributes: &attributes,
                inputs: node.input.len(),
                outputs: node.output.len(),
            };
            let looked_up = match fused {
                Some(f) => f.operator(options.cpu),
                None => registry::operator_with(
                    &spec,
                    KernelOptions {
                        int8_activations: options.int8_activations,
                    },
                ),
            };
            let op = match looked_up {
                Ok(op) => op,
                Err(KernelError::UnsupportedOp {
                    domain,
                    op_type,
                    opset,
                }) => {
                    // Keep going: one error lists every operator without a
                    // kernel. The node's outputs stay unprobed.
                    match unsupported.iter_mut().find(|u: &&mut UnsupportedOperator| {
                        u.domain == domain && u.op_type == op_type
                    }) {
                        Some(u) => u.nodes += 1,
                        None => unsupported.push(UnsupportedOperator {
                            domain,
                            op_type,
                            opset,
                            nodes: 1,
                            first_node: name.clone(),
                        }),
                    }
                    for out in &node.output {
                        if !out.is_empty() && !known.contains_key(out) {
                            let id = new_value(out.clone(), &mut value_names);
                            ids.insert(out.clone(), id);
                            unprobed.insert(id);
                            known.insert(
                                out.clone(),
                                Known::Value(id, ElementType::F32, Vec::new()),
                            );
                        }
                    }
                    continue;
                }
                Err(source) => {
                    return Err(ResolveError::Kernel {
                        node: name.clone(),
                        source,
                    }
                    .into());
                }
            };
            let mut node_inputs = Vec::with_capacity(input_names.len());
            for input in input_names {
                if input.is_empty() {
                    node_inputs.push(None);
                    continue;
                }
                let k = known
                    .get(input)
                    .cloned()
                    .ok_or_else(|| ResolveError::UndefinedValue {
                        node: name.clone(),
                        value: input.clone(),
                    })?;
                node_inputs.push(Some(k));
            }
            let view = ProbeView {
                inline: &inline,
                weights: model.weights(),
                weight_dims: &weight_dims,
                unprobed: &unprobed,
                probe_values: &probe_values,
            };
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
                .all(|k| !matches!(k, Known::Value(id, ..) if unprobed.contains(id)));
            let outs = match probed.then(|| op.infer_checked(&infos)) {
                Some(Ok(outs)) => Some(outs),
                Some(Err(source)) if foldable => {
                    return Err(ResolveError::Kernel { node: name, source }.into());
                }
                _ => None,
            };
            if foldable {
                let outs = outs.expect("foldable nodes are probed");
                let ins: Vec<Option<&Tensor>> = node_inputs
                    .iter()
                    .map(|k| match k {
                        Some(Known::Inline(i)) => Some(&*inline[i.0 as usize]),
                        _ => None,
                    })
                    .collect();
                // Folded values are budgeted (checked before allocating) and
                // a kernel panic is an error naming the node, as in lowering.
                folded_bytes = folded_bytes.saturating_add(crate::model::folded_bytes(&outs));
                let ceiling = options
                    .fold_limit
                    .min(crate::limits::default_allocation_ceiling());
                if folded_bytes > ceiling {
                    return Err(crate::arena::ArenaError::AboveCeiling {
                        domain: crate::arena::Domain::Preparation,
                        what: format!("values folded through node `{name}`"),
                        requested: folded_bytes,
                        limit: ceiling,
                    }
                    .into());
                }
                let tensors = crate::model::fold_node(&*op, &name, &ins, &outs)
                    .map_err(ResolveError::Folding)?;
                for (out, t) in node.output.iter().zip(tensors) {
                    inline.push(Arc::new(t));
                    known.insert(
                        out.clone(),
                        Known::Inline(InlineId((inline.len() - 1) as u32)),
                    );
                }
                continue;
            }
            let probe_out =
                probe_evaluate(&*op, &infos, outs.as_deref(), &node_inputs, |k| match k {
                    Known::Inline(i) => Some(&*inline[i.0 as usize]),
                    Known::Value(id, ..) => probe_values.get(id).map(|t| &**t),
                    Known::Weight(_) => None,
                });
            let mut outputs = Vec::with_capacity(node.output.len());
            for (i, out) in node.output.iter().enumerate() {
                let info = outs.as_ref().and_then(|o| o.get(i));
                let label = if out.is_empty() {
                    format!("{name}:unused{i}")
                } else {
                    out.clone()
                };
                if known.contains_key(&label) {
                    return Err(ResolveError::Redefined {
                        node: name,
                        value: label,
                    }
                    .into());
                }
                let id = new_value(label.clone(), &mut value_names);
                ids.insert(label.clone(), id);
                let (dtype, shape) = match info {
                    Some(info) => (info.dtype, info.shape.clone()),
                    None => {
                        unprobed.insert(id);
                        (ElementType::F32, Vec::new())
                    }
                };
                known.insert(label, Known::Value(id, dtype, shape));
                outputs.push(id);
            }
            if let Some(values) = probe_out {
                for (id, t) in outputs.iter().zip(values) {
                    probe_values.insert(*id, Arc::new(t));
                }
            }
            pending.push(Pending {
                scope: scope_of(&name),
                name,
                op,
                inputs: node_inputs,
                outputs,
                probe_outputs: outs.unwrap_or_default(),
            });
        }

        if !unsupported.is_empty() {
            return Err(ResolveError::UnsupportedOperators(unsupported).into());
        }

        // Graph outputs and liveness.
        let mut graph_outputs = Vec::with_capacity(graph.output.len());
        for v in &graph.output {
            let name = v.name.clone().unwrap_or_default();
            let k = known
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
        let mut live = vec![false; pending.len()];
        for (i, p) in pending.iter().enumerate().rev() {
            if p.outputs.iter().any(|o| needed.contains(o)) {
                live[i] = true;
                needed.extend(p.inputs.iter().flatten().filter_map(|k| match k {
                    Known::Value(id, ..) => Some(*id),
                    _ => None,
                }));
            }
        }

        // Requirements of live nodes, deduplicated by key.
        let mut requirements: Vec<Requirement> = Vec::new();
        let mut by_key: HashMap<PreparedKey, RequirementIndex> = HashMap::new();
        let mut require =
            |key: PreparedKey, req: Requirement, requirements: &mut Vec<Requirement>| {
                *by_key.entry(key).or_insert_with(|| {
                    requirements.push(req);
                    RequirementIndex((requirements.len() - 1) as u32)
                })
            };
        let lineage = |sources: &[WeightId]| {
            let mut h = Sha256::new();
            for &w in sources {
                hash_source(&mut h, &model, w);
            }
            let mut out = [0u8; 32];
            out.copy_from_slice(&h.finalize());
            out
        };
        let mut nodes = Vec::new();
        for (p, live) in pending.into_iter().zip(live) {
            if !live {
                continue;
            }
            let descriptors = model.weights();
            let view = ProbeView {
                inline: &inline,
                weights: model.weights(),
                weight_dims: &weight_dims,
                unprobed: &unprobed,
                probe_values: &probe_values,
            };
            let infos: Vec<Option<InputInfo<'_>>> = p
                .inputs
                .iter()
                .map(|k| k.as_ref().and_then(|k| view.info(k)))
                .collect();
            let mut consumed: Vec<usize> = Vec::new();
            let mut packed = None;
            if let Some(prepack) = p.op.prepack(&infos, options.cpu) {
                let sources: Option<Vec<WeightId>> = prepack
                    .consumes()
                    .iter()
                    .map(|&i| match p.inputs.get(i) {
                        Some(Some(Known::Weight(w))) => Some(*w),
                        Some(Some(Known::Inline(c))) => inline_weights.get(&c.0).copied(),
                        _ => None,
                    })
                    .collect();
                // Packing applies to initializers (external or embedded,
                // inline or not); a layout over a folded value would be
                // prepared every run.
                if let Some(sources) = sources {
                    let key = PreparedKey {
                        lineage: lineage(&sources),
                        layout: prepack.layout().to_owned(),
                        device: 0,
                    };
                    let source_bytes = sources
                        .iter()
                        .map(|w| descriptors[w.index()].byte_len())
                        .sum();
                    let name = format!("{}:{}", p.name, prepack.layout());
                    consumed = prepack.consumes().to_vec();
                    let req = Requirement {
                        key: key.clone(),
                        sources,
                        prepack: Some(Arc::from(prepack)),
                        source_bytes,
                        name,
                    };
                    packed = Some(require(key, req, &mut requirements));
                }
            }
            let mut operands = Vec::with_capacity(p.inputs.len());
            for (i, k) in p.inputs.iter().enumerate() {
                let op = match k {
                    None => None,
                    Some(Known::Weight(w)) if consumed.contains(&i) => Some(Operand::Consumed(*w)),
                    Some(Known::Inline(c)) if consumed.contains(&i) => {
                        inline_weights.get(&c.0).map(|w| Operand::Consumed(*w))
                    }
                    Some(_) if consumed.contains(&i) => None,
                    Some(Known::Value(id, ..)) => Some(Operand::Value(*id)),
                    Some(Known::Inline(c)) => Some(Operand::Inline(*c)),
                    Some(Known::Weight(w)) => {
                        let d = &descriptors[w.index()];
                        let key = PreparedKey {
                            lineage: lineage(&[*w]),
                            layout: SOURCE_LAYOUT.into(),
                            device: 0,
                        };
                        let req = Requirement {
                            key: key.clone(),
                            sources: vec![*w],
                            prepack: None,
                            source_bytes: d.byte_len(),
                            name: d.name().to_owned(),
                        };
                        Some(Operand::Prepared(require(key, req, &mut requirements)))
                    }
                };
                operands.push(op);
            }
            nodes.push(ResolvedNode {
                name: p.name,
                scope: p.scope,
                op: p.op,
                inputs: operands,
                outputs: p.outputs,
                packed,
                probe_outputs: p.probe_outputs,
            });
        }
        let outputs = graph_outputs
            .into_iter()
            .map(|(name, k)| {
                let op = match k {
                    Known::Value(id, ..) => Operand::Value(id),
                    Known::Inline(i) => Operand::Inline(i),
                    Known::Weight(w) => {
                        let d = &model.weights()[w.index()];
                        let key = PreparedKey {
                            lineage: lineage(&[w]),
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
                        Operand::Prepared(require(key, req, &mut requirements))
                    }
                };
                (name, op)
            })
            .collect();
        // Frozen last: graph outputs that are external weights are read too.
        let manifest = PayloadManifest {
            weights: requirements
                .iter()
                .flat_map(|r| r.sources.iter().copied())
                .filter(|w| model.weights()[w.index()].is_external())
                .collect(),
        };
        Ok(Self {
            model,
            nodes,
            inputs,
            outputs,
            value_names,
            inline,
            requirements,
            manifest,
            cpu: options.cpu,
        })
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Live nodes in execution order.
    pub fn nodes(&self) -> &[ResolvedNode] {
        &self.nodes
    }

    /// Graph inputs the caller provides.
    pub fn inputs(&self) -> &[GraphInput] {
        &self.inputs
    }

    /// Graph outputs and where each comes from.
    pub fn outputs(&self) -> &[(String, Operand)] {
        &self.outputs
    }

    /// Name of a value.
    pub fn value_name(&self, id: ValueId) -> &str {
        &self.value_names[id.0 as usize]
    }

    /// Number of values.
    pub fn value_count(&self) -> usize {
        self.value_names.len()
    }

    /// An inline constant.
    pub fn inline(&self, id: InlineId) -> &Arc<Tensor> {
        &self.inline[id.0 as usize]
    }

    /// Every prepared requirement.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The frozen payload manifest.
    pub fn manifest(&self) -> &PayloadManifest {
        &self.manifest
    }

    /// The CPU features kernels and layouts were chosen for.
    pub fn cpu(&self) -> CpuFeatures {
        self.cpu
    }
}

/// The scope of a node name: the name without its last `.`/`/` component.
/// A node whose name has no separator is its own scope.
pub fn scope_of(name: &str) -> String {
    match name.rfind(['.', '/']) {
        Some(i) if i > 0 => name[..i].to_owned(),
        _ => name.to_owned(),
    }
}
