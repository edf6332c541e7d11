//! The integer matrix-product operators on [`super::qgemm`]: MatMulInteger,
//! QLinearMatMul, and `com.microsoft` MatMulIntegerToFloat,
//! DynamicQuantizeMatMul and QGemm (cold path: inputs, shapes, the prepack
//! offer; hot path: `execute`).
//!
//! Each is one product `(A - za)(B - zb)` with its own output stage: int32,
//! float (`* scale_a * scale_b[n] + bias`) or requantized 8 bits
//! (`multiplier[n] = scale_a * scale_b[n] / scale_y`, ONNX Runtime's order
//! of float operations). A constant 2-D `B` with a constant zero point is
//! packed once ([`QPrepack`]).

use super::common::QInt;
use super::operand::{
    BInput, QPrepack, bytes_of, check_columns, for_each_product, is_8bit, is_scale_type, scales,
    zero_points,
};
use super::qgemm::sink::{BiasI32, F32Sink, I32Sink, RequantSink, Shared};
use super::qgemm::{self, QIsa};
use super::quantize::{dynamic_params, min_max, quantize_u8};
use crate::ops::basic::common::{Attrs, input, optional, output, required, typed, typed_mut};
use crate::ops::linalg::shape::matmul_output_shape;
use crate::{
    CpuFeatures, ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight,
    ParallelFor, Prepack, Tensor,
};

/// Which operator, with the positions of its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// MatMulInteger: `A, B, a_zero_point?, b_zero_point?` -> int32.
    Integer,
    /// QLinearMatMul: `a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp`.
    QLinear,
    /// MatMulIntegerToFloat: `A, B, a_scale, b_scale, a_zp?, b_zp?, bias?`.
    ToFloat,
    /// DynamicQuantizeMatMul: `A (f32), B, b_scale, b_zp?, bias?`.
    Dynamic,
    /// QGemm: `A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?`.
    Gemm,
}

/// Input positions (`usize::MAX`: none).
#[derive(Debug, Clone, Copy)]
struct Slots {
    a: usize,
    sa: usize,
    za: usize,
    b: usize,
    sb: usize,
    zb: usize,
    sy: usize,
    zy: usize,
    /// Float bias `[N]` (ToFloat, Dynamic) or int32 `C` (Gemm).
    bias: usize,
}

const NONE: usize = usize::MAX;

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Integer => "MatMulInteger",
            Self::QLinear => "QLinearMatMul",
            Self::ToFloat => "MatMulIntegerToFloat",
            Self::Dynamic => "DynamicQuantizeMatMul",
            Self::Gemm => "QGemm",
        }
    }

    fn slots(self) -> Slots {
        let s = |a, sa, za, b, sb, zb, sy, zy, bias| Slots {
            a,
            sa,
            za,
            b,
            sb,
            zb,
            sy,
            zy,
            bias,
        };
        match self {
            Self::Integer => s(0, NONE, 2, 1, NONE, 3, NONE, NONE, NONE),
            Self::QLinear => s(0, 1, 2, 3, 4, 5, 6, 7, NONE),
            Self::ToFloat => s(0, 2, 4, 1, 3, 5, NONE, NONE, 6),
            Self::Dynamic => s(0, NONE, NONE, 1, 2, 3, NONE, NONE, 4),
            Self::Gemm => s(0, 1, 2, 3, 4, 5, 7, 8, 6),
        }
    }

    /// Inputs the node may have.
    fn arity(self) -> std::ops::RangeInclusive<usize> {
        match self {
            Self::Integer => 2..=4,
            Self::QLinear => 8..=8,
            Self::ToFloat => 4..=7,
            Self::Dynamic => 3..=5,
            Self::Gemm => 6..=9,
        }
    }
}

/// One of the integer matrix-product operators.
#[derive(Debug)]
pub(crate) struct QMatMul {
    kind: Kind,
    slots: Slots,
    isa: QIsa,
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
}

