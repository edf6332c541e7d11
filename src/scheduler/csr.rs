//! Compressed sparse rows: adjacency as `offsets` + `targets` (cold path to
//! build, hot path to read).

/// Row `i` is `targets[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Csr<T> {
    offsets: Vec<u32>,
    targets: Vec<T>,
}

impl<T: Copy> Csr<T> {
    /// Builds from one list per row.
    pub fn from_rows<R: AsRef<[T]>>(rows: &[R]) -> Self {
        let mut offsets = Vec::with_capacity(rows.len() + 1);
        let mut targets = Vec::new();
        offsets.push(0);
        for r in rows {
            targets.extend_from_slice(r.as_ref());
            offsets.push(targets.len() as u32);
        }
        Self { offsets, targets }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[T] {
        &self.targets[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Every target of every row.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether there are no targets.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}
