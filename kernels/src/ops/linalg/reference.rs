//! Scalar reference implementations of the matrix products (cold path): the
//! oracle the fast kernels are tested against, and the execution path for
//! element types without a fast kernel. Floating-point sums of f32 operands
//! accumulate in f64; integer products wrap.

use half::{bf16, f16};

use super::shape::{matmul_dims, matmul_output_shape};
use crate::{DataRef, ElementType, KernelError, Tensor, TensorData};

/// Element arithmetic of the reference loops.
trait Elem: Copy {
    type Acc: Copy;
    fn zero() -> Self::Acc;
    fn mul_add(acc: Self::Acc, a: Self, b: Self) -> Self::Acc;
    fn finish(acc: Self::Acc) -> Self;
}

macro_rules! float_elem {
    ($t:ty, $acc:ty, $to:expr, $from:expr) => {
        impl Elem for $t {
            type Acc = $acc;
            fn zero() -> $acc {
                0.0
            }
            fn mul_add(acc: $acc, a: Self, b: Self) -> $acc {
                #[allow(clippy::redundant_closure_call)]
                let (a, b): ($acc, $acc) = ($to(a), $to(b));
                acc + a * b
            }
            fn finish(acc: $acc) -> Self {
                #[allow(clippy::redundant_closure_call)]
                $from(acc)
            }
        }
    };
}

float_elem!(f32, f64, |x: f32| x as f64, |x: f64| x as f32);
float_elem!(f64, f64, |x: f64| x, |x: f64| x);
float_elem!(f16, f32, |x: f16| x.to_f32(), f16::from_f32);
float_elem!(bf16, f32, |x: bf16| x.to_f32(), bf16::from_f32);

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            type Acc = $t;
            fn zero() -> $t {
                0
            }
            fn mul_add(acc: $t, a: Self, b: Self) -> $t {
                acc.wrapping_add(a.wrapping_mul(b))
            }
            fn finish(acc: $t) -> Self {
                acc
            }
        }
    )*};
}

int_elem!(i32, i64, u32, u64);

fn matmul_typed<T: Elem>(
    a: &[T],
    a_shape: &[usize],
    b: &[T],
    b_shape: &[usize],
) -> Result<Vec<T>, KernelError> {
    let d = matmul_dims(a_shape, b_shape)?;
    let (m, k, n) = (d.m, d.k, d.n);
    let mut out = crate::scratch::with_capacity(
        "MatMul",
        crate::ops::basic::common::numel(&[d.batch.count, m, n]),
    )?;
    for batch in 0..d.batch.count {
        let (ia, ib) = d.batch.offsets(batch);
        let a = &a[ia * m * k..][..m * k];
        let b = &b[ib * k * n..][..k * n];
        for i in 0..m {
            for j in 0..n {
                let mut acc = T::zero();
                for p in 0..k {
                    acc = T::mul_add(acc, a[i * k + p], b[p * n + j]);
                }
                out.push(T::finish(acc));
            }
        }
    }
    Ok(out)
}

/// `numpy.matmul(a, b)` for f32, f64, f16, bf16, i32, i64, u32 and u64.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor, KernelError> {
    let shape = matmul_output_shape(a.shape(), b.shape())?;
    let (sa, sb) = (a.shape(), b.shape());
    let data = match (a.data(), b.data()) {
        (DataRef::F32(x), DataRef::F32(y)) => TensorData::F32(matmul_typed(x, sa, y, sb)?),
        (DataRef::F64(x), DataRef::F64(y)) => TensorData::F64(matmul_typed(x, sa, y, sb)?),
        (DataRef::F16(x), DataRef::F16(y)) => TensorData::F16(matmul_typed(x, sa, y, sb)?),
        (DataRef::BF16(x), DataRef::BF16(y)) => TensorData::BF16(matmul_typed(x, sa, y, sb)?),
        (DataRef::I32(x), DataRef::I32(y)) => TensorData::I32(matmul_typed(x, sa, y, sb)?),
        (DataRef::I64(x), DataRef::I64(y)) => TensorData::I64(matmul_typed(x, sa, y, sb)?),
        (DataRef::U32(x), DataRef::U32(y)) => TensorData::U32(matmul_typed(x, sa, y, sb)?),
        (DataRef::U64(x), DataRef::U64(y)) => TensorData::U64(matmul_typed(x, sa, y, sb)?),
        (x, y) if x.dtype() != y.dtype() => {
            return Err(KernelError::Shape(format!(
                "MatMul: operand types differ ({} and {})",
                x.dtype(),
                y.dtype()
            )));
        }
        (x, _) => {
            return Err(KernelError::UnsupportedType {
                op: "MatMul",
                dtype: x.dtype(),
            });
        }
    };
    Tensor::new(shape, data)
}

