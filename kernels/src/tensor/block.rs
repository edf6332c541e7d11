//! `ZeroedBlock`: zeroed bytes, owned, whose first byte sits on a chosen
//! boundary. The one allocation behind activation buffers
//! ([`Tensor::zeros`](super::Tensor::zeros)), large packed weights and the
//! runtime's preparation buffers (source reads), so all get the same
//! placement and paging.
//!
//! Small blocks come from the system allocator, over-allocated by the
//! alignment and used from the first boundary (a zeroed allocation leaves
//! untouched pages to the kernel). A block of [`LARGE`] bytes or more is an
//! anonymous mapping of its own, started on a [`LARGE`] boundary, whose
//! whole 2 MiB extents the kernel is asked to back with transparent huge
//! pages: its first touch then faults 2 MiB at a time instead of 4 KiB
//! (tiny-llm's 8 MiB embedding, read from the page cache into a fresh
//! block: 9.5–15 ms with 4 KiB faults, 3.5–4.2 ms with huge pages on a
//! 2-vCPU VM; BENCHMARKS.md), and freeing it returns the memory to the
//! system at once. Only pages inside the block
//! are ever touched, so the resident size is the block's, rounded to pages.
//! No `unsafe`: the mapping is memmap2's safe anonymous one.

/// Size from which a block is a mapping of its own (a huge page on x86-64
/// and most arm64 kernels).
pub const LARGE: usize = super::slab::HUGE_PAGE;

/// `len` zeroed bytes starting at a multiple of the alignment asked for.
pub struct ZeroedBlock {
    storage: Storage,
    start: usize,
    len: usize,
}

enum Storage {
    Heap(Box<[u8]>),
    Mapped(memmap2::MmapMut),
    Slab(super::slab::SlabBlock),
}

impl ZeroedBlock {
    /// `len` zero bytes whose first byte's address is a multiple of `align`
    /// (a power of two); `None` when `align` is not one, the size with its
    /// slack overflows, or the system has not the memory (never an abort:
    /// sizes come from models and inputs).
    pub fn zeroed(len: usize, align: usize) -> Option<Self> {
        if !align.is_power_of_two() {
            return None;
        }
        if len >= LARGE {
            // A large block the system will not map is not asked of the
            // heap either: the allocator would map it the same way.
            return Self::mapped(len, align.max(LARGE));
        }
        let size = len.checked_add(align - 1)?;
        let mut buf = Vec::new();
        buf.try_reserve_exact(size).ok()?;
        // Small (under `LARGE`): writing the zeros costs little.
        buf.resize(size, 0u8);
        let buf = buf.into_boxed_slice();
        // Moving the box never moves its heap block: `start` stays valid.
        let start = buf.as_ptr().addr().wrapping_neg() % align;
        Some(Self {
            storage: Storage::Heap(buf),
            start,
            len,
        })
    }

    /// `len` zero bytes for a part that is read often and whole (a packed
    /// weight), aligned to a cache line: from [`LARGE`] bytes a mapping of
    /// its own, as [`zeroed`](Self::zeroed); from 64 KiB a block of a
    /// shared huge-page slab (`tensor/slab.rs`); smaller, from the heap.
    pub fn streamed(len: usize) -> Option<Self> {
        if len >= LARGE {
            return Self::zeroed(len, 64);
        }
        match super::slab::SlabBlock::zeroed(len) {
            Some(block) => Some(Self {
                storage: Storage::Slab(block),
                start: 0,
                len,
            }),
            None => Self::zeroed(len, 64),
        }
    }

    /// An anonymous mapping with room for `len` bytes from an `align`
    /// boundary; `None` if the system refuses it.
    fn mapped(len: usize, align: usize) -> Option<Self> {
        let map = memmap2::MmapMut::map_anon(len.checked_add(align - 1)?).ok()?;
        let start = map.as_ptr().addr().wrapping_neg() % align;
        let whole = len / LARGE * LARGE;
        // Advice only: where transparent huge pages are off, 4 KiB pages
        // serve the block as they would a heap one.
        #[cfg(target_os = "linux")]
        let _ = map.advise_range(memmap2::Advice::HugePage, start, whole);
        #[cfg(not(target_os = "linux"))]
        let _ = whole;
        Some(Self {
            storage: Storage::Mapped(map),
            start,
            len,
        })
    }

