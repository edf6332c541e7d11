//! Payload sources (cold path): read one weight's bytes into a caller's
//! buffer, counting bytes per weight. Both file-backed sources read only
//! through the handles [`Model::open`] opened and checked, never by path.
//!
//! * [`FileSource`] — positioned reads on one shared handle per data file; the
//!   default, because a file truncated under a read gives an error.
//! * [`MmapSource`] — copies out of a memory mapping, or offers the mapped
//!   bytes themselves so that suitably aligned weights are used in place
//!   ([`PayloadSource::shared`]); a file truncated under a mapping kills the
//!   process (SIGBUS).
//! * [`FaultInjectingSource`](super::FaultInjectingSource) (`fault.rs`) —
//!   wraps another source and delays, fails, shortens or holds reads of
//!   chosen weights, for tests.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use memmap2::Mmap;
use onnx_prepared_kernels::SharedBytes;

use super::LoadError;
use super::{ExternalFile, Model, PayloadError, WeightDescriptor, WeightId, WeightSource};
use crate::sync::{AtomicU64, Ordering};

/// Reads weight payloads.
pub trait PayloadSource: Send + Sync + std::fmt::Debug {
    /// The descriptor of weight `id`, if this source knows it.
    fn descriptor(&self, id: WeightId) -> Option<&WeightDescriptor>;

    /// Reads weight `id` into `buf`, whose length must equal the weight's
    /// `byte_len`.
    fn read(&self, id: WeightId, buf: &mut [u8]) -> Result<(), PayloadError>;

    /// Whether [`read_range`](Self::read_range) reads only the range (a
    /// table is served row by row only from such a source).
    fn reads_ranges(&self) -> bool {
        false
    }

    /// Reads `buf.len()` bytes of weight `id` starting `start` bytes into it
    /// (rows of a table served from storage). The default reads the whole
    /// weight and copies the range out; sources that can seek override it
    /// (and [`reads_ranges`](Self::reads_ranges)).
    ///
    /// # Errors
    /// The range is not inside the weight, or the read fails.
    fn read_range(&self, id: WeightId, start: u64, buf: &mut [u8]) -> Result<(), PayloadError> {
        let weight = self
            .descriptor(id)
            .ok_or(PayloadError::UnknownWeight { id: id.0 })?;
        let range = checked_range(weight, start, buf.len())?;
        let mut all = vec![0; usize::try_from(weight.byte_len()).unwrap_or(usize::MAX)];
        self.read(id, &mut all)?;
        buf.copy_from_slice(&all[range]);
        Ok(())
    }

    /// Checks that weight `id`'s data file is still the file the model
    /// opened (its [`FileIdentity`](crate::durable::FileIdentity): one
    /// `fstat`). Every whole read checks after reading; a caller that
    /// reads ranges (rows of a table, pieces) checks once per batch of
    /// reads. The default (a source with nothing on disk) always agrees.
    ///
    /// # Errors
    /// [`PayloadError::DataFileChanged`]: written in place, truncated or
    /// touched since the model was opened.
    fn check_unchanged(&self, id: WeightId) -> Result<(), PayloadError> {
        let _ = id;
        Ok(())
    }

    /// Bytes delivered so far, per weight.
    fn counters(&self) -> &ReadCounters;

    /// The caller is done touching weight `id`'s bytes for now (it copied,
    /// hashed or packed them): a source that maps its files drops those
    /// pages from the process (they stay in the page cache and fault back
    /// in when read again), so a weight's bytes do not count twice in its
    /// memory next to their packed copy. Never changes what a read or a
    /// view of [`shared`](Self::shared) bytes sees. The default does
    /// nothing.
    fn release(&self, id: WeightId) {
        let _ = id;
    }

    /// [`release`](Self::release) of the bytes `range` of weight `id` (a
    /// piece the caller copied out); pages the range shares with the rest
    /// of the weight stay. The default does nothing.
    fn release_range(&self, id: WeightId, range: std::ops::Range<u64>) {
        let _ = (id, range);
    }

