//! The `com.microsoft` MatMulNBits operator (cold path: attributes, shapes,
//! prepack offer; hot path: `execute`). 4-bit weights only, computed in f32
//! unless the caller opted into int8 activations
//! ([`KernelOptions::int8_activations`]) and the node says
//! `accuracy_level = 4`; `g_idx` is rejected.

use super::isa::Isa;
use super::q4;
use super::reference::{
    NBitsParams, check_nbits_shapes, check_nbits_sources, scales_f32, scales_f32_of,
};
use super::{check_arity, check_attributes, f32_input, output_f32};
use crate::{
    CpuFeatures, DataRef, ElementType, InputInfo, KernelError, KernelOptions, NodeSpec, Operator,
    OutputInfo, PackedWeight, ParallelFor, Prepack, RowPacking, Tensor,
};

const OP: &str = "MatMulNBits";
/// Input positions.
const A: usize = 0;
const B: usize = 1;
const SCALES: usize = 2;
const ZERO_POINTS: usize = 3;
const G_IDX: usize = 4;
const BIAS: usize = 5;

/// `Y = A * dequantize(B) (+ bias)`.
#[derive(Debug)]
pub(crate) struct MatMulNBits {
    p: NBitsParams,
    /// Kernel family when the weights arrive unpacked.
    isa: Isa,
    /// Activations quantized to int8 (`accuracy_level = 4`, opted in).
    int8: bool,
}

impl MatMulNBits {
    pub(crate) fn create(
        spec: &NodeSpec<'_>,
        isa: Isa,
        options: KernelOptions,
    ) -> Result<Box<dyn Operator>, KernelError> {
        check_arity(spec, OP, 3..=6)?;
        check_attributes(
            spec,
            OP,
            &["K", "N", "bits", "block_size", "accuracy_level"],
        )?;
        let at = spec.attributes;
        let dim = |name: &'static str| -> Result<usize, KernelError> {
            let v = at.int(name)?.ok_or_else(|| KernelError::Attribute {
                op: OP,
                name,
                detail: "is required".into(),
            })?;
            usize::try_from(v).map_err(|_| KernelError::Attribute {
                op: OP,
                name,
                detail: format!("must be non-negative, got {v}"),
            })
        };
        let (k, n) = (dim("K")?, dim("N")?);
        // Level 4 is int8 activations, when the caller opted in; every
        // other level computes in f32.
        let int8 = options.int8_activations && at.int("accuracy_level")? == Some(4);
        let bits = at.int("bits")?.unwrap_or(4);
        if bits != 4 {
            return Err(KernelError::Attribute {
                op: OP,
                name: "bits",
                detail: format!("{bits} bits are not supported (only 4)"),
            });
        }
        let block_size = dim("block_size")?;
        if !(16..=128).contains(&block_size) || !block_size.is_power_of_two() {
            return Err(KernelError::Attribute {
                op: OP,
                name: "block_size",
                detail: format!("must be 16, 32, 64 or 128, got {block_size}"),
            });
        }
        // Every size derived from K and N (B's bytes, scales, zero points,
        // the packed tiles of up to 16 columns) is at most
        // `N rounded up to 16 × blocks × block_size`: checked once here, so
        // the plain arithmetic of shape inference and packing cannot wrap.
        let blocks = k.div_ceil(block_size);
        n.checked_next_multiple_of(16)
            .and_then(|n| n.checked_mul(blocks))
            .and_then(|v| v.checked_mul(block_size))
            .filter(|&v| isize::try_from(v).is_ok())
            .ok_or_else(|| KernelError::Overflow {
                op: OP,
                what: format!("the weight size of N = {n}, K = {k}, block_size = {block_size}"),
            })?;
        Ok(Box::new(Self {
            p: NBitsParams {
                k,
                n,
                bits: 4,
                block_size,
            },
            isa,
            int8,
        }))
    }

    /// `Y (+)= A * W` on a packed weight: int8 activations when enabled
    /// (at every `M`: the int8 kernels beat the f32 GEMM at M = 128 too,
    /// 2.3-2.8x in BENCHMARKS.md), else f32.
    fn product(
        &self,
        packed: &PackedWeight,
        a: &[f32],
        rows: usize,
        y: &mut [f32],
        accumulate: bool,
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let (isa, view) = q4::view(packed, &self.p)?;
        if self.int8 {
            let family = q4::int8::Int8Isa::for_layout(isa);
            q4::int8::matmul(family, &view, a, rows, y, accumulate, par)
        } else {
            q4::matmul(isa, &view, a, rows, y, accumulate, par);
            Ok(())
        }
    }

    fn check_a(&self, shape: &[usize]) -> Result<usize, KernelError> {
        match shape.split_last() {
            Some((&k, rest)) if k == self.p.k => Ok(crate::element_count(rest).unwrap_or(0)),
            _ => Err(KernelError::Shape(format!(
                "MatMulNBits: A {shape:?} must end in K = {}",
                self.p.k
            ))),
        }
    }
}

