//! Element types and dense tensors (hot path: kernels read and write these).

use half::{bf16, f16};

use crate::KernelError;

/// Element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// 8-bit signed integer.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 8-bit unsigned integer.
    U8,
    /// 16-bit unsigned integer.
    U16,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
    /// One byte per element, 0 or 1.
    Bool,
    /// Signed 4-bit integers, two per byte (low nibble first). Storage only.
    I4,
    /// Unsigned 4-bit integers, two per byte (low nibble first). Storage only.
    U4,
}

impl ElementType {
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

    /// The type a tensor of this element type holds in memory: 4-bit
    /// values are unpacked one per byte (`I4` to `I8`, `U4` to `U8`) when
    /// read, every other type is itself.
    pub fn compute(self) -> Self {
        match self {
            Self::I4 => Self::I8,
            Self::U4 => Self::U8,
            t => t,
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

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The elements of a tensor, one typed vector per element type. Four-bit
/// types have no compute representation; their bytes travel as `U8` inside
/// packed weights.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum TensorData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
}

/// Applies `$body` to the vector inside any `TensorData` variant.
#[macro_export]
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::TensorData::F32($v) => $body,
            $crate::TensorData::F64($v) => $body,
            $crate::TensorData::F16($v) => $body,
            $crate::TensorData::BF16($v) => $body,
            $crate::TensorData::I8($v) => $body,
            $crate::TensorData::I16($v) => $body,
            $crate::TensorData::I32($v) => $body,
            $crate::TensorData::I64($v) => $body,
            $crate::TensorData::U8($v) => $body,
            $crate::TensorData::U16($v) => $body,
            $crate::TensorData::U32($v) => $body,
            $crate::TensorData::U64($v) => $body,
            $crate::TensorData::Bool($v) => $body,
        }
    };
}

impl TensorData {
    /// `len` zeros of `dtype`; `None` for the storage-only 4-bit types.
    pub fn zeros(dtype: ElementType, len: usize) -> Option<Self> {
        use ElementType as T;
        Some(match dtype {
            T::F32 => Self::F32(vec![0.0; len]),
            T::F64 => Self::F64(vec![0.0; len]),
            T::F16 => Self::F16(vec![f16::ZERO; len]),
            T::BF16 => Self::BF16(vec![bf16::ZERO; len]),
            T::I8 => Self::I8(vec![0; len]),
            T::I16 => Self::I16(vec![0; len]),
            T::I32 => Self::I32(vec![0; len]),
            T::I64 => Self::I64(vec![0; len]),
            T::U8 => Self::U8(vec![0; len]),
            T::U16 => Self::U16(vec![0; len]),
            T::U32 => Self::U32(vec![0; len]),
            T::U64 => Self::U64(vec![0; len]),
            T::Bool => Self::Bool(vec![false; len]),
            T::I4 | T::U4 => return None,
        })
    }