/// Gemm attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmParams {
    /// Scale of `A * B`.
    pub alpha: f32,
    /// Scale of `C`; 0 ignores `C` (as ONNX Runtime does).
    pub beta: f32,
    /// `A` is stored `[K, M]`.
    pub trans_a: bool,
    /// `B` is stored `[N, K]`.
    pub trans_b: bool,
}

impl Default for GemmParams {
    fn default() -> Self {
        Self {
            alpha: 1.0,
            beta: 1.0,
            trans_a: false,
            trans_b: false,
        }
    }
}

/// `(M, K, N)` of a Gemm, checking `A`, `B` and (unidirectional broadcast) `C`.
pub(crate) fn gemm_dims(
    a: &[usize],
    b: &[usize],
    c: Option<&[usize]>,
    p: &GemmParams,
) -> Result<(usize, usize, usize), KernelError> {
    if a.len() != 2 || b.len() != 2 {
        return Err(KernelError::Shape(format!(
            "Gemm: A {a:?} and B {b:?} must be 2-D"
        )));
    }
    let (m, ka) = if p.trans_a {
        (a[1], a[0])
    } else {
        (a[0], a[1])
    };
    let (kb, n) = if p.trans_b {
        (b[1], b[0])
    } else {
        (b[0], b[1])
    };
    if ka != kb {
        return Err(KernelError::Shape(format!(
            "Gemm: A {a:?} and B {b:?} disagree on K (transA {}, transB {})",
            p.trans_a as u8, p.trans_b as u8
        )));
    }
    if let Some(c) = c {
        let ok = c.len() <= 2
            && c.iter()
                .rev()
                .zip([n, m])
                .all(|(&d, want)| d == want || d == 1);
        if !ok {
            return Err(KernelError::Shape(format!(
                "Gemm: C {c:?} does not broadcast to [{m}, {n}]"
            )));
        }
    }
    m.checked_mul(n).ok_or_else(|| KernelError::Overflow {
        op: "Gemm",
        what: format!("the output [{m}, {n}]"),
    })?;
    Ok((m, ka, n))
}

/// Index into `C` (shape `c`) for output element `(i, j)`.
pub(crate) fn c_index(c: &[usize], i: usize, j: usize) -> usize {
    match c {
        [] => 0,
        [cn] => {
            if *cn == 1 {
                0
            } else {
                j
            }
        }
        [cm, cn] => {
            let i = if *cm == 1 { 0 } else { i };
            let j = if *cn == 1 { 0 } else { j };
            i * cn + j
        }
        _ => 0,
    }
}

fn gemm_typed<T: Elem + Into<f64>>(
    a: &[T],
    b: &[T],
    c: Option<(&[T], &[usize])>,
    (m, k, n): (usize, usize, usize),
    p: &GemmParams,
    from: impl Fn(f64) -> T,
) -> Result<Vec<T>, KernelError> {
    let mut out = crate::scratch::with_capacity("Gemm", m * n)?;
    for i in 0..m {
        for j in 0..n {
            let mut acc = T::zero();
            for q in 0..k {
                let x = if p.trans_a {
                    a[q * m + i]
                } else {
                    a[i * k + q]
                };
                let y = if p.trans_b {
                    b[j * k + q]
                } else {
                    b[q * n + j]
                };
                acc = T::mul_add(acc, x, y);
            }
            let mut v = p.alpha as f64 * T::finish(acc).into();
            if let Some((cv, cs)) = c
                && p.beta != 0.0
            {
                v += p.beta as f64 * cv[c_index(cs, i, j)].into();
            }
            out.push(from(v));
        }
    }
    Ok(out)
}

