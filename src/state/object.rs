//! Prepared objects (cold path to build, hot path to read): what a
//! requirement publishes — a packed weight, or a source tensor used as is.

use std::sync::Arc;

use onnx_prepared_kernels::{PackedWeight, Tensor, TensorData};

use crate::Error;
use crate::error::{ResolveError, RunError};
use crate::model::{Requirement, ResolvedModel};

/// The object a requirement publishes.
#[derive(Debug, Clone)]
pub enum PreparedObject {
    /// A source tensor, for kernels that read it as is.
    Source(Arc<Tensor>),
    /// A packed weight, for the kernel whose layout it is.
    Packed(Arc<PackedWeight>),
}

impl PreparedObject {
    /// Bytes held.
    pub fn byte_len(&self) -> usize {
        match self {
            PreparedObject::Source(t) => t.byte_len(),
            PreparedObject::Packed(p) => p.byte_len(),
        }
    }

    /// The source tensor, if this is one.
    pub fn as_source(&self) -> Option<&Tensor> {
        match self {
            PreparedObject::Source(t) => Some(t),
            PreparedObject::Packed(_) => None,
        }
    }

    /// The packed weight, if this is one.
    pub fn as_packed(&self) -> Option<&PackedWeight> {
        match self {
            PreparedObject::Packed(p) => Some(p),
            PreparedObject::Source(_) => None,
        }
    }
}

/// Decodes one source weight's bytes into a tensor.
pub(crate) fn source_tensor(
    resolved: &ResolvedModel,
    weight: crate::model::WeightId,
    bytes: &[u8],
) -> Result<Tensor, Error> {
    let d = &resolved.model().weights()[weight.index()];
    let bad = || ResolveError::WeightType {
        weight: d.name().to_owned(),
        dtype: d.element_type(),
    };
    let dims: Vec<usize> = d.dims().iter().map(|&x| x as usize).collect();
    let elements = onnx_prepared_kernels::element_count(&dims).ok_or_else(bad)?;
    let data = TensorData::decode(d.element_type(), bytes, elements).ok_or_else(bad)?;
    Ok(Tensor::new(dims, data).map_err(|_| bad())?)
}

/// Builds a requirement's object from its source tensors (in `sources` order).
pub(crate) fn prepare(
    requirement: &Requirement,
    sources: &[Arc<Tensor>],
) -> Result<PreparedObject, Error> {
    match &requirement.prepack {
        // A source used as is is shared, not copied.
        None => Ok(PreparedObject::Source(sources[0].clone())),
        Some(p) => {
            let refs: Vec<&Tensor> = sources.iter().map(|t| &**t).collect();
            p.prepare(&refs)
                .map(|w| PreparedObject::Packed(Arc::new(w)))
                .map_err(|source| {
                    RunError::Kernel {
                        node: requirement.name.clone(),
                        source,
                    }
                    .into()
                })
        }
    }
}
