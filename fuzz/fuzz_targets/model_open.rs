//! `Model::open` on arbitrary bytes written as `model.onnx` in a scratch
//! folder; when it opens, inspection and resolution too. Resolution folds
//! at most 32 MiB (a constant `ConstantOfShape` can ask for any size): the
//! runtime must refuse more before allocating, below libFuzzer's
//! `-malloc_limit_mb`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_prepared::model::inspect::InspectReport;
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};

fuzz_target!(|data: &[u8]| {
    let dir = onnx_prepared_fuzz::scratch();
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, data).expect("write the model");
    let Ok(model) = Model::open(&path) else {
        return;
    };
    let _ = InspectReport::new(&model).to_text();
    let options = ResolveOptions {
        fold_limit: 32 << 20,
        ..ResolveOptions::default()
    };
    let _ = ResolvedModel::resolve(model, &options);
});
