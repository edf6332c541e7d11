//! `com.microsoft` FusedMatMul, which ONNX Runtime's optimizer writes for
//! a MatMul with a scaled or transposed operand: `Y = alpha *
//! matmul(op(A), op(B))`, `op` transposing the last two axes when `transA`
//! / `transB` (cold path: attributes and shapes; hot path: `execute`, f32
//! on the GEMM kernels with transposed operands copied first).

use super::isa::Isa;
use super::matmul::execute_f32;
use super::shape::matmul_output_shape;
use super::{check_arity, f32_input};
use crate::ops::basic::common::Attrs;
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, TensorData,
};

const OP: &str = "FusedMatMul";

/// FusedMatMul.
#[derive(Debug)]
pub(crate) struct FusedMatMul {
    isa: Isa,
    alpha: f32,
    trans_a: bool,
    trans_b: bool,
}

impl FusedMatMul {
    pub(crate) fn create(spec: &NodeSpec<'_>, isa: Isa) -> Result<Box<dyn Operator>, KernelError> {
        check_arity(spec, OP, 2..=2)?;
        let attrs = Attrs::new(
            spec,
            OP,
            &["alpha", "transA", "transB", "transBatchA", "transBatchB"],
        )?;
        for name in ["transBatchA", "transBatchB"] {
            if attrs.int_or(name, 0)? != 0 {
                return Err(attrs.error(name, "only 0 is supported"));
            }
        }
        Ok(Box::new(Self {
            isa,
            alpha: attrs.float("alpha")?.unwrap_or(1.0),
            trans_a: attrs.int_or("transA", 0)? != 0,
            trans_b: attrs.int_or("transB", 0)? != 0,
        }))
    }
}

/// `shape` with its last two axes swapped when `trans` (a 1-D shape is
/// left as is).
fn swapped(shape: &[usize], trans: bool) -> Vec<usize> {
    let mut s = shape.to_vec();
    let r = s.len();
    if trans && r >= 2 {
        s.swap(r - 1, r - 2);
    }
    s
}

/// `t` with its last two axes swapped.
fn transpose_last(t: &Tensor) -> Result<Tensor, KernelError> {
    let v = f32_input(t, OP)?;
    let s = t.shape();
    let r = s.len();
    if r < 2 {
        return Ok(t.clone());
    }
    let (rows, cols) = (s[r - 2], s[r - 1]);
    let mut out = crate::scratch::filled(OP, v.len(), 0f32)?;
    for (src, dst) in v
        .chunks_exact((rows * cols).max(1))
        .zip(out.chunks_exact_mut((rows * cols).max(1)))
    {
        for i in 0..rows {
            for j in 0..cols {
                dst[j * rows + i] = src[i * cols + j];
            }
        }
    }
    Tensor::new(swapped(s, true), TensorData::F32(out))
}

impl Operator for FusedMatMul {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let [Some(a), Some(b)] = inputs else {
            return Err(KernelError::Shape(format!("{OP}: needs inputs A and B")));
        };
        for t in [a.dtype, b.dtype] {
            if t != ElementType::F32 {
                return Err(KernelError::UnsupportedType { op: OP, dtype: t });
            }
        }
        let shape = matmul_output_shape(
            &swapped(a.shape, self.trans_a),
            &swapped(b.shape, self.trans_b),
        )?;
        Ok(vec![OutputInfo {
            dtype: ElementType::F32,
            shape,
        }])
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        inputs
            .iter()
            .zip([self.trans_a, self.trans_b])
            .filter(|(_, t)| *t)
            .filter_map(|(i, _)| i.as_ref())
            .map(|i| {
                crate::element_count(i.shape)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(4)
            })
            .fold(0, usize::saturating_add)
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let [Some(a), Some(b)] = inputs else {
            return Err(KernelError::Shape(format!("{OP}: needs inputs A and B")));
        };
        let ta = self.trans_a.then(|| transpose_last(a)).transpose()?;
        let tb = self.trans_b.then(|| transpose_last(b)).transpose()?;
        execute_f32(
            self.isa,
            ta.as_ref().unwrap_or(a),
            tb.as_ref().unwrap_or(b),
            outputs,
            par,
        )?;
        if self.alpha != 1.0 {
            let y = outputs
                .first_mut()
                .and_then(|y| y.as_f32_mut())
                .ok_or_else(|| KernelError::Shape(format!("{OP}: missing f32 output")))?;
            y.iter_mut().for_each(|v| *v *= self.alpha);
        }
        Ok(())
    }
}
