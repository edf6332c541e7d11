//! Packed weights (cold path to build, hot path to read): the parts a fast
//! kernel consumes, owned in memory or used in place from a read-only
//! mapping of a prepared-cache payload.

use std::fmt::Debug;
use std::mem::MaybeUninit;
use std::sync::Arc;

use crate::{ElementType, KernelError, SharedBytes, TensorData, ZeroedBlock};

/// One part of a packed weight.
#[derive(Debug, Clone)]
pub enum PackedPart {
    /// Elements owned in memory.
    Owned(TensorData),
    /// `elements` little-endian values of `dtype` at `offset` in `bytes`,
    /// aligned for the type: used in place, never copied or decoded. Made
    /// by [`PackedPart::mapped`], which checks all of that.
    Mapped {
        /// The element type (`U8`, `U64` or `F32`).
        dtype: ElementType,
        /// The bytes the part lies in.
        bytes: Arc<dyn SharedBytes>,
        /// Where the part starts in `bytes`.
        offset: usize,
        /// Elements.
        elements: usize,
    },
}

impl From<TensorData> for PackedPart {
    fn from(data: TensorData) -> Self {
        Self::Owned(data)
    }
}

macro_rules! view {
    ($($get:ident, $variant:ident, $t:ty;)*) => {$(
        #[doc = concat!("The elements as `", stringify!($t), "`, if that is the type.")]
        pub fn $get(&self) -> Option<&[$t]> {
            match self {
                Self::Owned(TensorData::$variant(v)) => Some(v),
                Self::Owned(_) => None,
                Self::Mapped { dtype, bytes, offset, elements } => {
                    if *dtype != ElementType::$variant {
                        return None;
                    }
                    let len = elements.checked_mul(std::mem::size_of::<$t>())?;
                    let raw = bytes.bytes().get(*offset..offset.checked_add(len)?)?;
                    <[$t] as zerocopy::FromBytes>::ref_from_bytes(raw).ok()
                }
            }
        }
    )*};
}

impl PackedPart {
    view! {
        as_u8, U8, u8;
        as_u64, U64, u64;
        as_f32, F32, f32;
    }

    /// A part used in place: `elements` values of `dtype` at `offset` in
    /// `bytes`. `None` when the type is not one packed layouts use (`U8`,
    /// `U64`, `F32`), the range leaves `bytes`, the start is misaligned for
    /// the type, or the target is big-endian (the payload is little-endian).
    pub fn mapped(
        dtype: ElementType,
        bytes: Arc<dyn SharedBytes>,
        offset: usize,
        elements: usize,
    ) -> Option<Self> {
        if cfg!(target_endian = "big")
            || !matches!(dtype, ElementType::U8 | ElementType::U64 | ElementType::F32)
        {
            return None;
        }
        let part = Self::Mapped {
            dtype,
            bytes,
            offset,
            elements,
        };
        let readable = match dtype {
            ElementType::U8 => part.as_u8().is_some(),
            ElementType::U64 => part.as_u64().is_some(),
            _ => part.as_f32().is_some(),
        };
        readable.then_some(part)
    }

    /// The element type.
    pub fn dtype(&self) -> ElementType {
        match self {
            Self::Owned(d) => d.dtype(),
            Self::Mapped { dtype, .. } => *dtype,
        }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        match self {
            Self::Owned(d) => d.len(),
            Self::Mapped { elements, .. } => *elements,
        }
    }

    /// Whether the part has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the part is used in place from shared bytes.
    pub fn is_mapped(&self) -> bool {
        matches!(self, Self::Mapped { .. })
    }

    /// The elements as owned data (a copy of a mapped part).
    pub fn to_data(&self) -> TensorData {
        match self {
            Self::Owned(d) => d.clone(),
            Self::Mapped { .. } => {
                if let Some(v) = self.as_u8() {
                    TensorData::U8(v.to_vec())
                } else if let Some(v) = self.as_u64() {
                    TensorData::U64(v.to_vec())
                } else {
                    TensorData::F32(self.as_f32().map(<[f32]>::to_vec).unwrap_or_default())
                }
            }
        }
    }
}

/// Parts are equal when they hold the same elements, owned or mapped.
impl PartialEq for PackedPart {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Owned(a), Self::Owned(b)) => a == b,
            _ => self.dtype() == other.dtype() && self.to_data() == other.to_data(),
        }
    }
}

/// A prepacked weight: the parts a fast kernel consumes, under the layout
/// key that names every parameter that changed the bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedWeight {
    /// The layout key, e.g. `matmul-nbits-q4-v1-b32-zp0-t8-avx2`.
    pub layout: String,
    /// The packed parts (typed, so kernels read them without casts).
    pub parts: Vec<PackedPart>,
}

impl PackedWeight {
    /// Bytes held.
    pub fn byte_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| p.dtype().byte_len(p.len() as u64).unwrap_or(u64::MAX) as usize)
            .sum()
    }
}

/// The element types packed parts are written as.
pub(crate) trait PackedElement:
    Sized + Send + Sync + Clone + Default + zerocopy::FromBytes + zerocopy::IntoBytes
{
    /// The part's element type.
    const DTYPE: ElementType;
    /// Owned elements as tensor data.
    fn owned(v: Vec<Self>) -> TensorData;
}

impl PackedElement for u8 {
    const DTYPE: ElementType = ElementType::U8;
    fn owned(v: Vec<Self>) -> TensorData {
        TensorData::U8(v)
    }
}

impl PackedElement for f32 {
    const DTYPE: ElementType = ElementType::F32;
    fn owned(v: Vec<Self>) -> TensorData {
        TensorData::F32(v)
    }
}

