//! `DirectReplay`: the eager executor and the hot-path baseline.
//!
//! Cold path (`new`, and lowering on the first run of each input-shape set):
//! every requirement of the resolved model is read and, where its kernel
//! offers a layout, prepacked; then the graph is lowered to a compact action
//! list (see [`super::lowering`]).
//!
//! Hot path (`run` with the shapes of the previous run): copy the inputs into
//! their buffers, execute each action, clone the outputs. No map lookup and
//! no allocation besides the returned outputs and the input check.

use std::collections::HashSet;
use std::sync::Arc;

use onnx_prepared_kernels::{CpuFeatures, ElementType, ParallelFor, Sequential, Tensor};
use onnx_prepared_proto::tensor_shape_proto::dimension::Value as DimValue;
use onnx_prepared_proto::type_proto::Value as TypeValue;

use super::lowering::{Lowered, ceiling_gate, lower_all, order_inputs};
use super::object::materialize;
use super::{PreparedObject, ThreadPool};
use crate::Error;
use crate::error::ResolveError;
use crate::model::{
    ChecksumPolicy, Model, PayloadSource, ResolveOptions, ResolvedModel, element_type_from_onnx,
};

/// Options of [`DirectReplay`].
#[derive(Debug, Clone)]
pub struct DirectReplayOptions {
    /// Threads kernels may use (the caller's plus `threads - 1` workers).
    pub threads: usize,
    /// CPU features that select packed layouts.
    pub cpu: CpuFeatures,
    /// Whether declared weight digests are verified as weights are read.
    pub checksums: ChecksumPolicy,
}

impl Default for DirectReplayOptions {
    fn default() -> Self {
        Self {
            threads: 1,
            cpu: CpuFeatures::detect(),
            checksums: ChecksumPolicy::Strict,
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
    Ok(GraphInput { name, dtype, dims })
}

/// The eager executor: everything loaded and prepacked up front, then a
/// straight replay per run.
#[derive(Debug)]
pub struct DirectReplay {
    resolved: Arc<ResolvedModel>,
    objects: Vec<PreparedObject>,
    /// Graph inputs whose values decide shapes (discovered at lowering).
    value_inputs: HashSet<usize>,
    lowered: Option<Lowered>,
    pool: Option<ThreadPool>,
}

impl DirectReplay {
    /// Resolves `model`, then reads and prepacks every requirement through
    /// `source`.
    pub fn new(
        model: &Model,
        source: &dyn PayloadSource,
        options: DirectReplayOptions,
    ) -> Result<Self, Error> {
        let resolved = ResolvedModel::resolve(
            model.clone(),
            &ResolveOptions {
                cpu: options.cpu,
                ..ResolveOptions::default()
            },
        )?;
        Self::from_resolved(
            Arc::new(resolved),
            source,
            options.threads,
            options.checksums,
        )
    }

    /// Reads (verified under `checksums`) and prepacks every requirement of
    /// `resolved` through `source`.
    pub fn from_resolved(
        resolved: Arc<ResolvedModel>,
        source: &dyn PayloadSource,
        threads: usize,
        checksums: ChecksumPolicy,
    ) -> Result<Self, Error> {
        let objects = resolved
            .requirements()
            .iter()
            .map(|r| materialize(&resolved, r, source, checksums))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            resolved,
            objects,
            value_inputs: HashSet::new(),
            lowered: None,
            pool: (threads > 1)
                .then(|| ThreadPool::try_new(threads - 1))
                .transpose()?,
        })
    }

    /// The resolved model.
    pub fn resolved(&self) -> &Arc<ResolvedModel> {
        &self.resolved
    }

    /// The graph inputs the caller provides.
    pub fn inputs(&self) -> &[GraphInput] {
        self.resolved.inputs()
    }

    /// The graph output names, in order.
    pub fn output_names(&self) -> impl Iterator<Item = &str> {
        self.resolved.outputs().iter().map(|(n, _)| n.as_str())
    }

    /// Total bytes of the prepared objects (packed and as-is).
    pub fn prepared_bytes(&self) -> usize {
        self.objects.iter().map(PreparedObject::byte_len).sum()
    }

    /// `(node, layout)` of every node that consumes a packed weight.
    pub fn packed_layouts(&self) -> Vec<(String, String)> {
        self.resolved
            .nodes()
            .iter()
            .filter_map(|n| {
                let r = n.packed?;
                let layout = self.objects[r.0 as usize].as_packed()?.layout.clone();
                Some((n.name.clone(), layout))
            })
            .collect()
    }

    /// Runs the graph on `inputs` (by name) and returns every graph output,
    /// by name, in graph order.
    pub fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<(String, Tensor)>, Error> {
        let ordered = order_inputs(self.resolved.inputs(), inputs)?;
        if !self
            .lowered
            .as_ref()
            .is_some_and(|l| l.matches(&ordered, &self.value_inputs))
        {
            self.lowered = None;
            let gate = ceiling_gate(crate::limits::default_allocation_ceiling());
            self.lowered = Some(lower_all(
                &self.resolved,
                &ordered,
                &mut self.value_inputs,
                &gate,
            )?);
        }
        let Self {
            resolved,
            objects,
            lowered,
            pool,
            ..
        } = self;
        let lowered = lowered.as_mut().expect("lowered above");
        lowered.load_inputs(&ordered)?;
        let par: &dyn ParallelFor = match pool {
            Some(p) => p,
            None => &Sequential,
        };
        let all = 0..lowered.len();
        lowered.replay(resolved, objects.as_slice(), all, par)?;
        Ok(lowered.outputs(resolved, objects.as_slice()))
    }
}
