//! Owned elements whose first byte starts a cache line: the storage of
//! [`Tensor::zeros`](super::Tensor::zeros), so outputs (activation buffers)
//! start on a 64-byte boundary as ONNX Runtime's allocator places them.
//!
//! Why it matters: a parallel matrix product splits its output by column
//! panels of 32 floats (128 bytes). When the output's first element sits
//! 16 bytes into a cache line (where the system allocator puts a large
//! block), every panel boundary cuts a line in two, and the two threads
//! computing neighbouring panels write that line in turn on every row and
//! every pass over `K`; the line moves between their caches each time.
//! Tiny-llm's two-thread prefill spent about 8 % of its time so.
//!
//! The bytes are a [`ZeroedBlock`] aligned to a line (large ones are
//! mappings of their own on huge-page boundaries, see [`super::block`]);
//! typed views are checked casts (zerocopy), no `unsafe`.

use half::{bf16, f16};

use super::block::ZeroedBlock;
use super::{DataMut, ElementType};

/// Cache-line size the storage aligns to.
const LINE: usize = 64;

/// `len` zeroed bytes, owned, starting at a [`LINE`] boundary.
pub(super) struct LineAligned(ZeroedBlock);

impl LineAligned {
    /// `len` zero bytes; `None` when `len` plus the alignment slack
    /// overflows.
    pub(super) fn zeroed(len: usize) -> Option<Self> {
        ZeroedBlock::zeroed(len, LINE).map(Self)
    }

    pub(super) fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }

    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        self.0.bytes_mut()
    }
}

/// A copy starts at a boundary of its own block.
impl Clone for LineAligned {
    fn clone(&self) -> Self {
        let mut copy = Self::zeroed(self.bytes().len()).expect("the original's size fits");
        copy.bytes_mut().copy_from_slice(self.bytes());
        copy
    }
}

/// The elements in `bytes` as `T`, mutable: `None` when the byte count
/// is not `elements` values or the start is misaligned for `T`.
fn cast_mut<T: zerocopy::FromBytes + zerocopy::IntoBytes>(
    bytes: &mut [u8],
    elements: usize,
) -> Option<&mut [T]> {
    let len = elements.checked_mul(std::mem::size_of::<T>())?;
    <[T] as zerocopy::FromBytes>::mut_from_bytes(bytes.get_mut(..len)?).ok()
}

/// The typed mutable view of native-endian element bytes; `None` for a
/// type whose bit patterns are not all valid (`Bool`) or storage-only
/// (4-bit), or bytes that do not fit.
pub(super) fn view_mut(
    dtype: ElementType,
    bytes: &mut [u8],
    elements: usize,
) -> Option<DataMut<'_>> {
    use ElementType as T;
    Some(match dtype {
        T::F32 => DataMut::F32(cast_mut(bytes, elements)?),
        T::F64 => DataMut::F64(cast_mut(bytes, elements)?),
        T::F16 => DataMut::F16(cast_mut::<f16>(bytes, elements)?),
        T::BF16 => DataMut::BF16(cast_mut::<bf16>(bytes, elements)?),
        T::I8 => DataMut::I8(cast_mut(bytes, elements)?),
        T::I16 => DataMut::I16(cast_mut(bytes, elements)?),
        T::I32 => DataMut::I32(cast_mut(bytes, elements)?),
        T::I64 => DataMut::I64(cast_mut(bytes, elements)?),
        T::U8 => DataMut::U8(cast_mut(bytes, elements)?),
        T::U16 => DataMut::U16(cast_mut(bytes, elements)?),
        T::U32 => DataMut::U32(cast_mut(bytes, elements)?),
        T::U64 => DataMut::U64(cast_mut(bytes, elements)?),
        T::Bool | T::I4 | T::U4 => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::{LINE, LineAligned};

    #[test]
    fn every_block_and_its_clone_start_on_a_line() {
        for len in [0usize, 1, 4, 63, 64, 65, 4096, 1 << 20, 5 << 20] {
            let mut a = LineAligned::zeroed(len).expect("fits");
            assert_eq!(a.bytes().len(), len);
            assert!(a.bytes().iter().all(|&b| b == 0));
            assert_eq!(a.bytes().as_ptr().addr() % LINE, 0, "len {len}");
            if len > 0 {
                a.bytes_mut()[len - 1] = 7;
            }
            let c = a.clone();
            assert_eq!(c.bytes().as_ptr().addr() % LINE, 0);
            assert_eq!(c.bytes(), a.bytes());
        }
        assert!(LineAligned::zeroed(usize::MAX).is_none());
    }
}
