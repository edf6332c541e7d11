//! Protocol "read" of the prepared cache: which entry serves a requirement
//! (plan build, no payload byte read) and the checks a payload passes
//! before any of its bytes is used.
//!
//! A payload is used only when, in this order:
//! 1. its file, opened through the payload folder's handle without
//!    following a link, is a regular file of the entry's length;
//! 2. its bytes, mapped (or copied in, [`PreparedCache::open_with`]), hash
//!    to the entry's XXH3-128 checksum — once per file identity (device,
//!    inode, size, modification and status-change times) per process: a
//!    payload restored after an eviction from the same unchanged file is
//!    not hashed again, one rewritten or touched since is;
//! 3. the file's identity after mapping is the one before (a change in
//!    between is a miss);
//! 4. it decodes, is an object of the requirement's layout, and the
//!    packing's own [`Prepack::validate`] accepts it for the sources'
//!    shapes (header, part sizes, target instructions).
//!
//! A payload failing any step is a damaged entry: the object is built from
//! its sources (and rewritten under `BuildIfMissing`), reported in the
//! diagnostics; under `RequireComplete` the run fails with the cause.
//!
//! [`Prepack::validate`]: onnx_prepared_kernels::Prepack::validate

use std::sync::Arc;

use super::files::PayloadDir;
use super::manifest::PAYLOAD_DIR;
use super::payload::{self, Decoded};
use super::{CacheEntry, CacheError, FORMAT_VERSION, Miss, PreparedCache, PreparedModelPolicy};
use crate::model::{Model, Requirement};
use crate::sync::Ordering;

/// The file name of a payload inside the payload folder.
pub(super) fn payload_name(location: &str) -> &str {
    location
        .strip_prefix(PAYLOAD_DIR)
        .and_then(|s| s.strip_prefix('/'))
        .unwrap_or(location)
}

impl PreparedCache {
    /// The payload folder, opened once (`None` while it does not exist;
    /// created when `create`).
    pub(super) fn payloads(&self, create: bool) -> Result<Option<Arc<PayloadDir>>, CacheError> {
        if let Some(d) = self.payload_dir.with(|d| d.clone()) {
            return Ok(Some(d));
        }
        let Some(dir) = PayloadDir::open(&self.dir, create)? else {
            return Ok(None);
        };
        let dir = Arc::new(dir);
        self.payload_dir.with(|d| *d = Some(dir.clone()));
        Ok(Some(dir))
    }

    /// The compatible entry for `r` in the generation this process opened
    /// or among the entries it persisted since, or why there is none (no
    /// payload byte is read; the payload file's size is checked).
    pub fn lookup(&self, model: &Model, r: &Requirement) -> Result<CacheEntry, Miss> {
        if self.policy == PreparedModelPolicy::Disabled {
            return Err(Miss::Absent);
        }
        let (key, _) = self.lineage(model, r)?;
        let e = match self.generation.entries.get(&key) {
            Some(e) => e.clone(),
            None => self
                .persisted
                .with(|p| p.get(&key).cloned())
                .ok_or(Miss::Absent)?,
        };
        // A source tensor's payload depends on the payload format only; a
        // packed object's on the kernels that packed it.
        if r.prepack.is_some() && e.kernel_abi != self.kernel_abi {
            return Err(Miss::Incompatible(format!(
                "packed for `{}`, this build packs for `{}`",
                e.kernel_abi, self.kernel_abi
            )));
        }
        if e.format_version != FORMAT_VERSION {
            return Err(Miss::Incompatible(format!(
                "format version {}, this build reads {FORMAT_VERSION}",
                e.format_version
            )));
        }
        let found = self
            .payloads(false)
            .and_then(|d| match d {
                Some(d) => d.identity(payload_name(&e.location)),
                None => Ok(None),
            })
            .map_err(|err| err.to_string());
        let why = match found {
            Ok(Some(id)) if id.len() == e.length => return Ok(e),
            Ok(Some(id)) => format!(
                "payload `{}` has {} bytes, the entry {}",
                e.location,
                id.len(),
                e.length
            ),
            Ok(None) => format!("payload `{}` is missing", e.location),
            Err(err) => err,
        };
        self.report(format!("cache entry `{}` ignored: {why}", e.name));
        Err(Miss::Corrupt(why))
    }

    /// Reads, checks and decodes `r`'s payload (steps in the module docs).
    ///
    /// # Errors
    /// The entry is gone, or its payload is missing, short, changed while
    /// read, fails its checksum, does not decode, or is not an object the
    /// requirement's packing accepts.
    pub fn read(&self, model: &Model, r: &Requirement) -> Result<Decoded, CacheError> {
        let bad = |detail: String| CacheError::BadEntry {
            entry: r.name.clone(),
            detail,
        };
        let e = self.lookup(model, r).map_err(|m| bad(m.to_string()))?;
        let missing = || bad(format!("payload `{}` is missing", e.location));
        let dir = self.payloads(false)?.ok_or_else(missing)?;
        let loaded = dir
            .load(payload_name(&e.location), e.length, self.copy_in)?
            .ok_or_else(missing)?;
        let bytes = onnx_prepared_kernels::SharedBytes::bytes(&*loaded);
        self.packed_bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        // Every page is checked before any byte is used in place — once
        // per file identity this process loads.
        let checked = (e.checksum, loaded.identity());
        if !self.checked.with(|c| c.contains(&checked)) {
            let sum = xxhash_rust::xxh3::xxh3_128(bytes);
            if sum != e.checksum {
                return Err(bad(format!(
                    "payload checksum {sum:032x} does not match the entry's {:032x}",
                    e.checksum
                )));
            }
            self.checked.with(|c| c.insert(checked));
        }
        let decoded = payload::decode_shared(loaded)?;
        check_object(model, r, &decoded).map_err(bad)?;
        let in_place: u64 = match &decoded {
            Decoded::Packed(p) => p
                .parts
                .iter()
                .filter(|part| part.is_mapped())
                .filter_map(|part| part.dtype().byte_len(part.len() as u64))
                .sum(),
            Decoded::Tensor(t) if t.is_shared() => t.byte_len() as u64,
            Decoded::Tensor(_) => 0,
        };
        self.bytes_in_place.fetch_add(in_place, Ordering::Relaxed);
        Ok(decoded)
    }
}

/// Step 4: `decoded` is an object `r` can use — a source tensor of the
/// source's type and shape, or a packed weight its packing validates for
/// the sources' shapes.
fn check_object(model: &Model, r: &Requirement, decoded: &Decoded) -> Result<(), String> {
    let weights = model.weights();
    let shapes: Vec<Vec<usize>> = r
        .sources
        .iter()
        .map(|w| {
            weights[w.index()]
                .dims()
                .iter()
                .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
                .collect()
        })
        .collect();
    match (decoded, &r.prepack) {
        (Decoded::Tensor(t), None) => {
            let source = &weights[r.sources[0].index()];
            if t.dtype() == source.element_type().compute() && t.shape() == shapes[0] {
                Ok(())
            } else {
                Err("the payload is not the source tensor of this entry".into())
            }
        }
        (Decoded::Packed(p), Some(k)) => {
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            onnx_prepared_kernels::check_packed(p)
                .and_then(|()| k.validate(p, &refs))
                .map_err(|e| format!("the packed object is not usable: {e}"))
        }
        _ => Err("the payload is not an object of this layout".into()),
    }
}
