//! The prepared cache (cold path): a companion ONNX model beside the source
//! model's identity, so a later process reads packed bytes instead of
//! reading source weights and prepacking them again.
//!
//! One [`PreparedCache`] holds one generation of the companion model
//! (parsed once, metadata only) and is shared by the plan built against it
//! and the session running that plan, so they can never see different
//! generations.
//!
//! * **Lookup** (plan build): a requirement's entry is used when its key
//!   (source lineage digest, layout, device) is present, its kernel ABI and
//!   format version are this build's, and its payload file has the
//!   recorded size. The lineage digest covers each source's name, element
//!   type, dims and SHA-256 digest — declared (`checksum` `sha256:`),
//!   computed from embedded bytes, or recorded by an earlier process that
//!   read the source — never paths, sizes or timestamps. A source with no
//!   digest makes the entry *unverified*: the source is read and packed.
//! * **Read** (a read-packed task): the payload file is mapped read-only
//!   and checked against its XXH3-128 checksum; a packed weight's parts are
//!   then used in place from the mapping (no copy, no decode), a source
//!   tensor is copied out once. A corrupt payload is
//!   reported in the session's diagnostics and the object is built from
//!   its sources instead (under [`PreparedModelPolicy::BuildIfMissing`] it
//!   is rewritten).
//! * **Write** (after a prepack published its object, under
//!   `BuildIfMissing`): a background job writes the payload and then a
//!   new manifest generation (protocol in `files.rs`).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = onnx_prepared_fixtures::default_dir();
//! # onnx_prepared_fixtures::ensure_all(&dir)?;
//! # let cache = tempfile::tempdir()?;
//! use onnx_prepared::{PreparedModelPolicy, RuntimeSession, SessionOptions};
//!
//! let options = |policy| {
//!     SessionOptions::default()
//!         .with_cache_dir(cache.path())
//!         .with_cache_policy(policy)
//! };
//! let model = dir.join("gemm-chain.onnx");
//! // The first process reads, packs, and persists in the background.
//! let first = RuntimeSession::open(&model, options(PreparedModelPolicy::BuildIfMissing))?;
//! first.prepare()?;
//! first.flush_cache();
//! assert!(first.preparation_stats().prepacks > 0);
//! drop(first);
//!
//! // The next one reads packed payloads only.
//! let next = RuntimeSession::open(&model, options(PreparedModelPolicy::RequireComplete))?;
//! next.prepare()?;
//! let stats = next.preparation_stats();
//! assert_eq!((stats.source_bytes_read, stats.prepacks), (0, 0));
//! # Ok(()) }
//! ```

mod files;
pub mod maintain;
mod manifest;
mod payload;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_prepared_kernels::{CpuFeatures, PackedWeight, SharedBytes, Tensor};
use sha2::{Digest, Sha256};

pub use files::PAUSE_ENV;
pub use manifest::{CacheEntry, EntryKey, FORMAT_VERSION, Manifest};
pub use payload::{Decoded, decode as decode_payload, encode_packed, encode_tensor};

use crate::model::{Model, Requirement, WeightDescriptor, WeightSource};
use crate::sync::{AtomicU64, AtomicUsize, Lock, Ordering};

/// Largest companion model read (it holds metadata only).
const MAX_MANIFEST_BYTES: u64 = 256 << 20;

/// What a session does with the prepared cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreparedModelPolicy {
    /// Ignore any companion model and never write one.
    #[default]
    Disabled,
    /// Use compatible entries; build misses in memory only.
    ReadOnly,
    /// Use compatible entries; build misses and persist them (creating or
    /// updating the companion model).
    BuildIfMissing,
    /// Fail at plan build, before any inference, when a prepared object
    /// has no compatible entry (every missing key is named).
    RequireComplete,
}

