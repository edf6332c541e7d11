//! Element types and the typed views of tensor elements (hot path:
//! kernels match on these).

use half::{bf16, f16};

use crate::dtype::ElementType;

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
        self.view().dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.view().len()
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

/// A read-only view of a tensor's elements, one typed slice per element
/// type: what [`Tensor::data`](super::Tensor::data) returns for owned and shared tensors alike.
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)]
pub enum DataRef<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    U64(&'a [u64]),
    Bool(&'a [bool]),
}

macro_rules! with_ref {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            DataRef::F32($v) => $body,
            DataRef::F64($v) => $body,
            DataRef::F16($v) => $body,
            DataRef::BF16($v) => $body,
            DataRef::I8($v) => $body,
            DataRef::I16($v) => $body,
            DataRef::I32($v) => $body,
            DataRef::I64($v) => $body,
            DataRef::U8($v) => $body,
            DataRef::U16($v) => $body,
            DataRef::U32($v) => $body,
            DataRef::U64($v) => $body,
            DataRef::Bool($v) => $body,
        }
    };
}

impl DataRef<'_> {
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
        with_ref!(self, v => v.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the elements as owned data.
    pub fn to_data(&self) -> TensorData {
        match *self {
            Self::F32(v) => TensorData::F32(v.to_vec()),
            Self::F64(v) => TensorData::F64(v.to_vec()),
            Self::F16(v) => TensorData::F16(v.to_vec()),
            Self::BF16(v) => TensorData::BF16(v.to_vec()),
            Self::I8(v) => TensorData::I8(v.to_vec()),
            Self::I16(v) => TensorData::I16(v.to_vec()),
            Self::I32(v) => TensorData::I32(v.to_vec()),
            Self::I64(v) => TensorData::I64(v.to_vec()),
            Self::U8(v) => TensorData::U8(v.to_vec()),
            Self::U16(v) => TensorData::U16(v.to_vec()),
            Self::U32(v) => TensorData::U32(v.to_vec()),
            Self::U64(v) => TensorData::U64(v.to_vec()),
            Self::Bool(v) => TensorData::Bool(v.to_vec()),
        }
    }
}

impl<'a> DataRef<'a> {
    /// The elements' bytes in native order (a checked cast, no copy).
    pub fn into_bytes(self) -> &'a [u8] {
        use zerocopy::IntoBytes;
        match self {
            Self::F32(v) => v.as_bytes(),
            Self::F64(v) => v.as_bytes(),
            Self::F16(v) => v.as_bytes(),
            Self::BF16(v) => v.as_bytes(),
            Self::I8(v) => v.as_bytes(),
            Self::I16(v) => v.as_bytes(),
            Self::I32(v) => v.as_bytes(),
            Self::I64(v) => v.as_bytes(),
            Self::U8(v) => v,
            Self::U16(v) => v.as_bytes(),
            Self::U32(v) => v.as_bytes(),
            Self::U64(v) => v.as_bytes(),
            Self::Bool(v) => v.as_bytes(),
        }
    }
}

