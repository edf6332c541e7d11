//! Elementwise operators: Add, Sub, Mul and Div with NumPy broadcasting
//! (Pow is in `pow`); Sigmoid, Neg, Sqrt, Reciprocal (hot path kernels, cold path
//! construction and inference).

use half::{bf16, f16};

use super::broadcast::{Plan, broadcast_shape};
use super::common::{
    Attrs, Elem, check_inputs, check_len, input, output, required, typed, typed_mut,
};
use super::real::Real;
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::vector::{self, Width};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Which arithmetic a [`Binary`] performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryKind {
    fn name(self) -> &'static str {
        match self {
            Self::Add => "Add",
            Self::Sub => "Sub",
            Self::Mul => "Mul",
            Self::Div => "Div",
        }
    }
}

/// Checks the legacy (opset < 7) broadcasting attributes: only the default
/// "no broadcast" form is accepted (NumPy broadcasting is a superset of it).
pub(crate) fn legacy_broadcast(spec: &NodeSpec<'_>, op: &'static str) -> Result<(), KernelError> {
    let allowed: &[&'static str] = match spec.opset {
        ..6 => &["broadcast", "axis", "consumed_inputs"],
        6 => &["broadcast", "axis"],
        _ => &[],
    };
    let attrs = Attrs::new(spec, op, allowed)?;
    // `axis` only places a broadcast operand, refused below; its declared
    // type is still checked.
    attrs.int("axis")?;
    match attrs.int("broadcast")? {
        None | Some(0) => Ok(()),
        Some(v) => Err(attrs.error(
            "broadcast",
            format!("legacy (opset < 7) broadcasting with broadcast={v} is not supported"),
        )),
    }
}

/// Add, Sub, Mul or Div.
#[derive(Debug)]
pub(crate) struct Binary {
    kind: BinaryKind,
}

impl Binary {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: BinaryKind) -> Result<Self, KernelError> {
        legacy_broadcast(spec, kind.name())?;
        Ok(Self { kind })
    }
}

