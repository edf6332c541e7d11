//! Prepared objects (cold path to build, hot path to read): what a
//! requirement publishes — a packed weight, a source tensor used as is, or
//! a table served row by row from its source.

use std::sync::Arc;

use onnx_prepared_kernels::{DataRef, ElementType, KernelError, PackedWeight, Tensor, TensorData};

use super::error::PrepareError;
use crate::model::ResolveError;
use crate::model::{PayloadSource, Requirement, ResolvedModel, WeightId};

/// The object a requirement publishes.
#[derive(Debug, Clone)]
pub enum PreparedObject {
    /// A source tensor, for kernels that read it as is.
    Source(Arc<Tensor>),
    /// A packed weight, for the kernel whose layout it is.
    Packed(Arc<PackedWeight>),
    /// A table read only by operators that gather whole rows of it, too
    /// large for the prepared arena's limit or served from its source by
    /// choice: each run reads the rows it needs from the source. Holds no
    /// table bytes.
    Rows(Arc<RowTable>),
}

impl PreparedObject {
    /// Bytes held.
    pub fn byte_len(&self) -> usize {
        match self {
            PreparedObject::Source(t) => t.byte_len(),
            PreparedObject::Packed(p) => p.byte_len(),
            PreparedObject::Rows(_) => 0,
        }
    }

    /// The source tensor, if this is one.
    pub fn as_source(&self) -> Option<&Tensor> {
        match self {
            PreparedObject::Source(t) => Some(t),
            _ => None,
        }
    }

    /// The packed weight, if this is one.
    pub fn as_packed(&self) -> Option<&PackedWeight> {
        match self {
            PreparedObject::Packed(p) => Some(p),
            _ => None,
        }
    }
}

impl PreparedObject {
    /// What the prepared cache writes for this object (a row table is
    /// served from its source and has nothing to persist).
    pub(crate) fn to_persist(&self) -> Option<crate::cache::PersistObject> {
        use crate::cache::PersistObject;
        match self {
            PreparedObject::Source(t) => Some(PersistObject::Tensor(t.clone())),
            PreparedObject::Packed(p) => Some(PersistObject::Packed(p.clone())),
            PreparedObject::Rows(_) => None,
        }
    }

    /// The row table, if this is one.
    pub fn as_rows(&self) -> Option<&RowTable> {
        match self {
            PreparedObject::Rows(r) => Some(r),
            _ => None,
        }
    }
}

/// A source table `[rows, ...]` read row by row (see
/// [`PreparedObject::Rows`]): its checksum was verified when the object was
/// made, like a mapped weight's; rows are decoded as the whole tensor
/// would be.
#[derive(Debug)]
pub struct RowTable {
    source: Arc<dyn PayloadSource>,
    weight: WeightId,
    stored: ElementType,
    dims: Vec<usize>,
}

impl RowTable {
    /// The table of `weight` in `resolved`, read through `source`; `None`
    /// when it has no rows or its rows have no byte size.
    pub(crate) fn new(
        resolved: &ResolvedModel,
        source: Arc<dyn PayloadSource>,
        weight: WeightId,
    ) -> Option<Self> {
        let d = &resolved.model().weights()[weight.index()];
        let dims: Vec<usize> = d
            .dims()
            .iter()
            .map(|&x| usize::try_from(x).ok())
            .collect::<Option<_>>()?;
        let stored = d.element_type();
        // Rows start on byte boundaries (a 4-bit table with an odd row
        // length does not: such a table is held whole instead).
        let row: u64 = dims.iter().skip(1).map(|&x| x as u64).product();
        let aligned = row
            .checked_mul(2)
            .and_then(|two| stored.byte_len(two))
            .zip(stored.byte_len(row))
            .is_some_and(|(two, one)| two == 2 * one);
        (!dims.is_empty() && aligned).then_some(Self {
            source,
            weight,
            stored,
            dims,
        })
    }

