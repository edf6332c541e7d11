//! Probing at resolution (cold path): what resolution can show a kernel
//! about each input, the values it can compute for the probe shapes alone,
//! and the content identity of weights for lineage digests.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use onnx_prepared_kernels::{ElementType, InputInfo, Operator, OutputInfo, Sequential, Tensor};
use sha2::Digest;
use sha2::Sha256;

use super::{InlineId, ValueId};
use crate::model::LoadError;
use crate::model::ResolveError;
use crate::model::{Model, WeightDescriptor, WeightId, WeightSource};

/// What resolution knows about a name.
#[derive(Clone)]
pub(super) enum Known {
    /// A graph input or node output, with its probed type and shape.
    Value(ValueId, ElementType, Vec<usize>),
    /// An inline constant.
    Inline(InlineId),
    /// An initializer not loaded at resolution.
    Weight(WeightId),
}

/// Shapes, types and values resolution can show a kernel for one input;
/// `None` for a value whose probe failed.
pub(super) struct ProbeView<'a> {
    pub(super) inline: &'a [Arc<Tensor>],
    pub(super) weights: &'a [WeightDescriptor],
    pub(super) weight_dims: &'a [Vec<usize>],
    pub(super) unprobed: &'a HashSet<ValueId>,
    /// Values known for the probe shapes only (a `Shape` of a graph input
    /// and what is computed from it): shown to kernels so that shape
    /// inference reaches past `Reshape`, never folded.
    pub(super) probe_values: &'a HashMap<ValueId, Arc<Tensor>>,
}

impl<'a> ProbeView<'a> {
    pub(super) fn info(&self, k: &'a Known) -> Option<InputInfo<'a>> {
        match k {
            Known::Value(id, ..) if self.unprobed.contains(id) => None,
            Known::Value(id, ..) if self.probe_values.contains_key(id) => {
                let t = &self.probe_values[id];
                Some(InputInfo {
                    dtype: t.dtype(),
                    shape: t.shape(),
                    value: Some(t),
                    constant: false,
                })
            }
            Known::Value(_, dtype, shape) => Some(InputInfo::dynamic(*dtype, shape)),
            Known::Inline(i) => Some(InputInfo::known(&self.inline[i.0 as usize])),
            Known::Weight(w) => Some(InputInfo::unloaded(
                self.weights[w.index()].element_type().compute(),
                &self.weight_dims[w.index()],
            )),
        }
    }
}

/// Content identity of one source for its lineage digest.
pub(super) fn hash_source(h: &mut Sha256, model: &Model, w: WeightId) {
    let d = &model.weights()[w.index()];
    match (d.checksum().and_then(|c| c.tensor_sha256()), d.source()) {
        (Some(digest), _) => hash_source_identity(h, d, digest),
        (None, WeightSource::Embedded { .. }) => {
            // No digest: identify by the model's bytes (the XXH3-128 Model::open
            // computed over the file that holds this source), so resolution
            // reads no weight; the prepared cache keys entries on the
            // SHA-256 instead.
            hash_source_fields(h, d);
            field(h, b"embedded");
            field(h, &model.identity().to_le_bytes());
        }
        (
            None,
            WeightSource::External {
                file,
                offset,
                length,
            },
        ) => {
            // No digest: identify by location, range and file size (an
            // in-process identity; the prepared cache never trusts it).
            hash_source_fields(h, d);
            let f = &model.external_files()[file.index()];
            field(h, f.location().as_bytes());
            field(
                h,
                &[
                    offset.to_le_bytes(),
                    length.to_le_bytes(),
                    f.size().to_le_bytes(),
                ]
                .concat(),
            );
        }
    }
}

fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

fn hash_source_fields(h: &mut Sha256, d: &WeightDescriptor) {
    field(h, d.name().as_bytes());
    field(h, d.element_type().name().as_bytes());
    let dims: Vec<u8> = d.dims().iter().flat_map(|x| x.to_le_bytes()).collect();
    field(h, &dims);
}

/// Hashes one source of a lineage: its name, element type, dims and the
/// SHA-256 digest of its bytes. The prepared cache's lineage digest and a
/// [`PreparedKey`](super::PreparedKey) of digested sources hash the same
/// fields, so the two agree.
pub(crate) fn hash_source_identity(h: &mut Sha256, d: &WeightDescriptor, digest: &[u8; 32]) {
    hash_source_fields(h, d);
    field(h, digest);
}

/// Most elements a probe value may hold: probe values are shapes, indices
/// and the small tensors computed from them, never activations.
const MAX_PROBE_ELEMENTS: usize = 1 << 12;

/// Outputs of a node for the probe shapes, when they are cheap to know: a
/// shape-only operator, or a small node whose inputs are all inline
/// constants or probe values (at least one of them a probe value).
pub(super) fn probe_evaluate<'k>(
    op: &dyn Operator,
    infos: &[Option<InputInfo<'_>>],
    outs: Option<&[OutputInfo]>,
    inputs: &'k [Option<Known>],
    value: impl Fn(&'k Known) -> Option<&'k Tensor>,
) -> Option<Vec<Tensor>> {
    if infos
        .iter()
        .zip(inputs)
        .all(|(i, k)| i.is_some() == k.is_some())
        && let Some(Ok(values)) = op.fold_shapes(infos)
    {
        return Some(values);
    }
    let outs = outs?;
    let small = outs
        .iter()
        .try_fold(0usize, |n, o| {
            n.checked_add(onnx_prepared_kernels::element_count(&o.shape)?)
        })
        .is_some_and(|n| n <= MAX_PROBE_ELEMENTS);
    let probe_input = inputs
        .iter()
        .flatten()
        .any(|k| matches!(k, Known::Value(..)));
    if !small || !probe_input {
        return None;
    }
    let mut ins = Vec::with_capacity(inputs.len());
    for k in inputs {
        ins.push(match k {
            None => None,
            Some(k) => Some(value(k)?),
        });
    }
    let mut tensors = Vec::with_capacity(outs.len());
    for o in outs {
        tensors.push(Tensor::zeros(o.dtype, o.shape.clone()).ok()?);
    }
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        op.execute(&ins, None, &mut tensors, &Sequential)
    }));
    matches!(ran, Ok(Ok(()))).then_some(tensors)
}

pub(super) fn embedded_tensor(model: &Model, id: WeightId) -> Result<Tensor, LoadError> {
    let d = &model.weights()[id.index()];
    let WeightSource::Embedded { bytes } = d.source() else {
        unreachable!("embedded checked by caller")
    };
    let dims: Vec<usize> = d.dims().iter().map(|&x| x as usize).collect();
    let elements = onnx_prepared_kernels::element_count(&dims).unwrap_or(usize::MAX);
    let data = onnx_prepared_kernels::TensorData::decode(d.element_type(), bytes, elements)
        .ok_or_else(|| ResolveError::WeightType {
            weight: d.name().to_owned(),
            dtype: d.element_type(),
        })?;
    Ok(
        Tensor::new(dims, data).map_err(|_| ResolveError::WeightType {
            weight: d.name().to_owned(),
            dtype: d.element_type(),
        })?,
    )
}
