//! `IoArena`: buffers that cross the runtime boundary (outputs leased to the
//! caller, staged inputs), charged to the I/O domain while leased, with a
//! small free list of returned buffers (cold path: a few leases per
//! invocation).

use std::any::Any;
use std::fmt;
use std::mem::size_of;
use std::ops::{Deref, DerefMut};

use super::{ArenaError, Domain, Element, MemoryBudget, Reservation};
use crate::sync::{Arc, FreeList};

/// How many returned buffers an [`IoArena`] keeps for reuse by default.
pub const IO_FREE_BUFFERS: usize = 8;

/// Leases zeroed buffers charged to [`Domain::Io`]. Cloning gives another
/// handle to the same arena (and free list).
///
/// A dropped [`IoLease`] returns its bytes to the domain and its buffer to the
/// free list (counted as retained) if the list has room; a later lease of the
/// same element type and length reuses it. [`IoArena::trim`] frees the list.
#[derive(Clone)]
pub struct IoArena {
    shared: Arc<IoShared>,
}

struct IoShared {
    budget: MemoryBudget,
    free: FreeList<FreeBuffer>,
}

/// A returned buffer: a `Box<[T]>` for some [`Element`] `T`.
struct FreeBuffer {
    bytes: usize,
    buffer: Box<dyn Any + Send + Sync>,
}

impl IoArena {
    /// An arena charging `budget` that keeps up to [`IO_FREE_BUFFERS`]
    /// returned buffers.
    pub fn new(budget: &MemoryBudget) -> Self {
        Self::with_free_buffers(budget, IO_FREE_BUFFERS)
    }

    /// An arena charging `budget` that keeps up to `free_buffers` returned
    /// buffers (0: none).
    pub fn with_free_buffers(budget: &MemoryBudget, free_buffers: usize) -> Self {
        Self {
            shared: Arc::new(IoShared {
                budget: budget.clone(),
                free: FreeList::new(free_buffers),
            }),
        }
    }

    /// A zeroed buffer of `len` elements, charged until the lease is dropped
    /// (or detached with [`IoLease::into_boxed_slice`]).
    pub fn lease<T: Element>(&self, len: usize) -> Result<IoLease<T>, ArenaError> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or(ArenaError::TooLarge {
                domain: Domain::Io,
                len,
                element_bytes: size_of::<T>(),
            })?;
        let reservation = self.shared.budget.reserve(Domain::Io, bytes)?;
        let buffer = match self.shared.take::<T>(len) {
            Some(mut buffer) => {
                buffer.fill(T::ZERO);
                buffer
            }
            None => vec![T::ZERO; len].into_boxed_slice(),
        };
        Ok(IoLease {
            buffer,
            reservation,
            home: Arc::clone(&self.shared),
        })
    }

    /// [`IoArena::lease`] for `f32`.
    pub fn lease_f32(&self, len: usize) -> Result<IoLease<f32>, ArenaError> {
        self.lease(len)
    }

    /// A leased copy of `data` (an input staged across the boundary).
    pub fn lease_copy<T: Element>(&self, data: &[T]) -> Result<IoLease<T>, ArenaError> {
        let mut lease = self.lease(data.len())?;
        lease.copy_from_slice(data);
        Ok(lease)
    }

    /// Frees every kept buffer; returns the bytes freed.
    pub fn trim(&self) -> usize {
        self.shared.trim()
    }

    /// How many returned buffers are kept now.
    pub fn free_buffers(&self) -> usize {
        self.shared.free.len()
    }

    /// The budget this arena charges.
    pub fn budget(&self) -> &MemoryBudget {
        &self.shared.budget
    }
}

impl IoShared {
    /// Takes a kept `Box<[T]>` of `len` elements, uncounting it as retained.
    fn take<T: Element>(&self, len: usize) -> Option<Box<[T]>> {
        if len == 0 {
            return None;
        }
        let free = self.free.take_first(|free| {
            free.buffer
                .downcast_ref::<Box<[T]>>()
                .is_some_and(|buffer| buffer.len() == len)
        })?;
        self.budget.shared().set_retained(Domain::Io, free.bytes, 0);
        free.buffer
            .downcast::<Box<[T]>>()
            .ok()
            .map(|buffer| *buffer)
    }

    /// Keeps `buffer` for reuse if the list has room. Counted as retained
    /// before it becomes visible in the list, so a concurrent `take` never
    /// uncounts bytes not yet counted.
    fn keep<T: Element>(&self, buffer: Box<[T]>) {
        if buffer.is_empty() || self.free.capacity() == 0 {
            return;
        }
        let bytes = size_of_val::<[T]>(&buffer);
        let shared = self.budget.shared();
        shared.set_retained(Domain::Io, 0, bytes);
        let free = FreeBuffer {
            bytes,
            buffer: Box::new(buffer),
        };
        if self.free.put(free).is_err() {
            shared.set_retained(Domain::Io, bytes, 0);
        }
    }

