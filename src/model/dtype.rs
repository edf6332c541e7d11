//! Element types the runtime stores (cold path): ONNX `TensorProto.DataType`
//! values with a fixed byte size.

use onnx_prepared_proto::tensor_proto::DataType;

/// Element type of a tensor the runtime can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ElementType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// Signed integers.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// Unsigned integers.
    U8,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
    /// One byte per element, 0 or 1.
    Bool,
    /// Signed 4-bit integers, two per byte (low nibble first).
    I4,
    /// Unsigned 4-bit integers, two per byte (low nibble first).
    U4,
}

impl ElementType {
    /// The element type of an ONNX `TensorProto.data_type` value, or `None`
    /// when the runtime cannot store it (strings, complex numbers, 8-bit
    /// floats, 2-bit integers, unknown values).
    pub fn from_onnx(data_type: i32) -> Option<Self> {
        Some(match DataType::try_from(data_type).ok()? {
            DataType::Float => Self::F32,
            DataType::Double => Self::F64,
            DataType::Float16 => Self::F16,
            DataType::Bfloat16 => Self::BF16,
            DataType::Int8 => Self::I8,
            DataType::Int16 => Self::I16,
            DataType::Int32 => Self::I32,
            DataType::Int64 => Self::I64,
            DataType::Uint8 => Self::U8,
            DataType::Uint16 => Self::U16,
            DataType::Uint32 => Self::U32,
            DataType::Uint64 => Self::U64,
            DataType::Bool => Self::Bool,
            DataType::Int4 => Self::I4,
            DataType::Uint4 => Self::U4,
            _ => return None,
        })
    }

    /// The ONNX `TensorProto.data_type` value.
    pub fn to_onnx(self) -> i32 {
        (match self {
            Self::F32 => DataType::Float,
            Self::F64 => DataType::Double,
            Self::F16 => DataType::Float16,
            Self::BF16 => DataType::Bfloat16,
            Self::I8 => DataType::Int8,
            Self::I16 => DataType::Int16,
            Self::I32 => DataType::Int32,
            Self::I64 => DataType::Int64,
            Self::U8 => DataType::Uint8,
            Self::U16 => DataType::Uint16,
            Self::U32 => DataType::Uint32,
            Self::U64 => DataType::Uint64,
            Self::Bool => DataType::Bool,
            Self::I4 => DataType::Int4,
            Self::U4 => DataType::Uint4,
        }) as i32
    }

    /// Bytes of `elements` values of this type, or `None` on overflow.
    /// Four-bit types pack two elements per byte, rounding up.
    pub fn byte_len(self, elements: u64) -> Option<u64> {
        match self {
            Self::I4 | Self::U4 => Some(elements.div_ceil(2)),
            Self::F64 | Self::I64 | Self::U64 => elements.checked_mul(8),
            Self::F32 | Self::I32 | Self::U32 => elements.checked_mul(4),
            Self::F16 | Self::BF16 | Self::I16 | Self::U16 => elements.checked_mul(2),
            Self::I8 | Self::U8 | Self::Bool => Some(elements),
        }
    }

    /// The short lowercase name used in reports (`f32`, `u8`, `i4`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::I8 => "i8",
            Self::I16 => "i16",
            Self::I32 => "i32",
            Self::I64 => "i64",
            Self::U8 => "u8",
            Self::U16 => "u16",
            Self::U32 => "u32",
            Self::U64 => "u64",
            Self::Bool => "bool",
            Self::I4 => "i4",
            Self::U4 => "u4",
        }
    }
}

/// The ONNX name of a `TensorProto.data_type` value, for error messages
/// (`STRING`, `COMPLEX64`, or the number when it is not a known type).
pub fn onnx_type_name(data_type: i32) -> String {
    match DataType::try_from(data_type) {
        Ok(t) => t.as_str_name().to_owned(),
        Err(_) => format!("unknown data type {data_type}"),
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_supported_type() {
        for raw in 0..=32 {
            if let Some(t) = ElementType::from_onnx(raw) {
                assert_eq!(t.to_onnx(), raw, "{t}");
            }
        }
    }

    #[test]
    fn four_bit_types_round_up() {
        assert_eq!(ElementType::U4.byte_len(3), Some(2));
        assert_eq!(ElementType::I4.byte_len(4), Some(2));
        assert_eq!(ElementType::F32.byte_len(u64::MAX / 2), None);
    }

    #[test]
    fn unsupported_types_are_named() {
        assert_eq!(ElementType::from_onnx(DataType::String as i32), None);
        assert_eq!(onnx_type_name(DataType::Complex64 as i32), "COMPLEX64");
        assert_eq!(onnx_type_name(999), "unknown data type 999");
    }
}
