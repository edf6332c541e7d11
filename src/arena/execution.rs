//! `ExecutionArena`: a bump arena for invocation-local intermediates and
//! kernel workspaces, reset per invocation with its capacity retained (hot
//! path: every intermediate of an invocation is allocated here).

use std::fmt;
use std::mem::size_of;

use bumpalo::Bump;

use super::{ArenaError, Domain, Element, MemoryBudget, UNLIMITED};
use crate::sync::{AtomicUsize, Ordering};

/// A `bumpalo` bump arena charged to [`Domain::Execution`], one per
/// invocation context (it is `Send` but not `Sync`).
///
/// * Every allocation charges its bytes (element count × element size) to the
///   execution domain and to the arena's per-invocation limit; a refused
///   allocation is an error, never a panic, and changes nothing.
/// * [`ExecutionArena::reset`] ends the invocation: it returns all charged
///   bytes and keeps the chunk capacity for the next invocation. If the
///   invocation needed several chunks, they are replaced by one chunk of their
///   total size (at most the limit plus [`PADDING_SLACK`]), so an invocation
///   of the same shape bump-allocates from one chunk.
/// * Capacity not handed out is counted as the domain's retained bytes.
///
/// The limit is enforced on the bytes handed out, exactly, by the accounting;
/// `Bump::set_allocation_limit` is not used, because it caps chunk capacity,
/// and bumpalo's chunk sizing (double the last chunk, halve while the request
/// still fits) makes it refuse requests well inside such a cap. While an
/// invocation grows the arena its chunks can hold more than the bytes handed
/// out (bumpalo doubles chunk sizes) until the reset trims them.
pub struct ExecutionArena {
    bump: Bump,
    budget: MemoryBudget,
    limit: usize,
    /// Bytes handed out (and charged) since the last reset. Only the thread
    /// that owns the arena touches it (the arena is not `Sync`); an atomic
    /// only because cells are named in `crate::sync` alone.
    live: AtomicUsize,
    /// The retained bytes this arena has added to the budget.
    retained: AtomicUsize,
}

impl ExecutionArena {
    /// An arena whose per-invocation limit is the execution domain's limit.
    pub fn new(budget: &MemoryBudget) -> Self {
        Self::with_limit(budget, UNLIMITED)
    }

    /// An arena whose per-invocation limit is `limit` bytes (at most the
    /// execution domain's limit).
    pub fn with_limit(budget: &MemoryBudget, limit: usize) -> Self {
        Self {
            bump: Bump::new(),
            budget: budget.clone(),
            limit: limit.min(budget.limit(Domain::Execution)),
            live: AtomicUsize::new(0),
            retained: AtomicUsize::new(0),
        }
    }

    /// The per-invocation limit, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes handed out (and charged) since the last reset. Not
    /// `Bump::allocated_bytes`, which is [`ExecutionArena::capacity_bytes`].
    pub fn allocated_bytes(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Bytes of chunk capacity the arena holds, handed out or not.
    pub fn capacity_bytes(&self) -> usize {
        self.bump.allocated_bytes()
    }

    /// A zeroed slice of `len` elements, valid until the next reset. Refused
    /// (changing nothing) when the bytes handed out since the reset would
    /// exceed the per-invocation limit, or the budget refuses them.
    pub fn alloc_slice_zeroed<T: Element>(&self, len: usize) -> Result<&mut [T], ArenaError> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or(ArenaError::TooLarge {
                domain: Domain::Execution,
                len,
                element_bytes: size_of::<T>(),
            })?;
        let live = self.live.load(Ordering::Relaxed);
        if bytes == 0 {
            return Ok(&mut []);
        }
        if live.checked_add(bytes).is_none_or(|next| next > self.limit) {
            return Err(ArenaError::InvocationLimit {
                requested: bytes,
                live,
                limit: self.limit,
            });
        }
        self.budget.shared().reserve(Domain::Execution, bytes)?;
        match self.bump.try_alloc_slice_fill_copy(len, T::ZERO) {
            Ok(slice) => {
                self.live.store(live + bytes, Ordering::Relaxed);
                self.sync_retained();
                Ok(slice)
            }
            Err(_) => {
                self.budget.shared().release(Domain::Execution, bytes);
                Err(ArenaError::AllocationFailed {
                    domain: Domain::Execution,
                    requested: bytes,
                })
            }
        }
    }

    /// [`ExecutionArena::alloc_slice_zeroed`] for `f32`.
    pub fn alloc_f32(&self, len: usize) -> Result<&mut [f32], ArenaError> {
        self.alloc_slice_zeroed(len)
    }

    /// [`ExecutionArena::alloc_slice_zeroed`] for `u8`.
    pub fn alloc_u8(&self, len: usize) -> Result<&mut [u8], ArenaError> {
        self.alloc_slice_zeroed(len)
    }

