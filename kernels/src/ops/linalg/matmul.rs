//! The MatMul operator (cold path: construction, shapes, prepack offer; hot
//! path: `execute`). f32 runs on the GEMM kernels (packed constant `B`, or
//! `B` read in place); other types run the reference loops.

use super::isa::Isa;
use super::sgemm::{self, BSrc, Problem};
use super::shape::{matmul_dims, matmul_output_shape};
use super::{
    F32PanelPrepack, check_arity, check_attributes, f32_input, f32_panels, output_f32, reference,
};
use crate::{
    CpuFeatures, ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight,
    ParallelFor, Prepack, Tensor,
};

const OP: &str = "MatMul";

/// `Y = numpy.matmul(A, B)`.
#[derive(Debug)]
pub(crate) struct MatMul {
    /// Kernel family for unpacked f32 inputs.
    isa: Isa,
}

impl MatMul {
    pub(crate) fn create(spec: &NodeSpec<'_>, isa: Isa) -> Result<Box<dyn Operator>, KernelError> {
        check_arity(spec, OP, 2..=2)?;
        check_attributes(spec, OP, &[])?;
        Ok(Box::new(Self { isa }))
    }
}

fn operands<T>(inputs: &[Option<T>]) -> Result<(&T, &T), KernelError> {
    match inputs {
        [Some(a), Some(b)] => Ok((a, b)),
        _ => Err(KernelError::Shape("MatMul: needs inputs A and B".into())),
    }
}

impl Operator for MatMul {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let (a, b) = operands(inputs)?;
        if a.dtype != b.dtype {
            return Err(KernelError::Shape(format!(
                "MatMul: A is {} but B is {}",
                a.dtype, b.dtype
            )));
        }
        if !super::matmul_type_supported(a.dtype) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: a.dtype,
            });
        }
        Ok(vec![OutputInfo {
            dtype: a.dtype,
            shape: matmul_output_shape(a.shape, b.shape)?,
        }])
    }

    fn prepack(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        cpu: CpuFeatures,
    ) -> Option<Box<dyn Prepack>> {
        let (a, b) = operands(inputs).ok()?;
        let packable = a.dtype == ElementType::F32
            && b.dtype == ElementType::F32
            && b.shape.len() == 2
            && b.constant
            && matmul_output_shape(a.shape, b.shape).is_ok();
        packable.then(|| {
            Box::new(F32PanelPrepack::new("matmul", None, Isa::select(cpu))) as Box<dyn Prepack>
        })
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let Ok((a, b)) = operands(inputs) else {
            return 0;
        };
        match (a.dtype, matmul_output_shape(a.shape, b.shape)) {
            // The reference loops compute the product aside.
            (dtype, Ok(shape)) if dtype != ElementType::F32 => super::scratch_of(dtype, &shape),
            _ => 0,
        }
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let a = inputs
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| KernelError::Shape("MatMul: missing A".into()))?;
        if let Some(packed) = packed {
            return execute_packed(a, packed, outputs, par);
        }
        let b = inputs
            .get(1)
            .copied()
            .flatten()
            .ok_or_else(|| KernelError::Shape("MatMul: missing B".into()))?;
        match (a.dtype(), b.dtype()) {
            (ElementType::F32, ElementType::F32) => execute_f32(self.isa, a, b, outputs, par),
            _ => super::store_result(outputs, OP, reference::matmul(a, b)?),
        }
    }
}

/// `A [..., M, K]` (or `[K]`) times packed `B [K, N]`: one GEMM with the batch
/// folded into `M`.
fn execute_packed(
    a: &Tensor,
    packed: &PackedWeight,
    outputs: &mut [Tensor],
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let p = f32_panels(packed, OP)?;
    let av = f32_input(a, OP)?;
    let (rows, ka) = match a.shape() {
        [] => {
            return Err(KernelError::Shape(
                "MatMul: A must have rank 1 or more".into(),
            ));
        }
        [k] => (1, *k),
        s => (
            crate::element_count(&s[..s.len() - 1]).unwrap_or(0),
            s[s.len() - 1],
        ),
    };
    if ka != p.k {
        return Err(KernelError::Shape(format!(
            "MatMul: A {:?} does not end in K = {} of the packed B",
            a.shape(),
            p.k
        )));
    }
    let y = output_f32(outputs, OP, rows * p.n)?;
    let prob = Problem {
        m: rows,
        n: p.n,
        k: p.k,
        a: av,
        lda: p.k,
        a_panels: false,
        b: BSrc::Packed(p.panels),
        ldc: p.n,
        alpha: 1.0,
        accumulate: false,
        batches: 1,
        offsets: &|_| (0, 0, 0),
    };
    sgemm::run(p.isa, &prob, y, par);
    Ok(())
}

/// Batched f32 product with `B` read in place.
pub(super) fn execute_f32(
    isa: Isa,
    a: &Tensor,
    b: &Tensor,
    outputs: &mut [Tensor],
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let d = matmul_dims(a.shape(), b.shape())?;
    let (m, k, n) = (d.m, d.k, d.n);
    let (av, bv) = (f32_input(a, OP)?, f32_input(b, OP)?);
    let y = output_f32(
        outputs,
        OP,
        crate::ops::basic::common::numel(&[d.batch.count, m, n]),
    )?;
    let batch = d.batch;
    let offsets = move |i: usize| {
        let (ia, ib) = batch.offsets(i);
        (ia * m * k, ib * k * n, i * m * n)
    };
    // One shared B and unbroadcast A: fold the batch into M.
    let fold = batch.b_shared() && batch.a_identity();
    let prob = Problem {
        m: if fold { batch.count * m } else { m },
        n,
        k,
        a: av,
        lda: k,
        a_panels: false,
        b: BSrc::Rows { data: bv, ldb: n },
        ldc: n,
        alpha: 1.0,
        accumulate: false,
        batches: if fold { 1 } else { batch.count },
        offsets: if fold { &|_| (0, 0, 0) } else { &offsets },
    };
    sgemm::run(isa, &prob, y, par);
    Ok(())
}
