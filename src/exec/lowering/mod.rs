//! Lowering and replay, shared by every executor (cold path to lower, hot
//! path to replay).
//!
//! Lowering takes a [`ResolvedModel`] and one set of input shapes, infers
//! every shape, folds nodes whose inputs are all known constants, and
//! assigns buffers by liveness (a buffer is released to later values at its
//! value's last use). The result, [`Lowered`], is a compact action list.
//! `build` holds the lowering itself; this file the result and its replay.
//! Replay runs a range of actions with no map lookup and no allocation.

use std::collections::HashSet;
use std::sync::Arc;

use onnx_prepared_kernels::{
    ParallelFor, Tensor,
};

use crate::prepare::PreparedObject;
use crate::exec::RunError;
use crate::exec::RunError as Error;
use crate::model::{Dim, GraphInput, ResolvedModel, execute_caught};

/// Where an action operand lives at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand {
    /// Omitted optional input, or consumed by the packed weight.
    None,
    /// `Lowered::constants[i]`.
    Const(u32),
    /// `Lowered::buffers[i]`.
    Buffer(u32),
    /// The source tensor published for requirement `i`.
    Object(u32),
}

/// One step of the hot path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Action {
    node: u32,
    inputs: (u32, u32),
    outputs: (u32, u32),
    /// Requirement whose packed weight the kernel consumes.
    packed: Option<u32>,
    /// The output is the input's buffer under the output's shape
    /// ([`Operator::passes_elements_through`]): nothing executes.
    ///
    /// [`Operator::passes_elements_through`]: onnx_prepared_kernels::Operator::passes_elements_through
    view: bool,
    /// Outputs computed in their inputs' buffers
    /// ([`Operator::in_place`]): the kernel's `execute_in_place` runs.
    ///
    /// [`Operator::in_place`]: onnx_prepared_kernels::Operator::in_place
    in_place: bool,
    /// Output shapes follow input values: evaluated, and the output
    /// buffers sized, just before the node executes (see [`late`]).
    late: bool,
}

/// Prepared objects by requirement index, as an executor holds them.
pub(crate) trait Objects {
    /// The object of requirement `r`; present for every requirement the
    /// replayed actions use.
    fn object(&self, r: u32) -> Option<&PreparedObject>;
}

impl Objects for [PreparedObject] {
    fn object(&self, r: u32) -> Option<&PreparedObject> {
        self.get(r as usize)
    }
}

/// Checks, before lowering allocates them, that its activation buffers and
/// folded values may hold `bytes` together; `what` names the request for
/// the error. Called with growing totals; an `Err` stops the lowering.
pub(crate) type AllocationGate<'a> = &'a dyn Fn(&str, usize) -> Result<(), Error>;

/// The process's [`Ceiling`](crate::arena::Ceiling) as a lowering's gate:
/// each request resizes one charge to the growing total, held while the
/// lowering allocates; [`into_charge`](Self::into_charge) keeps it, sized
/// to the activation buffers, for as long as the lowering is kept.
pub(crate) struct CeilingGate {
    ceiling: crate::arena::Ceiling,
    held: crate::sync::Lock<Option<crate::arena::Reservation>>,
}

impl CeilingGate {
    /// A gate charging the process's ceiling.
    pub(crate) fn process() -> Self {
        Self {
            ceiling: crate::arena::Ceiling::process(),
            held: crate::sync::Lock::new(None),
        }
    }

    /// Charges `bytes` in all for the lowering (`what` names the request).
    pub(crate) fn check(&self, what: &str, bytes: usize) -> Result<(), Error> {
        let what = || what.to_owned();
        self.held.with(|held| match held {
            Some(r) => self.ceiling.resize(r, what, bytes),
            None => self
                .ceiling
                .charge(crate::arena::Domain::Execution, what, bytes)
                .map(|r| *held = Some(r)),
        })?;
        Ok(())
    }

    /// The charge, resized to `bytes` (the lowering's activation buffers).
    pub(crate) fn into_charge(self, bytes: usize) -> Result<crate::arena::Reservation, Error> {
        let held = self.held.with(Option::take);
        let what = || "the activation buffers".to_owned();
        Ok(match held {
            Some(mut r) => {
                self.ceiling.resize(&mut r, what, bytes)?;
                r
            }
            None => self
                .ceiling
                .charge(crate::arena::Domain::Execution, what, bytes)?,
        })
    }
}