impl PreparedModelPolicy {
    /// The CLI spelling (`disabled`, `read-only`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Disabled => "disabled",
            Self::ReadOnly => "read-only",
            Self::BuildIfMissing => "build-if-missing",
            Self::RequireComplete => "require-complete",
        }
    }

    /// Parses [`PreparedModelPolicy::name`].
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Disabled,
            Self::ReadOnly,
            Self::BuildIfMissing,
            Self::RequireComplete,
        ]
        .into_iter()
        .find(|p| p.name() == s)
    }
}

/// The prepared cache cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// A file of the cache could not be read or written.
    #[error("prepared cache: cannot {what} `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operation.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// The companion model is not one this build can read (structural
    /// corruption): delete it or run `onnx-prepared cache prune`.
    #[error(
        "prepared cache: `{path}` is corrupt: {detail} (remove it or run `onnx-prepared cache prune`)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// A payload does not decode.
    #[error("prepared cache: payload is damaged: {detail}")]
    Payload {
        /// What is wrong.
        detail: String,
    },
    /// A payload does not match its entry.
    #[error("prepared cache: entry `{entry}`: {detail}")]
    BadEntry {
        /// The entry's name.
        entry: String,
        /// What is wrong.
        detail: String,
    },
    /// `RequireComplete`: prepared objects without a compatible entry.
    #[error(
        "prepared cache is incomplete under require-complete: {} prepared object(s) have no compatible entry (run once with build-if-missing): {}",
        missing.len(),
        missing.join("; ")
    )]
    Incomplete {
        /// Each missing or incompatible key, with why.
        missing: Vec<String>,
    },
}

/// Cache counters of one store (one process's use of one companion model).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Requirements planned as read-packed.
    pub hits: u64,
    /// Requirements planned from their sources.
    pub misses: u64,
    /// Payload bytes read.
    pub packed_bytes_read: u64,
    /// Bytes of packed parts and source tensors used in place from a
    /// mapped payload (never copied or decoded).
    pub bytes_in_place: u64,
    /// Payloads persisted by this process.
    pub writes: u64,
}

/// Why a requirement has no usable entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// A source has no trusted digest.
    Unverified(String),
    /// No entry with this key.
    Absent,
    /// An entry exists but another build, CPU or format wrote it.
    Incompatible(String),
    /// The entry is damaged (reported in the diagnostics).
    Corrupt(String),
}

impl std::fmt::Display for Miss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Miss::Unverified(w) => write!(f, "source `{w}` has no sha256 digest (unverified)"),
            Miss::Absent => write!(f, "no entry"),
            Miss::Incompatible(why) => write!(f, "incompatible entry: {why}"),
            Miss::Corrupt(why) => write!(f, "corrupt entry: {why}"),
        }
    }
}

/// An object to persist (a background job under `BuildIfMissing`).
#[derive(Debug)]
pub struct PersistJob {
    store: Arc<PreparedCache>,
    key: EntryKey,
    source_lineage: String,
    name: String,
    object: PersistObject,
}

/// The object a [`PersistJob`] writes.
#[derive(Debug)]
pub enum PersistObject {
    /// A source tensor used as is.
    Tensor(Arc<Tensor>),
    /// A packed weight.
    Packed(Arc<PackedWeight>),
}

/// Runs persist jobs off the critical path (a session submits each as a
/// background-priority I/O task).
pub trait PersistSink: Send + Sync + std::fmt::Debug {
    /// Runs `job` eventually.
    fn submit(&self, job: PersistJob);
}

