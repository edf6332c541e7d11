//! Validation of `external_data` entries (cold path). Runs at open, opens
//! each data file once and keeps the handle, and reads no payload byte.
//!
//! A data file is opened by its canonical path without following a final
//! symbolic link and without blocking (a FIFO swapped in answers at once),
//! then checked through the handle: a regular file (`fstat`), its size, and
//! (where `/proc` says) still inside an allowed folder. Payload sources read
//! only through these handles, so replacing the path after open changes
//! nothing the model reads.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use onnx_prepared_proto::StringStringEntryProto;

use super::error::ExternalDataError as E;
use super::weight::{Checksum, ExternalFile, ExternalFileId, WeightSource};

/// The folders an external data file may resolve into: the model's folder and
/// the folder of the model file's real path (a Hugging Face-style cache links
/// `model.onnx` and its data into a `blobs/` folder).
#[derive(Debug)]
pub(crate) struct Roots {
    /// The model's folder as the caller named it, for joining locations.
    pub(crate) model_dir: PathBuf,
    /// Canonical forms of the two allowed folders.
    pub(crate) allowed: [PathBuf; 2],
}

/// External files seen so far, deduplicated by canonical path.
#[derive(Debug, Default)]
pub(crate) struct ExternalFiles {
    pub(crate) files: Vec<ExternalFile>,
    by_path: HashMap<PathBuf, ExternalFileId>,
    by_location: HashMap<String, ExternalFileId>,
}

/// The parsed keys of one `external_data` list.
#[derive(Default)]
struct Keys<'a> {
    location: Option<&'a str>,
    offset: Option<&'a str>,
    length: Option<&'a str>,
    checksum: Option<&'a str>,
}

fn parse_keys<'a>(tensor: &str, entries: &'a [StringStringEntryProto]) -> Result<Keys<'a>, E> {
    let mut keys = Keys::default();
    for entry in entries {
        let key = entry.key.as_deref().unwrap_or_default();
        let value = entry.value.as_deref().unwrap_or_default();
        let slot = match key {
            "location" => &mut keys.location,
            "offset" => &mut keys.offset,
            "length" => &mut keys.length,
            "checksum" => &mut keys.checksum,
            other => {
                return Err(E::UnknownKey {
                    tensor: tensor.to_owned(),
                    key: other.to_owned(),
                });
            }
        };
        if slot.replace(value).is_some() {
            return Err(E::DuplicateKey {
                tensor: tensor.to_owned(),
                key: key.to_owned(),
            });
        }
    }
    Ok(keys)
}

/// A non-negative decimal integer, without sign, spaces or other digits.
fn parse_u64(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

fn is_absolute(location: &str) -> bool {
    let b = location.as_bytes();
    Path::new(location).is_absolute()
        || b.first().is_some_and(|&c| c == b'/' || c == b'\\')
        || (b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':')
}

/// `..` as a whole path component; `w..v2.bin` is an ordinary name.
fn has_parent_component(location: &str) -> bool {
    location.split(['/', '\\']).any(|c| c == "..")
}

/// The value of one ASCII hex digit.
fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `sha256:` and 64 hex digits, or an unprefixed hex digest (the spec's
/// whole-file SHA-1). Works on bytes: any other character, multi-byte ones
/// included, is an error, never a slice across a character.
fn parse_checksum(tensor: &str, value: &str) -> Result<Checksum, E> {
    let invalid = || E::InvalidChecksum {
        tensor: tensor.to_owned(),
        value: value.to_owned(),
    };
    let Some(hex) = value.strip_prefix("sha256:") else {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid());
        }
        return Ok(Checksum::WholeFileSha1(value.to_owned()));
    };
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return Err(invalid());
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.chunks_exact(2)) {
        let (hi, lo) = (hex_digit(pair[0]), hex_digit(pair[1]));
        *byte = (hi.ok_or_else(invalid)? << 4) | lo.ok_or_else(invalid)?;
    }
    Ok(Checksum::Sha256(digest))
}

/// Opens `path` for reading without following a final symbolic link and
/// without blocking on a FIFO or device.
pub(crate) fn open_no_follow(path: &Path) -> std::io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    Ok(File::from(rustix::fs::open(path, flags, Mode::empty())?))
}

