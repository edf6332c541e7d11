//! A map keyed by value id (dense, `0..values`): what lowering records per
//! value, indexed instead of hashed.

/// Per-value entries, `None` where unset.
pub(super) struct ValueMap<T> {
    slots: Vec<Option<T>>,
}

impl<T> ValueMap<T> {
    /// An empty map for ids `0..values`.
    pub(super) fn new(values: usize) -> Self {
        Self {
            slots: std::iter::repeat_with(|| None).take(values).collect(),
        }
    }

    /// The entry of `id`.
    pub(super) fn get(&self, id: &u32) -> Option<&T> {
        self.slots.get(*id as usize).and_then(Option::as_ref)
    }

    /// Whether `id` has an entry.
    pub(super) fn contains(&self, id: &u32) -> bool {
        self.get(id).is_some()
    }

    /// Sets the entry of `id` (the map grows for an id beyond its size).
    pub(super) fn insert(&mut self, id: u32, value: T) {
        let at = id as usize;
        if at >= self.slots.len() {
            self.slots.resize_with(at + 1, || None);
        }
        self.slots[at] = Some(value);
    }
}
