//! Detection and classification post-processing: selection (TopK,
//! NonMaxSuppression), encoding (OneHot), region pooling (RoiAlign) and the
//! operators whose output lengths count input values (NonZero, Compress,
//! Unique, NonMaxSuppression).
//!
//! Shapes that follow values: `infer` returns
//! [`KernelError::ValueDependent`] when an input an output length counts is
//! not known, and the exact shapes when every such input has a value (the
//! runtime passes [`crate::InputInfo::known`] for every input at run time).
//! Each of these operators has one selection routine, which `infer` runs to
//! count and `execute` runs to write.
//!
//! Files: `topk` (TopK, OneHot), `roi_align` (RoiAlign), `nonzero`
//! (NonZero, Compress), `unique` (Unique), `nms` (NonMaxSuppression).

mod nms;
mod nonzero;
mod roi_align;
mod topk;
mod unique;

use crate::{InputInfo, KernelError, NodeSpec, Operator, Tensor};

fn boxed<O: Operator + 'static>(
    op: Result<O, KernelError>,
) -> Result<Box<dyn Operator>, KernelError> {
    op.map(|o| Box::new(o) as Box<dyn Operator>)
}

/// The value of an input an output length counts, or
/// [`KernelError::ValueDependent`] when it is not known.
fn counted<'a>(op: &'static str, info: InputInfo<'a>) -> Result<&'a Tensor, KernelError> {
    info.value.ok_or(KernelError::ValueDependent { op })
}

/// Checks the number of outputs a node asks for.
fn check_outputs(
    op: &'static str,
    spec: &NodeSpec<'_>,
    min: usize,
    max: usize,
) -> Result<(), KernelError> {
    if (min..=max).contains(&spec.outputs) {
        return Ok(());
    }
    Err(KernelError::Shape(format!(
        "{op}: {} outputs requested where it has {}",
        spec.outputs,
        if min == max {
            format!("{max}")
        } else {
            format!("{min} to {max}")
        }
    )))
}

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    if !spec.domain.is_empty() {
        return None;
    }
    Some(match spec.op_type {
        "TopK" => boxed(topk::TopK::new(spec)),
        "OneHot" => boxed(topk::OneHot::new(spec)),
        "RoiAlign" => boxed(roi_align::RoiAlign::new(spec)),
        "NonZero" => boxed(nonzero::NonZero::new(spec)),
        "Compress" => boxed(nonzero::Compress::new(spec)),
        "Unique" => boxed(unique::Unique::new(spec)),
        "NonMaxSuppression" => boxed(nms::Nms::new(spec)),
        _ => return None,
    })
}