/// One process's view of one companion model: its generation, the digests
/// and entries this process added, diagnostics and counters.
#[derive(Debug)]
pub struct PreparedCache {
    dir: PathBuf,
    manifest_path: PathBuf,
    policy: PreparedModelPolicy,
    model_identity: String,
    kernel_abi: String,
    generation: Manifest,
    /// Per external data file of the model, its key for recorded digests
    /// (see `manifest.rs`).
    data_file_keys: Vec<String>,
    /// Digests computed this process (sources that declare none).
    recorded: Lock<BTreeMap<String, [u8; 32]>>,
    /// Entries this process persisted, not yet in a committed manifest.
    written: Lock<Vec<CacheEntry>>,
    /// Every entry this process persisted (committed or not): an object
    /// evicted after its payload was written is restored from it.
    persisted: Lock<BTreeMap<EntryKey, CacheEntry>>,
    /// Payload files whose checksum this process verified, by checksum
    /// and file identity.
    checked: Lock<BTreeSet<(u128, files::FileIdentity)>>,
    /// Serializes manifest commits within the process.
    commit: Lock<()>,
    /// Persist jobs submitted and not finished.
    outstanding: AtomicUsize,
    diagnostics: Lock<Vec<String>>,
    hits: AtomicU64,
    misses: AtomicU64,
    packed_bytes_read: AtomicU64,
    bytes_in_place: AtomicU64,
    writes: AtomicU64,
}

/// The kernels' ABI: the build, the CPU features packing targets and the
/// payload format.
pub fn kernel_abi(cpu: CpuFeatures) -> String {
    format!(
        "onnx-prepared-kernels {} / {cpu:?} / payload {FORMAT_VERSION}",
        env!("CARGO_PKG_VERSION")
    )
}

impl PreparedCache {
    /// Opens the cache in `dir` for `model` (packing for `cpu`): reads the
    /// companion model `<identity>.prepared.onnx` if it exists (metadata
    /// only). `BuildIfMissing` creates `dir`.
    ///
    /// # Errors
    /// The companion model is structurally corrupt, or `dir` cannot be
    /// created or read.
    pub fn open(
        dir: &Path,
        policy: PreparedModelPolicy,
        model: &Model,
        cpu: CpuFeatures,
    ) -> Result<Arc<Self>, CacheError> {
        if policy == PreparedModelPolicy::BuildIfMissing {
            std::fs::create_dir_all(dir).map_err(|source| CacheError::Io {
                path: dir.to_owned(),
                what: "create the cache directory",
                source,
            })?;
        }
        let model_identity = format!("{:032x}", model.identity());
        let manifest_path = dir.join(format!("{model_identity}.prepared.onnx"));
        let mut diagnostics = Vec::new();
        let generation = if policy == PreparedModelPolicy::Disabled {
            Manifest::default()
        } else {
            match files::read_bounded(&manifest_path, MAX_MANIFEST_BYTES)? {
                None => Manifest::default(),
                Some(bytes) => Manifest::parse(&bytes, &manifest_path)?,
            }
        };
        if !generation.model_identity.is_empty() && generation.model_identity != model_identity {
            return Err(CacheError::Corrupt {
                path: manifest_path,
                detail: format!(
                    "it belongs to model {}, not {model_identity}",
                    generation.model_identity
                ),
            });
        }
        for (name, why) in &generation.rejected {
            diagnostics.push(format!("cache entry `{name}` ignored: {why}"));
        }
        let data_file_keys = model
            .external_files()
            .iter()
            .map(|f| {
                let canonical = f.path().to_string_lossy();
                let stamp = files::stamp(f.path()).unwrap_or_default();
                let key = format!("{canonical}\n{stamp}");
                format!("{:016x}", xxhash_rust::xxh3::xxh3_64(key.as_bytes()))
            })
            .collect();
        Ok(Arc::new(Self {
            dir: dir.to_owned(),
            manifest_path,
            policy,
            model_identity,
            kernel_abi: kernel_abi(cpu),
            generation,
            data_file_keys,
            recorded: Lock::new(BTreeMap::new()),
            written: Lock::new(Vec::new()),
            persisted: Lock::new(BTreeMap::new()),
            checked: Lock::new(BTreeSet::new()),
            commit: Lock::new(()),
            outstanding: AtomicUsize::new(0),
            diagnostics: Lock::new(diagnostics),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            packed_bytes_read: AtomicU64::new(0),
            bytes_in_place: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }))
    }