/// A mutable view of a tensor's elements, one typed slice per element
/// type: what [`Tensor::view_mut`](super::Tensor::view_mut) returns for every storage.
#[derive(Debug, PartialEq)]
#[allow(missing_docs)]
pub enum DataMut<'a> {
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
    I8(&'a mut [i8]),
    I16(&'a mut [i16]),
    I32(&'a mut [i32]),
    I64(&'a mut [i64]),
    U8(&'a mut [u8]),
    U16(&'a mut [u16]),
    U32(&'a mut [u32]),
    U64(&'a mut [u64]),
    Bool(&'a mut [bool]),
}

impl TensorData {
    /// A read-only view of the elements.
    pub fn view(&self) -> DataRef<'_> {
        match self {
            Self::F32(v) => DataRef::F32(v),
            Self::F64(v) => DataRef::F64(v),
            Self::F16(v) => DataRef::F16(v),
            Self::BF16(v) => DataRef::BF16(v),
            Self::I8(v) => DataRef::I8(v),
            Self::I16(v) => DataRef::I16(v),
            Self::I32(v) => DataRef::I32(v),
            Self::I64(v) => DataRef::I64(v),
            Self::U8(v) => DataRef::U8(v),
            Self::U16(v) => DataRef::U16(v),
            Self::U32(v) => DataRef::U32(v),
            Self::U64(v) => DataRef::U64(v),
            Self::Bool(v) => DataRef::Bool(v),
        }
    }

    /// A mutable view of the elements.
    pub fn view_mut(&mut self) -> DataMut<'_> {
        match self {
            Self::F32(v) => DataMut::F32(v),
            Self::F64(v) => DataMut::F64(v),
            Self::F16(v) => DataMut::F16(v),
            Self::BF16(v) => DataMut::BF16(v),
            Self::I8(v) => DataMut::I8(v),
            Self::I16(v) => DataMut::I16(v),
            Self::I32(v) => DataMut::I32(v),
            Self::I64(v) => DataMut::I64(v),
            Self::U8(v) => DataMut::U8(v),
            Self::U16(v) => DataMut::U16(v),
            Self::U32(v) => DataMut::U32(v),
            Self::U64(v) => DataMut::U64(v),
            Self::Bool(v) => DataMut::Bool(v),
        }
    }
}

impl<'a> DataMut<'a> {
    /// The elements' bytes, which are their little-endian encoding (as
    /// ONNX stores them) on a little-endian machine, for a reader that
    /// fills them straight from storage. `None` for `Bool` (not every byte
    /// is a valid `bool`) and on a big-endian machine. A checked cast
    /// (zerocopy), no `unsafe`.
    pub fn into_le_bytes(self) -> Option<&'a mut [u8]> {
        use zerocopy::IntoBytes;
        if cfg!(target_endian = "big") {
            return None;
        }
        Some(match self {
            Self::F32(v) => v.as_mut_bytes(),
            Self::F64(v) => v.as_mut_bytes(),
            Self::F16(v) => v.as_mut_bytes(),
            Self::BF16(v) => v.as_mut_bytes(),
            Self::I8(v) => v.as_mut_bytes(),
            Self::I16(v) => v.as_mut_bytes(),
            Self::I32(v) => v.as_mut_bytes(),
            Self::I64(v) => v.as_mut_bytes(),
            Self::U8(v) => v,
            Self::U16(v) => v.as_mut_bytes(),
            Self::U32(v) => v.as_mut_bytes(),
            Self::U64(v) => v.as_mut_bytes(),
            Self::Bool(_) => return None,
        })
    }
}

impl<'a> DataRef<'a> {
    /// `bytes` viewed in place as elements of `dtype` stored little-endian
    /// as ONNX stores them: `None` when they cannot be (a `Bool` or 4-bit
    /// type, a big-endian target, a length that is not whole elements, or
    /// a start misaligned for the type).
    pub fn from_le_bytes(dtype: ElementType, bytes: &'a [u8]) -> Option<Self> {
        let size = usize::try_from(dtype.byte_len(1)?).ok()?;
        if !super::Tensor::views_in_place(dtype) || size == 0 || !bytes.len().is_multiple_of(size) {
            return None;
        }
        shared_view(dtype, bytes, 0, bytes.len() / size)
    }
}

/// The elements of a shared tensor as `T`: `None` when the range leaves
/// `bytes` or its start is misaligned for `T`. A checked cast (zerocopy,
/// which `half` implements for `f16` and `bf16`), no `unsafe`.
fn cast<T: zerocopy::FromBytes + zerocopy::Immutable>(
    bytes: &[u8],
    offset: usize,
    elements: usize,
) -> Option<&[T]> {
    let len = elements.checked_mul(std::mem::size_of::<T>())?;
    let raw = bytes.get(offset..offset.checked_add(len)?)?;
    <[T] as zerocopy::FromBytes>::ref_from_bytes(raw).ok()
}

/// The typed view of shared bytes, `None` for a type that cannot be shared
/// or a range that does not fit.
pub(super) fn shared_view(
    dtype: ElementType,
    bytes: &[u8],
    offset: usize,
    elements: usize,
) -> Option<DataRef<'_>> {
    use ElementType as T;
    Some(match dtype {
        T::F32 => DataRef::F32(cast(bytes, offset, elements)?),
        T::F64 => DataRef::F64(cast(bytes, offset, elements)?),
        T::F16 => DataRef::F16(cast(bytes, offset, elements)?),
        T::BF16 => DataRef::BF16(cast(bytes, offset, elements)?),
        T::I8 => DataRef::I8(cast(bytes, offset, elements)?),
        T::I16 => DataRef::I16(cast(bytes, offset, elements)?),
        T::I32 => DataRef::I32(cast(bytes, offset, elements)?),
        T::I64 => DataRef::I64(cast(bytes, offset, elements)?),
        T::U8 => DataRef::U8(cast(bytes, offset, elements)?),
        T::U16 => DataRef::U16(cast(bytes, offset, elements)?),
        T::U32 => DataRef::U32(cast(bytes, offset, elements)?),
        T::U64 => DataRef::U64(cast(bytes, offset, elements)?),
        // Bool bytes other than 0 and 1 are not valid `bool`s; 4-bit types
        // need unpacking.
        T::Bool | T::I4 | T::U4 => return None,
    })
}