/// The graph lowered for one input-shape set.
#[derive(Debug)]
pub(crate) struct Lowered {
    /// Input shapes this is for.
    key_shapes: Vec<Vec<usize>>,
    /// Values of the shape-operand inputs this is for (`None` for others).
    key_values: Vec<Option<Tensor>>,
    constants: Vec<Arc<Tensor>>,
    buffers: Vec<Tensor>,
    /// Shape of each output operand, indexed like `operands`.
    out_shapes: Vec<Vec<usize>>,
    operands: Vec<Operand>,
    actions: Vec<Action>,
    /// `node_action[n]`: index of the first action of node `n` or later
    /// (folded nodes have none); one past the end closes the last node.
    node_action: Vec<u32>,
    input_buffers: Vec<u32>,
    output_operands: Vec<Operand>,
    /// `output_buffers[i]`: the buffer graph output `i` may trade places
    /// with its caller's tensor — one it alone owns (not a graph input's,
    /// not shared with another output); decided at lowering.
    output_buffers: Vec<Option<u32>>,
    /// Buffers an output is computed in over its input (the input's value
    /// is gone after the run).
    in_place_buffers: HashSet<u32>,
    /// Pass 1 of this lowering, for the next one ([`infer::Memo`]).
    memo: Option<infer::Memo>,
    /// The largest temporary any kernel allocates while it runs
    /// ([`kernels::Operator::scratch_bytes`]), charged with the buffers.
    scratch_bytes: usize,
    /// Output tensors of the action being replayed; capacity for the most
    /// outputs of any action, reserved at lowering.
    scratch: Vec<Tensor>,
    /// Input references of the action being replayed, kept empty between
    /// actions; capacity for the most inputs of any action, reserved at
    /// lowering (see [`recycle`]).
    ins: Vec<Option<&'static Tensor>>,
    /// Inputs of late actions that are no tensor during the run.
    late_fixed: late::FixedInputs,
    /// The memory late outputs hold.
    late_charge: late::LateCharge,
}

/// An empty `Vec` of references with the allocation of `v`: collecting a
/// `vec::IntoIter` into a `Vec` of an element of the same size and alignment
/// reuses its buffer, so this allocates nothing. It lets replay keep one
/// buffer of input references across actions whose tensors it borrows anew.
fn recycle<'b>(mut v: Vec<Option<&Tensor>>) -> Vec<Option<&'b Tensor>> {
    v.clear();
    v.into_iter().map(|_| None).collect()
}

/// Lowering must restart with graph input `0` treated as a known value.
pub(crate) struct NeedsValue(pub(crate) Vec<usize>);

/// Most elements a graph input may have to become a known value of a
/// lowering (its contents decide shapes, so each distinct value is lowered
/// once): shape-like inputs, not activations.
const MAX_VALUE_INPUT_ELEMENTS: usize = 1024;

/// Checks `inputs` (by name) against the declared graph inputs and orders them.
pub(crate) fn order_inputs<'t>(
    declared: &[GraphInput],
    inputs: &[(&str, &'t Tensor)],
) -> Result<Vec<&'t Tensor>, Error> {
    for (name, _) in inputs {
        if !declared.iter().any(|i| i.name == *name) {
            return Err(RunError::UnknownInput {
                input: (*name).to_owned(),
            });
        }
    }
    let mut ordered = Vec::with_capacity(declared.len());
    for decl in declared {
        let mut found = inputs.iter().filter(|(n, _)| *n == decl.name);
        let (_, t) = found.next().ok_or_else(|| RunError::MissingInput {
            input: decl.name.clone(),
        })?;
        if found.next().is_some() {
            return Err(RunError::DuplicateInput {
                input: decl.name.clone(),
            });
        }
        check_input(decl, t)?;
        ordered.push(*t);
    }
    Ok(ordered)
}

/// Checks one input's type and shape against its declaration.
pub(crate) fn check_input(decl: &GraphInput, t: &Tensor) -> Result<(), Error> {
    if t.dtype() != decl.dtype {
        return Err(RunError::InputType {
            input: decl.name.clone(),
            expected: decl.dtype,
            found: t.dtype(),
        });
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
            });
        }
    }
    Ok(())
}

