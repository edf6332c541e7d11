//! Lowering one input-shape set (cold path): infer every shape, fold what
//! depends only on shapes and constants, key the lowering by the values of
//! small graph inputs that decide shapes, and lay out buffers by liveness.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use onnx_prepared_kernels::{ElementType, Tensor, element_count};

use super::alias::{AliasContext, in_place_of, view_of};
use super::dense::ValueMap;
use super::infer::{Known, Memo, infer_and_fold, weight_dims};
use super::late::LateCharge;
use super::{Action, AllocationGate, Lowered, NeedsValue, Operand};
use crate::exec::RunError as Error;
use crate::model::{Operand as Source, ResolveError, ResolvedModel, tensor_bytes};

/// Lowers `resolved` for `inputs`; graph inputs in `value_inputs` are known
/// values (their contents decide shapes). Returns `Err(NeedsValue(i))` when
/// graph input `i` must join `value_inputs`.
///
/// Every tensor it allocates is sized first, with checked arithmetic, and
/// passed through `gate`: each folded value as it is folded (with the total
/// folded so far), then every activation buffer at once (with the folded
/// total) before the first buffer is allocated.
fn lower(
    resolved: &ResolvedModel,
    inputs: &[&Tensor],
    value_inputs: &HashSet<usize>,
    gate: AllocationGate<'_>,
    pool: &mut Vec<Tensor>,
    memo: Option<&Memo>,
) -> Result<Result<Lowered, Error>, NeedsValue> {
    let dims = weight_dims(resolved);
    let shapes = match infer_and_fold(resolved, inputs, value_inputs, gate, &dims, memo)? {
        Ok(shapes) => shapes,
        Err(e) => return Ok(Err(e)),
    };
    let uses = Uses::of(resolved, &shapes.dynamic_nodes, shapes.known.len());
    let mut layout = Layout::new(resolved, inputs, value_inputs, &shapes.known, &dims);
    let mut next_dynamic = shapes.dynamic_nodes.iter().peekable();
    for (n, node) in resolved.nodes().iter().enumerate() {
        layout
            .lowered
            .node_action
            .push(layout.lowered.actions.len() as u32);
        if next_dynamic.peek() == Some(&&n) {
            next_dynamic.next();
            layout.action(n, node, &uses);
        }
    }
    let lowered = &mut layout.lowered;
    lowered.node_action.push(lowered.actions.len() as u32);
    let mut lowered = layout.finish(gate, shapes.folded_bytes, shapes.most_scratch, pool);
    if let Ok(l) = &mut lowered {
        l.memo = Some(shapes.into_memo());
    }
    Ok(lowered)
}

/// Pass 2: the graph outputs, and the last action that reads each value.
struct Uses {
    graph_outputs: ValueMap<()>,
    last_use: ValueMap<usize>,
}

impl Uses {
    fn of(resolved: &ResolvedModel, dynamic_nodes: &[usize], values: usize) -> Self {
        let mut graph_outputs = ValueMap::new(values);
        for (_, op) in resolved.outputs() {
            if let Source::Value(id) = op {
                graph_outputs.insert(id.0, ());
            }
        }
        let mut last_use = ValueMap::new(values);
        for (step, &n) in dynamic_nodes.iter().enumerate() {
            for op in resolved.nodes()[n].inputs.iter().flatten() {
                if let Source::Value(id) = op {
                    last_use.insert(id.0, step);
                }
            }
        }
        Self {
            graph_outputs,
            last_use,
        }
    }
}

/// Pass 3: buffers (graph inputs first, never shared) and actions. Each
/// buffer is only sized while actions are laid out (`buffer_specs`,
/// placeholders in `lowered.buffers`); all are allocated in
/// [`Layout::finish`] once their total passed the gate.
struct Layout<'a> {
    resolved: &'a ResolvedModel,
    inputs: &'a [&'a Tensor],
    known: &'a [Known],
    weight_dims: &'a [Vec<usize>],
    lowered: Lowered,
    /// `(dtype, element count, shape)` of each buffer; the shape is `None`
    /// for a graph input's buffer (a copy of the input).
    buffer_specs: Vec<(ElementType, usize, Option<Vec<usize>>)>,
    most_inputs: usize,
    most_outputs: usize,
    operand_of: ValueMap<Operand>,
    const_index: HashMap<*const Tensor, u32>,
    free: HashMap<(ElementType, usize), Vec<u32>>,
}