    /// Ends the invocation: every slice handed out is gone (the `&mut self`
    /// proves no borrow remains), their bytes are returned to the execution
    /// domain, and the capacity is kept as retained bytes.
    pub fn reset(&mut self) {
        let live = self.live.swap(0, Ordering::Relaxed);
        self.budget.shared().release(Domain::Execution, live);
        let capacity = self.bump.allocated_bytes();
        self.bump.reset();
        if self.bump.allocated_bytes() < capacity {
            // The invocation spilled into more than one chunk: keep one chunk
            // of their total instead (never more than a whole invocation can
            // use), so an invocation of the same shape allocates from one.
            let target = capacity.min(self.limit.saturating_add(PADDING_SLACK));
            if let Ok(bump) = Bump::try_with_capacity(target) {
                self.bump = bump;
            }
        }
        self.sync_retained();
    }

    /// Brings the budget's retained count for this arena to its capacity not
    /// handed out.
    fn sync_retained(&self) {
        let now = self
            .bump
            .allocated_bytes()
            .saturating_sub(self.live.load(Ordering::Relaxed));
        let before = self.retained.swap(now, Ordering::Relaxed);
        self.budget
            .shared()
            .set_retained(Domain::Execution, before, now);
    }
}

/// Room for alignment padding between allocations that a chunk kept across
/// a reset has beyond the per-invocation limit.
pub const PADDING_SLACK: usize = 4096;

impl Drop for ExecutionArena {
    fn drop(&mut self) {
        let live = self.live.swap(0, Ordering::Relaxed);
        self.budget.shared().release(Domain::Execution, live);
        let retained = self.retained.swap(0, Ordering::Relaxed);
        self.budget
            .shared()
            .set_retained(Domain::Execution, retained, 0);
    }
}

impl fmt::Debug for ExecutionArena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionArena")
            .field("allocated_bytes", &self.allocated_bytes())
            .field("capacity_bytes", &self.capacity_bytes())
            .field("limit", &self.limit)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::arena::BudgetLimits;

    #[test]
    fn reset_keeps_capacity_as_retained() {
        let budget = MemoryBudget::unlimited();
        let mut arena = ExecutionArena::new(&budget);
        for round in 0..3 {
            let a = arena.alloc_f32(1000).unwrap();
            let b = arena.alloc_u8(10_000).unwrap();
            assert!(a.iter().all(|&x| x == 0.0) && b.iter().all(|&x| x == 0));
            a.fill(1.0);
            b.fill(7);
            assert_eq!(arena.allocated_bytes(), 14_000);
            assert_eq!(budget.live(Domain::Execution), 14_000);
            assert_eq!(
                budget.live(Domain::Execution) + budget.retained(Domain::Execution),
                arena.capacity_bytes()
            );
            arena.reset();
            assert_eq!(budget.live(Domain::Execution), 0, "round {round}");
            assert!(budget.retained(Domain::Execution) >= 14_000);
            assert_eq!(budget.retained(Domain::Execution), arena.capacity_bytes());
        }
        drop(arena);
        assert_eq!(budget.retained(Domain::Execution), 0);
        assert_eq!(budget.peak(Domain::Execution), 14_000);
    }

    #[test]
    fn spilled_chunks_become_one_bounded_chunk() {
        let limit = 256 * 1024;
        let budget = MemoryBudget::unlimited();
        let mut arena = ExecutionArena::with_limit(&budget, limit);
        let mut total = 0;
        while total + 4000 <= limit {
            arena.alloc_u8(4000).unwrap();
            total += 4000;
        }
        let spilled = arena.capacity_bytes();
        assert!(spilled > total);
        arena.reset();
        let kept = arena.capacity_bytes();
        assert!(kept >= total.min(spilled) && kept <= limit + PADDING_SLACK + 4096);
        // The same invocation now fits the one chunk.
        for _ in 0..total / 4000 {
            arena.alloc_u8(4000).unwrap();
        }
        assert_eq!(arena.capacity_bytes(), kept);
        // Any invocation within the limit succeeds, whatever its shape.
        arena.reset();
        arena.alloc_u8(limit - 8).unwrap();
        arena.alloc_u8(8).unwrap();
        assert_eq!(budget.peak(Domain::Execution), limit);
    }

    #[test]
    fn per_invocation_limit_is_an_error() {
        let budget =
            MemoryBudget::new(BudgetLimits::unlimited().with_domain(Domain::Execution, 4096));
        let arena = ExecutionArena::new(&budget);
        assert_eq!(arena.limit(), 4096);
        let _a = arena.alloc_f32(1000).unwrap();
        assert_eq!(
            arena.alloc_f32(25).unwrap_err(),
            ArenaError::InvocationLimit {
                requested: 100,
                live: 4000,
                limit: 4096,
            }
        );
        assert_eq!(arena.allocated_bytes(), 4000);
        let tight = ExecutionArena::with_limit(&budget, 100);
        assert_eq!(tight.limit(), 100);
        assert!(matches!(
            tight.alloc_u8(97),
            Err(ArenaError::OverBudget { live: 4000, .. })
        ));
        assert!(tight.alloc_u8(usize::MAX).is_err());
        assert!(matches!(
            tight.alloc_slice_zeroed::<f64>(usize::MAX),
            Err(ArenaError::TooLarge { .. })
        ));
        assert_eq!(budget.live(Domain::Execution), 4000);
    }
}
