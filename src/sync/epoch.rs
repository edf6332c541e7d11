//! Epoch-protected publication: a [`Slot`] holds at most one heap object that
//! readers load under a [`Guard`] (readers: hot path; publish and unpublish:
//! cold path).
//!
//! The contract, in both builds:
//! * `publish` moves an object into the slot (Release); `load` (Acquire) under
//!   a guard returns a reference that lives as long as the guard and the slot
//!   borrow.
//! * `unpublish` empties the slot and *retires* the object: it is destroyed
//!   only after every guard that existed when it was unpublished has been
//!   dropped, so a reader that loaded it never sees it freed.
//! * Dropping the slot (exclusive access: no borrow, so no reader) destroys
//!   its current object at once.
//!
//! Normally this is `crossbeam-epoch` with its global collector. Under
//! `cfg(loom)` crossbeam's internals are invisible to loom (its own switch is
//! `cfg(crossbeam_loom)`), so a small stand-in with the same interface takes
//! its place. Stand-in protocol:
//! 1. `pin`: under the domain lock, `active += 1`.
//! 2. `load`: Acquire load of the pointer (no lock).
//! 3. `unpublish`: swap the pointer to null (AcqRel), then push the old one
//!    to `garbage` under the lock. The caller holds a guard, so `active > 0`.
//! 4. Guard drop: under the lock `active -= 1`; if that made it 0, take all of
//!    `garbage`, and destroy it after releasing the lock.
//!
//! Why nothing is freed under a reader: garbage is taken only in a critical
//! section that sees `active == 0`, i.e. after every guard that existed at the
//! push is gone. A guard pinned later takes the lock after that critical
//! section, so its `load` happens after the swap (lock hand-off plus program
//! order) and, by coherence, cannot return the retired pointer. And garbage is
//! never stranded: it is pushed while a guard is alive, and the last guard to
//! leave takes it, so at quiescence (no guard alive) nothing is pending.
//!
//! The stand-in drops a retired object in place but does not free its memory
//! (see `destroy`), so loom models detect a use after destruction reliably.

#[cfg(loom)]
use std::marker::PhantomData;

#[cfg(not(loom))]
use crossbeam_epoch as cbe;

use super::Ordering;
#[cfg(loom)]
use super::{Mutex, imp::AtomicPtr, lock};

/// Keeps every object loaded through it alive until it is dropped. Not
/// `Send`: it belongs to the thread that pinned. Keep it short-lived: while a
/// guard lives, nothing retired after it was pinned can be freed.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct Guard(cbe::Guard);

/// Keeps every object loaded through it alive until it is dropped (loom
/// stand-in: a count of live guards).
#[cfg(loom)]
#[derive(Debug)]
pub struct Guard {
    _not_send: PhantomData<*mut ()>,
}

/// Pins the current thread: objects it loads stay alive while the guard does.
#[cfg(not(loom))]
pub fn pin() -> Guard {
    Guard(cbe::pin())
}

/// Pins the current thread: objects it loads stay alive while the guard does.
#[cfg(loom)]
pub fn pin() -> Guard {
    lock(&DOMAIN.state).active += 1;
    Guard {
        _not_send: PhantomData,
    }
}

/// Nudges reclamation forward: retired objects whose readers are gone get
/// destroyed sooner. Only tests need it; the collector advances by itself.
pub fn flush() {
    #[cfg(not(loom))]
    cbe::pin().flush();
}

#[cfg(loom)]
struct Domain {
    state: Mutex<DomainState>,
}

#[cfg(loom)]
struct DomainState {
    active: usize,
    garbage: Vec<Retired>,
}

/// A type-erased retired object: its pointer and how to destroy it.
#[cfg(loom)]
struct Retired {
    ptr: *mut (),
    destroy: unsafe fn(*mut ()),
}

// SAFETY: only `Slot<T: Send>` retires objects, so destroying one on another
// thread is allowed; the pointer is owned by this record alone.
#[cfg(loom)]
unsafe impl Send for Retired {}

#[cfg(loom)]
loom::lazy_static! {
    static ref DOMAIN: Domain = Domain {
        state: Mutex::new(DomainState { active: 0, garbage: Vec::new() }),
    };
}

#[cfg(loom)]
impl Drop for Guard {
    fn drop(&mut self) {
        let garbage = {
            let mut state = lock(&DOMAIN.state);
            state.active -= 1;
            if state.active == 0 {
                std::mem::take(&mut state.garbage)
            } else {
                Vec::new()
            }
        };
        for retired in garbage {
            // SAFETY: `retired` came from `Slot::unpublish`/`publish`, which
            // pushed a pointer from `Box::into_raw` with its matching destroy
            // function, exactly once; every guard alive at that push is gone
            // (protocol step 4), so no reader holds it.
            unsafe { (retired.destroy)(retired.ptr) };
        }
    }
}

/// Drops the retired object in place but keeps its memory allocated (a
/// bounded leak: loom models are tiny). A protocol bug that reads an object
/// after its destruction then reads intact memory, and the model's probe in
/// `T` reports it deterministically, instead of the outcome depending on
/// whether the allocator reused the block.
///
/// # Safety
/// `ptr` must come from `Box::<T>::into_raw` and not be used afterwards.
#[cfg(loom)]
unsafe fn destroy<T>(ptr: *mut ()) {
    // SAFETY: guaranteed by the caller.
    unsafe { std::ptr::drop_in_place(ptr.cast::<T>()) };
}

/// An atomic, epoch-protected home for at most one `T` (see module docs).
pub struct Slot<T> {
    #[cfg(not(loom))]
    ptr: cbe::Atomic<T>,
    #[cfg(loom)]
    ptr: AtomicPtr<T>,
}

