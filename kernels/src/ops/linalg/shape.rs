//! Shapes of matrix products (cold path, plus allocation-free batch indexing
//! for the hot path): numpy.matmul rules with batch broadcasting.

use crate::KernelError;

/// Most distinct broadcast runs a batched product may have after merging.
pub(crate) const MAX_BATCH_RANK: usize = 8;

/// Maps an output batch index to the batch indices of `A` and `B` without
/// allocating. Adjacent dimensions that broadcast the same way are merged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchMap {
    rank: usize,
    dims: [usize; MAX_BATCH_RANK],
    a_strides: [usize; MAX_BATCH_RANK],
    b_strides: [usize; MAX_BATCH_RANK],
    /// Number of output batches (product of the broadcast batch dims).
    pub(crate) count: usize,
}

impl BatchMap {
    /// `(A batch, B batch)` for output batch `index`.
    pub(crate) fn offsets(&self, mut index: usize) -> (usize, usize) {
        let (mut a, mut b) = (0, 0);
        for d in (0..self.rank).rev() {
            let coord = index % self.dims[d];
            index /= self.dims[d];
            a += coord * self.a_strides[d];
            b += coord * self.b_strides[d];
        }
        (a, b)
    }

    /// Whether every output batch reads the same `B` matrix.
    pub(crate) fn b_shared(&self) -> bool {
        self.b_strides[..self.rank].iter().all(|&s| s == 0)
    }

    /// Whether output batch `i` reads `A` batch `i` (no broadcasting of `A`).
    pub(crate) fn a_identity(&self) -> bool {
        let mut expect = 1;
        for d in (0..self.rank).rev() {
            if self.a_strides[d] != expect {
                return false;
            }
            expect *= self.dims[d];
        }
        true
    }
}

/// The dimensions of one batched matrix product.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatMulDims {
    /// Rows of each `A` matrix (1 for a 1-D `A`).
    pub(crate) m: usize,
    /// The reduction length.
    pub(crate) k: usize,
    /// Columns of each `B` matrix (1 for a 1-D `B`).
    pub(crate) n: usize,
    /// Batch indexing.
    pub(crate) batch: BatchMap,
}

fn split(shape: &[usize], is_a: bool) -> Result<(&[usize], usize, usize), KernelError> {
    match shape.len() {
        0 => Err(KernelError::Shape(
            "MatMul: operands must have rank 1 or more".into(),
        )),
        // A 1-D A is a row vector [1, K]; a 1-D B a column vector [K, 1].
        1 => Ok((
            &[],
            if is_a { 1 } else { shape[0] },
            if is_a { shape[0] } else { 1 },
        )),
        r => Ok((&shape[..r - 2], shape[r - 2], shape[r - 1])),
    }
}

/// The broadcast of two batch shapes (numpy rules, right-aligned).
pub(crate) fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, KernelError> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let da = if i + a.len() >= rank {
                a[i + a.len() - rank]
            } else {
                1
            };
            let db = if i + b.len() >= rank {
                b[i + b.len() - rank]
            } else {
                1
            };
            match (da, db) {
                (x, y) if x == y => Ok(x),
                (1, y) => Ok(y),
                (x, 1) => Ok(x),
                _ => Err(KernelError::Shape(format!(
                    "MatMul: batch dimensions {a:?} and {b:?} do not broadcast"
                ))),
            }
        })
        .collect()
}

/// The output shape of `numpy.matmul(A, B)`.
pub(crate) fn matmul_output_shape(a: &[usize], b: &[usize]) -> Result<Vec<usize>, KernelError> {
    let (ab, m, ka) = split(a, true)?;
    let (bb, kb, n) = split(b, false)?;
    if ka != kb {
        return Err(KernelError::Shape(format!(
            "MatMul: A {a:?} and B {b:?} disagree on the reduction length ({ka} vs {kb})"
        )));
    }
    let mut out = broadcast(ab, bb)?;
    if a.len() >= 2 {
        out.push(m);
    }
    if b.len() >= 2 {
        out.push(n);
    }
    crate::element_count(&out).ok_or_else(|| KernelError::Overflow {
        op: "MatMul",
        what: format!("the element count of the output {out:?}"),
    })?;
    Ok(out)
}

