//! Weight descriptors (cold path): what an initializer is and where its bytes
//! live, known before any payload byte is read.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::{ElementType, PayloadError};
use crate::durable::FileIdentity;

/// Index of a weight in [`super::Model::weights`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WeightId(pub u32);

impl WeightId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of an external data file in [`super::Model::external_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExternalFileId(pub u32);

impl ExternalFileId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// An external data file some initializer reads, opened and validated at
/// open. Payload sources read through its handle, never through its path.
#[derive(Debug, Clone)]
pub struct ExternalFile {
    pub(crate) location: String,
    pub(crate) path: PathBuf,
    pub(crate) size: u64,
    /// The file's identity when it was opened (`fstat` of `handle`).
    pub(crate) identity: FileIdentity,
    /// The file opened at validation (a regular file of `size` bytes then).
    pub(crate) handle: Arc<File>,
}

impl ExternalFile {
    /// The `location` as written in the model (first weight that named it).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The canonical path the location resolved to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's size when the model was opened.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The handle opened at validation, shared by every payload source.
    pub(crate) fn handle(&self) -> &Arc<File> {
        &self.handle
    }

    /// The file's identity when the model was opened: what every digest
    /// computed from its bytes, and every check of it, refers to.
    pub fn identity(&self) -> &FileIdentity {
        &self.identity
    }

    /// Checks that the file still has the identity it had when the model
    /// was opened (one `fstat` of the handle, about 1 µs).
    ///
    /// # Errors
    /// [`PayloadError::DataFileChanged`] naming `tensor` and what changed;
    /// [`PayloadError::Io`] when `fstat` fails.
    pub fn check_unchanged(&self, tensor: &str) -> Result<(), PayloadError> {
        let now = FileIdentity::of(&self.handle).map_err(|source| PayloadError::Io {
            tensor: tensor.to_owned(),
            path: self.path.clone(),
            source,
        })?;
        if self.identity.same_contents(&now) {
            return Ok(());
        }
        Err(PayloadError::DataFileChanged {
            tensor: tensor.to_owned(),
            path: self.path.clone(),
            what: self.identity.difference(&now),
        })
    }
}

/// Where a weight's bytes live.
#[derive(Debug, Clone)]
pub enum WeightSource {
    /// Inside the `.onnx` file; `bytes` slices the model buffer (raw data) or
    /// holds the little-endian encoding of the typed fields.
    Embedded {
        /// The payload.
        bytes: Bytes,
    },
    /// In an external data file.
    External {
        /// The file.
        file: ExternalFileId,
        /// Byte offset in the file.
        offset: u64,
        /// Byte length (equal to the descriptor's `byte_len`).
        length: u64,
    },
}

/// The `checksum` entry of an initializer's `external_data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checksum {
    /// `sha256:<hex>`: the digest of exactly this tensor's bytes.
    Sha256([u8; 32]),
    /// An unprefixed value: the ONNX spec's SHA-1 of the *whole file*, kept
    /// for reports and never used as a tensor digest.
    WholeFileSha1(String),
}

impl Checksum {
    /// The tensor digest, when the entry is one.
    pub fn tensor_sha256(&self) -> Option<&[u8; 32]> {
        match self {
            Checksum::Sha256(d) => Some(d),
            Checksum::WholeFileSha1(_) => None,
        }
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// One initializer: name, type, shape and where its bytes are. Holds no
/// external payload byte.
#[derive(Debug, Clone)]
pub struct WeightDescriptor {
    pub(crate) id: WeightId,
    pub(crate) name: String,
    pub(crate) element_type: ElementType,
    pub(crate) dims: Vec<u64>,
    pub(crate) byte_len: u64,
    pub(crate) source: WeightSource,
    pub(crate) checksum: Option<Checksum>,
    /// The SHA-256 of embedded bytes, computed once when first asked (the
    /// prepared cache asks when no earlier process recorded it).
    pub(crate) embedded_digest: crate::sync::OnceLock<[u8; 32]>,
}

impl WeightDescriptor {
    /// The SHA-256 of the bytes of an embedded weight (computed on the
    /// first call, then remembered); `None` for an external one.
    pub fn embedded_sha256(&self) -> Option<&[u8; 32]> {
        use sha2::Digest;
        match &self.source {
            WeightSource::Embedded { bytes } => Some(
                self.embedded_digest
                    .get_or_init(|| sha2::Sha256::digest(bytes).into()),
            ),
            WeightSource::External { .. } => None,
        }
    }

    /// Its index in the model.
    pub fn id(&self) -> WeightId {
        self.id
    }

    /// The initializer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Element type.
    pub fn element_type(&self) -> ElementType {
        self.element_type
    }

    /// Dimensions.
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// Number of elements (the product of the dims, checked at open).
    pub fn element_count(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Payload size in bytes (element type × dims, checked at open).
    pub fn byte_len(&self) -> u64 {
        self.byte_len
    }

    /// Where the bytes live.
    pub fn source(&self) -> &WeightSource {
        &self.source
    }

    /// Whether the bytes live in an external file.
    pub fn is_external(&self) -> bool {
        matches!(self.source, WeightSource::External { .. })
    }

    /// The `checksum` entry, if any.
    pub fn checksum(&self) -> Option<&Checksum> {
        self.checksum.as_ref()
    }

    /// Checks `bytes` against the `sha256:` checksum, when there is one.
    /// Returns `Ok(false)` when the weight carries no tensor digest.
    pub fn verify_checksum(&self, bytes: &[u8]) -> Result<bool, PayloadError> {
        if !self.declares_digest() {
            return Ok(false);
        }
        self.check_digest(&Sha256::digest(bytes).into())
    }

    /// Whether the weight declares a `sha256:` digest of its bytes.
    pub fn declares_digest(&self) -> bool {
        self.checksum
            .as_ref()
            .and_then(Checksum::tensor_sha256)
            .is_some()
    }

    /// Checks `actual`, the SHA-256 of the weight's bytes computed by the
    /// caller (say, piece by piece), against the declared digest. Returns
    /// `Ok(false)` when the weight carries no tensor digest.
    pub fn check_digest(&self, actual: &[u8; 32]) -> Result<bool, PayloadError> {
        let Some(expected) = self.checksum.as_ref().and_then(Checksum::tensor_sha256) else {
            return Ok(false);
        };
        if actual.as_slice() == expected.as_slice() {
            Ok(true)
        } else {
            Err(PayloadError::ChecksumMismatch {
                tensor: self.name.clone(),
                expected: hex(expected),
                actual: hex(actual),
            })
        }
    }
}
