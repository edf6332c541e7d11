//! `DirectReplay`: the eager executor and the hot-path baseline.
//!
//! Cold path (`new`, and lowering on the first run of each input-shape set):
//! every weight is read and, where its kernel offers a layout, prepacked;
//! shapes are inferred node by node, constant subgraphs are folded, and the
//! graph is lowered to a compact action list over a fixed set of buffers
//! (a buffer is released to later values at its value's last use).
//!
//! Hot path (`run` with the shapes of the previous run): copy the inputs into
//! their buffers, execute each action, clone the outputs. No map lookup and
//! no allocation besides the returned outputs.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use onnx_prepared_kernels::{
    CpuFeatures, ElementType, InputInfo, KernelError, NodeSpec, Operator, PackedWeight,
    ParallelFor, Prepack, Sequential, Tensor, TensorData, registry,
};
use onnx_prepared_proto::tensor_shape_proto::dimension::Value as DimValue;
use onnx_prepared_proto::type_proto::Value as TypeValue;

use super::ThreadPool;
use crate::Error;
use crate::error::{ResolveError, RunError};
use crate::model::{Model, NodeAttributes, PayloadSource, element_type_from_onnx, read_to_vec};

/// Most inputs or outputs one node may have on the hot path (`Concat` with
/// more inputs is rejected at resolution).
const MAX_OPERANDS: usize = 32;

/// Options of [`DirectReplay`].
#[derive(Debug, Clone)]
pub struct DirectReplayOptions {
    /// Threads kernels may use (the caller's plus `threads - 1` workers).
    pub threads: usize,
    /// CPU features that select packed layouts.
    pub cpu: CpuFeatures,
}

impl Default for DirectReplayOptions {
    fn default() -> Self {
        Self {
            threads: 1,
            cpu: CpuFeatures::detect(),
        }
    }
}

/// One declared dimension of a graph input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A named symbolic size (`T`, `batch`).
    Symbolic(String),
    /// Neither.
    Unknown,
}

/// A graph input: its name, element type and declared dims.
#[derive(Debug, Clone)]
pub struct GraphInput {
    /// The input's name.
    pub name: String,
    /// Declared element type.
    pub dtype: ElementType,
    /// Declared dims; `None` when the model declares no shape.
    pub dims: Option<Vec<Dim>>,
    value: u32,
}

/// A node's packing recipe and the weight it produced.
type PackedSlot = (Box<dyn Prepack>, Arc<PackedWeight>);

/// One live node, with its operator and value ids.
#[derive(Debug)]
struct Node {
    name: String,
    op: Box<dyn Operator>,
    inputs: Vec<Option<u32>>,
    outputs: Vec<u32>,
}

/// Where an operand lives at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operand {
    /// Omitted optional input, or consumed by the packed weight.
    None,
    /// `Lowered::constants[i]`.
    Const(u32),
    /// `Lowered::buffers[i]`.
    Buffer(u32),
}

/// One step of the hot path: execute `node` reading `operands[inputs]` and
/// writing the buffers `operands[outputs]`.
#[derive(Debug, Clone, Copy)]
struct Action {
    node: u32,
    inputs: (u32, u32),
    outputs: (u32, u32),
}

/// The graph lowered for one input-shape set.
#[derive(Debug)]
struct Lowered {
    /// Input shapes (and values of shape-operand inputs) this lowering is for.
    key: Vec<Tensor>,
    constants: Vec<Arc<Tensor>>,
    buffers: Vec<Tensor>,
    /// Inferred shape of each output operand, indexed like `operands`
    /// (empty for input operands).
    out_shapes: Vec<Vec<usize>>,
    operands: Vec<Operand>,
    actions: Vec<Action>,
    /// Buffer of each graph input, in `DirectReplay::inputs` order.
    input_buffers: Vec<u32>,
    /// Operand of each graph output.
    output_operands: Vec<Operand>,
    /// Reused between actions so outputs move out of `buffers` without allocating.
    scratch: Vec<Tensor>,
}

