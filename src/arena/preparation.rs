//! `PreparationArena`: zeroed, 64-byte-aligned buffers for source reads and
//! packing scratch, charged to the preparation domain until dropped (cold
//! path: one or two buffers per read or prepack task).

use std::fmt;
use std::ops::{Deref, DerefMut};

use onnx_prepared_kernels::{SharedBytes, ZeroedBlock};

use super::{ArenaError, Ceiling, Domain, MemoryBudget, Reservation};

/// The alignment of every [`PreparationBuffer`]'s first byte: a cache line,
/// and the alignment of tensors in external data files
/// ([`crate::limits::EXTERNAL_DATA_ALIGNMENT`]).
pub const PREPARATION_ALIGN: usize = 64;

/// Hands out [`PreparationBuffer`]s charged to [`Domain::Preparation`].
/// Cloning gives another handle to the same budget; the arena keeps no memory
/// of its own.
#[derive(Debug, Clone)]
pub struct PreparationArena {
    budget: MemoryBudget,
}

impl PreparationArena {
    /// An arena charging `budget`.
    pub fn new(budget: &MemoryBudget) -> Self {
        Self {
            budget: budget.clone(),
        }
    }

    /// A zeroed buffer of `len` bytes whose first byte is
    /// [`PREPARATION_ALIGN`]-aligned, charged (to this arena's budget and to
    /// the process's [`Ceiling`]) until it is dropped. A size the ceiling
    /// refuses, or memory the system refuses, is an error, never an abort.
    pub fn alloc_zeroed(&self, len: usize) -> Result<PreparationBuffer, ArenaError> {
        self.alloc_zeroed_under(&Ceiling::process(), len)
    }

    /// [`alloc_zeroed`](Self::alloc_zeroed) charging `ceiling`.
    pub fn alloc_zeroed_under(
        &self,
        ceiling: &Ceiling,
        len: usize,
    ) -> Result<PreparationBuffer, ArenaError> {
        let shared = ceiling.charge(Domain::Preparation, || "a preparation buffer".into(), len)?;
        let reservation = self.budget.reserve(Domain::Preparation, len)?;
        // Large blocks are mappings backed by huge pages where the system
        // has them: a read into fresh memory faults 2 MiB at a time.
        let Some(storage) = ZeroedBlock::zeroed(len, PREPARATION_ALIGN) else {
            return Err(ArenaError::AllocationFailed {
                domain: Domain::Preparation,
                requested: len,
            });
        };
        Ok(PreparationBuffer {
            storage: ChargedBlock {
                block: storage,
                _ceiling: shared,
            },
            reservation,
        })
    }

    /// Bytes live in the preparation domain now (all arenas of the budget).
    pub fn live_bytes(&self) -> usize {
        self.budget.live(Domain::Preparation)
    }

    /// The budget this arena charges.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }
}

/// A zeroed, 64-byte-aligned byte buffer from a [`PreparationArena`]. Derefs
/// to `[u8]`; dropping it frees the memory and returns its bytes to the
/// preparation domain.
#[must_use = "dropping a preparation buffer frees it at once"]
pub struct PreparationBuffer {
    storage: ChargedBlock,
    reservation: Reservation,
}

/// A block and its charge to the process's [`Ceiling`], returned when the
/// bytes are freed (with the block, even once shared).
struct ChargedBlock {
    block: ZeroedBlock,
    _ceiling: Reservation,
}

impl PreparationBuffer {
    /// The bytes charged for this buffer (its length).
    pub fn charged_bytes(&self) -> usize {
        self.reservation.bytes()
    }
}

impl PreparationBuffer {
    /// The buffer's bytes as shared bytes a tensor can view in place (no
    /// copy), and the charge for them, which the caller keeps for as long
    /// as it counts them in the preparation domain.
    pub fn into_shared(self) -> (std::sync::Arc<dyn SharedBytes>, Reservation) {
        (
            std::sync::Arc::new(FilledBuffer(self.storage)),
            self.reservation,
        )
    }
}

/// A filled [`PreparationBuffer`]'s bytes, shared read-only
/// ([`PreparationBuffer::into_shared`]).
struct FilledBuffer(ChargedBlock);

impl SharedBytes for FilledBuffer {
    fn bytes(&self) -> &[u8] {
        self.0.block.bytes()
    }
}

impl fmt::Debug for FilledBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilledBuffer")
            .field("len", &self.0.block.bytes().len())
            .finish_non_exhaustive()
    }
}

impl Deref for PreparationBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.storage.block.bytes()
    }
}

impl DerefMut for PreparationBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.storage.block.bytes_mut()
    }
}

impl AsRef<[u8]> for PreparationBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for PreparationBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for PreparationBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparationBuffer")
            .field("len", &self.storage.block.bytes().len())
            .field("reservation", &self.reservation)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::arena::BudgetLimits;

    #[test]
    fn buffers_are_aligned_zeroed_and_charged() {
        let budget = MemoryBudget::unlimited();
        let arena = PreparationArena::new(&budget);
        let mut buffers = Vec::new();
        // The last one is a mapping of its own (huge pages where there are).
        for len in [0, 1, 63, 64, 65, 1000, 4096, (2 << 20) + 5] {
            let mut buffer = arena.alloc_zeroed(len).unwrap();
            assert_eq!(buffer.len(), len);
            assert_eq!(buffer.as_ptr().addr() % PREPARATION_ALIGN, 0);
            assert!(buffer.iter().all(|&b| b == 0));
            buffer.fill(0xAB);
            buffers.push(buffer);
        }
        assert_eq!(
            arena.live_bytes(),
            1 + 63 + 64 + 65 + 1000 + 4096 + (2 << 20) + 5
        );
        assert!(buffers.iter().all(|b| b.iter().all(|&x| x == 0xAB)));
        drop(buffers);
        assert_eq!(arena.live_bytes(), 0);
        assert_eq!(budget.live(Domain::Preparation), 0);
    }

    #[test]
    fn buffers_share_the_ceiling_until_freed_even_when_shared() {
        let budget = MemoryBudget::unlimited();
        let arena = PreparationArena::new(&budget);
        let ceiling = Ceiling::new(1000);
        assert!(matches!(
            arena.alloc_zeroed_under(&ceiling, 1001),
            Err(ArenaError::AboveCeiling { .. })
        ));
        let first = arena.alloc_zeroed_under(&ceiling, 800).unwrap();
        assert!(matches!(
            arena.alloc_zeroed_under(&ceiling, 300),
            Err(ArenaError::CeilingHeld { live: 800, .. })
        ));
        assert_eq!(budget.live(Domain::Preparation), 800);
        // Shared bytes keep their ceiling charge; the budget's goes with
        // the reservation.
        let (bytes, reservation) = first.into_shared();
        drop(reservation);
        assert_eq!(ceiling.live(), 800);
        drop(bytes);
        assert_eq!(ceiling.live(), 0);
        let _second = arena.alloc_zeroed_under(&ceiling, 300).unwrap();
    }

    #[test]
    fn over_limit_is_refused() {
        let budget =
            MemoryBudget::new(BudgetLimits::unlimited().with_domain(Domain::Preparation, 100));
        let arena = PreparationArena::new(&budget);
        let _a = arena.alloc_zeroed(60).unwrap();
        assert!(matches!(
            arena.alloc_zeroed(41),
            Err(ArenaError::OverBudget { live: 60, .. })
        ));
        assert_eq!(arena.live_bytes(), 60);
    }
}
