//! Operands of the integer products (cold path for shapes and packing, hot
//! path for reading): 8-bit tensors as bytes, zero points and scales, the
//! prepacked constant `B` ([`QPrepack`]) and the batch loop every
//! matrix-product operator shares ([`for_each_product`]).

use zerocopy::IntoBytes;

use super::qgemm::{self, AOperand, Arith, PackedB, QIsa, QMatrix, ZeroA};
use crate::ops::basic::common::typed;
use crate::ops::linalg::shape::matmul_dims;
use crate::{ElementType, KernelError, PackedWeight, Prepack, Tensor, TensorData};

/// The bytes of an 8-bit tensor and whether they are int8.
pub(crate) fn bytes_of<'a>(
    op: &'static str,
    t: &'a Tensor,
) -> Result<(&'a [u8], bool), KernelError> {
    match t.dtype() {
        ElementType::U8 => Ok((typed::<u8>(op, t)?, false)),
        ElementType::I8 => Ok((typed::<i8>(op, t)?.as_bytes(), true)),
        dtype => Err(KernelError::UnsupportedType { op, dtype }),
    }
}

/// Whether `t` is an 8-bit integer type.
pub(crate) fn is_8bit(t: ElementType) -> bool {
    matches!(t, ElementType::U8 | ElementType::I8)
}

/// Zero points (uint8 or int8, any shape) as i32; `[0]` when absent.
pub(crate) fn zero_points(op: &'static str, t: Option<&Tensor>) -> Result<Vec<i32>, KernelError> {
    let Some(t) = t else { return Ok(vec![0]) };
    let (b, signed) = bytes_of(op, t)?;
    if b.is_empty() {
        return Err(KernelError::Shape(format!("{op}: an empty zero point")));
    }
    Ok(b.iter()
        .map(|&v| if signed { v as i8 as i32 } else { v as i32 })
        .collect())
}

/// Scales (f32, f16 or bf16, any shape) as f32; an empty one is an error.
pub(crate) fn scales(op: &'static str, t: &Tensor) -> Result<Vec<f32>, KernelError> {
    let s: Vec<f32> = match t.dtype() {
        ElementType::F32 => typed::<f32>(op, t)?.to_vec(),
        ElementType::F16 => typed::<half::f16>(op, t)?
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        ElementType::BF16 => typed::<half::bf16>(op, t)?
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        dtype => return Err(KernelError::UnsupportedType { op, dtype }),
    };
    if s.is_empty() {
        return Err(KernelError::Shape(format!("{op}: an empty scale")));
    }
    Ok(s)
}

/// Whether `t` is a scale type.
pub(crate) fn is_scale_type(t: ElementType) -> bool {
    matches!(t, ElementType::F32 | ElementType::F16 | ElementType::BF16)
}

/// Checks that a per-tensor or per-column operand (scale or zero point of
/// `B`) has 1 or `n` values.
pub(crate) fn check_columns(
    op: &'static str,
    what: &str,
    len: usize,
    n: usize,
) -> Result<(), KernelError> {
    if len == 1 || len == n {
        Ok(())
    } else {
        Err(KernelError::Shape(format!(
            "{op}: {what} has {len} values; it must have 1 or one per column ({n})"
        )))
    }
}

/// Checks that `A`'s zero point has 1 value or one per row (`m`).
pub(crate) fn check_rows(op: &'static str, len: usize, m: usize) -> Result<(), KernelError> {
    if len == 1 || len == m {
        Ok(())
    } else {
        Err(KernelError::Shape(format!(
            "{op}: a_zero_point has {len} values; it must have 1 or one per row of A ({m})"
        )))
    }
}

/// The `B` operand of a product: packed ahead of the run, or a tensor.
pub(crate) enum BInput<'a> {
    /// Packed by [`QPrepack`].
    Packed(&'a PackedWeight),
    /// A tensor with its zero points (1, or one per column), `[.., K, N]`,
    /// or `[N, K]` when `trans`.
    Tensor {
        b: &'a Tensor,
        zero: Vec<i32>,
        trans: bool,
    },
}

