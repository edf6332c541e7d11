//! Packing a large weight from pieces of its sources (cold path): when a
//! prepack takes its sources a range of rows at a time
//! ([`Prepack::in_rows`]), the producer reads the next rows of every source
//! into small buffers and packs them, so the preparation domain holds one
//! piece per packing instead of every source whole beside its packed copy.
//! The sources' read tasks then read nothing (`tasks.rs`).
//!
//! [`Prepack::in_rows`]: onnx_prepared_kernels::Prepack::in_rows

use std::sync::Arc;

use onnx_prepared_kernels::{DataRef, ElementType, ParallelFor, RowPacking, Tensor};

use super::object::PreparedObject;
use super::error::PrepareError;
use crate::arena::PreparationArena;
use crate::cache::PreparedCache;
use crate::model::ResolveError;
use crate::limits::{PACK_IN_PIECES_MIN_BYTES, PACK_PIECE_BYTES};
use crate::model::{ChecksumPolicy, PayloadSource, PieceReader, Requirement, WeightDescriptor};
use crate::plan::PreparedExecutionPlan;

/// How one requirement is read in pieces: rows per piece and the bytes
/// one row takes in each source.
#[derive(Debug, Clone)]
pub(crate) struct PiecePlan {
    rows_per_piece: usize,
    row_bytes: Box<[usize]>,
}

impl PiecePlan {
    /// Preparation bytes one packing holds: a piece of every source.
    pub(crate) fn bytes(&self) -> u64 {
        self.row_bytes
            .iter()
            .map(|&b| (b * self.rows_per_piece) as u64)
            .sum()
    }
}

/// Per requirement of `plan`, its piece plan when it is packed from pieces:
/// its prepack takes rows, its sources hold at least
/// [`PACK_IN_PIECES_MIN_BYTES`], `source` reads ranges (a mapping too: a
/// piece is copied out and its pages dropped, so the packing does not
/// fault in a whole source beside its packed copy), each source
/// is a whole number of rows of a type viewed as stored, and no other
/// requirement reads it (a shared source is read once, whole).
pub(crate) fn piece_plans(
    plan: &PreparedExecutionPlan,
    source: &dyn PayloadSource,
) -> Box<[Option<PiecePlan>]> {
    let resolved = plan.resolved();
    let weights = resolved.model().weights();
    let mut readers = vec![0u32; weights.len()];
    for requirement in resolved.requirements() {
        for w in &requirement.sources {
            readers[w.index()] += 1;
        }
    }
    resolved
        .requirements()
        .iter()
        .map(|requirement| {
            let sources: Vec<&WeightDescriptor> = requirement
                .sources
                .iter()
                .map(|w| &weights[w.index()])
                .collect();
            let eligible = source.reads_ranges()
                && requirement.source_bytes >= PACK_IN_PIECES_MIN_BYTES
                && sources.iter().all(|w| {
                    let dtype = w.element_type();
                    readers[w.id().index()] == 1
                        && dtype.compute() == dtype
                        && Tensor::views_in_place(dtype)
                });
            if !eligible {
                return None;
            }
            let rows = start(requirement, &sources).ok()?;
            let n = rows.rows();
            let row_bytes = sources
                .iter()
                .map(|w| {
                    let len = usize::try_from(w.byte_len()).ok()?;
                    (n > 0 && len.is_multiple_of(n)).then_some(len / n)
                })
                .collect::<Option<Box<[usize]>>>()?;
            let per_row: usize = row_bytes.iter().sum::<usize>().max(1);
            let align = rows.align().max(1);
            let rows_per_piece = (PACK_PIECE_BYTES / per_row / align).max(1) * align;
            Some(PiecePlan {
                rows_per_piece: rows_per_piece.min(n),
                row_bytes,
            })
        })
        .collect()
}

/// The row packing of `requirement` for `sources` (its weights).
fn start(
    requirement: &Requirement,
    sources: &[&WeightDescriptor],
) -> Result<Box<dyn RowPacking>, PrepareError> {
    let dims: Vec<Vec<usize>> = sources
        .iter()
        .map(|w| w.dims().iter().map(|&d| d as usize).collect())
        .collect();
    let shapes: Vec<(&[usize], ElementType)> = dims
        .iter()
        .zip(sources)
        .map(|(d, w)| (&d[..], w.element_type()))
        .collect();
    let kernel = |source| -> PrepareError {
        PrepareError::kernel(requirement.name.clone(), source)
    };
    match requirement.prepack.as_ref().and_then(|p| p.in_rows(&shapes)) {
        Some(rows) => rows.map_err(kernel),
        None => Err(PrepareError::Unsupported {
            what: format!("packing `{}` from pieces of rows", requirement.name),
        }),
    }
}

/// Where a packing from pieces reads and what it checks.
pub(crate) struct PieceSource<'a> {
    pub(crate) source: &'a dyn PayloadSource,
    pub(crate) preparation: &'a PreparationArena,
    pub(crate) checksums: ChecksumPolicy,
    pub(crate) cache: Option<&'a Arc<PreparedCache>>,
}

impl PieceSource<'_> {
    /// Packs `requirement` (of `sources`, its weights) under `plan`: the
    /// next rows of every source read into one buffer per source, packed,
    /// and read over; each source's digest checked (under the checksum
    /// policy) or recorded for the cache once its last piece was read,
    /// before the object is returned.
    pub(crate) fn pack(
        &self,
        requirement: &Requirement,
        sources: &[&WeightDescriptor],
        plan: &PiecePlan,
        par: &dyn ParallelFor,
    ) -> Result<PreparedObject, PrepareError> {
        let mut rows = start(requirement, sources)?;
        let mut buffers = plan
            .row_bytes
            .iter()
            .map(|&b| self.preparation.alloc_zeroed(b * plan.rows_per_piece))
            .collect::<Result<Vec<_>, _>>()?;
        let wanted: Vec<bool> = sources
            .iter()
            .map(|w| self.cache.is_some_and(|c| c.wants_digest(w)))
            .collect();
        let mut readers: Vec<PieceReader<'_>> = sources
            .iter()
            .zip(&wanted)
            .map(|(w, &want)| PieceReader::new(self.source, w, self.checksums, want))
            .collect();
        let total = rows.rows();
        let mut first = 0;
        while first < total {
            let n = plan.rows_per_piece.min(total - first);
            let mut pieces = Vec::with_capacity(sources.len());
            for (((reader, buffer), &row), w) in readers
                .iter_mut()
                .zip(&mut buffers)
                .zip(&plan.row_bytes)
                .zip(sources)
            {
                let piece = &mut buffer[..n * row];
                reader.read(piece)?;
                let view = DataRef::from_le_bytes(w.element_type(), piece);
                pieces.push(view.ok_or_else(|| ResolveError::WeightType {
                    weight: w.name().to_owned(),
                    dtype: w.element_type(),
                })?);
            }
            rows.pack(&pieces, par).map_err(|source| PrepareError::kernel(requirement.name.clone(), source))?;
            first += n;
        }
        for ((reader, w), want) in readers.into_iter().zip(sources).zip(wanted) {
            if let (Some(digest), true, Some(cache)) = (reader.finish()?, want, self.cache) {
                cache.record_digest(w, digest)?;
            }
        }
        let packed = rows.finish().map_err(|source| PrepareError::kernel(requirement.name.clone(), source))?;
        Ok(PreparedObject::Packed(Arc::new(packed)))
    }
}