/// Arithmetic with the ONNX semantics of each element type: floats follow
/// IEEE, integers wrap on overflow and divide truncating toward zero.
trait Arith: Elem {
    const INTEGER: bool;
    fn add(a: Self, b: Self) -> Self;
    fn sub(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn div(a: Self, b: Self) -> Self;
    fn is_zero(self) -> bool;
}

macro_rules! impl_arith_float {
    ($($t:ty),*) => {
        $(
            impl Arith for $t {
                const INTEGER: bool = false;
                #[inline(always)]
                fn add(a: Self, b: Self) -> Self { a + b }
                #[inline(always)]
                fn sub(a: Self, b: Self) -> Self { a - b }
                #[inline(always)]
                fn mul(a: Self, b: Self) -> Self { a * b }
                #[inline(always)]
                fn div(a: Self, b: Self) -> Self { a / b }
                #[inline(always)]
                fn is_zero(self) -> bool { false }
            }
        )*
    };
}

macro_rules! impl_arith_int {
    ($($t:ty),*) => {
        $(
            impl Arith for $t {
                const INTEGER: bool = true;
                #[inline(always)]
                fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
                #[inline(always)]
                fn sub(a: Self, b: Self) -> Self { a.wrapping_sub(b) }
                #[inline(always)]
                fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
                #[inline(always)]
                fn div(a: Self, b: Self) -> Self {
                    // Divisors are checked for zero before the loop.
                    if b == 0 { 0 } else { a.wrapping_div(b) }
                }
                #[inline(always)]
                fn is_zero(self) -> bool { self == 0 }
            }
        )*
    };
}

impl_arith_float!(f32, f64, f16, bf16);
impl_arith_int!(i8, i16, i32, i64, u8, u16, u32, u64);

fn binary_typed<T: Arith + Send + Sync>(
    kind: BinaryKind,
    plan: &Plan,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let op = kind.name();
    let (a, b, out) = (
        typed::<T>(op, a)?,
        typed::<T>(op, b)?,
        typed_mut::<T>(op, out)?,
    );
    match kind {
        BinaryKind::Add => plan.run_par(op, a, b, out, par, T::add),
        BinaryKind::Sub => plan.run_par(op, a, b, out, par, T::sub),
        BinaryKind::Mul => plan.run_par(op, a, b, out, par, T::mul),
        BinaryKind::Div => {
            if T::INTEGER && plan.out_len() > 0 && b.iter().any(|v| v.is_zero()) {
                return Err(KernelError::Invalid {
                    op,
                    detail: "integer division by zero".into(),
                });
            }
            plan.run_par(op, a, b, out, par, T::div)
        }
    }
}

fn arith_supported(dtype: ElementType) -> bool {
    use ElementType as E;
    matches!(
        dtype,
        E::F32
            | E::F64
            | E::F16
            | E::BF16
            | E::I8
            | E::I16
            | E::I32
            | E::I64
            | E::U8
            | E::U16
            | E::U32
            | E::U64
    )
}

impl Operator for Binary {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let inputs = check_inputs(op, inputs, 2, 2)?;
        let (a, b) = (required(op, inputs, 0)?, required(op, inputs, 1)?);
        if a.dtype != b.dtype {
            return Err(KernelError::Shape(format!(
                "{op}: operand types differ ({} and {})",
                a.dtype, b.dtype
            )));
        }
        if !arith_supported(a.dtype) {
            return Err(KernelError::UnsupportedType { op, dtype: a.dtype });
        }
        let shape = broadcast_shape(op, a.shape, b.shape)?;
        Plan::new(op, a.shape, b.shape)?;
        Ok(vec![OutputInfo {
            dtype: a.dtype,
            shape,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.name();
        let (a, b) = (input(op, inputs, 0)?, input(op, inputs, 1)?);
        let out = output(op, outputs, 0)?;
        let plan = Plan::new(op, a.shape(), b.shape())?;
        let k = self.kind;
        use ElementType as E;
        match a.dtype() {
            E::F32 => binary_typed::<f32>(k, &plan, a, b, out, par),
            E::F64 => binary_typed::<f64>(k, &plan, a, b, out, par),
            E::F16 => binary_typed::<f16>(k, &plan, a, b, out, par),
            E::BF16 => binary_typed::<bf16>(k, &plan, a, b, out, par),
            E::I8 => binary_typed::<i8>(k, &plan, a, b, out, par),
            E::I16 => binary_typed::<i16>(k, &plan, a, b, out, par),
            E::I32 => binary_typed::<i32>(k, &plan, a, b, out, par),
            E::I64 => binary_typed::<i64>(k, &plan, a, b, out, par),
            E::U8 => binary_typed::<u8>(k, &plan, a, b, out, par),
            E::U16 => binary_typed::<u16>(k, &plan, a, b, out, par),
            E::U32 => binary_typed::<u32>(k, &plan, a, b, out, par),
            E::U64 => binary_typed::<u64>(k, &plan, a, b, out, par),
            dtype => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}

/// Which function a [`Unary`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnaryKind {
    Sigmoid,
    Neg,
    Sqrt,
    Reciprocal,
}

impl UnaryKind {
    fn name(self) -> &'static str {
        match self {
            Self::Sigmoid => "Sigmoid",
            Self::Neg => "Neg",
            Self::Sqrt => "Sqrt",
            Self::Reciprocal => "Reciprocal",
        }
    }
}

/// Sigmoid, Neg, Sqrt or Reciprocal.
#[derive(Debug)]
pub(crate) struct Unary {
    kind: UnaryKind,
}

impl Unary {
    pub(crate) fn new(spec: &NodeSpec<'_>, kind: UnaryKind) -> Result<Self, KernelError> {
        // `consumed_inputs` (opset < 6) was an in-place hint without meaning
        // for the result.
        let allowed: &[&'static str] = if spec.opset < 6 {
            &["consumed_inputs"]
        } else {
            &[]
        };
        Attrs::new(spec, kind.name(), allowed)?;
        Ok(Self { kind })
    }

    fn supports(&self, dtype: ElementType) -> bool {
        use ElementType as E;
        match self.kind {
            UnaryKind::Neg => {
                matches!(
                    dtype,
                    E::F32 | E::F64 | E::F16 | E::BF16 | E::I8 | E::I16 | E::I32 | E::I64
                )
            }
            _ => matches!(dtype, E::F32 | E::F64 | E::F16 | E::BF16),
        }
    }
}

#[inline]
fn map<A: Elem + Sync, B: Elem + Send>(
    op: &'static str,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
    f: impl Fn(A) -> B + Sync,
) -> Result<(), KernelError> {
    let (x, y) = (typed::<A>(op, x)?, typed_mut::<B>(op, y)?);
    check_len(op, "output", y.len(), x.len())?;
    let chunk = if y.len() < PARALLEL_MIN_ELEMENTS {
        y.len()
    } else {
        rows_chunk(par, y.len(), 1)
    };
    let width = Width::detect();
    for_each_chunk_mut(par, y, chunk, &|offset, out| {
        vector::run(
            width,
            #[inline(always)]
            || {
                for (o, &v) in out.iter_mut().zip(&x[offset..]) {
                    *o = f(v);
                }
            },
        )
    });
    Ok(())
}

#[inline(always)]
fn sigmoid<T: Real>(x: T) -> T {
    T::ONE / (T::ONE + (-x).exp())
}

fn unary_real<T: Real + Send + Sync>(
    kind: UnaryKind,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let op = kind.name();
    match kind {
        UnaryKind::Sigmoid => map::<T, T>(op, x, y, par, sigmoid),
        UnaryKind::Neg => map::<T, T>(op, x, y, par, |v| -v),
        UnaryKind::Sqrt => map::<T, T>(op, x, y, par, T::sqrt),
        UnaryKind::Reciprocal => map::<T, T>(op, x, y, par, |v| T::ONE / v),
    }
}

macro_rules! unary_half {
    ($t:ty, $kind:expr, $x:expr, $y:expr, $par:expr) => {{
        let op = $kind.name();
        match $kind {
            UnaryKind::Sigmoid => {
                map::<$t, $t>(op, $x, $y, $par, |v| <$t>::from_f32(sigmoid(v.to_f32())))
            }
            UnaryKind::Neg => map::<$t, $t>(op, $x, $y, $par, |v| -v),
            UnaryKind::Sqrt => {
                map::<$t, $t>(op, $x, $y, $par, |v| <$t>::from_f32(v.to_f32().sqrt()))
            }
            UnaryKind::Reciprocal => {
                map::<$t, $t>(op, $x, $y, $par, |v| <$t>::from_f32(1.0 / v.to_f32()))
            }
        }
    }};
}

impl Operator for Unary {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        if !self.supports(x.dtype) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        use ElementType as E;
        let op = self.name();
        let x = input(op, inputs, 0)?;
        let y = output(op, outputs, 0)?;
        let kind = self.kind;
        match (kind, x.dtype()) {
            (_, E::F32) => unary_real::<f32>(kind, x, y, par),
            (_, E::F64) => unary_real::<f64>(kind, x, y, par),
            (_, E::F16) => unary_half!(f16, kind, x, y, par),
            (_, E::BF16) => unary_half!(bf16, kind, x, y, par),
            (UnaryKind::Neg, E::I8) => map::<i8, i8>(op, x, y, par, i8::wrapping_neg),
            (UnaryKind::Neg, E::I16) => map::<i16, i16>(op, x, y, par, i16::wrapping_neg),
            (UnaryKind::Neg, E::I32) => map::<i32, i32>(op, x, y, par, i32::wrapping_neg),
            (UnaryKind::Neg, E::I64) => map::<i64, i64>(op, x, y, par, i64::wrapping_neg),
            (_, dtype) => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}