/// The eager executor: everything loaded and prepacked up front, then a
/// straight replay per run.
#[derive(Debug)]
pub struct DirectReplay {
    inputs: Vec<GraphInput>,
    outputs: Vec<(String, u32)>,
    value_count: usize,
    /// Initializers and Constant outputs known at load, by value id.
    initial: HashMap<u32, Arc<Tensor>>,
    nodes: Vec<Node>,
    /// Packed weight per node (by node index), built on first lowering.
    packed: Vec<Option<PackedSlot>>,
    cpu: CpuFeatures,
    /// Graph inputs whose values decide shapes (discovered at lowering).
    value_inputs: HashSet<usize>,
    lowered: Option<Lowered>,
    pool: Option<ThreadPool>,
}

fn tensor_type(v: &onnx_prepared_proto::ValueInfoProto) -> Option<(i32, Option<Vec<Dim>>)> {
    match v.r#type.as_ref()?.value.as_ref()? {
        TypeValue::TensorType(t) => Some((
            t.elem_type.unwrap_or_default(),
            t.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match &d.value {
                        Some(DimValue::DimValue(n)) if *n >= 0 => Dim::Fixed(*n as usize),
                        Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Symbolic(p.clone()),
                        _ => Dim::Unknown,
                    })
                    .collect()
            }),
        )),
        _ => None,
    }
}

/// A graph input's declared name, type and dims.
pub(crate) fn graph_input(v: &onnx_prepared_proto::ValueInfoProto) -> Result<GraphInput, Error> {
    let name = v.name.clone().unwrap_or_default();
    let (elem, dims) = tensor_type(v).ok_or_else(|| ResolveError::InputNotTensor {
        input: name.clone(),
    })?;
    let dtype = element_type_from_onnx(elem).ok_or_else(|| ResolveError::InputType {
        input: name.clone(),
        dtype: crate::model::onnx_type_name(elem),
    })?;
    Ok(GraphInput {
        name,
        dtype,
        dims,
        value: 0,
    })
}

impl DirectReplay {
    /// Reads every weight of `model` through `source`, checks every node has
    /// a kernel, and prepares the executor.
    pub fn new(
        model: &Model,
        source: &dyn PayloadSource,
        options: DirectReplayOptions,
    ) -> Result<Self, Error> {
        let graph = model.graph();
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut next = 0u32;
        let mut id_of = |name: &str, ids: &mut HashMap<String, u32>| -> u32 {
            *ids.entry(name.to_owned()).or_insert_with(|| {
                next += 1;
                next - 1
            })
        };

        // Initializers: read eagerly.
        let mut initial = HashMap::new();
        for w in model.weights() {
            let id = id_of(w.name(), &mut ids);
            let bytes = read_to_vec(source, w.id())?;
            let unsupported = || ResolveError::WeightType {
                weight: w.name().to_owned(),
                dtype: w.element_type(),
            };
            let data =
                TensorData::from_le_bytes(w.element_type(), &bytes).ok_or_else(unsupported)?;
            let dims = w.dims().iter().map(|&d| d as usize).collect();
            let tensor = Tensor::new(dims, data).map_err(|_| unsupported())?;
            initial.insert(id, Arc::new(tensor));
        }

        // Graph inputs that are not initializers.
        let mut inputs = Vec::new();
        for v in &graph.input {
            let name = v.name.clone().unwrap_or_default();
            if model.weight_by_name(&name).is_some() {
                continue;
            }
            let GraphInput { dtype, dims, .. } = graph_input(v)?;
            let value = id_of(&name, &mut ids);
            inputs.push(GraphInput {
                name,
                dtype,
                dims,
                value,
            });
        }

        // Nodes in file order, which ONNX requires to be topological.
        let mut defined: HashSet<u32> = initial
            .keys()
            .copied()
            .chain(inputs.iter().map(|i| i.value))
            .collect();
        let mut all_nodes = Vec::with_capacity(graph.node.len());
        for (index, node) in graph.node.iter().enumerate() {
            let name = node
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| {
                    format!("#{index} {}", node.op_type.as_deref().unwrap_or_default())
                });
            let domain = node.domain.as_deref().unwrap_or_default();
            let opset = model
                .opset_version(domain)
                .ok_or_else(|| ResolveError::MissingOpset {
                    node: name.clone(),
                    domain: domain.to_owned(),
                })?;
            let attributes = NodeAttributes::new(node);
            let spec = NodeSpec {
                domain,
                op_type: node.op_type.as_deref().unwrap_or_default(),
                opset,
                attributes: &attributes,
                inputs: node.input.len(),
                outputs: node.output.len(),
            };
            if node.input.len() > MAX_OPERANDS || node.output.len() > MAX_OPERANDS {
                return Err(ResolveError::TooManyOperands {
                    node: name,
                    limit: MAX_OPERANDS,
                }
                .into());
            }
            let op = registry::operator(&spec).map_err(|source| ResolveError::Kernel {
                node: name.clone(),
                source,
            })?;
            let mut node_inputs = Vec::with_capacity(node.input.len());
            for input in &node.input {
                if input.is_empty() {
                    node_inputs.push(None);
                    continue;
                }
                let id = *ids
                    .get(input)
                    .filter(|id| defined.contains(id))
                    .ok_or_else(|| ResolveError::UndefinedValue {
                        node: name.clone(),
                        value: input.clone(),
                    })?;
                node_inputs.push(Some(id));
            }
            let mut outputs = Vec::with_capacity(node.output.len());
            for (i, output) in node.output.iter().enumerate() {
                let label = if output.is_empty() {
                    format!("{name}:unused{i}")
                } else {
                    output.clone()
                };
                let id = id_of(&label, &mut ids);
                if !defined.insert(id) {
                    return Err(ResolveError::Redefined {
                        node: name,
                        value: label,
                    }
                    .into());
                }
                outputs.push(id);
            }
            all_nodes.push(Node {
                name,
                op,
                inputs: node_inputs,
                outputs,
            });
        }