    /// Writes the rows `indices` picks into `out` (shape `indices.shape +
    /// dims[1..]`, prepared by the lowering): one positioned read per run
    /// of consecutive rows, straight into `out` when the table is stored
    /// in `out`'s element type (else through a buffer, decoded).
    ///
    /// # Errors
    /// An index out of range (nothing is read then), indices that are not
    /// integers, or a read that fails.
    pub(crate) fn gather_into(
        &self,
        node: &str,
        indices: &Tensor,
        out: &mut Tensor,
    ) -> Result<(), PrepareError> {
        let kernel = |detail: String| -> PrepareError {
            PrepareError::kernel(node, KernelError::Invalid { op: "Gather", detail })
        };
        // The file is still the one verified (a rewrite in place would mix
        // new rows with the layers prepared from the old ones).
        self.source.check_unchanged(self.weight)?;
        let rows = self.dims[0];
        let picked = Picked::of(indices).ok_or_else(|| {
            kernel(format!("indices of type {}", indices.dtype().name()))
        })?;
        if let Some(k) = (0..picked.len()).find(|&k| picked.row(k, rows).is_none()) {
            return Err(kernel(format!(
                "index {} is out of range for axis of size {rows}",
                picked.raw(k)
            )));
        }
        let row_elems: usize = self.dims[1..].iter().product();
        let row_bytes = self
            .stored
            .byte_len(row_elems as u64)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| kernel("a row's size overflows".into()))?;
        if out.len() != picked.len() * row_elems {
            return Err(kernel(format!(
                "output of {} elements for {} rows of {row_elems}",
                out.len(),
                picked.len()
            )));
        }
        let len = picked.len() * row_bytes;
        if self.stored == out.dtype()
            && let Some(bytes) = out.view_mut().into_le_bytes()
            && bytes.len() == len
        {
            return self.read_rows(&picked, rows, row_bytes, bytes);
        }
        let mut bytes = vec![0u8; len];
        self.read_rows(&picked, rows, row_bytes, &mut bytes)?;
        let data = TensorData::decode(self.stored, &bytes, out.len())
            .filter(|d| d.dtype() == out.dtype())
            .ok_or_else(|| kernel(format!("rows of {} do not decode", self.stored.name())))?;
        out.set_data(data).map_err(|e| kernel(e.to_string()))
    }

    /// Reads rows `picked` (checked in range of `rows`) of `row_bytes`
    /// each into `dst`, one positioned read per run of consecutive rows.
    fn read_rows(
        &self,
        picked: &Picked<'_>,
        rows: usize,
        row_bytes: usize,
        dst: &mut [u8],
    ) -> Result<(), PrepareError> {
        // In range (checked by the caller): 0 is never read.
        let row = |k: usize| picked.row(k, rows).unwrap_or(0);
        let mut k = 0;
        while k < picked.len() {
            let first = row(k);
            let mut n = 1;
            while k + n < picked.len() && row(k + n) == first + n as u64 {
                n += 1;
            }
            self.source.read_range(
                self.weight,
                first * row_bytes as u64,
                &mut dst[k * row_bytes..(k + n) * row_bytes],
            )?;
            k += n;
        }
        Ok(())
    }
}

/// The indices of a row gather, as stored (no copy).
enum Picked<'a> {
    I64(&'a [i64]),
    I32(&'a [i32]),
}

impl<'a> Picked<'a> {
    /// `indices`' elements; `None` unless they are `int64` or `int32`.
    fn of(indices: &'a Tensor) -> Option<Self> {
        match indices.data() {
            DataRef::I64(v) => Some(Self::I64(v)),
            DataRef::I32(v) => Some(Self::I32(v)),
            _ => None,
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::I64(v) => v.len(),
            Self::I32(v) => v.len(),
        }
    }

    /// Index `k` as given (may be negative).
    fn raw(&self, k: usize) -> i64 {
        match self {
            Self::I64(v) => v[k],
            Self::I32(v) => i64::from(v[k]),
        }
    }

    /// The row index `k` picks in a table of `rows` rows (a negative index
    /// counts from the end); `None` when it is out of range.
    fn row(&self, k: usize, rows: usize) -> Option<u64> {
        let i = self.raw(k);
        let row = if i < 0 { i + rows as i64 } else { i };
        u64::try_from(row).ok().filter(|&r| r < rows as u64)
    }
}

/// Decodes one source weight's bytes into a tensor.
pub(crate) fn source_tensor(
    resolved: &ResolvedModel,
    weight: crate::model::WeightId,
    bytes: &[u8],
) -> Result<Tensor, PrepareError> {
    let d = &resolved.model().weights()[weight.index()];
    let bad = || ResolveError::WeightType {
        weight: d.name().to_owned(),
        dtype: d.element_type(),
    };
    let dims: Vec<usize> = d.dims().iter().map(|&x| x as usize).collect();
    let elements = onnx_prepared_kernels::element_count(&dims).ok_or_else(bad)?;
    let data = TensorData::decode(d.element_type(), bytes, elements).ok_or_else(bad)?;
    Ok(Tensor::new(dims, data).map_err(|_| bad())?)
}

/// Builds a requirement's object from its source tensors (in `sources` order).
pub(crate) fn prepare(
    requirement: &Requirement,
    sources: &[Arc<Tensor>],
    par: &dyn onnx_prepared_kernels::ParallelFor,
) -> Result<PreparedObject, PrepareError> {
    match &requirement.prepack {
        // A source used as is is shared, not copied.
        None => Ok(PreparedObject::Source(sources[0].clone())),
        Some(p) => {
            let refs: Vec<&Tensor> = sources.iter().map(|t| &**t).collect();
            p.prepare(&refs, par)
                .map(|w| PreparedObject::Packed(Arc::new(w)))
                .map_err(|source| {
                    PrepareError::kernel(requirement.name.clone(), source)
                })
        }
    }
}