/// Where the kernel says `file` lives (`/proc/self/fd`), when it can say.
fn opened_path(file: &File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

impl ExternalFiles {
    /// Validates one initializer's `external_data` against its expected
    /// payload size and the file system, registering its file.
    pub(crate) fn add(
        &mut self,
        tensor: &str,
        entries: &[StringStringEntryProto],
        byte_len: u64,
        roots: &Roots,
    ) -> Result<(WeightSource, Option<Checksum>), E> {
        let t = || tensor.to_owned();
        let keys = parse_keys(tensor, entries)?;
        let location = keys
            .location
            .ok_or_else(|| E::MissingLocation { tensor: t() })?;
        if location.is_empty() {
            return Err(E::EmptyLocation { tensor: t() });
        }
        if is_absolute(location) {
            return Err(E::AbsoluteLocation {
                tensor: t(),
                location: location.to_owned(),
            });
        }
        if has_parent_component(location) {
            return Err(E::ParentComponent {
                tensor: t(),
                location: location.to_owned(),
            });
        }
        let offset = match keys.offset {
            None => 0,
            Some(v) => parse_u64(v).ok_or_else(|| E::InvalidOffset {
                tensor: t(),
                value: v.to_owned(),
            })?,
        };
        let length = match keys.length {
            None => byte_len,
            Some(v) => {
                let declared = parse_u64(v).ok_or_else(|| E::InvalidLength {
                    tensor: t(),
                    value: v.to_owned(),
                })?;
                if declared != byte_len {
                    return Err(E::LengthMismatch {
                        tensor: t(),
                        declared,
                        expected: byte_len,
                    });
                }
                declared
            }
        };
        let checksum = keys
            .checksum
            .map(|v| parse_checksum(tensor, v))
            .transpose()?;
        let file = self.resolve(tensor, location, roots)?;
        let info = &self.files[file.index()];
        match offset.checked_add(length) {
            Some(end) if end <= info.size => {}
            _ => {
                return Err(E::OutOfBounds {
                    tensor: t(),
                    path: info.path.clone(),
                    offset,
                    length,
                    file_size: info.size,
                });
            }
        }
        Ok((
            WeightSource::External {
                file,
                offset,
                length,
            },
            checksum,
        ))
    }

    fn resolve(
        &mut self,
        tensor: &str,
        location: &str,
        roots: &Roots,
    ) -> Result<ExternalFileId, E> {
        // Same spelling, same file: resolve each distinct location once.
        if let Some(&id) = self.by_location.get(location) {
            return Ok(id);
        }
        let joined = roots.model_dir.join(location);
        let canonical = std::fs::canonicalize(&joined).map_err(|source| E::FileNotFound {
            tensor: tensor.to_owned(),
            path: joined.clone(),
            source,
        })?;
        if !roots.allowed.iter().any(|root| canonical.starts_with(root)) {
            return Err(E::SymlinkEscape {
                tensor: tensor.to_owned(),
                location: location.to_owned(),
                target: canonical,
            });
        }
        if let Some(&id) = self.by_path.get(&canonical) {
            self.by_location.insert(location.to_owned(), id);
            return Ok(id);
        }
        let not_found = |source| E::FileNotFound {
            tensor: tensor.to_owned(),
            path: canonical.clone(),
            source,
        };
        // The canonical path holds no link; a final component that became
        // one since is refused (ELOOP), and the handle is checked, not the
        // path, from here on.
        let handle = open_no_follow(&canonical).map_err(not_found)?;
        let meta = handle.metadata().map_err(not_found)?;
        if !meta.is_file() {
            return Err(E::NotRegularFile {
                tensor: tensor.to_owned(),
                path: canonical,
            });
        }
        // A folder on the way swapped for a link since canonicalization.
        if let Some(opened) = opened_path(&handle)
            && !roots.allowed.iter().any(|root| opened.starts_with(root))
        {
            return Err(E::SymlinkEscape {
                tensor: tensor.to_owned(),
                location: location.to_owned(),
                target: opened,
            });
        }
        let id = ExternalFileId(self.files.len() as u32);
        self.files.push(ExternalFile {
            location: location.to_owned(),
            path: canonical.clone(),
            size: meta.len(),
            identity: crate::durable::FileIdentity::from_metadata(&meta),
            handle: Arc::new(handle),
        });
        self.by_path.insert(canonical, id);
        self.by_location.insert(location.to_owned(), id);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_plain_decimal() {
        assert_eq!(parse_u64("0"), Some(0));
        assert_eq!(parse_u64("4096"), Some(4096));
        for bad in ["", "-1", "+1", " 1", "0x10", "1e3", "18446744073709551616"] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parent_check_is_component_wise() {
        assert!(!has_parent_component("w..v2.bin"));
        assert!(!has_parent_component("sub/..hidden"));
        assert!(has_parent_component("../w.bin"));
        assert!(has_parent_component("sub/../../w.bin"));
        assert!(has_parent_component("sub\\..\\w.bin"));
    }

    #[test]
    fn absolute_forms() {
        assert!(is_absolute("/etc/passwd"));
        assert!(is_absolute("\\\\server\\share"));
        assert!(is_absolute("C:\\weights.bin"));
        assert!(!is_absolute("weights.bin"));
        assert!(!is_absolute("sub/weights.bin"));
    }

    #[test]
    fn checksum_forms() {
        let hex64 = "ab".repeat(32);
        assert_eq!(
            parse_checksum("w", &format!("sha256:{hex64}")).unwrap(),
            Checksum::Sha256([0xab; 32])
        );
        assert!(matches!(
            parse_checksum("w", "0123abcd").unwrap(),
            Checksum::WholeFileSha1(_)
        ));
        assert!(matches!(
            parse_checksum("w", "sha256:xyz"),
            Err(E::InvalidChecksum { .. })
        ));
        assert!(matches!(
            parse_checksum("w", &format!("sha256:{}", "zz".repeat(32))),
            Err(E::InvalidChecksum { .. })
        ));
        // `from_str_radix` would take "+a" as a digit pair.
        assert!(matches!(
            parse_checksum("w", &format!("sha256:+a{}", "00".repeat(31))),
            Err(E::InvalidChecksum { .. })
        ));
        // 64 bytes, but a multi-byte character straddles a digit pair.
        let straddle = format!("sha256:0é{}", "0".repeat(61));
        assert_eq!(straddle.len() - "sha256:".len(), 64);
        assert!(matches!(
            parse_checksum("w", &straddle),
            Err(E::InvalidChecksum { .. })
        ));
        for bad in ["", "not hex", "da39é"] {
            assert!(
                matches!(parse_checksum("w", bad), Err(E::InvalidChecksum { .. })),
                "{bad:?}"
            );
        }
    }
}
