//! Cast between the element types with a compute representation (hot path:
//! one monomorphized loop per type pair). Float to integer truncates toward
//! zero and saturates at the integer's range (NaN becomes 0), integer to
//! integer wraps like C's `static_cast`, anything to bool is `!= 0`.

use half::{bf16, f16};

use super::common::{
    Attrs, Elem, check_inputs, check_len, input, output, required, typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Conversion of one element to `D`.
trait Conv<D> {
    fn conv(self) -> D;
}

macro_rules! conv_prim {
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
            #[allow(clippy::float_cmp)]
            fn conv(self) -> bool { self != (0 as $s) }
        }
    };
}

macro_rules! conv_prims {
    ($($s:ty),*) => {
        $( conv_prim!($s => f32, f64, i8, i16, i32, i64, u8, u16, u32, u64); )*
    };
}

conv_prims!(i8, i16, i32, i64, u8, u16, u32, u64, f64);

// f32 to the half types converts directly (one rounding).
impl Conv<f16> for f32 {
    #[inline(always)]
    fn conv(self) -> f16 {
        f16::from_f32(self)
    }
}

impl Conv<bf16> for f32 {
    #[inline(always)]
    fn conv(self) -> bf16 {
        bf16::from_f32(self)
    }
}

impl Conv<bool> for f32 {
    #[inline(always)]
    fn conv(self) -> bool {
        self != 0.0
    }
}

macro_rules! conv_f32_prims {
    ($($d:ty),*) => {
        $(
            impl Conv<$d> for f32 {
                #[inline(always)]
                fn conv(self) -> $d { self as $d }
            }
        )*
    };
}

conv_f32_prims!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64);

// The half types convert through f32 (exact), bool through u8.
impl<D> Conv<D> for f16
where
    f32: Conv<D>,
{
    #[inline(always)]
    fn conv(self) -> D {
        self.to_f32().conv()
    }
}

impl<D> Conv<D> for bf16
where
    f32: Conv<D>,
{
    #[inline(always)]
    fn conv(self) -> D {
        self.to_f32().conv()
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
    for (o, &v) in dst.iter_mut().zip(src) {
        *o = v.conv();
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
