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
//!   type, dims and SHA-256 digest — declared (`checksum` `sha256:`), or
//!   recorded by an earlier process that read the source (an embedded
//!   source's digest is computed from the model's bytes by the first
//!   process and recorded under the manifest of that model identity) —
//!   never paths, sizes or timestamps. A source with no
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
mod lookup;
pub mod maintain;
mod manifest;
mod payload;
mod persist;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_prepared_kernels::{CpuFeatures, PackedWeight, Tensor};
use sha2::{Digest, Sha256};

pub use files::{COMMIT_LOCK, PAUSE_ENV, RESUME_ENV};
pub use manifest::{CacheEntry, EntryKey, FORMAT_VERSION, Manifest};
pub use payload::{Decoded, decode as decode_payload, encode_packed, encode_tensor};

use crate::durable::FileIdentity;
use crate::model::{Model, PayloadError, Requirement, WeightDescriptor, WeightSource};
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
    /// A source's data file changed since it was verified: its object is
    /// not persisted.
    #[error("prepared cache: not persisted: {0}")]
    Source(#[from] PayloadError),
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
    /// The data file of each external source, with the source's name.
    files: Vec<(crate::model::ExternalFile, String)>,
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
    checked: Lock<BTreeSet<(u128, FileIdentity)>>,
    /// Payloads are copied into memory instead of mapped.
    copy_in: bool,
    /// Why the manifest on disk is not this build's to overwrite (damaged,
    /// unreadable, a link, another format or model), if it is not.
    foreign: Option<String>,
    /// The payload folder, once opened.
    payload_dir: Lock<Option<Arc<files::PayloadDir>>>,
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

/// The prefix of an embedded source's recorded digest (a data file's key
/// is 16 hex digits, so the two never meet).
const EMBEDDED_KEY: &str = "embedded:";

/// The kernels' ABI: the crate version, a hash of the kernels' sources
/// (so two builds with other packers never accept each other's payloads),
/// the CPU features packing targets and the payload format.
pub fn kernel_abi(cpu: CpuFeatures) -> String {
    format!(
        "onnx-prepared-kernels {} src {} / {cpu:?} / payload {FORMAT_VERSION}",
        env!("CARGO_PKG_VERSION"),
        onnx_prepared_kernels::SOURCE_HASH
    )
}

/// The manifest at `path` for the model `model_identity`: `None` when
/// there is none.
///
/// # Errors
/// It cannot be read (a link, not a regular file, too large, an I/O
/// error), does not parse, or belongs to another format version or model.
fn read_manifest(path: &Path, model_identity: &str) -> Result<Option<Manifest>, CacheError> {
    let Some(bytes) = files::read_bounded(path, MAX_MANIFEST_BYTES)? else {
        return Ok(None);
    };
    let m = Manifest::parse(&bytes, path)?;
    if m.model_identity != model_identity {
        return Err(CacheError::Corrupt {
            path: path.to_owned(),
            detail: format!(
                "it belongs to model {}, not {model_identity}",
                m.model_identity
            ),
        });
    }
    Ok(Some(m))
}

impl PreparedCache {
    /// Opens the cache in `dir` for `model` (packing for `cpu`): reads the
    /// companion model `<identity>.prepared.onnx` if it exists (metadata
    /// only). `BuildIfMissing` creates `dir`. Payloads are mapped.
    ///
    /// # Errors
    /// `dir` cannot be created; under `RequireComplete`, the companion
    /// model cannot be read or is not one this build reads (under the
    /// other policies that is a miss, reported in the diagnostics).
    pub fn open(
        dir: &Path,
        policy: PreparedModelPolicy,
        model: &Model,
        cpu: CpuFeatures,
    ) -> Result<Arc<Self>, CacheError> {
        Self::open_with(dir, policy, model, cpu, false)
    }

    /// [`open`](Self::open), copying each payload into memory when it is
    /// read instead of mapping it when `copy_in` (for cache folders other
    /// programs write: a mapped payload truncated while in use faults the
    /// process, a copied one cannot).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_with(
        dir: &Path,
        policy: PreparedModelPolicy,
        model: &Model,
        cpu: CpuFeatures,
        copy_in: bool,
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
        let (generation, foreign) = if policy == PreparedModelPolicy::Disabled {
            (Manifest::default(), None)
        } else {
            match read_manifest(&manifest_path, &model_identity) {
                Ok(m) => (m.unwrap_or_default(), None),
                Err(e) if policy == PreparedModelPolicy::RequireComplete => return Err(e),
                Err(e) => {
                    diagnostics.push(format!(
                        "{e}; the cache is not used for this model and its manifest is not overwritten"
                    ));
                    (Manifest::default(), Some(e.to_string()))
                }
            }
        };
        for (name, why) in &generation.rejected {
            diagnostics.push(format!("cache entry `{name}` ignored: {why}"));
        }
        // A recorded digest belongs to the data file's identity as the
        // model opened it (device, inode, size, modification and
        // status-change times): a file written or touched since has
        // another key, so no recorded digest applies to it.
        let data_file_keys = model
            .external_files()
            .iter()
            .map(|f| {
                let key = f.identity().key();
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
            copy_in,
            foreign,
            payload_dir: Lock::new(None),
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
            WeightSource::Embedded { .. } => self.embedded_digest(d),
            WeightSource::External { .. } => self.recorded_digest(d),
        }
    }

    /// The SHA-256 of an embedded source: recorded by an earlier process
    /// under this manifest, else computed from the bytes (once per
    /// process) and recorded. The manifest is named by, and checked
    /// against, the XXH3-128 of the model file's bytes, which hold the
    /// source: a model file with other bytes has another manifest, so a
    /// second process keys its entries without hashing the weights again.
    fn embedded_digest(&self, d: &WeightDescriptor) -> Option<[u8; 32]> {
        let key = format!("{EMBEDDED_KEY}{}", d.name());
        if let Some(digest) = self
            .recorded
            .with(|r| r.get(&key).copied())
            .or_else(|| self.generation.source_digests.get(&key).copied())
        {
            return Some(digest);
        }
        let digest = *d.embedded_sha256()?;
        self.recorded.with(|r| r.insert(key, digest));
        Some(digest)
    }

    /// The digest a read recorded for `d` (this process or an earlier one,
    /// for the data file's identity now).
    fn recorded_digest(&self, d: &WeightDescriptor) -> Option<[u8; 32]> {
        let WeightSource::External { file, .. } = d.source() else {
            return None;
        };
        let key = self.recorded_key(d, file.index());
        self.recorded
            .with(|r| r.get(&key).copied())
            .or_else(|| self.generation.source_digests.get(&key).copied())
    }

    /// The key of `d`'s recorded digest: its data file's key and its name.
    fn recorded_key(&self, d: &WeightDescriptor, file: usize) -> String {
        let file = self.data_file_keys.get(file).map_or("", String::as_str);
        format!("{file}:{}", d.name())
    }

    /// Whether a read of `d` should compute its digest: the cache writes
    /// and no trusted digest is known (it is then recorded), or the digest
    /// the cache trusts for `d` was recorded by a read rather than
    /// declared (it is then compared: a source read for any reason is
    /// checked against what entries were keyed on).
    pub fn wants_digest(&self, d: &WeightDescriptor) -> bool {
        if self.policy == PreparedModelPolicy::Disabled || d.declares_digest() {
            return false;
        }
        let recorded = self.recorded_digest(d).is_some();
        recorded
            || (self.policy == PreparedModelPolicy::BuildIfMissing && self.digest_of(d).is_none())
    }

    /// Records the digest a read computed for `d`, or compares it with the
    /// one recorded before.
    ///
    /// # Errors
    /// [`PayloadError::DigestChanged`]: the bytes differ from the recorded
    /// digest (the data file was changed in place keeping its identity).
    pub fn record_digest(
        &self,
        d: &WeightDescriptor,
        digest: [u8; 32],
    ) -> Result<(), PayloadError> {
        let WeightSource::External { file, .. } = d.source() else {
            return Ok(());
        };
        if let Some(recorded) = self.recorded_digest(d)
            && recorded != digest
        {
            self.report(format!(
                "source `{}` changed under its recorded digest; entries keyed on it are not used",
                d.name()
            ));
            return Err(PayloadError::DigestChanged {
                tensor: d.name().to_owned(),
                recorded: manifest::hex(&recorded),
                actual: manifest::hex(&digest),
            });
        }
        let key = self.recorded_key(d, file.index());
        self.recorded.with(|r| r.insert(key, digest));
        Ok(())
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

    /// Counts a planned hit or miss.
    pub fn count_planned(&self, hit: bool) {
        let c = if hit { &self.hits } else { &self.misses };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Reports a damaged entry found while reading (the object is then
    /// built from its sources).
    pub fn report_damaged(&self, e: &CacheError) {
        self.report(format!("{e}; built from its sources instead"));
    }
}