    /// Weight `id`'s bytes in place: read-only shared bytes they lie in
    /// (kept alive by the `Arc`) and the offset where they start, for a
    /// caller that uses them without a copy. `None` (the default) when this
    /// source only copies out; the caller then [`read`](Self::read)s. A
    /// caller that uses the bytes verifies them like a read (the declared
    /// digest, under its [`ChecksumPolicy`]) and counts them in
    /// [`counters`](Self::counters).
    fn shared(&self, id: WeightId) -> Option<(Arc<dyn SharedBytes>, usize)> {
        let _ = id;
        None
    }
}

/// Whether a weight's declared `sha256:` checksum is verified before use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChecksumPolicy {
    /// Every weight that declares a `sha256:` digest is hashed after it is
    /// read and before anything uses it; a mismatch fails the read with
    /// [`PayloadError::ChecksumMismatch`] naming the tensor.
    #[default]
    Strict,
    /// Declared digests are not checked.
    Off,
}

/// Reads `weight` through `source` into `buf` (the whole payload in one
/// buffer) and [`verify`]s it before returning. Every path that copies a
/// weight's bytes — the session's read tasks, on-demand reads,
/// [`DirectReplay`] — reads through here.
///
/// [`DirectReplay`]: crate::exec::DirectReplay
pub(crate) fn read_verified(
    source: &dyn PayloadSource,
    weight: &WeightDescriptor,
    buf: &mut [u8],
    policy: ChecksumPolicy,
) -> Result<(), PayloadError> {
    source.read(weight.id(), buf)?;
    verify(weight, buf, policy)
}

/// Reads `weight` through `source` in pieces of at most `piece.len()` bytes
/// ([`PieceReader`]) and checks the declared digest under `policy`: a
/// table served row by row is verified without ever being held whole.
/// Reads nothing when there is nothing to check and no digest is wanted.
/// Returns the SHA-256 of the bytes when one was computed.
///
/// # Errors
/// A read that fails or comes up short, or a digest that does not match.
///
/// # Panics
/// If `piece` is empty and the weight is not.
pub(crate) fn verify_in_pieces(
    source: &dyn PayloadSource,
    weight: &WeightDescriptor,
    piece: &mut [u8],
    policy: ChecksumPolicy,
    want_digest: bool,
) -> Result<Option<[u8; 32]>, PayloadError> {
    let mut reader = PieceReader::new(source, weight, policy, want_digest);
    if !reader.hashes() {
        return Ok(None);
    }
    let len = weight.byte_len();
    while reader.at < len {
        let n = usize::try_from(len - reader.at).map_or(piece.len(), |rest| rest.min(piece.len()));
        assert!(n > 0, "verifying a weight through an empty piece");
        reader.read(&mut piece[..n])?;
    }
    reader.finish()
}

/// One weight read front to back in pieces (positioned reads), hashed as
/// it goes when its declared digest is checked (under
/// [`ChecksumPolicy::Strict`]) or a digest is wanted; [`finish`] checks the
/// digest once the last piece was read. What a piece held is usable only
/// after `finish` succeeds.
///
/// [`finish`]: PieceReader::finish
pub(crate) struct PieceReader<'a> {
    source: &'a dyn PayloadSource,
    weight: &'a WeightDescriptor,
    hasher: Option<sha2::Sha256>,
    check: bool,
    at: u64,
}

impl<'a> PieceReader<'a> {
    pub(crate) fn new(
        source: &'a dyn PayloadSource,
        weight: &'a WeightDescriptor,
        policy: ChecksumPolicy,
        want_digest: bool,
    ) -> Self {
        use sha2::Digest;
        let check = policy == ChecksumPolicy::Strict && weight.declares_digest();
        Self {
            source,
            weight,
            hasher: (check || want_digest).then(sha2::Sha256::new),
            check,
            at: 0,
        }
    }

    /// Whether the pieces are hashed.
    pub(crate) fn hashes(&self) -> bool {
        self.hasher.is_some()
    }

