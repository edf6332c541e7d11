//! Element types and dense tensors (hot path: kernels read and write these).

use std::sync::Arc;

use half::{bf16, f16};

use std::fmt::Debug;

use crate::KernelError;

mod aligned;
mod block;
mod data;
mod slab;
#[cfg(test)]
mod tests;

use crate::ElementType;
use aligned::LineAligned;
pub use block::{LARGE as LARGE_BLOCK, ZeroedBlock};
use data::shared_view;
pub use data::{DataMut, DataRef, TensorData};
pub use slab::SLAB_MIN as STREAMED_MIN;

/// Read-only bytes a shared [`Tensor`] or a [`PackedPart`](crate::PackedPart)
/// may borrow, kept alive by it (a mapping of a prepared-cache payload or of
/// a model's external data file, say).
pub trait SharedBytes: Send + Sync + Debug {
    /// The bytes: the same slice (address and length) on every call, which
    /// views checked once at construction rely on.
    fn bytes(&self) -> &[u8];
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
    /// `elements` native values of `dtype` in bytes of its own that start
    /// on a cache line ([`Tensor::zeros`]; never `Bool` or a 4-bit type).
    Aligned {
        dtype: ElementType,
        bytes: LineAligned,
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
            Self::Aligned {
                dtype,
                bytes,
                elements,
            } => match shared_view(*dtype, bytes.bytes(), 0, *elements) {
                Some(view) => view.fmt(f),
                None => write!(f, "Aligned({dtype} x {elements})"),
            },
        }
    }
}

/// A tensor's own storage lent as shared bytes ([`Tensor::into_shared`]).
#[derive(Debug)]
struct StorageBytes(Storage);

impl SharedBytes for StorageBytes {
    fn bytes(&self) -> &[u8] {
        match &self.0 {
            Storage::Owned(d) => d.view().into_bytes(),
            Storage::Aligned { bytes, .. } => bytes.bytes(),
            Storage::Shared { bytes, .. } => bytes.bytes(),
        }
    }
}

/// A dense row-major tensor, its elements owned in memory (a vector given
/// to [`Tensor::new`], or a cache-line-aligned block from
/// [`Tensor::zeros`]) or used in place from shared read-only bytes (see
/// [`Tensor::shared`]). The default is an empty f32 vector (a placeholder
/// that holds no allocation).
///
/// Cloning a shared tensor shares its bytes; mutating one
/// ([`Tensor::view_mut`], the `as_*_mut` accessors, [`Tensor::copy_from`])
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
                    match self.view_mut() {
                        DataMut::$variant(v) => Some(v),
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
            Storage::Owned(_) | Storage::Aligned { .. } => self.clone(),
            Storage::Shared { .. } => Self {
                shape: self.shape.clone(),
                data: Storage::Owned(self.data().to_data()),
            },
        }
    }

    /// The same tensor with its elements behind shared bytes (moved, not
    /// copied): clones then share them instead of copying, so one output
    /// can be handed to several holders (a caller's value, the next run's
    /// input) at no cost. A tensor already shared, and one of a type that
    /// is never viewed in place (`Bool`, the 4-bit types), comes back as
    /// it is.
    pub fn into_shared(self) -> Self {
        if self.is_shared() || !Self::views_in_place(self.dtype()) {
            return self;
        }
        let Self { shape, data } = self;
        let dtype = match &data {
            Storage::Owned(d) => d.dtype(),
            Storage::Aligned { dtype, .. } | Storage::Shared { dtype, .. } => *dtype,
        };
        let owned = Arc::new(StorageBytes(data));
        match Self::shared(shape.clone(), dtype, owned.clone(), 0) {
            Some(t) => t,
            // The storage's own bytes always fit its elements; should the
            // view be refused anyway, the tensor stays as it was.
            None => {
                let data = Arc::try_unwrap(owned).map_or_else(|a| a.0.clone(), |b| b.0);
                Self { shape, data }
            }
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
    ///
    /// The elements start on a 64-byte boundary (`Bool` ones excepted),
    /// as kernels writing one output from several threads need (no cache
    /// line holds elements of two threads' column blocks).
    pub fn zeros(dtype: ElementType, shape: Vec<usize>) -> Result<Self, KernelError> {
        let overflow = || KernelError::Shape(format!("shape {shape:?} overflows"));
        let elements = element_count(&shape).ok_or_else(overflow)?;
        let unsupported = KernelError::UnsupportedType {
            op: "Tensor",
            dtype,
        };
        let data = match dtype {
            ElementType::I4 | ElementType::U4 => return Err(unsupported),
            ElementType::Bool => {
                Storage::Owned(TensorData::zeros(dtype, elements).ok_or(unsupported)?)
            }
            _ => {
                let bytes = dtype
                    .byte_len(elements as u64)
                    .and_then(|b| usize::try_from(b).ok())
                    .and_then(LineAligned::zeroed)
                    .ok_or_else(overflow)?;
                Storage::Aligned {
                    dtype,
                    bytes,
                    elements,
                }
            }
        };
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
        match &self.data {
            Storage::Owned(d) => d.dtype(),
            Storage::Aligned { dtype, .. } => *dtype,
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
            Storage::Shared { elements, .. } | Storage::Aligned { elements, .. } => *elements,
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
            Storage::Aligned {
                dtype,
                bytes,
                elements,
            } => {
                // Sized and aligned for the type by `Tensor::zeros`.
                let view = shared_view(*dtype, bytes.bytes(), 0, *elements);
                debug_assert!(view.is_some(), "aligned bytes fit their elements");
                view.unwrap_or(DataRef::U8(&[]))
            }
        }
    }

    /// The elements as a vector of their type, mutable (the shape stays).
    /// A shared tensor, or one made by [`Tensor::zeros`], is first copied
    /// into an owned vector; [`Tensor::view_mut`] and the `as_*_mut`
    /// accessors write in place.
    pub fn data_mut(&mut self) -> &mut TensorData {
        if !matches!(self.data, Storage::Owned(_)) {
            self.data = Storage::Owned(self.data().to_data());
        }
        match &mut self.data {
            Storage::Owned(d) => d,
            _ => unreachable!("made owned above"),
        }
    }

    /// The elements, mutable, in place (the shape stays). A shared tensor
    /// is first copied into an owned one (copy on write).
    #[inline]
    pub fn view_mut(&mut self) -> DataMut<'_> {
        if self.is_shared() {
            self.data = Storage::Owned(self.data().to_data());
        }
        match &mut self.data {
            Storage::Owned(d) => d.view_mut(),
            Storage::Aligned {
                dtype,
                bytes,
                elements,
            } => {
                let view = aligned::view_mut(*dtype, bytes.bytes_mut(), *elements);
                debug_assert!(view.is_some(), "aligned bytes fit their elements");
                view.unwrap_or(DataMut::U8(&mut []))
            }
            Storage::Shared { .. } => unreachable!("made owned above"),
        }
    }

    /// Replaces the elements with `data`, which must hold as many.
    pub fn set_data(&mut self, data: TensorData) -> Result<(), KernelError> {
        if data.len() != self.len() {
            return Err(KernelError::Shape(format!(
                "cannot put {} elements into a tensor of shape {:?}",
                data.len(),
                self.shape
            )));
        }
        self.data = Storage::Owned(data);
        Ok(())
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
                match (self.view_mut(), other.data()) {
                    $((DataMut::$v(d), DataRef::$v(s)) => d.copy_from_slice(s),)*
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
            other => Self {
                shape: Vec::new(),
                data: other,
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
