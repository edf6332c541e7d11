//! `FreeList`: a small bounded free list of reusable values behind a lock (cold
//! path: buffers handed back by their users, e.g. returned I/O leases).
//!
//! Every operation holds the lock only for a scan of at most `capacity`
//! entries and a `Vec` push or `swap_remove`; nothing allocates under it
//! (the `Vec` is sized once, at construction).

use super::{Mutex, lock};

/// A bounded set of values kept for reuse. Which value `take_first` returns
/// among several that match is unspecified.
#[derive(Debug)]
pub struct FreeList<T> {
    items: Mutex<Vec<T>>,
    capacity: usize,
}

impl<T> FreeList<T> {
    /// An empty pool that keeps at most `capacity` values.
    pub fn new(capacity: usize) -> Self {
        Self {
            items: Mutex::new(Vec::with_capacity(capacity)),
            capacity,
        }
    }

    /// The most values the pool keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keeps `item`, or hands it back when the pool is full.
    pub fn put(&self, item: T) -> Result<(), T> {
        let mut items = lock(&self.items);
        if items.len() < self.capacity {
            items.push(item);
            Ok(())
        } else {
            Err(item)
        }
    }

    /// Removes and returns a kept value for which `matches` is true.
    /// `matches` runs under the pool's lock: keep it cheap.
    pub fn take_first(&self, mut matches: impl FnMut(&T) -> bool) -> Option<T> {
        let mut items = lock(&self.items);
        let index = items.iter().position(&mut matches)?;
        Some(items.swap_remove(index))
    }

    /// Whether a kept value matches (`matches` runs under the pool's lock).
    pub fn any(&self, matches: impl FnMut(&T) -> bool) -> bool {
        lock(&self.items).iter().any(matches)
    }

    /// Removes and returns every kept value.
    pub fn drain(&self) -> Vec<T> {
        std::mem::take(&mut *lock(&self.items))
    }

    /// How many values are kept now.
    pub fn len(&self) -> usize {
        lock(&self.items).len()
    }

    /// Whether no value is kept now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::FreeList;

    #[test]
    fn keeps_at_most_capacity_and_takes_matching() {
        let pool = FreeList::new(2);
        assert_eq!(pool.put(1), Ok(()));
        assert_eq!(pool.put(2), Ok(()));
        assert_eq!(pool.put(3), Err(3));
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.take_first(|&v| v == 2), Some(2));
        assert_eq!(pool.take_first(|&v| v == 2), None);
        assert_eq!(pool.drain(), vec![1]);
        assert!(pool.is_empty());
    }
}
