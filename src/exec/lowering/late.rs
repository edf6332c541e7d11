//! Values known only while the model runs (cold path to classify, warm path
//! to size).
//!
//! A node whose output shape follows the values of its inputs (NonZero,
//! Unique, NonMaxSuppression, Compress; a TopK, Reshape or Range whose shape
//! operand is computed from large inputs or from weights), and every node
//! that reads a value such a node computes, is *late*: lowering gives it an
//! action but no output shapes. Replay evaluates the operator's shape
//! function on the values of its inputs just before it executes and sizes
//! its outputs then. Each late output has a buffer of its own — never
//! shared by liveness, never a view — charged to the process's ceiling and
//! the session's budget as it grows, as the lowering's own buffers are.
//! Models without late nodes replay as before, at the cost of one flag test
//! per action.

use std::collections::{HashMap, HashSet};

use onnx_prepared_kernels::{ElementType, InputInfo, Tensor};

use super::{Lowered, MAX_VALUE_INPUT_ELEMENTS, Objects, Operand};
use crate::arena::{Ceiling, Domain, MemoryBudget, Reservation};
use crate::exec::RunError as Error;
use crate::model::{Operand as Source, ResolvedModel, ValueId};
use crate::prepare::PreparedObject;

/// Where the value a node's shape needs comes from.
pub(super) enum ShapeOperand {
    /// Small graph inputs: lower again with their values known, keyed by
    /// them.
    Rekey(Vec<usize>),
    /// Large graph inputs or weights: the node is late.
    Late,
    /// Nothing lowering can evaluate or defer (the value is never computed).
    Missing,
}

/// Where the value `id`, a shape operand, comes from: the graph inputs
/// (not yet known values) it is computed from when each is small enough to
/// key a lowering by; [`ShapeOperand::Late`] when one is not, or when it
/// reads weights.
pub(super) fn shape_operand(
    resolved: &ResolvedModel,
    id: ValueId,
    inputs: &[&Tensor],
    value_inputs: &HashSet<usize>,
) -> ShapeOperand {
    let mut producer: HashMap<u32, usize> = HashMap::new();
    for (n, node) in resolved.nodes().iter().enumerate() {
        for o in &node.outputs {
            producer.insert(o.0, n);
        }
    }
    let mut sources = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![id.0];
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        if (v as usize) < inputs.len() {
            let i = v as usize;
            if value_inputs.contains(&i) {
                continue;
            }
            if inputs[i].len() > MAX_VALUE_INPUT_ELEMENTS {
                return ShapeOperand::Late;
            }
            sources.push(i);
            continue;
        }
        let Some(&n) = producer.get(&v) else { continue };
        for op in resolved.nodes()[n].inputs.iter().flatten() {
            match op {
                Source::Value(u) => stack.push(u.0),
                Source::Prepared(_) | Source::Consumed(_) => return ShapeOperand::Late,
                Source::Inline(_) => {}
            }
        }
    }
    if sources.is_empty() {
        ShapeOperand::Missing
    } else {
        ShapeOperand::Rekey(sources)
    }
}

/// The memory of late outputs: one charge on the process's ceiling and one
/// on the session's budget (when the executor has one), each resized to
/// the bytes every late buffer holds now.
pub(crate) struct LateCharge {
    ceiling: Ceiling,
    budget: Option<MemoryBudget>,
    on_ceiling: Option<Reservation>,
    on_budget: Option<Reservation>,
    bytes: usize,
}

impl std::fmt::Debug for LateCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LateCharge")
            .field("bytes", &self.bytes)
            .field("budget", &self.budget.is_some())
            .finish()
    }
}

impl LateCharge {
    /// Charges the process's ceiling only, until [`Lowered::charge_late_to`].
    pub(super) fn process() -> Self {
        Self {
            ceiling: Ceiling::process(),
            budget: None,
            on_ceiling: None,
            on_budget: None,
            bytes: 0,
        }
    }