impl Lowered {
    /// Whether this lowering serves `inputs` (same shapes, same values of
    /// shape-operand inputs).
    pub(crate) fn matches(&self, inputs: &[&Tensor], value_inputs: &HashSet<usize>) -> bool {
        self.matches_by(inputs.len(), |i| inputs[i], value_inputs)
    }

    /// Bytes held by the activation buffers (inputs included), plus room
    /// for the largest kernel temporary of a run.
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.buffers
            .iter()
            .map(Tensor::byte_len)
            .fold(self.scratch_bytes, usize::saturating_add)
    }

    /// Number of actions.
    pub(crate) fn len(&self) -> usize {
        self.actions.len()
    }

    /// The action range of nodes `nodes`.
    pub(crate) fn actions_of(&self, nodes: std::ops::Range<u32>) -> std::ops::Range<usize> {
        self.node_action[nodes.start as usize] as usize
            ..self.node_action[nodes.end as usize] as usize
    }

    /// [`Lowered::matches`] over inputs reached by declared index.
    pub(crate) fn matches_by<'t>(
        &self,
        count: usize,
        input: impl Fn(usize) -> &'t Tensor,
        value_inputs: &HashSet<usize>,
    ) -> bool {
        self.key_shapes.len() == count
            && self.key_shapes.iter().enumerate().all(|(i, k)| {
                let t = input(i);
                k.as_slice() == t.shape()
                    && (!value_inputs.contains(&i) || self.key_values[i].as_ref() == Some(t))
            })
    }

    /// [`Lowered::load_inputs`] over inputs reached by declared index
    /// (allocates nothing).
    pub(crate) fn load_inputs_by<'t>(
        &mut self,
        input: impl Fn(usize) -> &'t Tensor,
    ) -> Result<(), Error> {
        for (i, &buffer) in self.input_buffers.iter().enumerate() {
            self.buffers[buffer as usize]
                .copy_from(input(i))
                .map_err(|source| RunError::Kernel {
                    node: "input copy".into(),
                    source,
                })?;
        }
        Ok(())
    }

    /// Whether a run may read its inputs from the caller's tensors, swapped
    /// into their buffers for the run ([`Lowered::swap_inputs`]), instead
    /// of copies: when no graph output reads an input's buffer (the
    /// outputs are taken after the inputs went back), except outputs
    /// computed in place over inputs the caller gives up (`gives_up(i)`
    /// for declared input `i`: a KV cache the outputs replace), and no
    /// kernel writes the buffer of an input the caller keeps.
    pub(crate) fn lends_inputs(&self, gives_up: impl Fn(usize) -> bool) -> bool {
        let written = |b: u32| self.in_place_buffers.contains(&b);
        let kept = self
            .input_buffers
            .iter()
            .enumerate()
            .all(|(i, &b)| !written(b) || gives_up(i));
        kept && self.output_operands.iter().all(|op| match *op {
            Operand::Buffer(b) => !self.input_buffers.contains(&b) || written(b),
            _ => true,
        })
    }

    /// Swaps each graph input's buffer with the caller's tensor for it
    /// (`inputs[order[i]]` for declared input `i`); a second call swaps
    /// them back. Kernels write no input's buffer but those
    /// [`Lowered::lends_inputs`] allowed, so the caller's other tensors come
    /// back unchanged. The caller checked them against this lowering
    /// ([`Lowered::matches_by`]).
    pub(crate) fn swap_inputs(&mut self, inputs: &mut [(String, Tensor)], order: &[u32]) {
        for (&b, &at) in self.input_buffers.iter().zip(order) {
            std::mem::swap(&mut self.buffers[b as usize], &mut inputs[at as usize].1);
        }
    }

    /// After a run that succeeded: [`Lowered::swap_inputs`] back, but for
    /// the inputs an output was computed in, which stay in their buffers
    /// as that output (the caller's slot keeps this lowering's tensor of
    /// the same size).
    pub(crate) fn return_inputs(&mut self, inputs: &mut [(String, Tensor)], order: &[u32]) {
        for (&b, &at) in self.input_buffers.iter().zip(order) {
            if !self.in_place_buffers.contains(&b) {
                std::mem::swap(&mut self.buffers[b as usize], &mut inputs[at as usize].1);
            }
        }
    }

    /// Copies the caller's inputs into their buffers.
    pub(crate) fn load_inputs(&mut self, inputs: &[&Tensor]) -> Result<(), Error> {
        self.load_inputs_by(|i| inputs[i])
    }

    /// Clones the graph outputs.
    pub(crate) fn outputs<O: Objects + ?Sized>(
        &self,
        resolved: &ResolvedModel,
        objects: &O,
    ) -> Vec<(String, Tensor)> {
        let empty = Tensor::default();
        resolved
            .outputs()
            .iter()
            .zip(&self.output_operands)
            .map(|((name, _), op)| {
                (
                    name.clone(),
                    self.output_value(*op, objects, &empty).clone(),
                )
            })
            .collect()
    }

    /// The tensor holding graph output `operand` after a run.
    fn output_value<'a, O: Objects + ?Sized>(
        &'a self,
        operand: Operand,
        objects: &'a O,
        empty: &'a Tensor,
    ) -> &'a Tensor {
        match operand {
            Operand::Const(c) => &self.constants[c as usize],
            Operand::Buffer(b) => &self.buffers[b as usize],
            Operand::Object(r) => objects
                .object(r)
                .and_then(|o| o.as_source())
                .unwrap_or(empty),
            Operand::None => empty,
        }
    }

    /// The bytes of the graph outputs `outputs_into` would write.
    pub(crate) fn output_bytes<O: Objects + ?Sized>(&self, objects: &O) -> usize {
        self.output_operands
            .iter()
            .map(|operand| {
                let t = match *operand {
                    Operand::Const(c) => Some(&*self.constants[c as usize]),
                    Operand::Buffer(b) => Some(&self.buffers[b as usize]),
                    Operand::Object(r) => objects.object(r).and_then(|o| o.as_source()),
                    Operand::None => None,
                };
                t.map_or(0, Tensor::byte_len)
            })
            .fold(0usize, usize::saturating_add)
    }

    /// The graph outputs written into `out`, reusing its tensors: an
    /// output computed into its own buffer trades places with the tensor in
    /// its slot when their types and element counts match (no copy: the
    /// buffer takes the old tensor, which the next run overwrites), or,
    /// when `out` has no slot for it yet, is handed over whole while the
    /// buffer starts afresh (no copy either: a caller that takes its
    /// outputs every run, as the Python binding does, copies nothing
    /// here); other outputs are copied into their slots, without allocating
    /// when types and element counts match.
    /// What a new lowering of the same model may reuse: the buffers with
    /// memory of their own (it takes those of the same type and size
    /// instead of allocating), and pass 1's memo (it redoes only the nodes
    /// whose inputs changed).
    pub(crate) fn into_reuse(self) -> (Vec<Tensor>, Option<infer::Memo>) {
        let pool = self
            .buffers
            .into_iter()
            .filter(|t| !t.is_shared() && !t.is_empty())
            .collect();
        (pool, self.memo)
    }

    /// Whether graph output `i` is written into a buffer of its own (which
    /// [`Self::outputs_into`] trades with the caller's slot), not a view of
    /// an input, a weight or a constant.
    pub(crate) fn output_has_buffer(&self, i: usize) -> bool {
        self.output_buffers.get(i).is_some_and(Option::is_some)
    }

    pub(crate) fn outputs_into<O: Objects + ?Sized>(
        &mut self,
        resolved: &ResolvedModel,
        objects: &O,
        out: &mut Vec<(String, Tensor)>,
    ) {
        let declared = resolved.outputs();
        out.truncate(declared.len());
        for (i, ((name, _), operand)) in declared.iter().zip(&self.output_operands).enumerate() {
            if let Some(b) = self.output_buffers[i]
                && i < out.len()
            {
                let buffer = &mut self.buffers[b as usize];
                let (slot_name, slot) = &mut out[i];
                if slot.dtype() == buffer.dtype() && slot.len() == buffer.len() {
                    if slot_name != name {
                        name.clone_into(slot_name);
                    }
                    std::mem::swap(slot, buffer);
                    continue;
                }
            }
            if let Some(b) = self.output_buffers[i]
                && i == out.len()
            {
                let buffer = &mut self.buffers[b as usize];
                if let Ok(fresh) = Tensor::zeros(buffer.dtype(), buffer.shape().to_vec()) {
                    out.push((name.clone(), std::mem::replace(buffer, fresh)));
                    continue;
                }
            }
            let empty = Tensor::default();
            let value = self.output_value(*operand, objects, &empty);
            // Outputs outlive the run: never views of an input's bytes
            // lent for it.
            if i == out.len() {
                out.push((name.clone(), value.to_owned_elements()));
                continue;
            }
            let (slot_name, slot) = &mut out[i];
            if slot_name != name {
                name.clone_into(slot_name);
            }
            if slot.copy_from(value).is_err() {
                *slot = value.to_owned_elements();
            }
        }
    }

    /// Replays `range` of the actions.
    pub(crate) fn replay<O: Objects + ?Sized>(
        &mut self,
        resolved: &ResolvedModel,
        objects: &O,
        range: std::ops::Range<usize>,
        par: &dyn ParallelFor,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), Error> {
        let nodes = resolved.nodes();
        for a in range {
            // A cancelled run ends between kernels (one load per action).
            if stop() {
                return Err(Error::Cancelled);
            }
            if self.actions[a].late {
                self.size_late(resolved, objects, a)?;
            }
            let Self {
                constants,
                buffers,
                out_shapes,
                operands,
                actions,
                scratch,
                ins: kept_ins,
                ..
            } = self;
            let action = &actions[a];
            let node = &nodes[action.node as usize];
            let (o0, o1) = (action.outputs.0 as usize, action.outputs.1 as usize);
            if action.view {
                let Operand::Buffer(b) = operands[o0] else {
                    unreachable!("a view's output is a buffer")
                };
                buffers[b as usize]
                    .set_shape_from(&out_shapes[o0])
                    .expect("a view keeps the element count by construction");
                continue;
            }
            scratch.clear();
            for (k, op) in operands[o0..o1].iter().enumerate() {
                let Operand::Buffer(b) = *op else {
                    unreachable!("outputs are buffers")
                };
                let mut t = std::mem::take(&mut buffers[b as usize]);
                let shape = out_shapes[o0 + k].as_slice();
                if t.shape() != shape {
                    // Values of equal size share a buffer; only the shape differs.
                    t.set_shape_from(shape)
                        .expect("same element count by construction");
                }
                scratch.push(t);
            }
            let mut ins = recycle(std::mem::take(kept_ins));
            let (i0, i1) = (action.inputs.0 as usize, action.inputs.1 as usize);
            let mut missing = None;
            // A table served row by row (input 0 of a row gather).
            let mut rows = None;
            for op in &operands[i0..i1] {
                ins.push(match *op {
                    Operand::None => None,
                    Operand::Const(c) => Some(&*constants[c as usize]),
                    Operand::Buffer(b) => Some(&buffers[b as usize]),
                    Operand::Object(r) => {
                        let object = objects.object(r);
                        let t = object.and_then(PreparedObject::as_source);
                        match object.and_then(PreparedObject::as_rows) {
                            Some(table) if ins.is_empty() && node.op.gathers_rows() => {
                                rows = Some(table);
                            }
                            _ if t.is_none() => missing = Some(r),
                            _ => {}
                        }
                        t
                    }
                });
            }
            let packed = match action.packed {
                None => None,
                Some(r) => {
                    let p = objects.object(r).and_then(PreparedObject::as_packed);
                    if p.is_none() {
                        missing = Some(r);
                    }
                    p
                }
            };
            let result = match (missing, rows) {
                (Some(r), _) => Err(RunError::NotResident {
                    node: node.name.clone(),
                    requirement: resolved.requirements()[r as usize].name.clone(),
                }),
                (None, Some(table)) => match (ins.get(1).copied().flatten(), scratch.first_mut()) {
                    (Some(indices), Some(out)) => Ok(table.gather_into(&node.name, indices, out)?),
                    _ => Err(RunError::Unsupported {
                        what: format!("node `{}` gathers rows without indices or output", node.name),
                    }),
                },
                (None, None) => Ok(execute_caught(
                    &*node.op,
                    &node.name,
                    (&ins, packed, action.in_place),
                    scratch,
                    par,
                )?),
            };
            *kept_ins = recycle(ins);
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
}

mod alias;
mod build;
mod dense;
mod infer;
mod late;

pub(crate) use build::lower_all;
