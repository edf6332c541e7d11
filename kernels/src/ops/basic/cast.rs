//! Cast between the element types with a compute representation (hot path:
//! one monomorphized loop per type pair). Integer to integer wraps like
//! C's `static_cast`, anything to bool is `!= 0` (NaN is true), and float
//! to integer is ONNX Runtime's x86-64 conversion ([`super::truncate`]):
//! truncation toward zero, NaN and out-of-range values giving the integer
//! indefinite, 8- and 16-bit targets the low bits of the 32-bit result.
//!
//! ONNX Runtime converts floats to `u32` in two ways: f32 and f64 sources
//! run a vector loop over groups of four elements, bf16 over groups of
//! eight, and the remaining `len % group` elements convert one by one
//! ([`Conv::conv_tail`]); an f16 source converts every element one by one.
//! The two differ for NaN, `-inf` and values below `i32::MIN` (2^31 against
//! 0 or the low half of the 64-bit conversion) and for values from 2^32 up.

use half::{bf16, f16};

use super::common::{
    Attrs, Elem, check_inputs, check_len, input, output, required, typed, typed_mut,
};
use super::truncate::{FromFloat, u32_scalar};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// How many elements ONNX Runtime's vector loop converts at a time from
/// `source` (bf16 8, the others 4); the remainder goes through
/// [`Conv::conv_tail`].
fn vector_group(source: ElementType) -> usize {
    match source {
        ElementType::BF16 => 8,
        _ => 4,
    }
}

/// Conversion of one element to `D`.
trait Conv<D> {
    fn conv(self) -> D;
    /// The conversion of an element past the last whole group of
    /// [`vector_group`] (only float to `u32` differs).
    #[inline(always)]
    fn conv_tail(self) -> D
    where
        Self: Sized,
    {
        self.conv()
    }
}

/// Integer sources: `as` (wrapping to integers, rounding to floats).
macro_rules! conv_int {
    ($s:ty => $($d:ty),*) => {
        $(
            impl Conv<$d> for $s {
                #[inline(always)]
                fn conv(self) -> $d { self as $d }
            }
        )*
        impl Conv<f16> for $s {
            #[inline(always)]
            fn conv(self) -> f16 { f16::from_f64(self as f64) }
        }
        impl Conv<bf16> for $s {
            #[inline(always)]
            fn conv(self) -> bf16 { bf16::from_f64(self as f64) }
        }
        impl Conv<bool> for $s {
            #[inline(always)]
            fn conv(self) -> bool { self != 0 }
        }
    };
}

macro_rules! conv_ints {
    ($($s:ty),*) => {
        $( conv_int!($s => f32, f64, i8, i16, i32, i64, u8, u16, u32, u64); )*
    };
}

conv_ints!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Float sources (`$s` converts to f64 exactly with `$wide`) to the integer
/// types but `u32`.
macro_rules! conv_float_to_int {
    ($s:ty, $wide:expr => $($d:ty),*) => {
        $(
            impl Conv<$d> for $s {
                #[inline(always)]
                fn conv(self) -> $d { <$d>::from_float($wide(self)) }
            }
        )*
    };
}

conv_float_to_int!(f32, f64::from => i8, i16, i32, i64, u8, u16, u64);
conv_float_to_int!(f64, std::convert::identity => i8, i16, i32, i64, u8, u16, u64);
conv_float_to_int!(f16, f64::from => i8, i16, i32, i64, u8, u16, u64);

impl Conv<u32> for f32 {
    #[inline(always)]
    fn conv(self) -> u32 {
        u32::from_float(self.into())
    }
    #[inline(always)]
    fn conv_tail(self) -> u32 {
        u32_scalar(self.into())
    }
}

impl Conv<u32> for f64 {
    #[inline(always)]
    fn conv(self) -> u32 {
        u32::from_float(self)
    }
    #[inline(always)]
    fn conv_tail(self) -> u32 {
        u32_scalar(self)
    }
}

impl Conv<u32> for f16 {
    #[inline(always)]
    fn conv(self) -> u32 {
        u32_scalar(self.into())
    }
}

/// Float sources to float types and bool.
macro_rules! conv_float_to_float {
    ($($s:ty => $f32:expr, $f64:expr, $half:expr, $bhalf:expr);*) => {
        $(
            impl Conv<f32> for $s {
                #[inline(always)]
                fn conv(self) -> f32 { $f32(self) }
            }
            impl Conv<f64> for $s {
                #[inline(always)]
                fn conv(self) -> f64 { $f64(self) }
            }
            impl Conv<f16> for $s {
                #[inline(always)]
                fn conv(self) -> f16 { $half(self) }
            }
            impl Conv<bf16> for $s {
                #[inline(always)]
                fn conv(self) -> bf16 { $bhalf(self) }
            }
            impl Conv<bool> for $s {
                #[inline(always)]
                fn conv(self) -> bool { f64::from(self) != 0.0 }
            }
        )*
    };
}

// f32 to the half types converts directly (one rounding); f64 narrows as
// `as` does; f16 widens exactly.
conv_float_to_float!(
    f32 => std::convert::identity, f64::from, f16::from_f32, bf16::from_f32;
    f64 => |x| x as f32, std::convert::identity, f16::from_f64, bf16::from_f64;
    f16 => f32::from, f64::from, std::convert::identity, |x: f16| bf16::from_f32(x.to_f32())
);

// bf16 converts through f32 (exact), in the same groups as f32.
impl<D> Conv<D> for bf16
where
    f32: Conv<D>,
{
    #[inline(always)]
    fn conv(self) -> D {
        self.to_f32().conv()
    }
    #[inline(always)]
    fn conv_tail(self) -> D {
        self.to_f32().conv_tail()
    }
}

