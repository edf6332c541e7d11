//! Element types and dense tensors (hot path: kernels read and write these).

use std::sync::Arc;

use half::{bf16, f16};

use crate::{KernelError, SharedBytes};

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
/// type: what [`Tensor::data`] returns for owned and shared tensors alike.
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
}

/// Where a tensor's elements live.
#[derive(Clone)]
enum Storage {
    /// Owned in memory.
    Owned(TensorData),
    /// `elements` little-endian values of `dtype` at `offset` in `bytes`,
    /// aligned for the type and inside `bytes` (checked by
    /// [`Tensor::shared`]): used in place, never copied or decoded.
    Shared {
        dtype: ElementType,
        bytes: Arc<dyn SharedBytes>,
        offset: usize,
        elements: usize,
    },
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Owned(d) => d.fmt(f),
            Self::Shared {
                dtype, elements, ..
            } => write!(f, "Shared({dtype} x {elements})"),
        }
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
fn shared_view(
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

/// A dense row-major tensor, its elements owned in memory or used in place
/// from shared read-only bytes (see [`Tensor::shared`]). The default is an
/// empty f32 vector (a placeholder that holds no allocation).
///
/// Cloning a shared tensor shares its bytes; mutating one
/// ([`Tensor::data_mut`], the `as_*_mut` accessors, [`Tensor::copy_from`])
/// first copies its elements into an owned vector.
#[derive(Clone)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Storage,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape)
            .field("data", &self.data)
            .finish()
    }
}

/// Tensors are equal when they have the same shape and elements, owned or
/// shared (compared in place, without allocating).
impl PartialEq for Tensor {
    fn eq(&self, other: &Self) -> bool {
        self.shape == other.shape && self.data() == other.data()
    }
}

/// Number of elements of `shape` (1 for a scalar), or `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl Default for Tensor {
    fn default() -> Self {
        Self {
            shape: Vec::new(),
            data: Storage::Owned(TensorData::F32(Vec::new())),
        }
    }
}