impl QMatMul {
    fn create(spec: &NodeSpec<'_>, kind: Kind, cpu: CpuFeatures) -> Result<Self, KernelError> {
        let op = kind.name();
        let allowed: &[&'static str] = match kind {
            Kind::Gemm => &["alpha", "transA", "transB"],
            _ => &[],
        };
        let attrs = Attrs::new(spec, op, allowed)?;
        if !kind.arity().contains(&spec.inputs) || spec.outputs != 1 {
            return Err(KernelError::Shape(format!(
                "{op}: takes {:?} inputs and 1 output, got {} and {}",
                kind.arity(),
                spec.inputs,
                spec.outputs
            )));
        }
        Ok(Self {
            kind,
            slots: kind.slots(),
            isa: QIsa::select(cpu),
            trans_a: attrs.int_or("transA", 0)? != 0,
            trans_b: attrs.int_or("transB", 0)? != 0,
            alpha: attrs.float("alpha")?.unwrap_or(1.0),
        })
    }

    fn op(&self) -> &'static str {
        self.kind.name()
    }

    /// The logical `B` shape (`[K, N]` for QGemm's transposed `B`).
    fn output_shape(&self, a: &[usize], b: &[usize]) -> Result<Vec<usize>, KernelError> {
        let op = self.op();
        if self.kind != Kind::Gemm {
            return matmul_output_shape(a, b);
        }
        let (&[ar, ac], &[br, bc]) = (a, b) else {
            return Err(KernelError::Shape(format!(
                "{op}: A {a:?} and B {b:?} must be 2-D"
            )));
        };
        let (m, ka) = if self.trans_a { (ac, ar) } else { (ar, ac) };
        let (kb, n) = if self.trans_b { (bc, br) } else { (br, bc) };
        if ka != kb {
            return Err(KernelError::Shape(format!(
                "{op}: A {a:?} and B {b:?} disagree on K"
            )));
        }
        Ok(vec![m, n])
    }

    fn out_type(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<ElementType, KernelError> {
        let op = self.op();
        Ok(match self.kind {
            Kind::Integer => ElementType::I32,
            Kind::ToFloat | Kind::Dynamic => ElementType::F32,
            Kind::QLinear => required(op, inputs, self.slots.zy)?.dtype,
            Kind::Gemm => match optional(inputs, self.slots.zy) {
                Some(z) => z.dtype,
                None if optional(inputs, self.slots.sy).is_some() => ElementType::U8,
                None => ElementType::F32,
            },
        })
    }
}

/// The operator for `spec` if it is one of this file's.
pub(crate) fn lookup(
    spec: &NodeSpec<'_>,
    cpu: CpuFeatures,
) -> Option<Result<Box<dyn Operator>, KernelError>> {
    let kind = match (spec.domain, spec.op_type) {
        ("", "MatMulInteger") => Kind::Integer,
        ("", "QLinearMatMul") => Kind::QLinear,
        ("com.microsoft", "MatMulIntegerToFloat") => Kind::ToFloat,
        ("com.microsoft", "DynamicQuantizeMatMul") => Kind::Dynamic,
        ("com.microsoft", "QGemm") => Kind::Gemm,
        _ => return None,
    };
    Some(QMatMul::create(spec, kind, cpu).map(|o| Box::new(o) as Box<dyn Operator>))
}

/// Input `i` at execute time, if the node has it.
fn opt<'a>(inputs: &[Option<&'a Tensor>], i: usize) -> Option<&'a Tensor> {
    inputs.get(i).copied().flatten()
}