/// Packs B, scales and (optional) zero points into the 4-bit layout.
#[derive(Debug)]
struct NBitsPrepack {
    layout: String,
    consumes: Vec<usize>,
    p: NBitsParams,
    isa: Isa,
}

impl Prepack for NBitsPrepack {
    fn layout(&self) -> &str {
        &self.layout
    }

    fn consumes(&self) -> &[usize] {
        &self.consumes
    }

    fn prepare(
        &self,
        sources: &[&Tensor],
        par: &dyn ParallelFor,
    ) -> Result<PackedWeight, KernelError> {
        let shapes: Vec<_> = sources.iter().map(|t| (t.shape(), t.dtype())).collect();
        let pieces: Vec<_> = sources.iter().map(|t| t.data()).collect();
        let mut rows = self.rows(&shapes)?;
        rows.pack(&pieces, par)?;
        Box::new(rows).finish()
    }

    fn in_rows(
        &self,
        sources: &[(&[usize], ElementType)],
    ) -> Option<Result<Box<dyn RowPacking>, KernelError>> {
        Some(
            self.rows(sources)
                .map(|r| Box::new(r) as Box<dyn RowPacking>),
        )
    }

    fn packed_bytes(&self, shapes: &[&[usize]]) -> Option<usize> {
        (2..=3)
            .contains(&shapes.len())
            .then(|| q4::packed_object_bytes(&self.p, self.isa, shapes.len() == 3))
    }

    fn validate(&self, packed: &PackedWeight, shapes: &[&[usize]]) -> Result<(), KernelError> {
        crate::validate_common(&self.layout, self.packed_bytes(shapes), packed)?;
        q4::validate(packed, &self.p, self.isa)
    }
}

impl NBitsPrepack {
    /// The row packing of sources of these shapes and types (`B`,
    /// `scales` [, `zero_points`]), checked against the attributes.
    fn rows(&self, sources: &[(&[usize], ElementType)]) -> Result<NBitsRows, KernelError> {
        let (b, scales, zp) = consumed(sources)?;
        check_nbits_shapes(&self.p, b, scales, zp)?;
        Ok(NBitsRows(q4::Q4Rows::new(
            self.p,
            self.isa,
            self.layout.clone(),
            zp.is_some(),
        )))
    }
}

/// The consumed inputs in order: `B`, `scales` and the optional
/// `zero_points`.
fn consumed<T: Copy>(items: &[T]) -> Result<(T, T, Option<T>), KernelError> {
    match items {
        [b, s] => Ok((*b, *s, None)),
        [b, s, z] => Ok((*b, *s, Some(*z))),
        _ => Err(KernelError::Shape(
            "MatMulNBits: packing needs B, scales [, zero_points]".into(),
        )),
    }
}

/// [`q4::Q4Rows`] fed typed pieces: a row of a source is one column of
/// the product (`B`'s row, its scales and zero points).
#[derive(Debug)]
struct NBitsRows(q4::Q4Rows);

impl RowPacking for NBitsRows {
    fn rows(&self) -> usize {
        self.0.columns()
    }

    fn align(&self) -> usize {
        self.0.tile()
    }

    fn pack(&mut self, pieces: &[DataRef<'_>], par: &dyn ParallelFor) -> Result<(), KernelError> {
        let (b, scales, zp) = consumed(pieces)?;
        let DataRef::U8(b) = b else {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: b.dtype(),
            });
        };
        self.0.pack(b, &scales_f32_of(scales)?, zp, par)
    }

    fn finish(self: Box<Self>) -> Result<PackedWeight, KernelError> {
        self.0.finish()
    }
}