macro_rules! accessors {
    ($($variant:ident, $t:ty, $get:ident, $get_mut:ident;)*) => {
        impl Tensor {
            $(
                #[doc = concat!("The elements as `", stringify!($t), "`, if that is the type.")]
                pub fn $get(&self) -> Option<&[$t]> {
                    match self.data() {
                        DataRef::$variant(v) => Some(v),
                        _ => None,
                    }
                }

                #[doc = concat!("The elements as mutable `", stringify!($t), "`, if that is the type")]
                #[doc = " (a shared tensor is copied into an owned one first)."]
                pub fn $get_mut(&mut self) -> Option<&mut [$t]> {
                    match self.data_mut() {
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
        Ok(Self {
            shape,
            data: Storage::Owned(data),
        })
    }

    /// A tensor of `shape` whose elements are used in place: the
    /// little-endian values of `dtype` at `offset` in `bytes`, never copied
    /// or decoded. `None` (the caller decodes instead) when the target is
    /// big-endian, the type is `Bool` or a 4-bit type, the shape's element
    /// count overflows, the range leaves `bytes` or its start is misaligned
    /// for the type.
    pub fn shared(
        shape: Vec<usize>,
        dtype: ElementType,
        bytes: Arc<dyn SharedBytes>,
        offset: usize,
    ) -> Option<Self> {
        if !Self::views_in_place(dtype) {
            return None;
        }
        let elements = element_count(&shape)?;
        shared_view(dtype, bytes.bytes(), offset, elements)?;
        Some(Self {
            shape,
            data: Storage::Shared {
                dtype,
                bytes,
                offset,
                elements,
            },
        })
    }

    /// Whether [`shared`](Self::shared) can view stored values of `dtype`
    /// in place (given aligned bytes of the right length): on a
    /// little-endian target, every type but `Bool` and the 4-bit ones.
    pub fn views_in_place(dtype: ElementType) -> bool {
        cfg!(target_endian = "little")
            && !matches!(dtype, ElementType::Bool | ElementType::I4 | ElementType::U4)
    }

    /// A copy that owns its elements: a tensor over shared bytes is copied
    /// out of them (a clone would keep using them in place), an owned one
    /// is cloned. For values that outlive the bytes' lender, e.g. a
    /// caller's buffer lent for one run.
    pub fn to_owned_elements(&self) -> Self {
        match &self.data {
            Storage::Owned(_) => self.clone(),
            Storage::Shared { .. } => Self {
                shape: self.shape.clone(),
                data: Storage::Owned(self.data().to_data()),
            },
        }
    }

    /// Whether the elements are used in place from shared bytes (made by
    /// [`Tensor::shared`] and not mutated since).
    pub fn is_shared(&self) -> bool {
        matches!(self.data, Storage::Shared { .. })
    }

    /// Whether both tensors view the same shared bytes in place (say, one
    /// mapping of a data file).
    pub fn shares_bytes_with(&self, other: &Tensor) -> bool {
        match (&self.data, &other.data) {
            (Storage::Shared { bytes: a, .. }, Storage::Shared { bytes: b, .. }) => {
                std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
            }
            _ => false,
        }
    }

    /// A zero tensor of `dtype` and `shape`.
    pub fn zeros(dtype: ElementType, shape: Vec<usize>) -> Result<Self, KernelError> {
        let len = element_count(&shape)
            .ok_or_else(|| KernelError::Shape(format!("shape {shape:?} overflows")))?;
        let data = TensorData::zeros(dtype, len).ok_or(KernelError::UnsupportedType {
            op: "Tensor",
            dtype,
        })?;
        Ok(Self {
            shape,
            data: Storage::Owned(data),
        })
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
        match &self.data {
            Storage::Owned(d) => d.dtype(),
            Storage::Shared { dtype, .. } => *dtype,
        }
    }

    /// The dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match &self.data {
            Storage::Owned(d) => d.len(),
            Storage::Shared { elements, .. } => *elements,
        }
    }

    /// Bytes of the elements (saturating; a tensor that exists fits).
    pub fn byte_len(&self) -> usize {
        self.dtype()
            .byte_len(self.len() as u64)
            .map_or(usize::MAX, |b| usize::try_from(b).unwrap_or(usize::MAX))
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements, owned or in place.
    #[inline]
    pub fn data(&self) -> DataRef<'_> {
        match &self.data {
            Storage::Owned(d) => d.view(),
            Storage::Shared {
                dtype,
                bytes,
                offset,
                elements,
            } => {
                // `Tensor::shared` checked the view, and `SharedBytes`
                // returns the same bytes on every call; the empty fallback
                // is never taken.
                let view = shared_view(*dtype, bytes.bytes(), *offset, *elements);
                debug_assert!(view.is_some(), "shared bytes changed under a tensor");
                view.unwrap_or(DataRef::U8(&[]))
            }
        }
    }

    /// The elements, mutable (the shape stays). A shared tensor is first
    /// copied into an owned one (copy on write).
    pub fn data_mut(&mut self) -> &mut TensorData {
        if self.is_shared() {
            self.data = Storage::Owned(self.data().to_data());
        }
        match &mut self.data {
            Storage::Owned(d) => d,
            Storage::Shared { .. } => unreachable!("made owned above"),
        }
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
        if self.dtype() != other.dtype() || self.len() != other.len() {
            return Err(KernelError::Shape(format!(
                "cannot copy {} {:?} into {} {:?}",
                other.dtype(),
                other.shape,
                self.dtype(),
                self.shape
            )));
        }
        macro_rules! copy {
            ($($v:ident),*) => {
                match (self.data_mut(), other.data()) {
                    $((TensorData::$v(d), DataRef::$v(s)) => d.copy_from_slice(s),)*
                    // Same type, checked above.
                    _ => {}
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
        let data = match self.data {
            Storage::Owned(d) => d,
            shared @ Storage::Shared { .. } => Self {
                shape: Vec::new(),
                data: shared,
            }
            .data()
            .to_data(),
        };
        (self.shape, data)
    }

    /// Integer elements widened to i64 (for shape, axes and index operands).
    pub fn to_i64_vec(&self) -> Option<Vec<i64>> {
        match self.data() {
            DataRef::I64(v) => Some(v.to_vec()),
            DataRef::I32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use half::f16;

    use super::{DataRef, ElementType, Tensor, TensorData};
    use crate::SharedBytes;

    /// Bytes whose start is 8-byte aligned (backed by `u64`s).
    #[derive(Debug)]
    struct Aligned(Vec<u64>);

    impl SharedBytes for Aligned {
        fn bytes(&self) -> &[u8] {
            let len = self.0.len() * 8;
            &zerocopy::IntoBytes::as_bytes(&self.0[..])[..len]
        }
    }

    fn f32_bytes(values: &[f32]) -> Arc<dyn SharedBytes> {
        let mut words = vec![0u64; values.len().div_ceil(2) + 1];
        let bytes: &mut [u8] = zerocopy::IntoBytes::as_mut_bytes(&mut words[..]);
        for (i, v) in values.iter().enumerate() {
            bytes[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        Arc::new(Aligned(words))
    }

    #[test]
    fn shared_tensors_read_in_place_and_equal_owned_ones() {
        let values = [1.5f32, -2.0, 0.25, 8.0];
        let bytes = f32_bytes(&values);
        let t = Tensor::shared(vec![2, 2], ElementType::F32, bytes.clone(), 0).expect("aligned");
        assert!(t.is_shared());
        assert_eq!(t.as_f32(), Some(&values[..]));
        assert_eq!(t.len(), 4);
        assert_eq!(t.dtype(), ElementType::F32);
        let owned = Tensor::from_f32(vec![2, 2], values.to_vec()).unwrap();
        assert_eq!(t, owned);
        assert_ne!(t, Tensor::from_f32(vec![4], values.to_vec()).unwrap());
        // A clone shares the bytes; an owned copy does not hold them.
        let c = t.clone();
        assert!(c.is_shared());
        assert_eq!(c.data(), DataRef::F32(&values));
        let before = Arc::strong_count(&bytes);
        let o = t.to_owned_elements();
        assert!(!o.is_shared());
        assert_eq!(o, owned);
        assert_eq!(Arc::strong_count(&bytes), before, "the copy holds no view");
        assert!(!owned.to_owned_elements().is_shared());
        assert!(format!("{t:?}").contains("Shared(f32 x 4)"));
        // f16 reads in place too (two per four bytes).
        let h = Tensor::shared(vec![2], ElementType::F16, bytes.clone(), 4).expect("f16");
        let want: Vec<f16> = [(-2.0f32).to_bits()]
            .iter()
            .flat_map(|b| [f16::from_bits(*b as u16), f16::from_bits((*b >> 16) as u16)])
            .collect();
        assert_eq!(h.as_f16(), Some(&want[..]));
    }

    #[test]
    fn unsuitable_bytes_are_refused() {
        let bytes = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
        // Misaligned start, range past the end, bool and 4-bit types.
        assert!(Tensor::shared(vec![2], ElementType::F32, bytes.clone(), 2).is_none());
        assert!(Tensor::shared(vec![6], ElementType::F32, bytes.clone(), 4).is_none());
        assert!(Tensor::shared(vec![2], ElementType::Bool, bytes.clone(), 0).is_none());
        assert!(Tensor::shared(vec![2], ElementType::U4, bytes.clone(), 0).is_none());
        assert!(Tensor::shared(vec![usize::MAX, 2], ElementType::U8, bytes.clone(), 0).is_none());
        // Bytes have no alignment to miss.
        let u = Tensor::shared(vec![3], ElementType::U8, bytes, 1).expect("u8");
        assert_eq!(u.as_u8().map(<[u8]>::len), Some(3));
    }

    #[test]
    fn mutating_a_shared_tensor_copies_it_first() {
        let bytes = f32_bytes(&[1.0, 2.0]);
        let mut t = Tensor::shared(vec![2], ElementType::F32, bytes.clone(), 0).unwrap();
        let other = t.clone();
        t.as_f32_mut().unwrap()[0] = 7.0;
        assert!(!t.is_shared());
        assert_eq!(t.as_f32(), Some(&[7.0, 2.0][..]));
        // The bytes and other tensors sharing them are untouched.
        assert_eq!(other.as_f32(), Some(&[1.0, 2.0][..]));
        let mut dst = Tensor::shared(vec![2], ElementType::F32, bytes, 0).unwrap();
        dst.copy_from(&t).unwrap();
        assert_eq!(dst.as_f32(), Some(&[7.0, 2.0][..]));
        let (shape, data) = other.into_parts();
        assert_eq!((shape, data), (vec![2], TensorData::F32(vec![1.0, 2.0])));
        assert_eq!(t.to_i64_vec(), None);
    }

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