/// `Y = alpha * A' * B' + beta * C` for f32, f64, f16 and bf16.
pub fn gemm(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    p: &GemmParams,
) -> Result<Tensor, KernelError> {
    let dims = gemm_dims(a.shape(), b.shape(), c.map(|c| c.shape()), p)?;
    let cs = c.map(|c| (c.data(), c.shape()));
    macro_rules! typed {
        ($av:ident, $variant:ident, $from:expr) => {{
            let DataRef::$variant(bv) = b.data() else {
                return Err(KernelError::Shape("Gemm: operand types differ".into()));
            };
            let c = match cs {
                Some((DataRef::$variant(v), s)) => Some((v, s)),
                Some(_) => return Err(KernelError::Shape("Gemm: operand types differ".into())),
                None => None,
            };
            TensorData::$variant(gemm_typed($av, bv, c, dims, p, $from)?)
        }};
    }
    let data = match a.data() {
        DataRef::F32(av) => typed!(av, F32, |x| x as f32),
        DataRef::F64(av) => typed!(av, F64, |x| x),
        DataRef::F16(av) => typed!(av, F16, f16::from_f64),
        DataRef::BF16(av) => typed!(av, BF16, bf16::from_f64),
        other => {
            return Err(KernelError::UnsupportedType {
                op: "Gemm",
                dtype: other.dtype(),
            });
        }
    };
    Tensor::new(vec![dims.0, dims.2], data)
}

/// MatMulNBits attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NBitsParams {
    /// Reduction length.
    pub k: usize,
    /// Output columns.
    pub n: usize,
    /// Bits per weight (4).
    pub bits: usize,
    /// Weights per quantization block (a power of two, at least 16).
    pub block_size: usize,
}

impl NBitsParams {
    /// Quantization blocks per column.
    pub fn blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }
}

/// The zero point of column `n`, block `b` (8 without zero points).
pub(crate) fn zero_point(zp: Option<DataRef<'_>>, blocks: usize, n: usize, b: usize) -> f32 {
    match zp {
        None => 8.0,
        Some(DataRef::U8(bytes)) => {
            let byte = bytes[n * blocks.div_ceil(2) + b / 2];
            (if b.is_multiple_of(2) {
                byte & 15
            } else {
                byte >> 4
            }) as f32
        }
        Some(DataRef::F32(v)) => v[n * blocks + b],
        Some(DataRef::F16(v)) => v[n * blocks + b].to_f32(),
        Some(_) => 8.0,
    }
}

/// Scales as f32 (from f32 or f16), or a type error.
pub(crate) fn scales_f32(scales: &Tensor) -> Result<std::borrow::Cow<'_, [f32]>, KernelError> {
    scales_f32_of(scales.data())
}

/// [`scales_f32`] of typed elements.
pub(crate) fn scales_f32_of(
    scales: DataRef<'_>,
) -> Result<std::borrow::Cow<'_, [f32]>, KernelError> {
    match scales {
        DataRef::F32(v) => Ok(std::borrow::Cow::Borrowed(v)),
        DataRef::F16(v) => Ok(std::borrow::Cow::Owned(
            v.iter().map(|x| x.to_f32()).collect(),
        )),
        other => Err(KernelError::UnsupportedType {
            op: "MatMulNBits",
            dtype: other.dtype(),
        }),
    }
}

/// Checks the quantized inputs against `p`.
pub(crate) fn check_nbits_sources(
    p: &NBitsParams,
    b: &Tensor,
    scales: &Tensor,
    zero_points: Option<&Tensor>,
) -> Result<(), KernelError> {
    check_nbits_shapes(
        p,
        (b.shape(), b.dtype()),
        (scales.shape(), scales.dtype()),
        zero_points.map(|z| (z.shape(), z.dtype())),
    )
}