    /// The policy.
    pub fn policy(&self) -> PreparedModelPolicy {
        self.policy
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The companion model's path.
    pub fn manifest_path(&self) -> &Path {
        &self.manifest_path
    }

    /// The generation read at open.
    pub fn generation(&self) -> &Manifest {
        &self.generation
    }

    /// Counters so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            packed_bytes_read: self.packed_bytes_read.load(Ordering::Relaxed),
            bytes_in_place: self.bytes_in_place.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
        }
    }

    /// Entries ignored, damaged payloads, unverified sources (in order).
    pub fn diagnostics(&self) -> Vec<String> {
        self.diagnostics.with(|d| d.clone())
    }

    /// Adds a diagnostic line, once (a damaged entry met at every restore
    /// is reported once).
    fn report(&self, line: String) {
        self.diagnostics.with(|d| {
            if !d.contains(&line) {
                d.push(line);
            }
        });
    }

    /// Payloads this process persisted so far (an entry can appear only
    /// when this count moves).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// A trusted SHA-256 of `d`'s bytes, if one is known without reading
    /// it: declared, embedded, or recorded by a read.
    fn digest_of(&self, d: &WeightDescriptor) -> Option<[u8; 32]> {
        if let Some(digest) = d.checksum().and_then(|c| c.tensor_sha256()) {
            return Some(*digest);
        }
        match d.source() {
            WeightSource::Embedded { bytes } => Some(Sha256::digest(bytes).into()),
            WeightSource::External { file, .. } => {
                let key = self.recorded_key(d, file.index());
                self.recorded
                    .with(|r| r.get(&key).copied())
                    .or_else(|| self.generation.source_digests.get(&key).copied())
            }
        }
    }

    /// The key of `d`'s recorded digest: its data file's key and its name.
    fn recorded_key(&self, d: &WeightDescriptor, file: usize) -> String {
        let file = self.data_file_keys.get(file).map_or("", String::as_str);
        format!("{file}:{}", d.name())
    }

    /// Whether a read of `d` should compute its digest (the cache writes
    /// and no trusted digest is known).
    pub fn wants_digest(&self, d: &WeightDescriptor) -> bool {
        self.policy == PreparedModelPolicy::BuildIfMissing && self.digest_of(d).is_none()
    }

    /// Records the digest a read computed for `d`.
    pub fn record_digest(&self, d: &WeightDescriptor, digest: [u8; 32]) {
        if let WeightSource::External { file, .. } = d.source() {
            let key = self.recorded_key(d, file.index());
            self.recorded.with(|r| r.insert(key, digest));
        }
    }

    /// The entry key and readable lineage of `r`, or the first source
    /// without a trusted digest.
    fn lineage(&self, model: &Model, r: &Requirement) -> Result<(EntryKey, String), Miss> {
        let mut h = Sha256::new();
        let mut text = Vec::with_capacity(r.sources.len());
        for &w in &r.sources {
            let d = &model.weights()[w.index()];
            let digest = self
                .digest_of(d)
                .ok_or_else(|| Miss::Unverified(d.name().to_owned()))?;
            crate::model::hash_source_identity(&mut h, d, &digest);
            text.push(format!(
                "{} {} {:?} sha256:{}",
                d.name(),
                d.element_type().name(),
                d.dims(),
                manifest::hex(&digest)
            ));
        }
        Ok((
            EntryKey {
                lineage: h.finalize().into(),
                layout: r.key.layout.clone(),
                device: r.key.device,
            },
            text.join("; "),
        ))
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
        if e.kernel_abi != self.kernel_abi {
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
        let path = self.dir.join(&e.location);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() && m.len() == e.length => Ok(e),
            Ok(m) => {
                let why = format!(
                    "payload `{}` has {} bytes, the entry {}",
                    e.location,
                    m.len(),
                    e.length
                );
                self.report(format!("cache entry `{}` ignored: {why}", e.name));
                Err(Miss::Corrupt(why))
            }
            Err(_) => {
                let why = format!("payload `{}` is missing", e.location);
                self.report(format!("cache entry `{}` ignored: {why}", e.name));
                Err(Miss::Corrupt(why))
            }
        }
    }

    /// Counts a planned hit or miss.
    pub fn count_planned(&self, hit: bool) {
        let c = if hit { &self.hits } else { &self.misses };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads, checks and decodes `r`'s payload.
    ///
    /// # Errors
    /// The entry is gone, or its payload is missing, short, fails its
    /// checksum or does not decode to an object of the entry's layout.
    pub fn read(&self, model: &Model, r: &Requirement) -> Result<Decoded, CacheError> {
        let bad = |detail: String| CacheError::BadEntry {
            entry: r.name.clone(),
            detail,
        };
        let e = self.lookup(model, r).map_err(|m| bad(m.to_string()))?;
        let path = self.dir.join(&e.location);
        let mapped = files::map_payload(&path, e.length)?
            .ok_or_else(|| bad(format!("payload `{}` is missing", e.location)))?;
        let bytes = mapped.bytes();
        self.packed_bytes_read
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if bytes.len() as u64 != e.length {
            return Err(bad(format!(
                "payload has {} bytes, the entry {}",
                bytes.len(),
                e.length
            )));
        }
        // Every page is checked before any byte is used in place — once
        // per file this process maps: a payload restored after an
        // eviction maps the same checked file again (same identity) and
        // is not hashed again.
        let checked = (e.checksum, mapped.identity());
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
        let decoded = payload::decode_shared(mapped)?;
        let layout_ok = match &decoded {
            Decoded::Tensor(t) => {
                let source = &model.weights()[r.sources[0].index()];
                r.prepack.is_none()
                    && t.dtype() == source.element_type().compute()
                    && t.shape()
                        .iter()
                        .map(|&x| x as u64)
                        .eq(source.dims().iter().copied())
            }
            Decoded::Packed(p) => r.prepack.as_ref().is_some_and(|k| k.layout() == p.layout),
        };
        if !layout_ok {
            return Err(bad("the payload is not an object of this layout".into()));
        }
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

    /// Reports a damaged entry found while reading (the object is then
    /// built from its sources).
    pub fn report_damaged(&self, e: &CacheError) {
        self.report(format!("{e}; built from its sources instead"));
    }

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
                Some(PersistJob {
                    store: self.clone(),
                    key,
                    source_lineage,
                    name: r.name.clone(),
                    object,
                })
            }
            Err(miss) => {
                self.report(format!("`{}` not persisted: {miss}", r.name));
                None
            }
        }
    }

    /// Commits a new manifest generation: what is on disk now, plus every
    /// entry and digest this process added (protocol "write" steps 3–4).
    pub fn commit(&self) -> Result<(), CacheError> {
        self.commit.with(|_| {
            let written = self.written.with(std::mem::take);
            let recorded = self.recorded.with(|r| r.clone());
            let mut m = match files::read_bounded(&self.manifest_path, MAX_MANIFEST_BYTES) {
                Ok(Some(bytes)) => Manifest::parse(&bytes, &self.manifest_path)
                    .ok()
                    .filter(|m| m.model_identity == self.model_identity)
                    .unwrap_or_default(),
                _ => Manifest::default(),
            };
            m.model_identity = self.model_identity.clone();
            m.rejected.clear();
            if written.is_empty()
                && recorded
                    .iter()
                    .all(|(k, v)| m.source_digests.get(k) == Some(v))
            {
                return Ok(());
            }
            for e in written {
                m.entries.insert(e.key.clone(), e);
            }
            m.source_digests.extend(recorded);
            // The payloads' names are durable before a manifest names them.
            let payloads = self.dir.join(manifest::PAYLOAD_DIR);
            if payloads.is_dir() {
                files::sync_dir(&payloads)?;
            }
            files::publish_manifest(&self.manifest_path, &m.to_bytes())
        })
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
        let checksum = xxhash_rust::xxh3::xxh3_128(&bytes);
        let location = CacheEntry::location_for(checksum);
        let (dir, name) = location.split_once('/').expect("payloads/<name>");
        files::publish_payload(&self.store.dir.join(dir), name, &bytes, checksum)?;
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
