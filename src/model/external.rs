//! Validation of `external_data` entries (cold path). Runs at open, touches
//! only file metadata, and reads no payload byte.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

fn parse_checksum(tensor: &str, value: &str) -> Result<Checksum, E> {
    let Some(hex) = value.strip_prefix("sha256:") else {
        return Ok(Checksum::WholeFileSha1(value.to_owned()));
    };
    let invalid = || E::InvalidChecksum {
        tensor: tensor.to_owned(),
        value: value.to_owned(),
    };
    if hex.len() != 64 {
        return Err(invalid());
    }
    let mut digest = [0u8; 32];
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| invalid())?;
    }
    Ok(Checksum::Sha256(digest))
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
        let meta = std::fs::metadata(&canonical).map_err(|source| E::FileNotFound {
            tensor: tensor.to_owned(),
            path: canonical.clone(),
            source,
        })?;
        if !meta.is_file() {
            return Err(E::NotRegularFile {
                tensor: tensor.to_owned(),
                path: canonical,
            });
        }
        let id = ExternalFileId(self.files.len() as u32);
        self.files.push(ExternalFile {
            location: location.to_owned(),
            path: canonical.clone(),
            size: meta.len(),
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
    }
}
