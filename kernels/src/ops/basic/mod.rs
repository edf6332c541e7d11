//! Elementwise, normalization, and shape/data-movement operators.
//!
//! Lookup and attribute parsing are cold path; each operator's `execute` is
//! hot path (no allocation: strides live in fixed arrays of
//! `MAX_RANK` entries).
//!
//! Files: `elementwise` (Add, Sub, Mul, Div, Sigmoid, Neg, Sqrt,
//! Reciprocal) and `pow` over `broadcast`; `softmax` (Softmax, LogSoftmax,
//! Hardmax); `norm` (LayerNormalization,
//! RMSNormalization, SimplifiedLayerNormalization); `gather`; `transpose`;
//! `slice`; `concat` (Concat, Split); `shape` (Reshape, Squeeze, Unsqueeze,
//! Identity); `cast`; `constant`. `common` holds attribute access and typed
//! tensor access, `real` the f32/f64 arithmetic trait, `truncate` the
//! float-to-integer conversion ONNX Runtime performs (Cast, Pow).

pub(crate) mod broadcast;
mod cast;
pub(crate) mod common;
mod concat;
mod constant;
pub(crate) mod elementwise;
mod gather;
pub(crate) mod norm;
mod pow;
pub(crate) mod real;
mod shape;
mod skip_norm;
mod slice;
mod softmax;
mod transpose;
mod truncate;

use elementwise::{BinaryKind, UnaryKind};
use norm::NormKind;
use shape::AxesKind;
use softmax::SoftmaxKind;

use crate::{KernelError, NodeSpec, Operator};

fn boxed<O: Operator + 'static>(
    op: Result<O, KernelError>,
) -> Result<Box<dyn Operator>, KernelError> {
    op.map(|o| Box::new(o) as Box<dyn Operator>)
}

/// The operator for `spec` if this family implements its op type (the
/// domain is `""` for ai.onnx; SimplifiedLayerNormalization is also
/// accepted in `com.microsoft`).
pub fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    Some(match (spec.domain, spec.op_type) {
        ("", "Add") => boxed(elementwise::Binary::new(spec, BinaryKind::Add)),
        ("", "Sub") => boxed(elementwise::Binary::new(spec, BinaryKind::Sub)),
        ("", "Mul") => boxed(elementwise::Binary::new(spec, BinaryKind::Mul)),
        ("", "Div") => boxed(elementwise::Binary::new(spec, BinaryKind::Div)),
        ("", "Pow") => boxed(pow::Pow::new(spec)),
        ("", "Sigmoid") => boxed(elementwise::Unary::new(spec, UnaryKind::Sigmoid)),
        ("", "Neg") => boxed(elementwise::Unary::new(spec, UnaryKind::Neg)),
        ("", "Sqrt") => boxed(elementwise::Unary::new(spec, UnaryKind::Sqrt)),
        ("", "Reciprocal") => boxed(elementwise::Unary::new(spec, UnaryKind::Reciprocal)),
        ("", "Softmax") => boxed(softmax::Softmax::new(spec, SoftmaxKind::Softmax)),
        ("", "LogSoftmax") => boxed(softmax::Softmax::new(spec, SoftmaxKind::LogSoftmax)),
        ("", "Hardmax") => boxed(softmax::Softmax::new(spec, SoftmaxKind::Hardmax)),
        ("", "LayerNormalization") => boxed(norm::Norm::new(spec, NormKind::Layer)),
        ("", "RMSNormalization") => boxed(norm::Norm::new(spec, NormKind::Rms)),
        ("" | "com.microsoft", "SimplifiedLayerNormalization") => {
            boxed(norm::Norm::new(spec, NormKind::SimplifiedLayer))
        }
        ("com.microsoft", "SkipLayerNormalization") => boxed(skip_norm::SkipNorm::new(spec, false)),
        ("com.microsoft", "SkipSimplifiedLayerNormalization") => {
            boxed(skip_norm::SkipNorm::new(spec, true))
        }
        ("", "Gather") => boxed(gather::Gather::new(spec)),
        ("", "Transpose") => boxed(transpose::Transpose::new(spec)),
        ("", "Reshape") => boxed(shape::Reshape::new(spec)),
        ("", "Squeeze") => boxed(shape::Axes::new(spec, AxesKind::Squeeze)),
        ("", "Unsqueeze") => boxed(shape::Axes::new(spec, AxesKind::Unsqueeze)),
        ("", "Identity") => boxed(shape::Identity::new(spec)),
        ("", "Split") => boxed(concat::Split::new(spec)),
        ("", "Concat") => boxed(concat::Concat::new(spec)),
        ("", "Slice") => boxed(slice::Slice::new(spec)),
        ("", "Cast") => boxed(cast::Cast::new(spec)),
        ("", "Constant") => boxed(constant::Constant::new(spec)),
        _ => return None,
    })
}