/// [`check_nbits_sources`] from the inputs' shapes and element types.
pub(crate) fn check_nbits_shapes(
    p: &NBitsParams,
    b: (&[usize], ElementType),
    scales: (&[usize], ElementType),
    zero_points: Option<(&[usize], ElementType)>,
) -> Result<(), KernelError> {
    let count = |s: &[usize]| crate::element_count(s).unwrap_or(usize::MAX);
    let blocks = p.blocks();
    let blob = p.block_size * p.bits / 8;
    if b.1 != ElementType::U8 || count(b.0) != p.n * blocks * blob || b.0.first() != Some(&p.n) {
        return Err(KernelError::Shape(format!(
            "MatMulNBits: B {:?} ({}) must be u8 [{}, {blocks}, {blob}]",
            b.0, b.1, p.n
        )));
    }
    if count(scales.0) != p.n * blocks {
        return Err(KernelError::Shape(format!(
            "MatMulNBits: scales {:?} must hold N * blocks = {} values",
            scales.0,
            p.n * blocks
        )));
    }
    if !matches!(scales.1, ElementType::F32 | ElementType::F16) {
        return Err(KernelError::UnsupportedType {
            op: "MatMulNBits",
            dtype: scales.1,
        });
    }
    if let Some((shape, dtype)) = zero_points {
        let want = match dtype {
            ElementType::U8 => p.n * blocks.div_ceil(2),
            ElementType::F32 | ElementType::F16 => p.n * blocks,
            dtype => {
                return Err(KernelError::UnsupportedType {
                    op: "MatMulNBits",
                    dtype,
                });
            }
        };
        if count(shape) != want {
            return Err(KernelError::Shape(format!(
                "MatMulNBits: zero_points {shape:?} ({dtype}) must hold {want} values"
            )));
        }
    }
    Ok(())
}

/// `com.microsoft` MatMulNBits with 4-bit weights in ONNX Runtime's CPU
/// layout: `Y[m][n] = sum_k A[m][k] * (q[n][k] - zp[n][b]) * scale[n][b] + bias[n]`.
pub fn matmul_nbits(
    p: &NBitsParams,
    a: &Tensor,
    b: &Tensor,
    scales: &Tensor,
    zero_points: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<Tensor, KernelError> {
    if p.bits != 4 {
        return Err(KernelError::Attribute {
            op: "MatMulNBits",
            name: "bits",
            detail: format!("{} bits are not supported (only 4)", p.bits),
        });
    }
    check_nbits_sources(p, b, scales, zero_points)?;
    let av = a.as_f32().ok_or_else(|| KernelError::UnsupportedType {
        op: "MatMulNBits",
        dtype: a.dtype(),
    })?;
    if a.shape().last() != Some(&p.k) {
        return Err(KernelError::Shape(format!(
            "MatMulNBits: A {:?} must end in K = {}",
            a.shape(),
            p.k
        )));
    }
    let bias = match bias {
        Some(t) => Some(t.as_f32().filter(|v| v.len() == p.n).ok_or_else(|| {
            KernelError::Shape(format!(
                "MatMulNBits: bias {:?} must be f32 [{}]",
                t.shape(),
                p.n
            ))
        })?),
        None => None,
    };
    let bytes = b.as_u8().expect("checked u8");
    let scales = scales_f32(scales)?;
    let zp = zero_points.map(|t| t.data());
    let (k, n, bs) = (p.k, p.n, p.block_size);
    let blocks = p.blocks();
    let rows = crate::element_count(&a.shape()[..a.shape().len() - 1]).unwrap_or(0);
    // Dequantize once: w[n][k].
    let mut w = vec![0f32; n * k];
    for col in 0..n {
        for q in 0..k {
            let blk = q / bs;
            let byte = bytes[(col * blocks + blk) * (bs / 2) + (q % bs) / 2];
            let nib = if q % 2 == 0 { byte & 15 } else { byte >> 4 };
            let z = zero_point(zp, blocks, col, blk);
            w[col * k + q] = (nib as f32 - z) * scales[col * blocks + blk];
        }
    }
    let mut y = Vec::with_capacity(rows * n);
    for r in 0..rows {
        let arow = &av[r * k..][..k];
        for col in 0..n {
            let wrow = &w[col * k..][..k];
            let dot: f64 = arow
                .iter()
                .zip(wrow)
                .map(|(&x, &v)| x as f64 * v as f64)
                .sum();
            let bias = bias.map_or(0.0, |v| v[col]);
            y.push((dot + bias as f64) as f32);
        }
    }
    let mut shape = a.shape().to_vec();
    *shape.last_mut().expect("A has rank >= 1") = n;
    Tensor::from_f32(shape, y)
}