impl<'a> Layout<'a> {
    /// The layout with the graph inputs' buffers (or constants, for the
    /// inputs whose values key the lowering).
    fn new(
        resolved: &'a ResolvedModel,
        inputs: &'a [&'a Tensor],
        value_inputs: &HashSet<usize>,
        known: &'a [Known],
        weight_dims: &'a [Vec<usize>],
    ) -> Self {
        let mut layout = Self {
            resolved,
            inputs,
            known,
            weight_dims,
            lowered: Lowered {
                key_shapes: inputs.iter().map(|t| t.shape().to_vec()).collect(),
                key_values: (0..inputs.len())
                    .map(|i| {
                        value_inputs
                            .contains(&i)
                            .then(|| inputs[i].to_owned_elements())
                    })
                    .collect(),
                constants: Vec::new(),
                buffers: Vec::new(),
                out_shapes: Vec::new(),
                operands: Vec::new(),
                actions: Vec::new(),
                node_action: Vec::with_capacity(resolved.nodes().len() + 1),
                input_buffers: Vec::new(),
                output_operands: Vec::new(),
                output_buffers: Vec::new(),
                in_place_buffers: HashSet::new(),
                memo: None,
                scratch_bytes: 0,
                scratch: Vec::new(),
                ins: Vec::new(),
                late_fixed: Vec::new(),
                late_charge: LateCharge::process(),
            },
            buffer_specs: Vec::new(),
            most_inputs: 0,
            most_outputs: 0,
            operand_of: ValueMap::new(known.len()),
            const_index: HashMap::new(),
            free: HashMap::new(),
        };
        for (i, t) in inputs.iter().enumerate() {
            layout.lowered.buffers.push(Tensor::default());
            layout.buffer_specs.push((t.dtype(), t.len(), None));
            let b = (layout.lowered.buffers.len() - 1) as u32;
            layout.lowered.input_buffers.push(b);
            let op = match &known[i] {
                Known::Const(c) => layout.constant(c),
                _ => Operand::Buffer(b),
            };
            layout.operand_of.insert(i as u32, op);
        }
        layout
    }

    /// The operand of constant `t`, each constant listed once.
    fn constant(&mut self, t: &Arc<Tensor>) -> Operand {
        let constants = &mut self.lowered.constants;
        let idx = *self.const_index.entry(Arc::as_ptr(t)).or_insert_with(|| {
            constants.push(t.clone());
            (constants.len() - 1) as u32
        });
        Operand::Const(idx)
    }

    /// The operand a node input reads.
    fn input_operand(&mut self, op: Option<Source>) -> Operand {
        match op {
            None | Some(Source::Consumed(_)) => Operand::None,
            Some(Source::Prepared(r)) => Operand::Object(r.0),
            Some(Source::Inline(i)) => self.constant(self.resolved.inline(i)),
            Some(Source::Value(id)) => match self.operand_of.get(&id.0) {
                Some(op) => *op,
                None => match &self.known[id.0 as usize] {
                    Known::Const(t) => {
                        let op = self.constant(t);
                        self.operand_of.insert(id.0, op);
                        op
                    }
                    _ => unreachable!("values are assigned before use"),
                },
            },
        }
    }

    /// The action of node `n`: its operands, a buffer per output (a view
    /// of input 0's, a freed one of the same type and size, or a new one),
    /// and the buffers it releases.
    fn action(&mut self, n: usize, node: &crate::model::ResolvedNode, uses: &Uses) {
        let step = self.lowered.actions.len();
        let start = self.lowered.operands.len() as u32;
        let late = node
            .outputs
            .iter()
            .any(|id| matches!(self.known[id.0 as usize], Known::Late));
        for op in &node.inputs {
            let operand = self.input_operand(*op);
            if late {
                self.fixed_input(*op);
            }
            self.lowered.operands.push(operand);
            self.lowered.out_shapes.push(Vec::new());
        }
        let mid = self.lowered.operands.len() as u32;
        let known = self.known;
        let value = |id: u32| match &known[id as usize] {
            Known::Dynamic(dtype, shape) => Some((*dtype, shape.as_slice())),
            _ => None,
        };
        let cx = AliasContext {
            last_use: &uses.last_use,
            graph_outputs: &uses.graph_outputs,
            graph_inputs: self.inputs.len(),
            operand_of: &self.operand_of,
            value: &value,
            buffer_specs: &self.buffer_specs,
        };
        let view = (!late).then(|| view_of(node, step, &cx)).flatten();
        let in_place = (!late && view.is_none())
            .then(|| in_place_of(node, step, &cx))
            .flatten()
            .unwrap_or_default();
        // The kernel finds each such input in its output's buffer.
        for &(input, _, b) in &in_place {
            self.lowered.operands[start as usize + input] = Operand::None;
            self.lowered.in_place_buffers.insert(b);
        }
        // Inputs whose last use is this action are released after it (an
        // output never reuses an input's buffer: kernels read while writing;
        // a view's output is its input, which then stays held, and so is
        // an input an output is computed in).
        let mut released = Vec::new();
        for op in node.inputs.iter().flatten() {
            if let Source::Value(id) = op
                && view.is_none()
                && !matches!(self.known[id.0 as usize], Known::Late)
                && uses.last_use.get(&id.0) == Some(&step)
                && !uses.graph_outputs.contains(&id.0)
                && (id.0 as usize) >= self.inputs.len()
                && let Some(Operand::Buffer(b)) = self.operand_of.get(&id.0)
                && !in_place.iter().any(|&(_, _, t)| t == *b)
            {
                let (dtype, len, _) = &self.buffer_specs[*b as usize];
                released.push(((*dtype, *len), *b));
            }
        }
        for (k, id) in node.outputs.iter().enumerate() {
            if late {
                // A buffer of its own, sized during each run; never
                // released to another value.
                self.lowered.buffers.push(Tensor::default());
                self.buffer_specs.push((ElementType::F32, 0, Some(vec![0])));
                let b = (self.lowered.buffers.len() - 1) as u32;
                self.operand_of.insert(id.0, Operand::Buffer(b));
                self.lowered.operands.push(Operand::Buffer(b));
                self.lowered.out_shapes.push(vec![0]);
                continue;
            }
            let Known::Dynamic(dtype, shape) = &self.known[id.0 as usize] else {
                unreachable!()
            };
            let len = element_count(shape).unwrap_or(0);
            let computed_in = in_place
                .iter()
                .find(|&&(_, output, _)| output == k)
                .map(|&(_, _, b)| b);
            let reused = view
                .or(computed_in)
                .or_else(|| self.free.get_mut(&(*dtype, len)).and_then(Vec::pop));
            let b = match reused {
                Some(b) => b,
                None => {
                    self.lowered.buffers.push(Tensor::default());
                    self.buffer_specs.push((*dtype, len, Some(shape.clone())));
                    (self.lowered.buffers.len() - 1) as u32
                }
            };
            self.operand_of.insert(id.0, Operand::Buffer(b));
            self.lowered.operands.push(Operand::Buffer(b));
            self.lowered.out_shapes.push(shape.clone());
            if !uses.last_use.contains(&id.0)
                && !uses.graph_outputs.contains(&id.0)
                && !self.lowered.input_buffers.contains(&b)
            {
                released.push(((*dtype, len), b));
            }
        }
        // Each buffer once (a value read twice by the node is listed twice).
        for (i, &(k, b)) in released.iter().enumerate() {
            if !released[..i].iter().any(|&(_, seen)| seen == b) {
                self.free.entry(k).or_default().push(b);
            }
        }
        self.most_inputs = self.most_inputs.max(node.inputs.len());
        self.most_outputs = self.most_outputs.max(node.outputs.len());
        self.lowered.actions.push(Action {
            node: n as u32,
            inputs: (start, mid),
            outputs: (mid, self.lowered.operands.len() as u32),
            packed: node.packed.map(|r| r.0),
            view: view.is_some(),
            in_place: !in_place.is_empty(),
            late,
        });
    }

    /// Records the type and shape of a late node's input that is no tensor
    /// during the run (a weight its packed object consumes, a table served
    /// by rows), for the shape function replay evaluates.
    fn fixed_input(&mut self, op: Option<Source>) {
        let weight = match op {
            Some(Source::Consumed(w)) => w,
            Some(Source::Prepared(r)) => self.resolved.requirements()[r.0 as usize].sources[0],
            _ => return,
        };
        let desc = &self.resolved.model().weights()[weight.index()];
        self.lowered.late_fixed.push((
            self.lowered.operands.len() as u32,
            desc.element_type().compute(),
            self.weight_dims[weight.index()].clone(),
        ));
    }

    /// Gates and allocates every buffer, then lays out the graph outputs.
    fn finish(
        mut self,
        gate: AllocationGate<'_>,
        folded_bytes: usize,
        most_scratch: usize,
        pool: &mut Vec<Tensor>,
    ) -> Result<Lowered, Error> {
        let buffer_bytes = self
            .buffer_specs
            .iter()
            .fold(folded_bytes, |n, (dtype, len, _)| {
                n.saturating_add(tensor_bytes(*dtype, &[*len]))
            });
        let buffer_bytes = buffer_bytes.saturating_add(most_scratch);
        self.lowered.scratch_bytes = most_scratch;
        gate(
            "the activation buffers and kernel temporaries",
            buffer_bytes,
        )?;
        for (b, (dtype, _, shape)) in std::mem::take(&mut self.buffer_specs)
            .into_iter()
            .enumerate()
        {
            let reusable = |pool: &Vec<Tensor>, count: Option<usize>| {
                pool.iter()
                    .position(|t| t.dtype() == dtype && Some(t.len()) == count)
            };
            self.lowered.buffers[b] = match shape {
                // A graph input's buffer: every run copies or swaps the
                // input into it before any kernel reads it, so only its
                // size matters here.
                None => {
                    let input: &Tensor = self.inputs[b];
                    let mut fresh = match reusable(pool, Some(input.len())) {
                        Some(at) => pool.swap_remove(at),
                        None => Tensor::zeros(input.dtype(), input.shape().to_vec())
                            .unwrap_or_else(|_| input.clone()),
                    };
                    if fresh.set_shape_from(input.shape()).is_err() {
                        fresh = input.clone();
                    }
                    fresh
                }
                Some(shape) => {
                    let err = |source| ResolveError::Kernel {
                        node: "activation buffers".to_owned(),
                        source,
                    };
                    // A buffer of the previous lowering of the same type
                    // and size (its contents are overwritten, as a hot
                    // run's are): no allocation, no fresh pages.
                    match reusable(pool, onnx_prepared_kernels::element_count(&shape)) {
                        Some(at) => {
                            let mut t = pool.swap_remove(at);
                            t.set_shape(shape).map_err(err)?;
                            t
                        }
                        None => Tensor::zeros(dtype, shape).map_err(err)?,
                    }
                }
            };
        }
        self.lowered.scratch.reserve_exact(self.most_outputs);
        self.lowered.ins.reserve_exact(self.most_inputs);
        for (_, op) in self.resolved.outputs() {
            let operand = match op {
                Source::Value(id) => match self.operand_of.get(&id.0) {
                    Some(op) => *op,
                    None => match &self.known[id.0 as usize] {
                        Known::Const(t) => self.constant(t),
                        _ => Operand::None,
                    },
                },
                Source::Inline(i) => self.constant(self.resolved.inline(*i)),
                Source::Prepared(r) => Operand::Object(r.0),
                Source::Consumed(_) => Operand::None,
            };
            self.lowered.output_operands.push(operand);
        }
        let mut lowered = self.lowered;
        // A buffer that is also a graph input, or that backs two outputs, is
        // copied out: its contents must stay — unless an output was computed
        // in the input's buffer (the run took that input).
        lowered.output_buffers = lowered
            .output_operands
            .iter()
            .map(|op| match *op {
                Operand::Buffer(b)
                    if (!lowered.input_buffers.contains(&b)
                        || lowered.in_place_buffers.contains(&b))
                        && lowered
                            .output_operands
                            .iter()
                            .filter(|o| **o == *op)
                            .count()
                            == 1 =>
                {
                    Some(b)
                }
                _ => None,
            })
            .collect();
        Ok(lowered)
    }
}

/// Lowers, adding graph inputs to `value_inputs` until shapes resolve.
/// `memo`: an earlier lowering's pass 1 of the same model, whose results
/// are taken where a node's inputs are unchanged.
pub(crate) fn lower_all(
    resolved: &ResolvedModel,
    inputs: &[&Tensor],
    value_inputs: &mut HashSet<usize>,
    gate: AllocationGate<'_>,
    pool: &mut Vec<Tensor>,
    memo: Option<&Memo>,
) -> Result<Lowered, Error> {
    loop {
        match lower(resolved, inputs, value_inputs, gate, pool, memo) {
            Ok(result) => return result,
            Err(NeedsValue(sources)) => value_inputs.extend(sources),
        }
    }
}