    /// Reads the next `buf.len()` bytes of the weight.
    ///
    /// # Errors
    /// A range past the weight's end, a read that fails or comes up short.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> Result<(), PayloadError> {
        use sha2::Digest;
        let id = self.weight.id();
        self.source.read_range(id, self.at, buf)?;
        if let Some(h) = &mut self.hasher {
            h.update(&*buf);
        }
        // Copied out: a mapping's pages of the piece leave the process.
        let end = self.at + buf.len() as u64;
        self.source.release_range(id, self.at..end);
        self.at = end;
        Ok(())
    }

    /// After the last piece: the SHA-256 of the weight's bytes when they
    /// were hashed, checked against the declared digest under `Strict`.
    ///
    /// # Errors
    /// A digest that does not match; pieces that did not reach the end.
    pub(crate) fn finish(self) -> Result<Option<[u8; 32]>, PayloadError> {
        use sha2::Digest;
        let len = self.weight.byte_len();
        if self.at != len {
            return Err(PayloadError::ShortRead {
                tensor: self.weight.name().to_owned(),
                path: PathBuf::new(),
                read: self.at,
                expected: len,
            });
        }
        self.source.check_unchanged(self.weight.id())?;
        let Some(hasher) = self.hasher else {
            return Ok(None);
        };
        let digest: [u8; 32] = hasher.finalize().into();
        if self.check {
            self.weight.check_digest(&digest)?;
        }
        Ok(Some(digest))
    }
}

/// Under [`ChecksumPolicy::Strict`], checks `bytes` (the whole payload of
/// `weight`) against its declared digest. The one place the check lives:
/// [`read_verified`] and weights used in place from
/// [`PayloadSource::shared`] bytes both go through here.
pub(crate) fn verify(
    weight: &WeightDescriptor,
    bytes: &[u8],
    policy: ChecksumPolicy,
) -> Result<(), PayloadError> {
    if policy == ChecksumPolicy::Strict {
        weight.verify_checksum(bytes)?;
    }
    Ok(())
}

/// Reads weight `id` into a new `Vec`, unverified.
pub fn read_to_vec(source: &dyn PayloadSource, id: WeightId) -> Result<Vec<u8>, PayloadError> {
    let weight = source
        .descriptor(id)
        .ok_or(PayloadError::UnknownWeight { id: id.0 })?;
    let mut buf = vec![0u8; weight.byte_len() as usize];
    source.read(id, &mut buf)?;
    Ok(buf)
}

/// Bytes read per weight.
#[derive(Debug)]
pub struct ReadCounters {
    per_weight: Box<[AtomicU64]>,
}

