//! Outputs that take an input's buffer instead of one of their own (cold
//! path, while lowering lays out buffers): views, whose node does not
//! execute, and outputs computed in place over an input (a KV cache the
//! step appends rows to).

use onnx_prepared_kernels::{ElementType, element_count};

use super::Operand;
use super::dense::ValueMap;
use crate::model::{Operand as Source, ResolvedNode};

/// What the deciders read of the lowering in progress.
pub(super) struct AliasContext<'a> {
    /// The action that reads each value last.
    pub(super) last_use: &'a ValueMap<usize>,
    pub(super) graph_outputs: &'a ValueMap<()>,
    /// Values below this id are graph inputs.
    pub(super) graph_inputs: usize,
    pub(super) operand_of: &'a ValueMap<Operand>,
    /// Type and shape of value `id` when it is a run-time value of known
    /// shape.
    pub(super) value: &'a dyn Fn(u32) -> Option<(ElementType, &'a [usize])>,
    /// `(dtype, element count, _)` of each buffer.
    pub(super) buffer_specs: &'a [(ElementType, usize, Option<Vec<usize>>)],
}

impl AliasContext<'_> {
    /// The buffer of node input `input`, when its value lives in one that
    /// nothing reads after action `step` (not read twice by this node, not
    /// a graph output) and that holds `out`'s type and element count.
    fn last_reader_buffer(
        &self,
        node: &ResolvedNode,
        input: usize,
        step: usize,
        out: u32,
    ) -> Option<(u32, u32)> {
        let Some(Some(Source::Value(id))) = node.inputs.get(input) else {
            return None;
        };
        let (dtype, shape) = (self.value)(out)?;
        let Some(Operand::Buffer(b)) = self.operand_of.get(&id.0) else {
            return None;
        };
        let (buffer_dtype, buffer_len, _) = &self.buffer_specs[*b as usize];
        let reads = node
            .inputs
            .iter()
            .flatten()
            .filter(|op| **op == Source::Value(*id))
            .count();
        (reads == 1
            && self.last_use.get(&id.0) == Some(&step)
            && !self.graph_outputs.contains(&id.0)
            && *buffer_dtype == dtype
            && element_count(shape) == Some(*buffer_len))
        .then_some((id.0, *b))
    }
}

/// The buffer `node` (action `step`) may leave its output in without
/// executing: input 0's, when the operator passes its elements through
/// and input 0 is a buffer nothing reads later (not a graph input or
/// output, not read twice by this node), of the output's type and size.
pub(super) fn view_of(node: &ResolvedNode, step: usize, cx: &AliasContext<'_>) -> Option<u32> {
    let [out] = node.outputs.as_slice() else {
        return None;
    };
    if !node.op.passes_elements_through() {
        return None;
    }
    let (id, b) = cx.last_reader_buffer(node, 0, step, out.0)?;
    ((id as usize) >= cx.graph_inputs).then_some(b)
}

/// For each pair `(input, output)` of [`Operator::in_place`], the input's
/// buffer, which the output then takes — when every pair can: each input is
/// a buffer nothing reads after this node (a graph input's included: the
/// run either copies the input into it or takes the caller's tensor, see
/// [`super::Lowered::lends_inputs`]) holding its output's type and size.
/// `None` when the operator declares no pairs or one cannot be applied.
///
/// [`Operator::in_place`]: onnx_prepared_kernels::Operator::in_place
pub(super) fn in_place_of(
    node: &ResolvedNode,
    step: usize,
    cx: &AliasContext<'_>,
) -> Option<Vec<(usize, usize, u32)>> {
    let pairs = node.op.in_place();
    if pairs.is_empty() {
        return None;
    }
    let mut taken = Vec::with_capacity(pairs.len());
    for &(input, output) in pairs {
        let out = node.outputs.get(output)?;
        let (_, b) = cx.last_reader_buffer(node, input, step, out.0)?;
        if taken.iter().any(|&(_, _, t)| t == b) {
            return None;
        }
        taken.push((input, output, b));
    }
    Some(taken)
}