/// One product of [`for_each_product`]: `A` rows against a packed `B`,
/// the result going to output elements `offset..offset + m * n`.
pub(crate) struct Product<'a> {
    pub(crate) a: AOperand<'a>,
    pub(crate) b: PackedB<'a>,
    pub(crate) offset: usize,
}

/// The view of a packed weight made by [`QPrepack`].
pub(crate) fn packed_view<'a>(
    op: &'static str,
    packed: &'a PackedWeight,
) -> Result<PackedB<'a>, KernelError> {
    let bad = || KernelError::Invalid {
        op,
        detail: format!(
            "packed weight `{}` is not an integer product's B for this CPU",
            packed.layout
        ),
    };
    let [meta, data] = packed.parts.as_slice() else {
        return Err(bad());
    };
    let (meta, data) = (
        meta.as_u64().ok_or_else(bad)?,
        data.as_u8().ok_or_else(bad)?,
    );
    PackedB::view(meta, data).ok_or_else(bad)
}

/// Calls `f` for each matrix product of `A (-) za` times `B`
/// (numpy.matmul batching; one product with the batch folded into the
/// rows when every batch shares one `B`). `za` holds 1 zero point or one
/// per row of each `A` matrix.
pub(crate) fn for_each_product(
    op: &'static str,
    a: &Tensor,
    za: &[i32],
    b: &BInput<'_>,
    isa: QIsa,
    f: &mut dyn FnMut(Product<'_>),
) -> Result<(), KernelError> {
    let (adata, a_signed) = bytes_of(op, a)?;
    let zero = |m: usize| -> Result<ZeroA<'_>, KernelError> {
        check_rows(op, za.len(), m)?;
        Ok(if za.len() == 1 {
            ZeroA::Scalar(za[0])
        } else {
            ZeroA::PerRow(za)
        })
    };
    let a_rows = |k: usize| -> Result<usize, KernelError> {
        match a.shape() {
            [] => Err(KernelError::Shape(format!(
                "{op}: A must have rank 1 or more"
            ))),
            s if s[s.len() - 1] != k => Err(KernelError::Shape(format!(
                "{op}: A {s:?} does not end in K = {k} of B"
            ))),
            s => Ok(crate::element_count(&s[..s.len() - 1]).unwrap_or(0)),
        }
    };
    match b {
        BInput::Packed(p) => {
            let pb = packed_view(op, p)?;
            let rows = a_rows(pb.k)?;
            let per_matrix = if a.shape().len() >= 2 {
                a.shape()[a.shape().len() - 2]
            } else {
                1
            };
            let a = AOperand {
                data: adata,
                signed: a_signed,
                m: rows,
                lda: pb.k,
                zero: zero(per_matrix)?,
            };
            f(Product {
                a,
                b: pb,
                offset: 0,
            });
        }
        BInput::Tensor { b, zero: zb, trans } => {
            let (bdata, b_signed) = bytes_of(op, b)?;
            let logical: Vec<usize> = if *trans {
                match b.shape() {
                    [n, k] => vec![*k, *n],
                    s => {
                        return Err(KernelError::Shape(format!(
                            "{op}: transposed B {s:?} must be 2-D"
                        )));
                    }
                }
            } else {
                b.shape().to_vec()
            };
            let d = matmul_dims(a.shape(), &logical)?;
            check_columns(op, "b_zero_point", zb.len(), d.n)?;
            let za = zero(d.m)?;
            let fold = d.batch.b_shared() && d.batch.a_identity();
            let (batches, rows) = if fold {
                (1, d.batch.count * d.m)
            } else {
                (d.batch.count, d.m)
            };
            for i in 0..batches {
                let (ia, ib) = if fold { (0, 0) } else { d.batch.offsets(i) };
                let bm = QMatrix {
                    data: &bdata[ib * d.k * d.n..],
                    signed: b_signed,
                    k: d.k,
                    n: d.n,
                    row_stride: if *trans { 1 } else { d.n },
                    col_stride: if *trans { d.k } else { 1 },
                    taps: 1,
                };
                let (meta, data) = qgemm::pack_b(
                    &bm,
                    zb,
                    isa,
                    isa.arith(a_signed, b_signed),
                    &crate::Sequential,
                );
                let pb = PackedB::view(&meta, &data).ok_or_else(|| KernelError::Invalid {
                    op,
                    detail: "packing B failed".into(),
                })?;
                let av = AOperand {
                    data: &adata[ia * d.m * d.k..],
                    signed: a_signed,
                    m: rows,
                    lda: d.k,
                    zero: za,
                };
                f(Product {
                    a: av,
                    b: pb,
                    offset: i * d.m * d.n,
                });
            }
        }
    }
    Ok(())
}

