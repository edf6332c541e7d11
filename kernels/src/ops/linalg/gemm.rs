//! The Gemm operator (cold path: attributes, shapes, prepack offer; hot
//! path: `execute`). f32 runs on the GEMM kernels with `beta * C` written
//! into `Y` first; other float types run the reference loops.

use super::isa::Isa;
use super::reference::{GemmParams, c_index, gemm_dims};
use super::sgemm::{self, BSrc, Problem};
use super::{
    F32PanelPrepack, check_arity, check_attributes, f32_input, f32_panels, output_f32, reference,
};
use crate::{
    CpuFeatures, ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight,
    ParallelFor, Prepack, Tensor,
};

const OP: &str = "Gemm";

/// `Y = alpha * A' * B' + beta * C`.
#[derive(Debug)]
pub(crate) struct Gemm {
    p: GemmParams,
    /// Kernel family for unpacked f32 inputs.
    isa: Isa,
}

impl Gemm {
    pub(crate) fn create(spec: &NodeSpec<'_>, isa: Isa) -> Result<Box<dyn Operator>, KernelError> {
        check_arity(spec, OP, 2..=3)?;
        let allowed: &[&str] = if spec.opset < 7 {
            &["alpha", "beta", "transA", "transB", "broadcast"]
        } else {
            &["alpha", "beta", "transA", "transB"]
        };
        check_attributes(spec, OP, allowed)?;
        let at = spec.attributes;
        let flag = |name: &'static str| -> Result<bool, KernelError> {
            match at.int(name)?.unwrap_or(0) {
                0 => Ok(false),
                1 => Ok(true),
                v => Err(KernelError::Attribute {
                    op: OP,
                    name,
                    detail: format!("must be 0 or 1, got {v}"),
                }),
            }
        };
        // Legacy `broadcast` (opset < 7) only allowed a broadcast C, which
        // every opset now allows; its declared type is still checked.
        at.int("broadcast")?;
        let p = GemmParams {
            alpha: at.float("alpha")?.unwrap_or(1.0),
            beta: at.float("beta")?.unwrap_or(1.0),
            trans_a: flag("transA")?,
            trans_b: flag("transB")?,
        };
        Ok(Box::new(Self { p, isa }))
    }
}

impl Operator for Gemm {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let (Some(Some(a)), Some(Some(b))) = (inputs.first(), inputs.get(1)) else {
            return Err(KernelError::Shape("Gemm: needs inputs A and B".into()));
        };
        let c = inputs.get(2).copied().flatten();
        if b.dtype != a.dtype || c.is_some_and(|c| c.dtype != a.dtype) {
            return Err(KernelError::Shape("Gemm: operand types differ".into()));
        }
        if !matches!(
            a.dtype,
            ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16
        ) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: a.dtype,
            });
        }
        let (m, _, n) = gemm_dims(a.shape, b.shape, c.map(|c| c.shape), &self.p)?;
        Ok(vec![OutputInfo {
            dtype: a.dtype,
            shape: vec![m, n],
        }])
    }

    fn prepack(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        cpu: CpuFeatures,
    ) -> Option<Box<dyn Prepack>> {
        let (Some(Some(a)), Some(Some(b))) = (inputs.first(), inputs.get(1)) else {
            return None;
        };
        let packable = a.dtype == ElementType::F32
            && b.dtype == ElementType::F32
            && b.shape.len() == 2
            && b.constant;
        packable.then(|| {
            Box::new(F32PanelPrepack::new(
                "gemm",
                Some(self.p.trans_b),
                Isa::select(cpu),
            )) as Box<dyn Prepack>
        })
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let (Some(Some(a)), Some(Some(b))) = (inputs.first(), inputs.get(1)) else {
            return 0;
        };
        let Ok((m, k, n)) = gemm_dims(a.shape, b.shape, None, &self.p) else {
            return 0;
        };
        if a.dtype != ElementType::F32 {
            // The reference loops compute the product aside.
            return super::scratch_of(a.dtype, &[m, n]);
        }
        if self.p.trans_a {
            super::scratch_of(ElementType::F32, &[m, k])
        } else {
            0
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
            .ok_or_else(|| KernelError::Shape("Gemm: missing A".into()))?;
        let b = inputs.get(1).copied().flatten();
        let c = inputs.get(2).copied().flatten();
        if packed.is_none() && a.dtype() != ElementType::F32 {
            let b = b.ok_or_else(|| KernelError::Shape("Gemm: missing B".into()))?;
            return super::store_result(outputs, OP, reference::gemm(a, b, c, &self.p)?);
        }
        let av = f32_input(a, OP)?;
        let (isa, bsrc, m, k, n);
        match packed {
            Some(packed) => {
                let pw = f32_panels(packed, OP)?;
                if pw.trans_b != self.p.trans_b {
                    return Err(KernelError::Invalid {
                        op: OP,
                        detail: format!("packed weight `{}` has the other transB", packed.layout),
                    });
                }
                let b_shape = if pw.trans_b {
                    [pw.n, pw.k]
                } else {
                    [pw.k, pw.n]
                };
                (m, k, n) = gemm_dims(a.shape(), &b_shape, c.map(|c| c.shape()), &self.p)?;
                bsrc = BSrc::Packed(pw.panels);
                isa = pw.isa;
            }
            None => {
                let b = b.ok_or_else(|| KernelError::Shape("Gemm: missing B".into()))?;
                let bv = f32_input(b, OP)?;
                (m, k, n) = gemm_dims(a.shape(), b.shape(), c.map(|c| c.shape()), &self.p)?;
                bsrc = if self.p.trans_b {
                    BSrc::Cols { data: bv, ldb: k }
                } else {
                    BSrc::Rows { data: bv, ldb: n }
                };
                isa = self.isa;
            }
        }
        let y = output_f32(outputs, OP, m * n)?;
        let accumulate = match c {
            Some(c) if self.p.beta != 0.0 => {
                let cv = f32_input(c, OP)?;
                let cs = c.shape();
                let beta = self.p.beta;
                for (i, row) in y.chunks_exact_mut(n.max(1)).enumerate().take(m) {
                    for (j, v) in row.iter_mut().enumerate() {
                        *v = beta * cv[c_index(cs, i, j)];
                    }
                }
                true
            }
            _ => false,
        };
        // transA: a transposed copy (rare; allocates).
        let transposed;
        let a_rows: &[f32] = if self.p.trans_a {
            let mut t = crate::scratch::filled(OP, m * k, 0f32)?;
            for q in 0..k {
                for i in 0..m {
                    t[i * k + q] = av[q * m + i];
                }
            }
            transposed = t;
            &transposed
        } else {
            av
        };
        let prob = Problem {
            m,
            n,
            k,
            a: a_rows,
            lda: k,
            a_panels: false,
            b: bsrc,
            ldc: n,
            alpha: self.p.alpha,
            accumulate,
            batches: 1,
            offsets: &|_| (0, 0, 0),
        };
        sgemm::run(isa, &prob, y, par);
        Ok(())
    }
}