impl ReadCounters {
    /// Zeroed counters for `weights` weights.
    pub fn new(weights: usize) -> Self {
        Self {
            per_weight: (0..weights).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Bytes delivered for weight `id`.
    pub fn bytes_read(&self, id: WeightId) -> u64 {
        self.per_weight
            .get(id.index())
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Bytes delivered for all weights.
    pub fn total(&self) -> u64 {
        self.per_weight
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Counts `bytes` delivered for weight `id` (also by a caller that used
    /// [`PayloadSource::shared`] bytes in place).
    pub(crate) fn add(&self, id: WeightId, bytes: u64) {
        if let Some(c) = self.per_weight.get(id.index()) {
            c.fetch_add(bytes, Ordering::Relaxed);
        }
    }
}

/// The descriptor of `id` checked against `buf`.
fn checked<'a>(
    weights: &'a [WeightDescriptor],
    id: WeightId,
    buf: &[u8],
) -> Result<&'a WeightDescriptor, PayloadError> {
    let weight = weights
        .get(id.index())
        .ok_or(PayloadError::UnknownWeight { id: id.0 })?;
    if buf.len() as u64 != weight.byte_len() {
        return Err(PayloadError::BufferSize {
            tensor: weight.name().to_owned(),
            expected: weight.byte_len(),
            buffer: buf.len(),
        });
    }
    Ok(weight)
}

/// The byte range `start..start + len` of `weight`, if it lies inside it.
fn checked_range(
    weight: &WeightDescriptor,
    start: u64,
    len: usize,
) -> Result<std::ops::Range<usize>, PayloadError> {
    let end = start
        .checked_add(len as u64)
        .filter(|&e| e <= weight.byte_len());
    match (
        usize::try_from(start),
        end.and_then(|e| usize::try_from(e).ok()),
    ) {
        (Ok(s), Some(e)) => Ok(s..e),
        _ => Err(PayloadError::BufferSize {
            tensor: weight.name().to_owned(),
            expected: weight.byte_len(),
            buffer: len,
        }),
    }
}

/// [`PayloadSource::check_unchanged`] of weight `id` among `weights`
/// stored in `files`.
fn check_file(
    weights: &[WeightDescriptor],
    files: &[ExternalFile],
    id: WeightId,
) -> Result<(), PayloadError> {
    let weight = weights
        .get(id.index())
        .ok_or(PayloadError::UnknownWeight { id: id.0 })?;
    match weight.source() {
        WeightSource::Embedded { .. } => Ok(()),
        WeightSource::External { file, .. } => files
            .get(file.index())
            .map_or(Ok(()), |f| f.check_unchanged(weight.name())),
    }
}

/// Positioned reads (`pread`) on the model's handle of each external data
/// file.
#[derive(Debug)]
pub struct FileSource {
    weights: Arc<[WeightDescriptor]>,
    files: Vec<ExternalFile>,
    counters: ReadCounters,
}

impl FileSource {
    /// Reads through the data-file handles `model` opened at validation.
    ///
    /// # Errors
    /// None today; kept fallible for sources that acquire resources.
    pub fn open(model: &Model) -> Result<Self, LoadError> {
        let files = model.external_files().to_vec();
        let weights = model.shared_weights();
        Ok(Self {
            counters: ReadCounters::new(weights.len()),
            weights,
            files,
        })
    }
}

impl PayloadSource for FileSource {
    fn descriptor(&self, id: WeightId) -> Option<&WeightDescriptor> {
        self.weights.get(id.index())
    }

    fn read(&self, id: WeightId, buf: &mut [u8]) -> Result<(), PayloadError> {
        let weight = checked(&self.weights, id, buf)?;
        let (file, offset) = match weight.source() {
            WeightSource::Embedded { bytes } => {
                buf.copy_from_slice(bytes);
                self.counters.add(id, bytes.len() as u64);
                return Ok(());
            }
            WeightSource::External { file, offset, .. } => (*file, *offset),
        };
        self.pread(weight, file, offset, buf)?;
        self.check_unchanged(id)
    }

    fn check_unchanged(&self, id: WeightId) -> Result<(), PayloadError> {
        check_file(&self.weights, &self.files, id)
    }

    fn reads_ranges(&self) -> bool {
        true
    }

    fn read_range(&self, id: WeightId, start: u64, buf: &mut [u8]) -> Result<(), PayloadError> {
        let weight = self
            .weights
            .get(id.index())
            .ok_or(PayloadError::UnknownWeight { id: id.0 })?;
        let range = checked_range(weight, start, buf.len())?;
        match weight.source() {
            WeightSource::Embedded { bytes } => {
                buf.copy_from_slice(&bytes[range]);
                self.counters.add(id, buf.len() as u64);
                Ok(())
            }
            WeightSource::External { file, offset, .. } => {
                self.pread(weight, *file, offset + start, buf)
            }
        }
    }

    fn counters(&self) -> &ReadCounters {
        &self.counters
    }
}

impl FileSource {
    /// Fills `buf` from `file` at `offset` (counted for `weight`).
    fn pread(
        &self,
        weight: &WeightDescriptor,
        file: super::weight::ExternalFileId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), PayloadError> {
        let f = &self.files[file.index()];
        let (handle, path) = (f.handle(), f.path());
        let mut done = 0usize;
        let result = loop {
            if done == buf.len() {
                break Ok(());
            }
            match handle.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    break Err(PayloadError::ShortRead {
                        tensor: weight.name().to_owned(),
                        path: path.to_owned(),
                        read: done as u64,
                        expected: buf.len() as u64,
                    });
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    break Err(PayloadError::Io {
                        tensor: weight.name().to_owned(),
                        path: path.to_owned(),
                        source,
                    });
                }
            }
        };
        self.counters.add(weight.id(), done as u64);
        result
    }
}

/// One read-only mapping of an external data file, shared with the
/// tensors used in place from it (they keep it mapped).
#[derive(Debug)]
struct MappedFile(Mmap);

impl MappedFile {
    /// Drops the whole pages inside `range` from the process (pages a
    /// neighbouring weight shares stay).
    fn release(&self, range: std::ops::Range<usize>) {
        let start = range.start.div_ceil(PAGE) * PAGE;
        let end = range.end.min(self.0.len()) / PAGE * PAGE;
        if end > start {
            // SAFETY: the mapping is read-only and shared (`Mmap::map`):
            // `MADV_DONTNEED` only unmaps its pages from this process, and
            // the next access faults the same file contents back in, so
            // every view of these bytes (shared tensors included) keeps
            // reading the same values. A failure only leaves the pages in.
            let _ = unsafe {
                self.0.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start,
                    end - start,
                )
            };
        }
    }
}