        let mut outputs = Vec::with_capacity(graph.output.len());
        for v in &graph.output {
            let name = v.name.clone().unwrap_or_default();
            let id = *ids
                .get(&name)
                .filter(|id| defined.contains(id))
                .ok_or_else(|| ResolveError::UndefinedValue {
                    node: "graph output".into(),
                    value: name.clone(),
                })?;
            outputs.push((name, id));
        }

        // Keep only nodes some graph output depends on.
        let mut needed: HashSet<u32> = outputs.iter().map(|(_, id)| *id).collect();
        let mut live = vec![false; all_nodes.len()];
        for (i, node) in all_nodes.iter().enumerate().rev() {
            if node.outputs.iter().any(|o| needed.contains(o)) {
                live[i] = true;
                needed.extend(node.inputs.iter().flatten());
            }
        }
        let nodes: Vec<Node> = all_nodes
            .into_iter()
            .zip(live)
            .filter(|(_, l)| *l)
            .map(|(n, _)| n)
            .collect();
        let pool = (options.threads > 1).then(|| ThreadPool::new(options.threads - 1));
        Ok(Self {
            packed: (0..nodes.len()).map(|_| None).collect(),
            inputs,
            outputs,
            value_count: next as usize,
            initial,
            nodes,
            cpu: options.cpu,
            value_inputs: HashSet::new(),
            lowered: None,
            pool,
        })
    }

    /// The graph inputs the caller provides.
    pub fn inputs(&self) -> &[GraphInput] {
        &self.inputs
    }

    /// The graph output names, in order.
    pub fn output_names(&self) -> impl Iterator<Item = &str> {
        self.outputs.iter().map(|(n, _)| n.as_str())
    }

    /// Total bytes of packed weights built so far.
    pub fn packed_bytes(&self) -> usize {
        self.packed
            .iter()
            .flatten()
            .map(|(_, p)| p.byte_len())
            .sum()
    }

    /// Layout keys of the packed weights built so far, one per packing node.
    pub fn packed_layouts(&self) -> Vec<(String, String)> {
        self.nodes
            .iter()
            .zip(&self.packed)
            .filter_map(|(n, p)| p.as_ref().map(|(_, w)| (n.name.clone(), w.layout.clone())))
            .collect()
    }

    /// Checks `inputs` (by name) against the graph inputs and orders them.
    fn order_inputs<'t>(&self, inputs: &[(&str, &'t Tensor)]) -> Result<Vec<&'t Tensor>, Error> {
        for (name, _) in inputs {
            if !self.inputs.iter().any(|i| i.name == *name) {
                return Err(RunError::UnknownInput {
                    input: (*name).to_owned(),
                }
                .into());
            }
        }
        let mut ordered = Vec::with_capacity(self.inputs.len());
        for decl in &self.inputs {
            let mut found = inputs.iter().filter(|(n, _)| *n == decl.name);
            let (_, t) = found.next().ok_or_else(|| RunError::MissingInput {
                input: decl.name.clone(),
            })?;
            if found.next().is_some() {
                return Err(RunError::DuplicateInput {
                    input: decl.name.clone(),
                }
                .into());
            }
            if t.dtype() != decl.dtype {
                return Err(RunError::InputType {
                    input: decl.name.clone(),
                    expected: decl.dtype,
                    found: t.dtype(),
                }
                .into());
            }
            if let Some(dims) = &decl.dims {
                let ok = dims.len() == t.shape().len()
                    && dims
                        .iter()
                        .zip(t.shape())
                        .all(|(d, &s)| !matches!(d, Dim::Fixed(f) if *f != s));
                if !ok {
                    return Err(RunError::InputShape {
                        input: decl.name.clone(),
                        expected: dims
                            .iter()
                            .map(|d| match d {
                                Dim::Fixed(n) => n.to_string(),
                                Dim::Symbolic(p) => p.clone(),
                                Dim::Unknown => "?".into(),
                            })
                            .collect(),
                        found: t.shape().to_vec(),
                    }
                    .into());
                }
            }
            ordered.push(*t);
        }
        Ok(ordered)
    }

    fn matches_key(&self, lowered: &Lowered, inputs: &[&Tensor]) -> bool {
        lowered.key.len() == inputs.len()
            && lowered
                .key
                .iter()
                .zip(inputs)
                .enumerate()
                .all(|(i, (k, t))| {
                    k.shape() == t.shape() && (!self.value_inputs.contains(&i) || k == *t)
                })
    }

    /// Runs the graph on `inputs` (by name) and returns every graph output,
    /// by name, in graph order.
    pub fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<(String, Tensor)>, Error> {
        let ordered = self.order_inputs(inputs)?;
        let stale = self
            .lowered
            .as_ref()
            .is_none_or(|l| !self.matches_key(l, &ordered));
        if stale {
            self.lowered = None;
            self.lowered = Some(self.lower(&ordered)?);
        }
        let Self {
            lowered,
            nodes,
            packed,
            pool,
            ..
        } = self;
        let lowered = lowered.as_mut().expect("lowered above");
        for (&buffer, input) in lowered.input_buffers.iter().zip(&ordered) {
            lowered.buffers[buffer as usize]
                .copy_from(input)
                .map_err(|source| RunError::Kernel {
                    node: "input copy".into(),
                    source,
                })?;
        }
        let par: &dyn ParallelFor = match pool {
            Some(p) => p,
            None => &Sequential,
        };
        replay(lowered, nodes, packed, par)?;
        Ok(self
            .outputs
            .iter()
            .zip(&lowered.output_operands)
            .map(|((name, _), operand)| {
                let t = match *operand {
                    Operand::Const(c) => (*lowered.constants[c as usize]).clone(),
                    Operand::Buffer(b) => lowered.buffers[b as usize].clone(),
                    Operand::None => Tensor::default(),
                };
                (name.clone(), t)
            })
            .collect())
    }

    /// Infers shapes for these inputs, folds constant nodes, packs weights
    /// not packed yet, and assigns buffers by liveness.
    fn lower(&mut self, inputs: &[&Tensor]) -> Result<Lowered, Error> {
        loop {
            match self.try_lower(inputs) {
                Err(NeedsValue(input)) if !self.value_inputs.contains(&input) => {
                    self.value_inputs.insert(input);
                }
                Err(NeedsValue(_)) => unreachable!("a value input is always supplied"),
                Ok(result) => return result,
            }
        }
    }

    fn try_lower(&mut self, inputs: &[&Tensor]) -> Result<Result<Lowered, Error>, NeedsValue> {
        /// What lowering knows about each value.
        #[derive(Clone)]
        enum Known {
            Unknown,
            Const(Arc<Tensor>),
            Dynamic(ElementType, Vec<usize>),
        }
        let mut known = vec![Known::Unknown; self.value_count];
        for (&id, t) in &self.initial {
            known[id as usize] = Known::Const(t.clone());
        }
        for (i, (decl, t)) in self.inputs.iter().zip(inputs).enumerate() {
            known[decl.value as usize] = if self.value_inputs.contains(&i) {
                Known::Const(Arc::new((*t).clone()))
            } else {
                Known::Dynamic(t.dtype(), t.shape().to_vec())
            };
        }
        let input_of: HashMap<u32, usize> = self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, d)| (d.value, i))
            .collect();

        // Pass 1: infer, fold, pack.
        let mut dynamic_nodes = Vec::new();
        for (n, node) in self.nodes.iter().enumerate() {
            let infos: Vec<Option<InputInfo<'_>>> = node
                .inputs
                .iter()
                .map(|id| {
                    id.and_then(|id| match &known[id as usize] {
                        Known::Const(t) => Some(InputInfo {
                            dtype: t.dtype(),
                            shape: t.shape(),
                            value: Some(t),
                            constant: true,
                        }),
                        Known::Dynamic(d, s) => Some(InputInfo {
                            dtype: *d,
                            shape: s,
                            value: None,
                            constant: false,
                        }),
                        Known::Unknown => None,
                    })
                })
                .collect();
            let out_infos = match node.op.infer(&infos) {
                Ok(o) => o,
                Err(KernelError::NeedsConstant { input, .. }) => {
                    if let Some(&gi) = node
                        .inputs
                        .get(input)
                        .copied()
                        .flatten()
                        .as_ref()
                        .and_then(|id| input_of.get(id))
                        && !self.value_inputs.contains(&gi)
                    {
                        return Err(NeedsValue(gi));
                    }
                    return Ok(Err(ResolveError::Kernel {
                        node: node.name.clone(),
                        source: KernelError::NeedsConstant {
                            op: node.op.name(),
                            input,
                        },
                    }
                    .into()));
                }
                Err(source) => {
                    return Ok(Err(ResolveError::Kernel {
                        node: node.name.clone(),
                        source,
                    }
                    .into()));
                }
            };
            if out_infos.len() != node.outputs.len() {
                return Ok(Err(ResolveError::Kernel {
                    node: node.name.clone(),
                    source: KernelError::Shape(format!(
                        "{} outputs inferred for {}",
                        out_infos.len(),
                        node.outputs.len()
                    )),
                }
                .into()));
            }
            let all_const = node
                .inputs
                .iter()
                .flatten()
                .all(|id| matches!(known[*id as usize], Known::Const(_)));
            if all_const {
                // Fold: execute once now; the outputs become constants.
                let ins: Vec<Option<&Tensor>> = node
                    .inputs
                    .iter()
                    .map(|id| {
                        id.and_then(|id| match &known[id as usize] {
                            Known::Const(t) => Some(&**t),
                            _ => None,
                        })
                    })
                    .collect();
                let mut outs = Vec::with_capacity(out_infos.len());
                for o in &out_infos {
                    match Tensor::zeros(o.dtype, o.shape.clone()) {
                        Ok(t) => outs.push(t),
                        Err(source) => {
                            return Ok(Err(ResolveError::Kernel {
                                node: node.name.clone(),
                                source,
                            }
                            .into()));
                        }
                    }
                }
                if let Err(e) =
                    execute_caught(&*node.op, &node.name, &ins, None, &mut outs, &Sequential)
                {
                    return Ok(Err(e));
                }
                for (&id, t) in node.outputs.iter().zip(outs) {
                    known[id as usize] = Known::Const(Arc::new(t));
                }
                continue;
            }
            if self.packed[n].is_none()
                && let Some(prepack) = node.op.prepack(&infos, self.cpu)
            {
                let mut sources = Vec::with_capacity(prepack.consumes().len());
                for &i in prepack.consumes() {
                    match infos.get(i).copied().flatten().and_then(|info| info.value) {
                        Some(t) => sources.push(t),
                        None => {
                            return Ok(Err(ResolveError::Kernel {
                                node: node.name.clone(),
                                source: KernelError::NeedsConstant {
                                    op: node.op.name(),
                                    input: i,
                                },
                            }
                            .into()));
                        }
                    }
                }
                match prepack.prepare(&sources) {
                    Ok(p) => self.packed[n] = Some((prepack, Arc::new(p))),
                    Err(source) => {
                        return Ok(Err(ResolveError::Kernel {
                            node: node.name.clone(),
                            source,
                        }
                        .into()));
                    }
                }
            }
            for (&id, o) in node.outputs.iter().zip(out_infos) {
                known[id as usize] = Known::Dynamic(o.dtype, o.shape);
            }
            dynamic_nodes.push(n);
        }

        // Pass 2: last use of every dynamic value.
        let graph_outputs: HashSet<u32> = self.outputs.iter().map(|(_, id)| *id).collect();
        let mut last_use: HashMap<u32, usize> = HashMap::new();
        for (step, &n) in dynamic_nodes.iter().enumerate() {
            let node = &self.nodes[n];
            let consumed: &[usize] = self.packed[n].as_ref().map_or(&[], |(p, _)| p.consumes());
            for (i, id) in node.inputs.iter().enumerate() {
                if let Some(id) = id
                    && !consumed.contains(&i)
                {
                    last_use.insert(*id, step);
                }
            }
        }

        // Pass 3: buffers (inputs first, never shared) and actions.
        let mut lowered = Lowered {
            key: inputs.iter().map(|t| (*t).clone()).collect(),
            constants: Vec::new(),
            buffers: Vec::new(),
            out_shapes: Vec::new(),
            operands: Vec::new(),
            actions: Vec::new(),
            input_buffers: Vec::new(),
            output_operands: Vec::new(),
            scratch: Vec::with_capacity(MAX_OPERANDS),
        };
        let mut operand_of: HashMap<u32, Operand> = HashMap::new();
        let mut const_index: HashMap<*const Tensor, u32> = HashMap::new();
        let mut constant = |t: &Arc<Tensor>, lowered: &mut Lowered| -> Operand {
            let key = Arc::as_ptr(t);
            let idx = *const_index.entry(key).or_insert_with(|| {
                lowered.constants.push(t.clone());
                (lowered.constants.len() - 1) as u32
            });
            Operand::Const(idx)
        };
        for (i, decl) in self.inputs.iter().enumerate() {
            match &known[decl.value as usize] {
                Known::Const(t) if self.value_inputs.contains(&i) => {
                    // Still copied in at run time so outputs naming it work; consumers read the constant.
                    let op = constant(t, &mut lowered);
                    operand_of.insert(decl.value, op);
                    lowered.buffers.push((**t).clone());
                    lowered
                        .input_buffers
                        .push((lowered.buffers.len() - 1) as u32);
                }
                _ => {
                    let t = Tensor::zeros(inputs[i].dtype(), inputs[i].shape().to_vec())
                        .expect("input tensor type");
                    lowered.buffers.push(t);
                    let b = (lowered.buffers.len() - 1) as u32;
                    lowered.input_buffers.push(b);
                    operand_of.insert(decl.value, Operand::Buffer(b));
                }
            }
        }
        // Free buffers by (dtype, element count).
        let mut free: HashMap<(ElementType, usize), Vec<u32>> = HashMap::new();
        let input_values: HashSet<u32> = self.inputs.iter().map(|d| d.value).collect();
        for (step, &n) in dynamic_nodes.iter().enumerate() {
            let node = &self.nodes[n];
            let consumed: &[usize] = self.packed[n].as_ref().map_or(&[], |(p, _)| p.consumes());
            let start = lowered.operands.len() as u32;
            for (i, id) in node.inputs.iter().enumerate() {
                let op = match id {
                    None => Operand::None,
                    Some(_) if consumed.contains(&i) => Operand::None,
                    Some(id) => match operand_of.get(id) {
                        Some(op) => *op,
                        None => match &known[*id as usize] {
                            Known::Const(t) => {
                                let op = constant(t, &mut lowered);
                                operand_of.insert(*id, op);
                                op
                            }
                            _ => unreachable!("dynamic values are assigned before use"),
                        },
                    },
                };
                lowered.operands.push(op);
                lowered.out_shapes.push(Vec::new());
            }
            let mid = lowered.operands.len() as u32;
            // Release inputs whose last use is this step (before outputs, so an
            // output may not reuse an input's buffer: kernels read inputs while writing).
            let mut released = Vec::new();
            for id in node.inputs.iter().flatten() {
                if last_use.get(id) == Some(&step)
                    && !graph_outputs.contains(id)
                    && !input_values.contains(id)
                    && let Some(Operand::Buffer(b)) = operand_of.get(id)
                {
                    let t = &lowered.buffers[*b as usize];
                    released.push(((t.dtype(), t.len()), *b));
                }
            }
            for &id in &node.outputs {
                let Known::Dynamic(dtype, shape) = &known[id as usize] else {
                    unreachable!()
                };
                let len = onnx_prepared_kernels::element_count(shape).unwrap_or(0);
                let b = match free.get_mut(&(*dtype, len)).and_then(Vec::pop) {
                    Some(b) => b,
                    None => {
                        let t = match Tensor::zeros(*dtype, shape.clone()) {
                            Ok(t) => t,
                            Err(source) => {
                                return Ok(Err(ResolveError::Kernel {
                                    node: node.name.clone(),
                                    source,
                                }
                                .into()));
                            }
                        };
                        lowered.buffers.push(t);
                        (lowered.buffers.len() - 1) as u32
                    }
                };
                operand_of.insert(id, Operand::Buffer(b));
                lowered.operands.push(Operand::Buffer(b));
                lowered.out_shapes.push(shape.clone());
                // An output nobody reads is free again after this step.
                if !last_use.contains_key(&id) && !graph_outputs.contains(&id) {
                    released.push(((*dtype, len), b));
                }
            }
            let mut seen = HashSet::new();
            for (k, b) in released {
                if seen.insert(b) {
                    free.entry(k).or_default().push(b);
                }
            }
            lowered.actions.push(Action {
                node: n as u32,
                inputs: (start, mid),
                outputs: (mid, lowered.operands.len() as u32),
            });
        }
        for (_, id) in &self.outputs {
            let op = match operand_of.get(id) {
                Some(op) => *op,
                None => match &known[*id as usize] {
                    Known::Const(t) => constant(t, &mut lowered),
                    _ => Operand::None,
                },
            };
            lowered.output_operands.push(op);
        }
        Ok(Ok(lowered))
    }
}