    /// The element type.
    pub fn dtype(&self) -> ElementType {
        use ElementType as T;
        match self {
            Self::F32(_) => T::F32,
            Self::F64(_) => T::F64,
            Self::F16(_) => T::F16,
            Self::BF16(_) => T::BF16,
            Self::I8(_) => T::I8,
            Self::I16(_) => T::I16,
            Self::I32(_) => T::I32,
            Self::I64(_) => T::I64,
            Self::U8(_) => T::U8,
            Self::U16(_) => T::U16,
            Self::U32(_) => T::U32,
            Self::U64(_) => T::U64,
            Self::Bool(_) => T::Bool,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes little-endian bytes; `None` when the length is not a whole
    /// number of elements or the type is storage-only.
    /// `elements` values of `dtype` stored as ONNX stores them: like
    /// [`TensorData::from_le_bytes`], and 4-bit types (two per byte, low
    /// nibble first) unpacked to one `I8` (sign-extended) or `U8` per value.
    /// `None` when the byte count does not match.
    pub fn decode(dtype: ElementType, bytes: &[u8], elements: usize) -> Option<Self> {
        match dtype {
            ElementType::I4 | ElementType::U4 => {
                if bytes.len() != elements.div_ceil(2) {
                    return None;
                }
                let nibble = |i: usize| (bytes[i / 2] >> ((i % 2) * 4)) & 0x0f;
                Some(if dtype == ElementType::I4 {
                    Self::I8(
                        (0..elements)
                            .map(|i| ((nibble(i) << 4) as i8) >> 4)
                            .collect(),
                    )
                } else {
                    Self::U8((0..elements).map(nibble).collect())
                })
            }
            _ => Self::from_le_bytes(dtype, bytes),
        }
    }

    pub fn from_le_bytes(dtype: ElementType, bytes: &[u8]) -> Option<Self> {
        fn decode<const N: usize, T>(bytes: &[u8], f: impl Fn([u8; N]) -> T) -> Option<Vec<T>> {
            if !bytes.len().is_multiple_of(N) {
                return None;
            }
            Some(
                bytes
                    .chunks_exact(N)
                    .map(|c| f(c.try_into().expect("chunk of N")))
                    .collect(),
            )
        }
        use ElementType as T;
        Some(match dtype {
            T::F32 => Self::F32(decode(bytes, f32::from_le_bytes)?),
            T::F64 => Self::F64(decode(bytes, f64::from_le_bytes)?),
            T::F16 => Self::F16(decode(bytes, f16::from_le_bytes)?),
            T::BF16 => Self::BF16(decode(bytes, bf16::from_le_bytes)?),
            T::I8 => Self::I8(decode(bytes, i8::from_le_bytes)?),
            T::I16 => Self::I16(decode(bytes, i16::from_le_bytes)?),
            T::I32 => Self::I32(decode(bytes, i32::from_le_bytes)?),
            T::I64 => Self::I64(decode(bytes, i64::from_le_bytes)?),
            T::U8 => Self::U8(bytes.to_vec()),
            T::U16 => Self::U16(decode(bytes, u16::from_le_bytes)?),
            T::U32 => Self::U32(decode(bytes, u32::from_le_bytes)?),
            T::U64 => Self::U64(decode(bytes, u64::from_le_bytes)?),
            T::Bool => Self::Bool(bytes.iter().map(|&b| b != 0).collect()),
            T::I4 | T::U4 => return None,
        })
    }
}

/// A dense row-major tensor. The default is an empty f32 vector (a
/// placeholder that holds no allocation).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: TensorData,
}

/// Number of elements of `shape` (1 for a scalar), or `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Default for Tensor {
    fn default() -> Self {
        Self {
            shape: Vec::new(),
            data: TensorData::F32(Vec::new()),
        }
    }
}

macro_rules! accessors {
    ($($variant:ident, $t:ty, $get:ident, $get_mut:ident;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("The elements as `", stringify!($t), "`, if that is the type.")]
                pub fn $get(&self) -> Option<&[$t]> {
                    match &self.data {
                        TensorData::$variant(v) => Some(v),
                        _ => None,
                    }
                }

                #[doc = concat!("The elements as mutable `", stringify!($t), "`, if that is the type.")]
                pub fn $get_mut(&mut self) -> Option<&mut [$t]> {
                    match &mut self.data {
                        TensorData::$variant(v) => Some(v),
                        _ => None,
                    }
                }
            )*
        }
    };
}

accessors! {
    F32, f32, as_f32, as_f32_mut;
    F64, f64, as_f64, as_f64_mut;
    F16, f16, as_f16, as_f16_mut;
    BF16, bf16, as_bf16, as_bf16_mut;
    I8, i8, as_i8, as_i8_mut;
    I16, i16, as_i16, as_i16_mut;
    I32, i32, as_i32, as_i32_mut;
    I64, i64, as_i64, as_i64_mut;
    U8, u8, as_u8, as_u8_mut;
    U16, u16, as_u16, as_u16_mut;
    U32, u32, as_u32, as_u32_mut;
    U64, u64, as_u64, as_u64_mut;
    Bool, bool, as_bool, as_bool_mut;
}

impl Tensor {
    /// A tensor of `shape` holding `data`; the element count must match.
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Self, KernelError> {
        if element_count(&shape) != Some(data.len()) {
            return Err(KernelError::Shape(format!(
                "shape {shape:?} needs {:?} elements but the data holds {}",
                element_count(&shape),
                data.len()
            )));
        }
        Ok(Self { shape, data })
    }

