//! `DirectReplay`: the eager executor and the hot-path baseline.
//!
//! Cold path (`new`, and lowering on the first run of each input-shape set):
//! every requirement of the resolved model is produced up front by the one
//! producer of prepared objects (`preparation.rs`: read, verify, prepack,
//! publish; a weight several requirements share is read once), then the
//! graph is lowered to a compact action list (see [`super::lowering`]).
//!
//! Hot path (`run` with the shapes of the previous run): copy the inputs into
//! their buffers, execute each action, clone the outputs. No map lookup and
//! no allocation besides the returned outputs and the input check.

use std::collections::HashSet;
use std::sync::Arc;

use onnx_prepared_kernels::{CpuFeatures, ParallelFor, Sequential, Tensor};

use crate::prepare::PreparedObject;
use super::lowering::{CeilingGate, Lowered, lower_all, order_inputs};
use crate::prepare::preparation::{Held, Producer};
use super::RunError;
use crate::arena::MemoryBudget;
use crate::plan::{PreparedExecutionPlan, RequirementId};
use crate::model::{
    ChecksumPolicy, GraphInput, Model, PayloadSource, ResolveOptions, ResolvedModel,
};
use crate::scheduler::{WorkerPoolOptions, WorkerPool};

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

/// The eager executor: everything loaded and prepacked up front, then a
/// straight replay per run.
#[derive(Debug)]
pub struct DirectReplay {
    resolved: Arc<ResolvedModel>,
    objects: Vec<PreparedObject>,
    /// Graph inputs whose values decide shapes (discovered at lowering).
    value_inputs: HashSet<usize>,
    lowered: Option<Lowered>,
    /// The lowering's activation buffers, charged to the process's
    /// allocation ceiling.
    ceiling: Option<crate::arena::Reservation>,
    /// `threads - 1` CPU workers (not pinned, no I/O workers) that help
    /// the caller's thread in kernels' parallel regions, leased per run.
    pool: Option<WorkerPool>,
}

impl DirectReplay {
    /// Resolves `model`, then reads and prepacks every requirement through
    /// `source`.
    pub fn new(
        model: &Model,
        source: Arc<dyn PayloadSource>,
        options: DirectReplayOptions,
    ) -> Result<Self, RunError> {
        let resolved = ResolvedModel::resolve(
            model.clone(),
            &ResolveOptions {
                cpu: options.cpu,
                ..ResolveOptions::default()
            },
        )?;
        Self::from_resolved(resolved, source, options.threads, options.checksums)
    }

    /// Reads (verified under `checksums`) and prepacks every requirement of
    /// `resolved` through `source`, in requirement order.
    pub fn from_resolved(
        resolved: ResolvedModel,
        source: Arc<dyn PayloadSource>,
        threads: usize,
        checksums: ChecksumPolicy,
    ) -> Result<Self, RunError> {
        let plan = Arc::new(PreparedExecutionPlan::build(resolved)?);
        let producer = Producer::new(plan.clone(), source, MemoryBudget::unlimited(), checksums);
        let mut held = Held::default();
        let count = plan.requirements().len();
        let mut objects = Vec::with_capacity(count);
        for r in (0..count as u32).map(RequirementId) {
            producer.ensure(r, &mut held)?;
            let pin = producer
                .store()
                .pin(r.0 as usize)
                .ok_or_else(|| producer.not_resident(r))?;
            objects.push(pin.object.clone());
        }
        let resolved = plan.resolved().clone();
        Ok(Self {
            resolved,
            objects,
            value_inputs: HashSet::new(),
            lowered: None,
            ceiling: None,
            pool: (threads > 1)
                .then(|| {
                    WorkerPool::try_new(WorkerPoolOptions {
                        cpu_workers: threads - 1,
                        io_workers: 0,
                        pin_cpu_workers: false,
                    })
                })
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
    pub fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<(String, Tensor)>, RunError> {
        let ordered = order_inputs(self.resolved.inputs(), inputs)?;
        if !self
            .lowered
            .as_ref()
            .is_some_and(|l| l.matches(&ordered, &self.value_inputs))
        {
            self.lowered = None;
            self.ceiling = None;
            let ceiling = CeilingGate::process();
            let gate = |what: &str, bytes: usize| ceiling.check(what, bytes);
            let lowered = lower_all(&self.resolved, &ordered, &mut self.value_inputs, &gate, &mut Vec::new(), None)?;
            self.ceiling = Some(ceiling.into_charge(lowered.buffer_bytes())?);
            self.lowered = Some(lowered);
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
        let lease;
        let par: &dyn ParallelFor = match pool {
            Some(p) => {
                lease = p.lease();
                &lease
            }
            None => &Sequential,
        };
        let all = 0..lowered.len();
        lowered.replay(resolved, objects.as_slice(), all, par, &|| false)?;
        Ok(lowered.outputs(resolved, objects.as_slice()))
    }
}