/// Lowering must restart with graph input `0` treated as a known value.
struct NeedsValue(usize);

/// Executes one operator, turning a panic into an error naming the node.
fn execute_caught(
    op: &dyn Operator,
    node: &str,
    inputs: &[Option<&Tensor>],
    packed: Option<&PackedWeight>,
    outputs: &mut [Tensor],
    par: &dyn ParallelFor,
) -> Result<(), Error> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| {
        op.execute(inputs, packed, outputs, par)
    })) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(RunError::Kernel {
            node: node.to_owned(),
            source,
        }
        .into()),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(RunError::KernelPanic {
                node: node.to_owned(),
                detail,
            }
            .into())
        }
    }
}

/// The hot loop: one `match`-free pass over the actions.
fn replay(
    lowered: &mut Lowered,
    nodes: &[Node],
    packed: &[Option<PackedSlot>],
    par: &dyn ParallelFor,
) -> Result<(), Error> {
    let Lowered {
        constants,
        buffers,
        out_shapes,
        operands,
        actions,
        scratch,
        ..
    } = lowered;
    for action in actions.iter() {
        let node = &nodes[action.node as usize];
        let (o0, o1) = (action.outputs.0 as usize, action.outputs.1 as usize);
        scratch.clear();
        for (k, op) in operands[o0..o1].iter().enumerate() {
            let Operand::Buffer(b) = *op else {
                unreachable!("outputs are buffers")
            };
            let mut t = std::mem::take(&mut buffers[b as usize]);
            let shape = out_shapes[o0 + k].as_slice();
            if t.shape() != shape {
                // Shapes differ only when values of equal size share a buffer.
                t.set_shape_from(shape)
                    .expect("same element count by construction");
            }
            scratch.push(t);
        }
        let mut ins: [Option<&Tensor>; MAX_OPERANDS] = [None; MAX_OPERANDS];
        let (i0, i1) = (action.inputs.0 as usize, action.inputs.1 as usize);
        for (slot, op) in ins.iter_mut().zip(&operands[i0..i1]) {
            *slot = match *op {
                Operand::None => None,
                Operand::Const(c) => Some(&*constants[c as usize]),
                Operand::Buffer(b) => Some(&buffers[b as usize]),
            };
        }
        let pw = packed[action.node as usize].as_ref().map(|(_, p)| &**p);
        let result = execute_caught(&*node.op, &node.name, &ins[..i1 - i0], pw, scratch, par);
        for (op, t) in operands[o0..o1].iter().zip(scratch.drain(..)) {
            let Operand::Buffer(b) = *op else {
                unreachable!()
            };
            buffers[b as usize] = t;
        }
        result?;
    }
    Ok(())
}
