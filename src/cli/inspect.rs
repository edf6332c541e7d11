//! `onnx-prepared inspect` and `onnx-prepared plan`: a model's metadata
//! and its scoped plan (cold path; no weight is read).

use std::path::Path;

use onnx_prepared::CpuFeatures;
use onnx_prepared::model::inspect::InspectReport;
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::{PlanDump, PreparedExecutionPlan};

/// `inspect`: opsets, inputs, outputs, ops and weights, as text or JSON.
pub fn inspect(path: &Path, json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let model = Model::open(path)?;
    let report = InspectReport::new(&model);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

/// `plan`: the model resolved for these CPU features (`--isa`) and
/// its plan's tasks, requirements and steps, as text or JSON.
pub fn plan(path: &Path, json: bool, cpu: CpuFeatures) -> Result<(), Box<dyn std::error::Error>> {
    let model = Model::open(path)?;
    let resolved = ResolvedModel::resolve(
        model,
        &ResolveOptions {
            cpu,
            ..ResolveOptions::default()
        },
    )?;
    let plan = PreparedExecutionPlan::build(resolved)?;
    let dump = PlanDump::new(&plan);
    if json {
        println!("{}", serde_json::to_string_pretty(&dump)?);
    } else {
        print!("{}", dump.to_text());
    }
    Ok(())
}