    /// The block's bytes.
    pub fn bytes(&self) -> &[u8] {
        let all: &[u8] = match &self.storage {
            Storage::Heap(b) => b,
            Storage::Mapped(m) => m,
            Storage::Slab(b) => b.bytes(),
        };
        &all[self.start..self.start + self.len]
    }

    /// The block's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let all: &mut [u8] = match &mut self.storage {
            Storage::Heap(b) => b,
            Storage::Mapped(m) => m,
            Storage::Slab(b) => b.bytes_mut(),
        };
        &mut all[self.start..self.start + self.len]
    }

    /// Whether the block is a mapping of its own (see [`LARGE`]).
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped(_))
    }
}

/// A filled block shared read-only, e.g. by a packed part that lies in it.
impl crate::SharedBytes for ZeroedBlock {
    fn bytes(&self) -> &[u8] {
        ZeroedBlock::bytes(self)
    }
}

impl std::fmt::Debug for ZeroedBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeroedBlock")
            .field("len", &self.len)
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::{LARGE, ZeroedBlock};

    #[test]
    fn blocks_are_zeroed_aligned_and_writable_on_both_sides_of_the_large_size() {
        for align in [1usize, 64, 4096] {
            for len in [0, 1, 63, 4097, LARGE - 1, LARGE, LARGE + 4097, 3 * LARGE] {
                let mut b = ZeroedBlock::zeroed(len, align).expect("fits");
                assert_eq!(b.bytes().len(), len);
                assert_eq!(b.bytes().as_ptr().addr() % align, 0, "len {len}");
                assert!(b.bytes().iter().all(|&x| x == 0), "len {len}");
                assert_eq!(b.is_mapped(), len >= LARGE, "len {len}");
                if b.is_mapped() {
                    assert_eq!(b.bytes().as_ptr().addr() % LARGE, 0);
                }
                for (i, x) in b.bytes_mut().iter_mut().enumerate() {
                    *x = i as u8;
                }
                assert!(b.bytes().iter().enumerate().all(|(i, &x)| x == i as u8));
            }
        }
    }

    #[test]
    fn streamed_blocks_are_zeroed_aligned_and_writable_at_every_size() {
        let slab = super::super::slab::SLAB_MIN;
        for len in [0, 1, slab - 1, slab, LARGE - 1, LARGE, LARGE + 4097] {
            let mut b = ZeroedBlock::streamed(len).expect("fits");
            assert_eq!(b.bytes().len(), len);
            assert_eq!(b.bytes().as_ptr().addr() % 64, 0, "len {len}");
            assert!(b.bytes().iter().all(|&x| x == 0), "len {len}");
            assert_eq!(b.is_mapped(), len >= LARGE, "len {len}");
            let in_slab = matches!(b.storage, super::Storage::Slab(_));
            assert_eq!(in_slab, (slab..LARGE).contains(&len), "len {len}");
            for (i, x) in b.bytes_mut().iter_mut().enumerate() {
                *x = i as u8;
            }
            assert!(b.bytes().iter().enumerate().all(|(i, &x)| x == i as u8));
        }
    }

    #[test]
    fn impossible_requests_are_refused() {
        assert!(ZeroedBlock::zeroed(10, 3).is_none());
        assert!(ZeroedBlock::zeroed(usize::MAX, 64).is_none());
        // More than any address space holds: refused, not an abort.
        assert!(ZeroedBlock::zeroed(usize::MAX / 2, 64).is_none());
        assert!(ZeroedBlock::zeroed(1 << 62, 64).is_none());
    }
}