// SAFETY: as for `crossbeam_epoch::Atomic`: the slot hands out `&T` to other
// threads (needs `Sync`) and may drop `T` on another thread (needs `Send`).
#[cfg(loom)]
unsafe impl<T: Send + Sync> Send for Slot<T> {}
// SAFETY: see the `Send` impl.
#[cfg(loom)]
unsafe impl<T: Send + Sync> Sync for Slot<T> {}

impl<T> std::fmt::Debug for Slot<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("published", &self.is_published())
            .finish()
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Slot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        Self {
            #[cfg(not(loom))]
            ptr: cbe::Atomic::null(),
            #[cfg(loom)]
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Whether an object is published now (Acquire).
    pub fn is_published(&self) -> bool {
        #[cfg(not(loom))]
        {
            // SAFETY: the pointer is only compared with null, never read.
            let guard = unsafe { cbe::unprotected() };
            !self.ptr.load(Ordering::Acquire, guard).is_null()
        }
        #[cfg(loom)]
        {
            !self.ptr.load(Ordering::Acquire).is_null()
        }
    }

    /// The published object, kept alive by `guard` (Acquire).
    pub fn load<'g>(&'g self, guard: &'g Guard) -> Option<&'g T> {
        #[cfg(not(loom))]
        {
            let shared = self.ptr.load(Ordering::Acquire, &guard.0);
            // SAFETY: a non-null pointer in the slot came from `Owned::new`
            // in `publish`; it is destroyed only through `defer_destroy` after
            // being swapped out, which waits for `guard`, or by `Drop`, which
            // cannot run while `self` is borrowed for `'g`.
            unsafe { shared.as_ref() }
        }
        #[cfg(loom)]
        {
            let _ = guard;
            let ptr = self.ptr.load(Ordering::Acquire);
            // SAFETY: as above: the stand-in destroys a swapped-out pointer
            // only once every guard alive at its retirement is dropped.
            unsafe { ptr.as_ref() }
        }
    }

    /// The published object, with no guard (Acquire).
    ///
    /// # Safety
    /// The caller must keep the object from being unpublished (and the slot
    /// from being dropped) while the returned reference lives; e.g. the
    /// store's pin count keeps the owning entry `Resident`, and only eviction
    /// unpublishes.
    pub unsafe fn load_unguarded(&self) -> Option<&T> {
        #[cfg(not(loom))]
        {
            // SAFETY: the caller keeps the object published for the borrow,
            // so it is not retired, let alone destroyed.
            unsafe {
                self.ptr
                    .load(Ordering::Acquire, cbe::unprotected())
                    .as_ref()
            }
        }
        #[cfg(loom)]
        {
            // SAFETY: as above.
            unsafe { self.ptr.load(Ordering::Acquire).as_ref() }
        }
    }
}

impl<T: Send + 'static> Slot<T> {
    /// Publishes `value` (Release). Returns whether it replaced an object,
    /// which is then retired like `unpublish` does.
    pub fn publish(&self, value: T, guard: &Guard) -> bool {
        #[cfg(not(loom))]
        {
            let old = self
                .ptr
                .swap(cbe::Owned::new(value), Ordering::AcqRel, &guard.0);
            if old.is_null() {
                return false;
            }
            // SAFETY: the swap unlinked `old`, so no later load returns it and
            // this thread alone retires it; `T: Send + 'static` lets the
            // collector destroy it on any thread at any later time.
            unsafe { guard.0.defer_destroy(old) };
            true
        }
        #[cfg(loom)]
        {
            let old = self
                .ptr
                .swap(Box::into_raw(Box::new(value)), Ordering::AcqRel);
            retire(old, guard)
        }
    }

    /// Empties the slot (AcqRel) and retires its object, if any: it is
    /// destroyed once every guard alive now is dropped. Returns whether there
    /// was one.
    pub fn unpublish(&self, guard: &Guard) -> bool {
        #[cfg(not(loom))]
        {
            let old = self
                .ptr
                .swap(cbe::Shared::null(), Ordering::AcqRel, &guard.0);
            if old.is_null() {
                return false;
            }
            // SAFETY: as in `publish`.
            unsafe { guard.0.defer_destroy(old) };
            true
        }
        #[cfg(loom)]
        {
            let old = self.ptr.swap(std::ptr::null_mut(), Ordering::AcqRel);
            retire(old, guard)
        }
    }
}

/// Pushes `old` (swapped out of a slot) to the garbage; stand-in step 3.
#[cfg(loom)]
fn retire<T: Send + 'static>(old: *mut T, guard: &Guard) -> bool {
    let _ = guard; // proves `active > 0`, so the push is not stranded
    if old.is_null() {
        return false;
    }
    lock(&DOMAIN.state).garbage.push(Retired {
        ptr: old.cast(),
        destroy: destroy::<T>,
    });
    true
}

impl<T> Drop for Slot<T> {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        {
            // SAFETY: `&mut self`: no borrow of the slot exists, so no
            // reference returned by `load` is alive; the object is owned by
            // the slot alone.
            unsafe {
                let old = self.ptr.load(Ordering::Relaxed, cbe::unprotected());
                if !old.is_null() {
                    drop(old.into_owned());
                }
            }
        }
        #[cfg(loom)]
        {
            let old = self.ptr.load(Ordering::Relaxed);
            if !old.is_null() {
                // SAFETY: as above; the pointer came from `Box::into_raw`.
                drop(unsafe { Box::from_raw(old) });
            }
        }
    }
}