impl Operator for QMatMul {
    fn name(&self) -> &'static str {
        self.op()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.op();
        let s = self.slots;
        let a = required(op, inputs, s.a)?;
        let b = required(op, inputs, s.b)?;
        let a_ok = if self.kind == Kind::Dynamic {
            a.dtype == ElementType::F32
        } else {
            is_8bit(a.dtype)
        };
        for (t, ok) in [(a.dtype, a_ok), (b.dtype, is_8bit(b.dtype))] {
            if !ok {
                return Err(KernelError::UnsupportedType { op, dtype: t });
            }
        }
        for (i, want) in [(s.za, a.dtype), (s.zb, b.dtype)] {
            if let Some(z) = optional(inputs, i)
                && z.dtype != want
            {
                return Err(KernelError::Shape(format!(
                    "{op}: a zero point of type {} for an operand of type {want}",
                    z.dtype
                )));
            }
        }
        for i in [s.sa, s.sb, s.sy] {
            if let Some(t) = optional(inputs, i)
                && !is_scale_type(t.dtype)
            {
                return Err(KernelError::UnsupportedType { op, dtype: t.dtype });
            }
        }
        let dtype = self.out_type(inputs)?;
        if !matches!(dtype, ElementType::I32 | ElementType::F32) && !is_8bit(dtype) {
            return Err(KernelError::UnsupportedType { op, dtype });
        }
        let shape = self.output_shape(a.shape, b.shape)?;
        let n = shape.last().copied().unwrap_or(1);
        if let Some(sb) = optional(inputs, s.sb) {
            check_columns(
                op,
                "b_scale",
                crate::element_count(sb.shape).unwrap_or(0),
                n,
            )?;
        }
        Ok(vec![OutputInfo { dtype, shape }])
    }

    fn prepack(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        cpu: CpuFeatures,
    ) -> Option<Box<dyn Prepack>> {
        let s = self.slots;
        let a = optional(inputs, s.a)?;
        let b = optional(inputs, s.b)?;
        let zb = optional(inputs, s.zb);
        let packable = b.constant
            && b.shape.len() == 2
            && is_8bit(b.dtype)
            && zb.is_none_or(|z| z.constant)
            && self.infer(inputs).is_ok();
        let a_signed = a.dtype == ElementType::I8;
        packable.then(|| {
            Box::new(QPrepack::new(
                self.op(),
                s.b,
                zb.map(|_| s.zb),
                b.dtype == ElementType::I8,
                a_signed,
                self.trans_b,
                QIsa::select(cpu),
            )) as Box<dyn Prepack>
        })
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let a = optional(inputs, self.slots.a);
        match (self.kind, a) {
            (Kind::Dynamic, Some(a)) => crate::element_count(a.shape).unwrap_or(usize::MAX),
            (Kind::Gemm, Some(a)) if self.trans_a => {
                crate::element_count(a.shape).unwrap_or(usize::MAX)
            }
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
        let op = self.op();
        let s = self.slots;
        let a_in = input(op, inputs, s.a)?;
        // DynamicQuantizeMatMul quantizes A first; QGemm's transA copies it.
        let scratch: Option<(Tensor, f32, i32)> = match self.kind {
            Kind::Dynamic => {
                let x = typed::<f32>(op, a_in)?;
                let (lo, hi) = min_max(x, par);
                let (scale, zp) = dynamic_params(lo, hi);
                let mut q = crate::scratch::filled(op, x.len(), 0u8)?;
                quantize_u8(x, scale, zp, &mut q, par);
                Some((
                    Tensor::new(a_in.shape().to_vec(), crate::TensorData::U8(q))?,
                    scale,
                    zp as i32,
                ))
            }
            Kind::Gemm if self.trans_a => Some((transpose_2d(op, a_in)?, 0.0, 0)),
            _ => None,
        };
        let a = scratch.as_ref().map_or(a_in, |t| &t.0);
        let za = match (&scratch, self.kind) {
            (Some((_, _, zp)), Kind::Dynamic) => vec![*zp],
            _ => zero_points(op, opt(inputs, s.za))?,
        };
        let a_scale = match (&scratch, self.kind) {
            (Some((_, sc, _)), Kind::Dynamic) => *sc,
            _ => opt(inputs, s.sa)
                .map(|t| scales(op, t))
                .transpose()?
                .map_or(1.0, |v| v[0]),
        };
        let b = match packed {
            Some(p) => BInput::Packed(p),
            None => BInput::Tensor {
                b: input(op, inputs, s.b)?,
                zero: zero_points(op, opt(inputs, s.zb))?,
                trans: self.trans_b,
            },
        };
        let b_scale = opt(inputs, s.sb).map(|t| scales(op, t)).transpose()?;
        let b_scale = b_scale.as_deref();
        let alpha = if self.kind == Kind::Gemm {
            self.alpha
        } else {
            1.0
        };
        let products: Vec<f32> = match b_scale {
            Some(sb) => sb.iter().map(|&v| alpha * a_scale * v).collect(),
            None => vec![alpha * a_scale],
        };
        let y = output(op, outputs, 0)?;
        let n = y.shape().last().copied().unwrap_or(1);
        check_columns(op, "b_scale", products.len(), n)?;
        let c_bias = match (self.kind, opt(inputs, s.bias)) {
            (Kind::Gemm, Some(c)) => Some(gemm_bias(op, c, y.shape())?),
            _ => None,
        };
        let f_bias = match self.kind {
            Kind::ToFloat | Kind::Dynamic => opt(inputs, s.bias)
                .map(|t| typed::<f32>(op, t))
                .transpose()?,
            _ => None,
        };
        if let Some(bias) = f_bias {
            check_columns(op, "bias", bias.len(), n)?;
        }
        let isa = self.isa;
        match y.dtype() {
            ElementType::I32 => {
                let y = typed_mut::<i32>(op, y)?;
                for_each_product(op, a, &za, &b, isa, &mut |p| {
                    let sink = I32Sink(Shared::new(&mut y[p.offset..], p.b.n, 1));
                    qgemm::run(&p.a, &p.b, &sink, par);
                })
            }
            ElementType::F32 => {
                let y = typed_mut::<f32>(op, y)?;
                for_each_product(op, a, &za, &b, isa, &mut |p| {
                    let sink = F32Sink {
                        out: Shared::new(&mut y[p.offset..], p.b.n, 1),
                        scales: &products,
                        bias: f_bias,
                        c_bias,
                    };
                    qgemm::run(&p.a, &p.b, &sink, par);
                })
            }
            ElementType::U8 => self.requantize::<u8>(inputs, a, &za, &b, &products, c_bias, y, par),
            ElementType::I8 => self.requantize::<i8>(inputs, a, &za, &b, &products, c_bias, y, par),
            dtype => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}

impl QMatMul {
    #[allow(clippy::too_many_arguments)]
    fn requantize<T: QInt>(
        &self,
        inputs: &[Option<&Tensor>],
        a: &Tensor,
        za: &[i32],
        b: &BInput<'_>,
        products: &[f32],
        bias: Option<BiasI32<'_>>,
        y: &mut Tensor,
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.op();
        let s = self.slots;
        let y_scale = scales(op, input(op, inputs, s.sy)?)?[0];
        let zy = zero_points(op, opt(inputs, s.zy))?[0];
        let multipliers: Vec<f32> = products.iter().map(|&p| p / y_scale).collect();
        let y = typed_mut::<T>(op, y)?;
        for_each_product(op, a, za, b, self.isa, &mut |p| {
            let sink = RequantSink {
                out: Shared::new(&mut y[p.offset..], p.b.n, 1),
                multipliers: &multipliers,
                by_row: false,
                bias,
                zero: zy,
            };
            qgemm::run(&p.a, &p.b, &sink, par);
        })
    }
}

/// QGemm's int32 `C`, broadcast to the output `[M, N]`.
fn gemm_bias<'a>(
    op: &'static str,
    c: &'a Tensor,
    out: &[usize],
) -> Result<BiasI32<'a>, KernelError> {
    let data = typed::<i32>(op, c)?;
    let (m, n) = match *out {
        [m, n] => (m, n),
        _ => {
            return Err(KernelError::Shape(format!(
                "{op}: output {out:?} is not 2-D"
            )));
        }
    };
    let (rows, cols) = match *c.shape() {
        [] => (1, 1),
        [c] => (1, c),
        [r, c] => (r, c),
        _ => (0, 0),
    };
    let fits = (rows == 1 || rows == m) && (cols == 1 || cols == n) && data.len() == rows * cols;
    if !fits {
        return Err(KernelError::Shape(format!(
            "{op}: C {:?} does not broadcast to the output [{m}, {n}]",
            c.shape()
        )));
    }
    Ok(BiasI32 {
        data,
        row_stride: if rows == 1 { 0 } else { cols },
        col_stride: usize::from(cols != 1),
    })
}

/// A 2-D 8-bit tensor transposed (QGemm's `transA`).
fn transpose_2d(op: &'static str, t: &Tensor) -> Result<Tensor, KernelError> {
    let &[r, c] = t.shape() else {
        return Err(KernelError::Shape(format!(
            "{op}: A {:?} is not 2-D",
            t.shape()
        )));
    };
    let (bytes, signed) = bytes_of(op, t)?;
    let mut out = crate::scratch::filled(op, r * c, 0u8)?;
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = bytes[i * c + j];
        }
    }
    let data = if signed {
        crate::TensorData::I8(out.into_iter().map(|v| v as i8).collect())
    } else {
        crate::TensorData::U8(out)
    };
    Tensor::new(vec![c, r], data)
}