/// Packs a constant 2-D `B` (and its zero point, when the node has one)
/// for the integer products.
#[derive(Debug)]
pub(crate) struct QPrepack {
    op: &'static str,
    layout: String,
    consumes: Vec<usize>,
    isa: QIsa,
    arith: Arith,
    a_signed: bool,
    trans: bool,
}

impl QPrepack {
    /// The packing of input `b` (and zero point input `zb`) for an `A` of
    /// signedness `a_signed`, `B` transposed when `trans`.
    pub(crate) fn new(
        op: &'static str,
        b: usize,
        zb: Option<usize>,
        b_signed: bool,
        a_signed: bool,
        trans: bool,
        isa: QIsa,
    ) -> Self {
        let arith = isa.arith(a_signed, b_signed);
        Self {
            op,
            layout: format!(
                "qgemm-v{}-{}-{arith:?}-a{}-b{}-t{}",
                qgemm::VERSION,
                isa.name(),
                a_signed as u8,
                b_signed as u8,
                trans as u8
            ),
            consumes: std::iter::once(b).chain(zb).collect(),
            isa,
            arith,
            a_signed,
            trans,
        }
    }
}

impl Prepack for QPrepack {
    fn layout(&self) -> &str {
        &self.layout
    }

    fn consumes(&self) -> &[usize] {
        &self.consumes
    }

    fn prepare(
        &self,
        sources: &[&Tensor],
        par: &dyn crate::ParallelFor,
    ) -> Result<PackedWeight, KernelError> {
        let op = self.op;
        let b = sources
            .first()
            .ok_or_else(|| KernelError::Shape(format!("{op}: packing needs B")))?;
        let zero = zero_points(op, sources.get(1).copied())?;
        let (data, signed) = bytes_of(op, b)?;
        let &[r, c] = b.shape() else {
            return Err(KernelError::Shape(format!(
                "{op}: a packed B must be 2-D, got {:?}",
                b.shape()
            )));
        };
        let (k, n) = if self.trans { (c, r) } else { (r, c) };
        check_columns(op, "b_zero_point", zero.len(), n)?;
        let m = QMatrix {
            data,
            signed,
            k,
            n,
            row_stride: if self.trans { 1 } else { n },
            col_stride: if self.trans { k } else { 1 },
            taps: 1,
        };
        let (meta, bytes) = qgemm::pack_b(
            &m,
            &zero,
            self.isa,
            self.isa.arith(self.a_signed, signed),
            par,
        );
        Ok(PackedWeight {
            layout: self.layout.clone(),
            parts: vec![TensorData::U64(meta).into(), TensorData::U8(bytes).into()],
        })
    }

    fn packed_bytes(&self, shapes: &[&[usize]]) -> Option<usize> {
        let &[r, c] = *shapes.first()? else {
            return None;
        };
        let (k, n) = if self.trans { (c, r) } else { (r, c) };
        Some(qgemm::packed_bytes(k, n, self.isa, self.arith))
    }

    fn validate(&self, packed: &PackedWeight, shapes: &[&[usize]]) -> Result<(), KernelError> {
        crate::validate_common(&self.layout, self.packed_bytes(shapes), packed)?;
        packed_view(self.op, packed).map(|_| ())
    }
}
