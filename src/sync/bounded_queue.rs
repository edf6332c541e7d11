//! `BoundedQueue<T>`: a bounded lock-free FIFO (hot path).
//!
//! Normally a `crossbeam_queue::ArrayQueue` (push and pop allocate nothing).
//! Under `cfg(loom)` the third-party queue is invisible to loom, so a loom
//! `Mutex<VecDeque>` stand-in with the same interface and the same capacity
//! rule replaces it; models then check the protocols built around the queue.

/// A bounded multi-producer multi-consumer FIFO.
#[derive(Debug)]
pub struct BoundedQueue<T> {
    #[cfg(not(loom))]
    inner: crossbeam_queue::ArrayQueue<T>,
    #[cfg(loom)]
    capacity: usize,
    #[cfg(loom)]
    inner: loom::sync::Mutex<std::collections::VecDeque<T>>,
}

impl<T> BoundedQueue<T> {
    /// A queue holding at most `capacity` items.
    ///
    /// # Panics
    /// If `capacity` is zero.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "capacity must be non-zero");
        #[cfg(not(loom))]
        {
            Self {
                inner: crossbeam_queue::ArrayQueue::new(capacity),
            }
        }
        #[cfg(loom)]
        {
            Self {
                capacity,
                inner: loom::sync::Mutex::new(std::collections::VecDeque::with_capacity(capacity)),
            }
        }
    }

    /// Appends `item`, or hands it back when the queue is full.
    pub fn push(&self, item: T) -> Result<(), T> {
        #[cfg(not(loom))]
        {
            self.inner.push(item)
        }
        #[cfg(loom)]
        {
            let mut items = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            if items.len() == self.capacity {
                return Err(item);
            }
            items.push_back(item);
            Ok(())
        }
    }

    /// Removes the oldest item.
    pub fn pop(&self) -> Option<T> {
        #[cfg(not(loom))]
        {
            self.inner.pop()
        }
        #[cfg(loom)]
        {
            self.inner
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front()
        }
    }

    /// Whether the queue holds nothing (a snapshot).
    pub fn is_empty(&self) -> bool {
        #[cfg(not(loom))]
        {
            self.inner.is_empty()
        }
        #[cfg(loom)]
        {
            self.inner
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
        }
    }
}