    /// A zero tensor of `dtype` and `shape`.
    pub fn zeros(dtype: ElementType, shape: Vec<usize>) -> Result<Self, KernelError> {
        let len = element_count(&shape)
            .ok_or_else(|| KernelError::Shape(format!("shape {shape:?} overflows")))?;
        let data = TensorData::zeros(dtype, len).ok_or(KernelError::UnsupportedType {
            op: "Tensor",
            dtype,
        })?;
        Ok(Self { shape, data })
    }

    /// An f32 tensor.
    pub fn from_f32(shape: Vec<usize>, values: Vec<f32>) -> Result<Self, KernelError> {
        Self::new(shape, TensorData::F32(values))
    }

    /// An i64 tensor.
    pub fn from_i64(shape: Vec<usize>, values: Vec<i64>) -> Result<Self, KernelError> {
        Self::new(shape, TensorData::I64(values))
    }

    /// The element type.
    pub fn dtype(&self) -> ElementType {
        self.data.dtype()
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Bytes of the elements (saturating; a tensor that exists fits).
    pub fn byte_len(&self) -> usize {
        self.dtype()
            .byte_len(self.len() as u64)
            .map_or(usize::MAX, |b| usize::try_from(b).unwrap_or(usize::MAX))
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// The elements, mutable (the shape stays).
    pub fn data_mut(&mut self) -> &mut TensorData {
        &mut self.data
    }

    /// Changes the shape without touching the data; the element count must stay.
    pub fn set_shape(&mut self, shape: Vec<usize>) -> Result<(), KernelError> {
        if element_count(&shape) != Some(self.len()) {
            return Err(KernelError::Shape(format!(
                "cannot view {} elements as {shape:?}",
                self.len()
            )));
        }
        self.shape = shape;
        Ok(())
    }

    /// Sets the shape to `shape` in place (reusing the shape's capacity); the
    /// element count must stay.
    pub fn set_shape_from(&mut self, shape: &[usize]) -> Result<(), KernelError> {
        if element_count(shape) != Some(self.len()) {
            return Err(KernelError::Shape(format!(
                "cannot view {} elements as {shape:?}",
                self.len()
            )));
        }
        self.shape.clear();
        self.shape.extend_from_slice(shape);
        Ok(())
    }

    /// Copies `other`'s elements into this tensor (same type and count);
    /// the shape becomes `other`'s. Allocation-free.
    pub fn copy_from(&mut self, other: &Tensor) -> Result<(), KernelError> {
        macro_rules! copy {
            ($($v:ident),*) => {
                match (&mut self.data, &other.data) {
                    $((TensorData::$v(d), TensorData::$v(s)) if d.len() == s.len() => d.copy_from_slice(s),)*
                    _ => {
                        return Err(KernelError::Shape(format!(
                            "cannot copy {} {:?} into {} {:?}",
                            other.dtype(),
                            other.shape,
                            self.dtype(),
                            self.shape
                        )))
                    }
                }
            };
        }
        copy!(
            F32, F64, F16, BF16, I8, I16, I32, I64, U8, U16, U32, U64, Bool
        );
        self.shape.clear();
        self.shape.extend_from_slice(&other.shape);
        Ok(())
    }

    /// Splits into shape and data.
    pub fn into_parts(self) -> (Vec<usize>, TensorData) {
        (self.shape, self.data)
    }

    /// Integer elements widened to i64 (for shape, axes and index operands).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        match &self.data {
            TensorData::I64(v) => Some(v.clone()),
            TensorData::I32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ElementType, TensorData};

    #[test]
    fn four_bit_values_unpack_low_nibble_first() {
        // 0x8f: low nibble 0xf, high 0x8; 0x17: 7, 1; an odd count ignores
        // the last high nibble.
        let bytes = [0x8f, 0x17, 0xa0];
        assert_eq!(
            TensorData::decode(ElementType::I4, &bytes, 5),
            Some(TensorData::I8(vec![-1, -8, 7, 1, 0]))
        );
        assert_eq!(
            TensorData::decode(ElementType::U4, &bytes, 6),
            Some(TensorData::U8(vec![15, 8, 7, 1, 0, 10]))
        );
        assert_eq!(TensorData::decode(ElementType::U4, &bytes, 7), None);
        assert_eq!(TensorData::decode(ElementType::U4, &bytes, 4), None);
        assert_eq!(ElementType::I4.compute(), ElementType::I8);
        assert_eq!(ElementType::U4.compute(), ElementType::U8);
        assert_eq!(ElementType::F32.compute(), ElementType::F32);
    }
}