/// The smallest page size of the systems a mapping runs on. Where pages
/// are larger, `madvise` widens the range to whole pages: a neighbour's
/// page may be dropped too, which costs it a fault, never its contents.
const PAGE: usize = 4096;

impl SharedBytes for MappedFile {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Copies out of one read-only memory mapping per external data file, or
/// offers the mapping itself ([`PayloadSource::shared`]) so that suitably
/// aligned weights are used in place (what
/// [`SessionOptions::map_weights`](crate::session::SessionOptions::map_weights)
/// selects).
///
/// Not the default: if another process truncates a data file while it is
/// mapped, touching the lost pages raises SIGBUS and kills the process.
#[derive(Debug)]
pub struct MmapSource {
    weights: Arc<[WeightDescriptor]>,
    maps: Vec<(Option<Arc<MappedFile>>, PathBuf)>,
    files: Vec<ExternalFile>,
    counters: ReadCounters,
}

impl MmapSource {
    /// Maps every external data file of `model` through the handle `model`
    /// opened at validation.
    pub fn open(model: &Model) -> Result<Self, LoadError> {
        let mut maps = Vec::with_capacity(model.external_files().len());
        for f in model.external_files() {
            let io = |source| PayloadError::Io {
                tensor: format!("(file {})", f.location()),
                path: f.path().to_path_buf(),
                source,
            };
            let file: &File = f.handle();
            let map = if file.metadata().map_err(io)?.len() == 0 {
                None
            } else {
                // SAFETY: the mapping is read-only and only ever read as plain
                // bytes, or as elements through checked casts (zerocopy)
                // for types where every bit pattern is a valid
                // value, so any content is valid. The remaining hazard,
                // another process truncating the file while it is mapped
                // (SIGBUS), is the documented reason this source is opt-in.
                let map = unsafe { Mmap::map(file) }.map_err(io)?;
                // A page cache of large folios would otherwise map 2 MiB
                // at once where a run reads a 2 KiB weight in place or one
                // embedding row, and keep it mapped: small pages only (a
                // refusal leaves the default).
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::NoHugePage);
                Some(Arc::new(MappedFile(map)))
            };
            maps.push((map, f.path().to_path_buf()));
        }
        let weights = model.shared_weights();
        Ok(Self {
            counters: ReadCounters::new(weights.len()),
            weights,
            maps,
            files: model.external_files().to_vec(),
        })
    }
}

impl PayloadSource for MmapSource {
    fn descriptor(&self, id: WeightId) -> Option<&WeightDescriptor> {
        self.weights.get(id.index())
    }