impl Operator for MatMulNBits {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let (Some(a), Some(b), Some(scales)) = (get(A), get(B), get(SCALES)) else {
            return Err(KernelError::Shape(
                "MatMulNBits: needs inputs A, B and scales".into(),
            ));
        };
        if get(G_IDX).is_some() {
            return Err(KernelError::Attribute {
                op: OP,
                name: "g_idx",
                detail: "the g_idx input is not supported".into(),
            });
        }
        if a.dtype != ElementType::F32 {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: a.dtype,
            });
        }
        self.check_a(a.shape)?;
        let count = |s: &[usize]| crate::element_count(s).unwrap_or(usize::MAX);
        let (p, blocks) = (self.p, self.p.blocks());
        if b.dtype != ElementType::U8
            || count(b.shape) != p.n * blocks * p.block_size / 2
            || b.shape.first() != Some(&p.n)
        {
            return Err(KernelError::Shape(format!(
                "MatMulNBits: B {:?} ({}) must be u8 [{}, {blocks}, {}]",
                b.shape,
                b.dtype,
                p.n,
                p.block_size / 2
            )));
        }
        if !matches!(scales.dtype, ElementType::F32 | ElementType::F16)
            || count(scales.shape) != p.n * blocks
        {
            return Err(KernelError::Shape(format!(
                "MatMulNBits: scales {:?} ({}) must be f32 with N * blocks = {} values",
                scales.shape,
                scales.dtype,
                p.n * blocks
            )));
        }
        if let Some(z) = get(ZERO_POINTS) {
            let want = match z.dtype {
                ElementType::U8 => p.n * blocks.div_ceil(2),
                ElementType::F32 | ElementType::F16 => p.n * blocks,
                dtype => return Err(KernelError::UnsupportedType { op: OP, dtype }),
            };
            if count(z.shape) != want {
                return Err(KernelError::Shape(format!(
                    "MatMulNBits: zero_points {:?} ({}) must hold {want} values",
                    z.shape, z.dtype
                )));
            }
        }
        if let Some(bias) = get(BIAS)
            && (bias.dtype != ElementType::F32 || count(bias.shape) != p.n)
        {
            return Err(KernelError::Shape(format!(
                "MatMulNBits: bias {:?} ({}) must be f32 [{}]",
                bias.shape, bias.dtype, p.n
            )));
        }
        let mut shape = a.shape.to_vec();
        *shape.last_mut().expect("A has rank >= 1") = p.n;
        Ok(vec![OutputInfo {
            dtype: ElementType::F32,
            shape,
        }])
    }

    fn prepack(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        cpu: CpuFeatures,
    ) -> Option<Box<dyn Prepack>> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let (b, scales, zp) = (get(B)?, get(SCALES)?, get(ZERO_POINTS));
        if !b.constant || !scales.constant || zp.is_some_and(|z| !z.constant) {
            return None;
        }
        let isa = Isa::select(cpu);
        let consumes = if zp.is_some() {
            vec![B, SCALES, ZERO_POINTS]
        } else {
            vec![B, SCALES]
        };
        Some(Box::new(NBitsPrepack {
            layout: q4::layout(self.p.block_size, zp.map(|z| z.dtype), isa),
            consumes,
            p: self.p,
            isa,
        }))
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let get = |i: usize| inputs.get(i).copied().flatten();
        // Quantized activations past the stack scratch.
        let int8 = match get(A) {
            Some(a) if self.int8 => {
                let rows = crate::element_count(a.shape.split_last().map_or(&[][..], |s| s.1))
                    .unwrap_or(usize::MAX);
                q4::int8::scratch_bytes(rows, self.p.blocks(), self.p.block_size)
            }
            _ => 0,
        };
        let (Some(b), Some(scales), zp) = (get(B), get(SCALES), get(ZERO_POINTS)) else {
            return int8;
        };
        if b.constant && scales.constant && zp.is_none_or(|z| z.constant) {
            return int8; // prepacked once, outside the run
        }
        // Packed at every run, from f32 scales.
        let scales_f32 = self.p.n.saturating_mul(self.p.blocks()).saturating_mul(4);
        q4::packed_bytes(&self.p, self.isa, zp.is_some())
            .saturating_add(scales_f32)
            .saturating_add(int8)
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let get = |i: usize| inputs.get(i).copied().flatten();
        let a = get(A).ok_or_else(|| KernelError::Shape("MatMulNBits: missing A".into()))?;
        if get(G_IDX).is_some() {
            return Err(KernelError::Attribute {
                op: OP,
                name: "g_idx",
                detail: "the g_idx input is not supported".into(),
            });
        }
        let av = f32_input(a, OP)?;
        let rows = self.check_a(a.shape())?;
        let n = self.p.n;
        let y = output_f32(outputs, OP, rows * n)?;
        let accumulate = match get(BIAS) {
            Some(bias) => {
                let bias = f32_input(bias, OP)?;
                if bias.len() != n {
                    return Err(KernelError::Shape(format!(
                        "MatMulNBits: bias must hold N = {n} values"
                    )));
                }
                for row in y.chunks_exact_mut(n.max(1)) {
                    row.copy_from_slice(bias);
                }
                true
            }
            None => false,
        };
        match packed {
            Some(packed) => self.product(packed, av, rows, y, accumulate, par)?,
            None => {
                // Weights that are not constants: pack for this call.
                let (Some(b), Some(scales)) = (get(B), get(SCALES)) else {
                    return Err(KernelError::Shape(
                        "MatMulNBits: missing B or scales".into(),
                    ));
                };
                let zp = get(ZERO_POINTS);
                check_nbits_sources(&self.p, b, scales, zp)?;
                let layout = q4::layout(self.p.block_size, zp.map(|z| z.dtype()), self.isa);
                let bytes = b.as_u8().expect("checked u8");
                let sc = scales_f32(scales)?;
                let packed = q4::pack(
                    &self.p,
                    self.isa,
                    layout,
                    bytes,
                    &sc,
                    zp.map(|z| z.data()),
                    par,
                )?;
                self.product(&packed, av, rows, y, accumulate, par)?;
            }
        }
        Ok(())
    }
}
