//! `SlabBlock`: zeroed bytes carved from a shared mapping whose 2 MiB
//! extents are transparent huge pages, for packed weight parts too small
//! for a mapping of their own (`ZeroedBlock`) but large enough that
//! their reads stream (cold path: allocation; hot path: the reads).
//!
//! Why: a decode step reads every weight once, about as fast as memory
//! delivers. A part on 4 KiB pages costs a page walk per 4 KiB of it, and
//! a hot loop that streams 85 MB a step (8 layers of 1-2 MB matrices)
//! pays that on every step: the int4 x int8 product read 43-47 GB/s from
//! 4 KiB pages and 48-49 GB/s from huge pages on a Zen 5 core (all of a
//! model's matrices, one thread). A part of its own on a huge-page
//! boundary would waste the rest of its last 2 MiB page, so parts share
//! slabs of [`SLAB`] bytes instead: a slab is an anonymous mapping
//! advised as huge pages, handed out front to back (never reused, so every
//! block is zero), and unmapped when its last block is dropped. A dropped
//! block gives its whole 4 KiB pages back to the system at once, so a part
//! evicted under a memory limit frees its memory as a block of its own
//! would.

use std::sync::Arc;

use crate::sync::Lock;

/// Smallest block taken from a slab (below it, the heap serves better):
/// packed parts from this size are blocks of their own or of a slab.
pub const SLAB_MIN: usize = 64 << 10;

/// The huge-page size of x86-64 and most arm64 kernels (slabs start on
/// its boundaries).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Bytes of one slab (a multiple of the huge-page size).
const SLAB: usize = 32 << 20;

/// Alignment of every block in a slab (a cache line).
const ALIGN: usize = 64;

/// One anonymous mapping; `base` is its first huge-page boundary.
struct Slab {
    map: memmap2::MmapMut,
    /// Offset of the slab's first byte in `map`.
    base: usize,
    /// The first byte's address, for blocks' views.
    ptr: *mut u8,
}

// SAFETY: `ptr` points into `map`, which the slab owns and never moves or
// unmaps while it lives; blocks read and write disjoint ranges through it
// (`SlabBlock`), each range by its one owner.
unsafe impl Send for Slab {}
// SAFETY: as above: shared references only hand out `ptr`, and every
// access through it is to a range one block owns.
unsafe impl Sync for Slab {}

impl Slab {
    /// A fresh slab; `None` if the system refuses the mapping.
    fn new() -> Option<Arc<Self>> {
        let mut map = memmap2::MmapMut::map_anon(SLAB + HUGE_PAGE).ok()?;
        let base = map.as_ptr().addr().wrapping_neg() % HUGE_PAGE;
        // Advice only: where transparent huge pages are off, 4 KiB pages
        // serve the slab.
        #[cfg(target_os = "linux")]
        let _ = map.advise_range(memmap2::Advice::HugePage, base, SLAB);
        let ptr = map[base..].as_mut_ptr();
        Some(Arc::new(Self { map, base, ptr }))
    }
}

/// The slab blocks are cut from, and how much of it is handed out.
static CURRENT: Lock<Option<(Arc<Slab>, usize)>> = Lock::new(None);

/// `len` zeroed bytes in a slab, aligned to a cache line.
pub struct SlabBlock {
    slab: Arc<Slab>,
    /// Offset of the block in the slab.
    start: usize,
    len: usize,
}

impl SlabBlock {
    /// `len` zero bytes (`SLAB_MIN <= len` and no more than a slab); `None`
    /// for another size or when the system refuses a new slab.
    pub(crate) fn zeroed(len: usize) -> Option<Self> {
        if !(SLAB_MIN..=SLAB).contains(&len) {
            return None;
        }
        let room = len.next_multiple_of(ALIGN);
        CURRENT.with(|current| {
            let fits = current
                .as_ref()
                .is_some_and(|(_, used)| used + room <= SLAB);
            if !fits {
                *current = Some((Slab::new()?, 0));
            }
            let (slab, used) = current.as_mut()?;
            let start = *used;
            *used += room;
            Some(Self {
                slab: Arc::clone(slab),
                start,
                len,
            })
        })
    }

    /// The block's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `start + len` is within the slab (`zeroed` handed out the
        // range from its unused part), no other block covers it, and
        // writes to it need `&mut self`.
        unsafe { std::slice::from_raw_parts(self.slab.ptr.add(self.start), self.len) }
    }

    /// The block's bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.slab.ptr.add(self.start), self.len) }
    }
}

/// The whole pages inside the block go back to the system now (the slab
/// itself only when its last block is gone).
impl Drop for SlabBlock {
    fn drop(&mut self) {
        const PAGE: usize = 4096;
        let from = (self.slab.base + self.start).next_multiple_of(PAGE);
        let to = (self.slab.base + self.start + self.len) / PAGE * PAGE;
        if to > from {
            // SAFETY: the pages in `from..to` lie wholly inside this block's
            // range, which no other block covers and nothing borrows now
            // (the block is being dropped); they read as zero afterwards
            // and no one reads them again (ranges are never handed out
            // twice). A failure only leaves the pages in.
            let _ = unsafe {
                self.slab.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    from,
                    to - from,
                )
            };
        }
    }
}

/// A filled block shared read-only, e.g. by a packed part that lies in it.
impl crate::SharedBytes for SlabBlock {
    fn bytes(&self) -> &[u8] {
        SlabBlock::bytes(self)
    }
}

impl std::fmt::Debug for SlabBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlabBlock")
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::{SLAB, SLAB_MIN, SlabBlock};

    #[test]
    fn blocks_are_zeroed_aligned_disjoint_and_keep_their_bytes() {
        let lens = [SLAB_MIN, SLAB_MIN + 1, 300_001, 1 << 20, SLAB_MIN + 4095];
        let mut blocks: Vec<SlabBlock> = lens
            .iter()
            .map(|&len| SlabBlock::zeroed(len).expect("a slab"))
            .collect();
        for (i, b) in blocks.iter_mut().enumerate() {
            assert!(b.bytes().iter().all(|&x| x == 0));
            assert_eq!(b.bytes().as_ptr().addr() % 64, 0);
            b.bytes_mut().fill(i as u8 + 1);
        }
        // Dropping one gives its pages back without touching its neighbours.
        let dropped = blocks.remove(2);
        drop(dropped);
        for (b, want) in blocks.iter().zip([1u8, 2, 4, 5]) {
            assert!(b.bytes().iter().all(|&x| x == want));
        }
        // A new block never reuses a range: it reads zero.
        let fresh = SlabBlock::zeroed(SLAB_MIN).expect("a slab");
        assert!(fresh.bytes().iter().all(|&x| x == 0));
    }

    #[test]
    fn sizes_outside_the_slab_range_are_refused() {
        assert!(SlabBlock::zeroed(SLAB_MIN - 1).is_none());
        assert!(SlabBlock::zeroed(SLAB + 1).is_none());
        assert!(SlabBlock::zeroed(SLAB).is_some());
    }
}