    fn read(&self, id: WeightId, buf: &mut [u8]) -> Result<(), PayloadError> {
        let weight = checked(&self.weights, id, buf)?;
        match weight.source() {
            WeightSource::Embedded { bytes } => buf.copy_from_slice(bytes),
            WeightSource::External {
                file,
                offset,
                length,
            } => {
                let (map, path) = &self.maps[file.index()];
                let bytes: &[u8] = map.as_deref().map_or(&[], |m| m.bytes());
                let start = usize::try_from(*offset).unwrap_or(usize::MAX);
                let end = start.saturating_add(*length as usize);
                let Some(src) = bytes.get(start..end) else {
                    return Err(PayloadError::ShortRead {
                        tensor: weight.name().to_owned(),
                        path: path.clone(),
                        read: 0,
                        expected: *length,
                    });
                };
                buf.copy_from_slice(src);
                if let Some(map) = map {
                    map.release(start..end);
                }
            }
        }
        self.counters.add(id, buf.len() as u64);
        self.check_unchanged(id)
    }

    fn check_unchanged(&self, id: WeightId) -> Result<(), PayloadError> {
        check_file(&self.weights, &self.files, id)
    }

    fn reads_ranges(&self) -> bool {
        true
    }

    fn read_range(&self, id: WeightId, start: u64, buf: &mut [u8]) -> Result<(), PayloadError> {
        let weight = self
            .weights
            .get(id.index())
            .ok_or(PayloadError::UnknownWeight { id: id.0 })?;
        let range = checked_range(weight, start, buf.len())?;
        match weight.source() {
            WeightSource::Embedded { bytes } => buf.copy_from_slice(&bytes[range]),
            WeightSource::External { file, offset, .. } => {
                let (map, path) = &self.maps[file.index()];
                let bytes: &[u8] = map.as_deref().map_or(&[], |m| m.bytes());
                let at = usize::try_from(*offset).unwrap_or(usize::MAX);
                let within = at.saturating_add(range.start)..at.saturating_add(range.end);
                let Some(src) = bytes.get(within) else {
                    return Err(PayloadError::ShortRead {
                        tensor: weight.name().to_owned(),
                        path: path.clone(),
                        read: 0,
                        expected: buf.len() as u64,
                    });
                };
                buf.copy_from_slice(src);
            }
        }
        self.counters.add(id, buf.len() as u64);
        Ok(())
    }

    fn counters(&self) -> &ReadCounters {
        &self.counters
    }

    fn release(&self, id: WeightId) {
        if let Some((map, range)) = self.mapped(id) {
            map.release(range);
        }
    }

    fn release_range(&self, id: WeightId, range: std::ops::Range<u64>) {
        let inside = |at: u64, weight: &std::ops::Range<usize>| {
            usize::try_from(at)
                .ok()
                .and_then(|at| weight.start.checked_add(at))
                .filter(|&at| at <= weight.end)
        };
        if let Some((map, weight)) = self.mapped(id)
            && let (Some(start), Some(end)) =
                (inside(range.start, &weight), inside(range.end, &weight))
        {
            map.release(start..end);
        }
    }

    fn shared(&self, id: WeightId) -> Option<(Arc<dyn SharedBytes>, usize)> {
        let (map, range) = self.mapped(id)?;
        Some((map.clone(), range.start))
    }
}

impl MmapSource {
    /// The mapping external weight `id` lies in and its byte range there.
    fn mapped(&self, id: WeightId) -> Option<(&Arc<MappedFile>, std::ops::Range<usize>)> {
        let weight = self.weights.get(id.index())?;
        let WeightSource::External {
            file,
            offset,
            length,
        } = weight.source()
        else {
            return None;
        };
        let (map, _) = self.maps.get(file.index())?;
        let map = map.as_ref()?;
        let start = usize::try_from(*offset).ok()?;
        let end = start.checked_add(usize::try_from(*length).ok()?)?;
        (end <= map.bytes().len()).then_some((map, start..end))
    }
}