/// A zeroed block for a part of `len` elements when that is 64 KiB or
/// more ([`ZeroedBlock::streamed`]: huge pages where the system has them,
/// a mapping of its own from [`crate::tensor::LARGE_BLOCK`] bytes, else a
/// block of a shared slab; a decode step streams every part once, and
/// huge pages spare it a page walk per 4 KiB); `None` for a smaller part
/// (or on a big-endian target: a part viewed in place must be
/// little-endian, [`PackedPart::mapped`]), which the caller keeps in a
/// vector.
///
/// # Errors
/// [`KernelError::Allocation`] when the system refuses the block.
fn large_block<T: PackedElement>(
    op: &'static str,
    len: usize,
) -> Option<Result<ZeroedBlock, KernelError>> {
    let bytes = len.saturating_mul(size_of::<T>());
    if bytes < crate::tensor::STREAMED_MIN || cfg!(target_endian = "big") {
        return None;
    }
    Some(ZeroedBlock::streamed(bytes).ok_or(KernelError::Allocation { op, bytes }))
}

/// The elements of a large part's block.
fn block_elements<'a, T: PackedElement>(
    op: &'static str,
    block: &'a mut ZeroedBlock,
) -> Result<&'a mut [T], KernelError> {
    let bytes = block.bytes().len();
    <[T] as zerocopy::FromBytes>::mut_from_bytes(block.bytes_mut())
        .map_err(|_| KernelError::Allocation { op, bytes })
}

/// A part of `len` elements written by `write` over zeros, in a block of
/// its own when large ([`large_block`]); `None` for a smaller part.
///
/// # Errors
/// [`KernelError::Allocation`] when the system refuses the block.
pub(crate) fn large_part<T: PackedElement>(
    op: &'static str,
    len: usize,
    write: impl FnOnce(&mut [T]),
) -> Option<Result<PackedPart, KernelError>> {
    let part = large_block::<T>(op, len)?.and_then(|mut block| {
        write(block_elements(op, &mut block)?);
        PackedPart::mapped(T::DTYPE, Arc::new(block), 0, len).ok_or(KernelError::Allocation {
            op,
            bytes: len.saturating_mul(size_of::<T>()),
        })
    });
    Some(part)
}

/// A packed part of `len` elements written a range at a time, each
/// element once, nothing zeroed first (packed objects are most of a
/// model): a block of its own when large ([`large_block`]), else a
/// vector's reserved room.
#[derive(Debug)]
pub(crate) struct PartWriter<T: PackedElement> {
    op: &'static str,
    len: usize,
    store: PartStore<T>,
}

#[derive(Debug)]
enum PartStore<T> {
    Block(ZeroedBlock),
    Vec(Vec<T>),
}

impl<T: PackedElement> PartWriter<T> {
    /// Room for a part of `len` elements.
    ///
    /// # Errors
    /// [`KernelError::Allocation`] when the system refuses the memory.
    pub(crate) fn new(op: &'static str, len: usize) -> Result<Self, KernelError> {
        let store = match large_block::<T>(op, len) {
            Some(block) => PartStore::Block(block?),
            None => PartStore::Vec(crate::scratch::with_capacity(op, len)?),
        };
        Ok(Self { op, len, store })
    }

    /// The part's elements, to be written (a block's are zeroed, a
    /// vector's not yet initialized).
    ///
    /// # Errors
    /// [`KernelError::Allocation`] if a block's bytes cannot be viewed as
    /// elements (not reached: blocks are aligned to 64 bytes).
    pub(crate) fn elements(&mut self) -> Result<&mut [MaybeUninit<T>], KernelError> {
        match &mut self.store {
            PartStore::Block(block) => {
                let elements = block_elements::<T>(self.op, block)?;
                // SAFETY: `MaybeUninit<T>` has `T`'s size and alignment,
                // and the elements are initialized (zeroed); the writers
                // (`finish`'s contract) only store initialized values, so
                // they stay so.
                Ok(unsafe { &mut *(std::ptr::from_mut(elements) as *mut [MaybeUninit<T>]) })
            }
            PartStore::Vec(v) => Ok(&mut v.spare_capacity_mut()[..self.len]),
        }
    }

    /// The finished part.
    ///
    /// # Safety
    /// Every element of [`elements`](Self::elements) was written, and no
    /// write stored an uninitialized value.
    pub(crate) unsafe fn finish(self) -> Result<PackedPart, KernelError> {
        match self.store {
            PartStore::Block(block) => PackedPart::mapped(T::DTYPE, Arc::new(block), 0, self.len)
                .ok_or(KernelError::Allocation {
                    op: self.op,
                    bytes: self.len.saturating_mul(size_of::<T>()),
                }),
            PartStore::Vec(mut v) => {
                // SAFETY: `new` reserved `len` elements and the caller
                // wrote every one of them (this function's contract).
                unsafe { v.set_len(self.len) };
                Ok(T::owned(v).into())
            }
        }
    }
}

/// A part of `len` elements written by `write` over zeros: a block of its
/// own when large ([`large_part`]), else a vector.
///
/// # Errors
/// [`KernelError::Allocation`] when the system refuses the memory.
pub(crate) fn zeroed_part<T: PackedElement>(
    op: &'static str,
    len: usize,
    write: impl Fn(&mut [T]),
) -> Result<PackedPart, KernelError> {
    if let Some(part) = large_part(op, len, &write) {
        return part;
    }
    let mut v = crate::scratch::filled(op, len, T::default())?;
    write(&mut v);
    Ok(T::owned(v).into())
}
