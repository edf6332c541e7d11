//! Resolution (cold path): from a metadata-only [`Model`] to a frozen
//! [`ResolvedModel`] — a kernel per node, the prepared requirements each node
//! needs, dead nodes and unused initializers dropped, constant subgraphs of
//! embedded values folded, and the payload manifest (exactly the external
//! entries some eligible recipe may read) frozen. No payload byte is read.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use onnx_prepared_kernels::{CpuFeatures, Operator, OutputInfo, Prepack, Tensor};

use super::{GraphInput, Model, WeightId};
use crate::model::LoadError;

mod phases;
mod probe;

use phases::{Requirements, Resolver};
pub(crate) use probe::hash_source_identity;

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

impl ResolvedModel {
    /// Resolves `model` (consumed: the resolved model owns it), in the
    /// phases of `phases.rs`: weights, graph inputs, nodes (kernels,
    /// probing, folding), liveness, requirements, manifest.
    pub fn resolve(model: Model, options: &ResolveOptions) -> Result<Self, LoadError> {
        let mut resolver = Resolver::new(&model, options)?;
        let inputs = resolver.graph_inputs()?;
        resolver.nodes()?;
        let (graph_outputs, live) = resolver.live()?;
        let mut requirements = Requirements::new(&model);
        let (nodes, outputs) = resolver.link(&live, graph_outputs, &mut requirements);
        let requirements = requirements.list;
        // Frozen last: graph outputs that are external weights are read too.
        let manifest = PayloadManifest {
            weights: requirements
                .iter()
                .flat_map(|r| r.sources.iter().copied())
                .filter(|w| model.weights()[w.index()].is_external())
                .collect(),
        };
        let Resolver {
            value_names,
            inline,
            ..
        } = resolver;
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
