//! Element types the runtime stores (cold path): ONNX `TensorProto.DataType`
//! values with a fixed byte size.

use onnx_prepared_proto::tensor_proto::DataType;

pub use onnx_prepared_kernels::ElementType;

/// The element type of an ONNX `TensorProto.data_type` value, or `None`
/// when the runtime cannot store it (strings, complex numbers, 8-bit
/// floats, 2-bit integers, unknown values).
pub fn element_type_from_onnx(data_type: i32) -> Option<ElementType> {
    Some(match DataType::try_from(data_type).ok()? {
        DataType::Float => ElementType::F32,
        DataType::Double => ElementType::F64,
        DataType::Float16 => ElementType::F16,
        DataType::Bfloat16 => ElementType::BF16,
        DataType::Int8 => ElementType::I8,
        DataType::Int16 => ElementType::I16,
        DataType::Int32 => ElementType::I32,
        DataType::Int64 => ElementType::I64,
        DataType::Uint8 => ElementType::U8,
        DataType::Uint16 => ElementType::U16,
        DataType::Uint32 => ElementType::U32,
        DataType::Uint64 => ElementType::U64,
        DataType::Bool => ElementType::Bool,
        DataType::Int4 => ElementType::I4,
        DataType::Uint4 => ElementType::U4,
        _ => return None,
    })
}

/// The ONNX `TensorProto.data_type` value of `t`.
pub fn element_type_to_onnx(t: ElementType) -> i32 {
    (match t {
        ElementType::F32 => DataType::Float,
        ElementType::F64 => DataType::Double,
        ElementType::F16 => DataType::Float16,
        ElementType::BF16 => DataType::Bfloat16,
        ElementType::I8 => DataType::Int8,
        ElementType::I16 => DataType::Int16,
        ElementType::I32 => DataType::Int32,
        ElementType::I64 => DataType::Int64,
        ElementType::U8 => DataType::Uint8,
        ElementType::U16 => DataType::Uint16,
        ElementType::U32 => DataType::Uint32,
        ElementType::U64 => DataType::Uint64,
        ElementType::Bool => DataType::Bool,
        ElementType::I4 => DataType::Int4,
        ElementType::U4 => DataType::Uint4,
    }) as i32
}

/// The ONNX name of a `TensorProto.data_type` value, for error messages
/// (`STRING`, `COMPLEX64`, or the number when it is not a known type).
pub fn onnx_type_name(data_type: i32) -> String {
    match DataType::try_from(data_type) {
        Ok(t) => t.as_str_name().to_owned(),
        Err(_) => format!("unknown data type {data_type}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_supported_type() {
        for raw in 0..=32 {
            if let Some(t) = element_type_from_onnx(raw) {
                assert_eq!(element_type_to_onnx(t), raw, "{t}");
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
        assert_eq!(element_type_from_onnx(DataType::String as i32), None);
        assert_eq!(onnx_type_name(DataType::Complex64 as i32), "COMPLEX64");
        assert_eq!(onnx_type_name(999), "unknown data type 999");
    }
}