    fn trim(&self) -> usize {
        let bytes = self.free.drain().iter().map(|free| free.bytes).sum();
        self.budget.shared().set_retained(Domain::Io, bytes, 0);
        bytes
    }
}

impl Drop for IoShared {
    fn drop(&mut self) {
        self.trim();
    }
}

impl fmt::Debug for IoArena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoArena")
            .field("free_buffers", &self.free_buffers())
            .finish()
    }
}

/// A zeroed buffer of `T` leased from an [`IoArena`]; derefs to `[T]`.
/// Dropping it returns its bytes to [`Domain::Io`] (and the buffer to the
/// arena's free list when there is room).
#[must_use = "dropping a lease returns the buffer at once"]
pub struct IoLease<T: Element> {
    buffer: Box<[T]>,
    reservation: Reservation,
    home: Arc<IoShared>,
}

impl<T: Element> IoLease<T> {
    /// The bytes charged for this lease.
    pub fn charged_bytes(&self) -> usize {
        self.reservation.bytes()
    }

    /// Takes the buffer out of the runtime's accounting: the caller owns it
    /// from now on and the I/O domain no longer counts it.
    pub fn into_boxed_slice(mut self) -> Box<[T]> {
        // `Drop` then finds an empty buffer (kept nowhere) and returns the
        // reservation.
        std::mem::take(&mut self.buffer)
    }
}

impl<T: Element> Drop for IoLease<T> {
    fn drop(&mut self) {
        let bytes = self.reservation.bytes();
        self.reservation.shrink(bytes);
        self.home.keep(std::mem::take(&mut self.buffer));
    }
}

impl<T: Element> Deref for IoLease<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.buffer
    }
}

impl<T: Element> DerefMut for IoLease<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buffer
    }
}

impl<T: Element> AsRef<[T]> for IoLease<T> {
    fn as_ref(&self) -> &[T] {
        self
    }
}

impl<T: Element> AsMut<[T]> for IoLease<T> {
    fn as_mut(&mut self) -> &mut [T] {
        self
    }
}

impl<T: Element> fmt::Debug for IoLease<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoLease")
            .field("element", &std::any::type_name::<T>())
            .field("len", &self.buffer.len())
            .field("reservation", &self.reservation)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn returned_buffers_are_reused_zeroed() {
        let budget = MemoryBudget::unlimited();
        let arena = IoArena::new(&budget);
        let mut lease = arena.lease_f32(16).unwrap();
        lease.fill(3.0);
        let address = lease.as_ptr().addr();
        drop(lease);
        assert_eq!(budget.live(Domain::Io), 0);
        assert_eq!(budget.retained(Domain::Io), 64);
        assert_eq!(arena.free_buffers(), 1);
        // A different type or length does not take it.
        let other = arena.lease::<u32>(16).unwrap();
        assert_eq!(budget.retained(Domain::Io), 64);
        let again = arena.lease_f32(16).unwrap();
        assert_eq!(again.as_ptr().addr(), address);
        assert!(again.iter().all(|&x| x == 0.0));
        assert_eq!(budget.retained(Domain::Io), 0);
        assert_eq!(budget.live(Domain::Io), 128);
        drop((other, again));
        assert_eq!(budget.retained(Domain::Io), 128);
        assert_eq!(arena.trim(), 128);
        assert_eq!(budget.retained(Domain::Io), 0);
    }

    #[test]
    fn detached_buffers_leave_the_accounting() {
        let budget = MemoryBudget::unlimited();
        let arena = IoArena::with_free_buffers(&budget, 1);
        let lease = arena.lease_copy(&[1u8, 2, 3]).unwrap();
        assert_eq!(budget.live(Domain::Io), 3);
        let owned = lease.into_boxed_slice();
        assert_eq!(&*owned, &[1, 2, 3]);
        assert_eq!(budget.live(Domain::Io), 0);
        assert_eq!(budget.retained(Domain::Io), 0);
        // One kept at most; the arena's drop frees it.
        let a = arena.lease::<i64>(2).unwrap();
        let b = arena.lease::<i64>(2).unwrap();
        drop((a, b));
        assert_eq!(budget.retained(Domain::Io), 16);
        drop(arena);
        assert_eq!(budget.retained(Domain::Io), 0);
    }
}