/// The dimensions and batch map of `numpy.matmul(A, B)`.
pub(crate) fn matmul_dims(a: &[usize], b: &[usize]) -> Result<MatMulDims, KernelError> {
    let (ab, m, ka) = split(a, true)?;
    let (bb, kb, n) = split(b, false)?;
    if ka != kb {
        return Err(KernelError::Shape(format!(
            "MatMul: A {a:?} and B {b:?} disagree on the reduction length ({ka} vs {kb})"
        )));
    }
    let rank = ab.len().max(bb.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    let mut map = BatchMap {
        rank: 0,
        dims: [1; MAX_BATCH_RANK],
        a_strides: [0; MAX_BATCH_RANK],
        b_strides: [0; MAX_BATCH_RANK],
        count: 1,
    };
    // Walk from the innermost batch dimension outwards, merging runs that
    // broadcast alike; strides count whole matrices. Runs are collected
    // innermost first and stored outermost first.
    let (mut a_stride, mut b_stride) = (1usize, 1usize);
    let mut last: Option<(bool, bool)> = None;
    let mut runs = [(1usize, false, false, 0usize, 0usize); MAX_BATCH_RANK];
    let mut len = 0;
    for i in (0..rank).rev() {
        let (da, db) = (dim(ab, i), dim(bb, i));
        let d = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(KernelError::Shape(format!(
                    "MatMul: batch dimensions of {a:?} and {b:?} do not broadcast"
                )));
            }
        };
        map.count = map.count.saturating_mul(d);
        if d == 1 {
            continue;
        }
        let pattern = (da == d, db == d);
        if last == Some(pattern) {
            runs[len - 1].0 = runs[len - 1].0.saturating_mul(d);
        } else {
            if len == MAX_BATCH_RANK {
                return Err(KernelError::Shape(format!(
                    "MatMul: batch broadcasting of {a:?} and {b:?} is too irregular (more \
                     than {MAX_BATCH_RANK} runs)"
                )));
            }
            runs[len] = (d, pattern.0, pattern.1, a_stride, b_stride);
            len += 1;
            last = Some(pattern);
        }
        if pattern.0 {
            a_stride = a_stride.saturating_mul(d);
        }
        if pattern.1 {
            b_stride = b_stride.saturating_mul(d);
        }
    }
    map.rank = len;
    for (slot, &(d, a_full, b_full, sa, sb)) in runs[..len].iter().rev().enumerate() {
        map.dims[slot] = d;
        map.a_strides[slot] = if a_full { sa } else { 0 };
        map.b_strides[slot] = if b_full { sb } else { 0 };
    }
    Ok(MatMulDims {
        m,
        k: ka,
        n,
        batch: map,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_follow_numpy() {
        assert_eq!(
            matmul_output_shape(&[3], &[3]).unwrap(),
            Vec::<usize>::new()
        );
        assert_eq!(matmul_output_shape(&[2, 3], &[3]).unwrap(), vec![2]);
        assert_eq!(matmul_output_shape(&[3], &[3, 4]).unwrap(), vec![4]);
        assert_eq!(
            matmul_output_shape(&[5, 1, 2, 3], &[4, 3, 6]).unwrap(),
            vec![5, 4, 2, 6]
        );
        assert!(matmul_output_shape(&[2, 3], &[4, 5]).is_err());
        assert!(matmul_output_shape(&[2, 2, 3], &[3, 3, 5]).is_err());
    }

    #[test]
    fn batch_map_broadcasts() {
        let d = matmul_dims(&[5, 1, 2, 3], &[4, 3, 6]).unwrap();
        assert_eq!(d.batch.count, 20);
        for o in 0..20 {
            let (i, j) = (o / 4, o % 4);
            assert_eq!(d.batch.offsets(o), (i, j));
        }
        let d = matmul_dims(&[2, 3, 4, 5], &[5, 6]).unwrap();
        assert!(d.batch.b_shared() && d.batch.a_identity());
        assert_eq!(d.batch.offsets(5), (5, 0));
    }
}