    /// Resizes both charges to `bytes`; a refusal changes neither.
    fn resize(&mut self, node: &str, bytes: usize) -> Result<(), Error> {
        let what = || format!("the outputs of node `{node}`, sized while the model runs");
        match &mut self.on_ceiling {
            Some(r) => self.ceiling.resize(r, what, bytes)?,
            None => {
                self.on_ceiling = Some(self.ceiling.charge(Domain::Execution, what, bytes)?);
            }
        }
        let on_budget = match (&mut self.on_budget, &self.budget) {
            (_, None) => Ok(()),
            (Some(r), Some(_)) => r.resize(bytes),
            (None, Some(budget)) => budget
                .reserve(Domain::Execution, bytes)
                .map(|r| self.on_budget = Some(r)),
        };
        if let Err(e) = on_budget {
            if let Some(r) = &mut self.on_ceiling {
                // Shrinking is never refused.
                let _ = r.resize(self.bytes);
            }
            return Err(e.into());
        }
        self.bytes = bytes;
        Ok(())
    }
}

/// Type and shape of an input a late node reads that is not a tensor
/// during the run (a weight its packed object consumed, a table served
/// by rows), by operand index.
pub(super) type FixedInputs = Vec<(u32, ElementType, Vec<usize>)>;

impl Lowered {
    /// Charges the memory late outputs take during runs to `budget` as
    /// well as to the process's ceiling.
    pub(crate) fn charge_late_to(&mut self, budget: &MemoryBudget) {
        self.late_charge.budget = Some(budget.clone());
    }

    /// Before late action `a` executes: infers its output shapes from the
    /// values of its inputs and sizes its buffers to them, charging what
    /// they grow by.
    pub(super) fn size_late<O: Objects + ?Sized>(
        &mut self,
        resolved: &ResolvedModel,
        objects: &O,
        a: usize,
    ) -> Result<(), Error> {
        let action = self.actions[a];
        let node = &resolved.nodes()[action.node as usize];
        let (i0, i1) = (action.inputs.0 as usize, action.inputs.1 as usize);
        let infos: Vec<Option<InputInfo<'_>>> = (i0..i1)
            .map(|k| {
                let fixed = || {
                    self.late_fixed
                        .iter()
                        .find(|(at, _, _)| *at as usize == k)
                        .map(|(_, dtype, shape)| InputInfo::unloaded(*dtype, shape))
                };
                match self.operands[k] {
                    Operand::None => fixed(),
                    Operand::Const(c) => Some(InputInfo::known(&self.constants[c as usize])),
                    Operand::Buffer(b) => Some(InputInfo::known(&self.buffers[b as usize])),
                    Operand::Object(r) => objects
                        .object(r)
                        .and_then(PreparedObject::as_source)
                        .map(InputInfo::known)
                        .or_else(fixed),
                }
            })
            .collect();
        let outs = node
            .op
            .infer_checked(&infos)
            .map_err(|source| Error::Kernel {
                node: node.name.clone(),
                source,
            })?;
        drop(infos);
        let (o0, o1) = (action.outputs.0 as usize, action.outputs.1 as usize);
        if outs.len() != o1 - o0 {
            return Err(Error::Unsupported {
                what: format!(
                    "node `{}`: {} outputs inferred for {}",
                    node.name,
                    outs.len(),
                    o1 - o0
                ),
            });
        }
        for (k, out) in outs.into_iter().enumerate() {
            let Operand::Buffer(b) = self.operands[o0 + k] else {
                unreachable!("outputs are buffers")
            };
            let buffer = &mut self.buffers[b as usize];
            let fits = buffer.dtype() == out.dtype
                && onnx_prepared_kernels::element_count(&out.shape) == Some(buffer.len());
            if !fits {
                let bytes = crate::model::tensor_bytes(out.dtype, &out.shape);
                let total = self
                    .late_charge
                    .bytes
                    .saturating_sub(buffer.byte_len())
                    .saturating_add(bytes);
                self.late_charge.resize(&node.name, total)?;
                // The old buffer goes before the new one is made.
                self.buffers[b as usize] = Tensor::default();
                match Tensor::zeros(out.dtype, out.shape.clone()) {
                    Ok(t) => self.buffers[b as usize] = t,
                    Err(source) => {
                        let held = total.saturating_sub(bytes);
                        self.late_charge.resize(&node.name, held)?;
                        return Err(Error::Kernel {
                            node: node.name.clone(),
                            source,
                        });
                    }
                }
            }
            self.out_shapes[o0 + k] = out.shape;
        }
        Ok(())
    }
}