impl<D> Conv<D> for bool
where
    u8: Conv<D>,
{
    #[inline(always)]
    fn conv(self) -> D {
        (self as u8).conv()
    }
}

/// The ONNX `TensorProto.DataType` code or (Cast-1) name of a target type.
fn onnx_type(code: i64) -> Result<ElementType, String> {
    use ElementType as E;
    Ok(match code {
        1 => E::F32,
        2 => E::U8,
        3 => E::I8,
        4 => E::U16,
        5 => E::I16,
        6 => E::I32,
        7 => E::I64,
        9 => E::Bool,
        10 => E::F16,
        11 => E::F64,
        12 => E::U32,
        13 => E::U64,
        16 => E::BF16,
        8 => return Err("string is not supported".into()),
        14 | 15 => return Err("complex types are not supported".into()),
        17..=20 | 24 => return Err("float8 types are not supported".into()),
        21 | 22 | 25 | 26 => return Err("2- and 4-bit integer types are not supported".into()),
        23 => return Err("float4 is not supported".into()),
        c => return Err(format!("unknown data type {c}")),
    })
}

fn onnx_type_name(name: &str) -> Result<ElementType, String> {
    let code = match name.to_ascii_uppercase().as_str() {
        "FLOAT" => 1,
        "UINT8" => 2,
        "INT8" => 3,
        "UINT16" => 4,
        "INT16" => 5,
        "INT32" => 6,
        "INT64" => 7,
        "STRING" => 8,
        "BOOL" => 9,
        "FLOAT16" => 10,
        "DOUBLE" => 11,
        "UINT32" => 12,
        "UINT64" => 13,
        "COMPLEX64" => 14,
        "COMPLEX128" => 15,
        "BFLOAT16" => 16,
        other => return Err(format!("unknown data type name {other:?}")),
    };
    onnx_type(code)
}

/// Cast.
#[derive(Debug)]
pub(crate) struct Cast {
    to: ElementType,
}

impl Cast {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = match spec.opset {
            ..19 => &["to"],
            _ => &["to", "saturate", "round_mode"],
        };
        let attrs = Attrs::new(spec, "Cast", allowed)?;
        let to = match attrs.int("to") {
            Ok(Some(code)) => onnx_type(code),
            Ok(None) => return Err(attrs.error("to", "is required")),
            // Cast-1 names the type as a string.
            Err(e) => match attrs.string("to") {
                Ok(Some(name)) if spec.opset < 6 => onnx_type_name(&name),
                _ => return Err(e),
            },
        }
        .map_err(|d| attrs.error("to", d))?;
        // `saturate` only affects float8 targets, which are rejected above.
        match attrs.int_or("saturate", 1)? {
            0 | 1 => {}
            v => return Err(attrs.error("saturate", format!("{v} is not 0 or 1"))),
        }
        // `round_mode` only affects float8e8m0 targets, rejected above.
        if let Some(m) = attrs.string("round_mode")?
            && !matches!(m.as_str(), "up" | "down" | "nearest")
        {
            return Err(attrs.error("round_mode", format!("{m:?} is not up, down or nearest")));
        }
        Ok(Self { to })
    }
}

fn cast_to<S: Elem + Conv<D>, D: Elem>(x: &Tensor, y: &mut Tensor) -> Result<(), KernelError> {
    let (src, dst) = (typed::<S>("Cast", x)?, typed_mut::<D>("Cast", y)?);
    check_len("Cast", "output", dst.len(), src.len())?;
    let whole = src.len() - src.len() % vector_group(S::DTYPE);
    let (src_head, src_tail) = src.split_at(whole);
    let (dst_head, dst_tail) = dst.split_at_mut(whole);
    for (o, &v) in dst_head.iter_mut().zip(src_head) {
        *o = v.conv();
    }
    for (o, &v) in dst_tail.iter_mut().zip(src_tail) {
        *o = v.conv_tail();
    }
    Ok(())
}

fn cast_from<S>(to: ElementType, x: &Tensor, y: &mut Tensor) -> Result<(), KernelError>
where
    S: Elem
        + Conv<f32>
        + Conv<f64>
        + Conv<f16>
        + Conv<bf16>
        + Conv<i8>
        + Conv<i16>
        + Conv<i32>
        + Conv<i64>
        + Conv<u8>
        + Conv<u16>
        + Conv<u32>
        + Conv<u64>
        + Conv<bool>,
{
    dispatch_any!(to, D => cast_to::<S, D>(x, y),
        else Err(KernelError::UnsupportedType { op: "Cast", dtype: to }))
}

impl Operator for Cast {
    fn name(&self) -> &'static str {
        "Cast"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Cast", inputs, 1, 1)?;
        let x = required("Cast", inputs, 0)?;
        if matches!(x.dtype, ElementType::I4 | ElementType::U4) {
            return Err(KernelError::UnsupportedType {
                op: "Cast",
                dtype: x.dtype,
            });
        }
        Ok(vec![OutputInfo {
            dtype: self.to,
            shape: x.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Cast", inputs, 0)?;
        let y = output("Cast", outputs, 0)?;
        if y.dtype() != self.to {
            return Err(KernelError::Invalid {
                op: "Cast",
                detail: format!("output holds {} where {} was inferred", y.dtype(), self.to),
            });
        }
        dispatch_any!(x.dtype(), S => cast_from::<S>(self.to, x, y),
            else Err(KernelError::UnsupportedType { op: "Cast", dtype: x.dtype() }))
    }
}
