//! Protocol "write" of the prepared cache, the process side: a persist
//! job per prepared object (off the critical path), then one commit of a
//! new manifest generation when the last pending job is done. The file
//! steps, the locks and the fault injection points are in `files.rs`.
//!
//! Only verified bytes are persisted: a job checks, after encoding its
//! object, that the data file of every source still has the identity it
//! had when the model was opened (so the bytes packed or copied are the
//! ones verified, even from a live mapping); a changed file leaves the
//! object unpersisted and reported.
//!
//! Entries survive a failed commit: they stay pending and the next commit
//! (the next job's, or [`PreparedCache::commit`] called again) retries
//! them; a commit never overwrites a manifest this build cannot read.

use std::sync::Arc;

use super::files;
use super::lookup::payload_name;
use super::{
    CacheEntry, CacheError, FORMAT_VERSION, PersistJob, PersistObject, PreparedCache,
    PreparedModelPolicy, encode_packed, encode_tensor, read_manifest,
};
use crate::model::{Model, Requirement, WeightSource};
use crate::sync::Ordering;

impl PreparedCache {
    /// A job persisting `object` as `r`'s entry, under `BuildIfMissing`
    /// when every source has a trusted digest by now.
    pub fn persist_job(
        self: &Arc<Self>,
        model: &Model,
        r: &Requirement,
        object: PersistObject,
    ) -> Option<PersistJob> {
        if self.policy != PreparedModelPolicy::BuildIfMissing {
            return None;
        }
        match self.lineage(model, r) {
            Ok((key, source_lineage)) => {
                self.outstanding.fetch_add(1, Ordering::SeqCst);
                let files = r
                    .sources
                    .iter()
                    .filter_map(|w| {
                        let d = &model.weights()[w.index()];
                        match d.source() {
                            WeightSource::External { file, .. } => Some((
                                model.external_files()[file.index()].clone(),
                                d.name().to_owned(),
                            )),
                            WeightSource::Embedded { .. } => None,
                        }
                    })
                    .collect();
                Some(PersistJob {
                    store: self.clone(),
                    key,
                    source_lineage,
                    name: r.name.clone(),
                    object,
                    files,
                })
            }
            Err(miss) => {
                self.report(format!("`{}` not persisted: {miss}", r.name));
                None
            }
        }
    }

    /// Commits a new manifest generation: what is on disk now, plus every
    /// entry and digest this process added (protocol "write" steps 3–4),
    /// under the cache's locks. On failure the entries stay pending.
    ///
    /// # Errors
    /// The manifest on disk is not this build's (it is never overwritten),
    /// or a lock, read or write failed.
    pub fn commit(&self) -> Result<(), CacheError> {
        self.commit.with(|_| {
            let written = self.written.with(std::mem::take);
            let result = self.commit_locked(&written);
            if result.is_err() {
                self.written.with(|w| {
                    let newer = std::mem::replace(w, written);
                    w.extend(newer);
                });
            }
            result
        })
    }

    fn commit_locked(&self, written: &[CacheEntry]) -> Result<(), CacheError> {
        if let Some(why) = &self.foreign {
            return Err(CacheError::Corrupt {
                path: self.manifest_path.clone(),
                detail: format!("not overwritten: {why}"),
            });
        }
        let recorded = self.recorded.with(|r| r.clone());
        let _writer = files::lock_dir(&self.dir, false)?;
        let _commit = files::lock_commit(&self.dir)?;
        let mut m = read_manifest(&self.manifest_path, &self.model_identity)?.unwrap_or_default();
        m.model_identity = self.model_identity.clone();
        m.rejected.clear();
        // A payload pruned between its publication and this commit is not
        // named (its object is rebuilt and written by a later process).
        let payloads = self.payloads(false)?;
        let mut named = Vec::with_capacity(written.len());
        for e in written {
            let id = match &payloads {
                Some(p) => p.identity(payload_name(&e.location)).ok().flatten(),
                None => None,
            };
            if id.is_some_and(|id| id.len() == e.length) {
                named.push(e.clone());
            } else {
                self.report(format!(
                    "cache entry `{}` not committed: its payload `{}` was removed before the commit",
                    e.name, e.location
                ));
            }
        }
        if named.is_empty()
            && recorded
                .iter()
                .all(|(k, v)| m.source_digests.get(k) == Some(v))
        {
            return Ok(());
        }
        for e in named {
            m.entries.insert(e.key.clone(), e);
        }
        m.source_digests.extend(recorded);
        // The payloads' names are durable before a manifest names them.
        if let Some(p) = &payloads {
            p.sync()?;
        }
        files::publish_manifest(&self.manifest_path, &m.to_bytes())
    }
}

impl PersistJob {
    /// Writes the payload; then, when no other job of the store is still
    /// pending, a new manifest generation (the commit runs as the job is
    /// dropped, so a job dropped unrun still lets the others commit).
    ///
    /// # Errors
    /// The payload could not be written; nothing half-written becomes
    /// visible (the failure is also in the store's diagnostics).
    pub fn run(self) -> Result<(), CacheError> {
        let result = self.write();
        if let Err(e) = &result {
            self.store.report(format!("cache write failed: {e}"));
        }
        result
    }

    fn write(&self) -> Result<(), CacheError> {
        let bytes = match &self.object {
            PersistObject::Tensor(t) => encode_tensor(t),
            PersistObject::Packed(p) => encode_packed(p),
        };
        // The bytes encoded are the verified ones: no source's data file
        // was written or touched since the model was opened.
        for (file, tensor) in &self.files {
            file.check_unchanged(tensor)?;
        }
        let checksum = xxhash_rust::xxh3::xxh3_128(&bytes);
        let location = CacheEntry::location_for(checksum);
        let _writer = files::lock_dir(&self.store.dir, false)?;
        let dir = self.store.payloads(true)?.ok_or_else(|| CacheError::Io {
            path: self.store.dir.join(super::manifest::PAYLOAD_DIR),
            what: "create the payload folder",
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        dir.publish(payload_name(&location), &bytes, checksum)?;
        let entry = CacheEntry {
            key: self.key.clone(),
            source_lineage: self.source_lineage.clone(),
            location: location.clone(),
            length: bytes.len() as u64,
            checksum,
            kernel_abi: self.store.kernel_abi.clone(),
            format_version: FORMAT_VERSION.into(),
            name: self.name.clone(),
        };
        self.store
            .persisted
            .with(|p| p.insert(entry.key.clone(), entry.clone()));
        self.store.written.with(|w| w.push(entry));
        self.store.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The last pending job of a store commits its manifest.
impl Drop for PersistJob {
    fn drop(&mut self) {
        if self.store.outstanding.fetch_sub(1, Ordering::SeqCst) == 1
            && let Err(e) = self.store.commit()
        {
            self.store.report(format!("cache write failed: {e}"));
        }
    }
}
