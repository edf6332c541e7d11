//! Cache maintenance (cold path): what `onnx-prepared cache inspect`,
//! `verify` and `prune` do to a cache directory.
//!
//! `prune` holds the cache directory's exclusive lock (it waits for every
//! writer to finish its step, and writers wait for it), then removes only
//! what this runtime creates and nobody uses: temp files of its own
//! naming (`.<payload or manifest name>.<pid>.<n>.tmp`, left by a writer
//! that died), entries whose payload is missing or damaged, and payload
//! files (`payloads/<32 hex>.bin`, regular files, never a link) that no
//! companion model names. A companion model it cannot read (damaged, a
//! link, another format version) is reported and kept, and while one is
//! there no payload is removed: it may name them. A cache folder is as
//! trusted as the model: whoever can write it decides what is served.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::files::{PayloadDir, lock_dir, publish_manifest, read_bounded};
use super::lookup::payload_name;
use super::manifest::{CacheEntry, Manifest};
use onnx_prepared_kernels::CpuFeatures;

use super::{CacheError, MAX_MANIFEST_BYTES, payload};

/// One companion model of a cache directory.
#[derive(Debug)]
pub struct Companion {
    /// Its path.
    pub path: PathBuf,
    /// Its parse, or why it does not parse.
    pub manifest: Result<Manifest, String>,
}

/// The companion models (`*.prepared.onnx`) in `dir`, parsed.
///
/// # Errors
/// `dir` cannot be listed.
pub fn companions(dir: &Path) -> Result<Vec<Companion>, CacheError> {
    let io = |source| CacheError::Io {
        path: dir.to_owned(),
        what: "list the cache directory",
        source,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".prepared.onnx") && !n.starts_with('.'))
        })
        .collect();
    paths.sort();
    Ok(paths
        .into_iter()
        .map(|path| {
            let manifest = match read_bounded(&path, MAX_MANIFEST_BYTES) {
                Ok(Some(bytes)) => Manifest::parse(&bytes, &path).map_err(|e| e.to_string()),
                Ok(None) => Err("vanished while read".into()),
                Err(e) => Err(e.to_string()),
            };
            Companion { path, manifest }
        })
        .collect())
}

/// Why `e`'s payload is not usable, if it is not.
pub fn check_entry(dir: &Path, e: &CacheEntry) -> Option<String> {
    match PayloadDir::open(dir, false) {
        Ok(Some(payloads)) => check_payload(&payloads, e),
        Ok(None) => Some(format!("payload `{}` is missing", e.location)),
        Err(err) => Some(err.to_string()),
    }
}

/// Why `e`'s payload in `payloads` is not usable, if it is not.
fn check_payload(payloads: &PayloadDir, e: &CacheEntry) -> Option<String> {
    let bytes = match payloads.read(payload_name(&e.location), e.length) {
        Ok(Some(b)) => b,
        Ok(None) => return Some(format!("payload `{}` is missing", e.location)),
        Err(err) => return Some(err.to_string()),
    };
    if bytes.len() as u64 != e.length {
        return Some(format!(
            "payload `{}` has {} bytes, the entry {}",
            e.location,
            bytes.len(),
            e.length
        ));
    }
    if xxhash_rust::xxh3::xxh3_128(&bytes) != e.checksum {
        return Some(format!("payload `{}` fails its checksum", e.location));
    }
    match payload::decode(&bytes) {
        Err(err) => Some(err.to_string()),
        // A packed object this build's kernels could not use is as
        // damaged as a flipped byte (the sources' shapes are checked at
        // read, by the packing's `validate`); one packed by another build
        // or for another CPU is not this build's to judge.
        Ok(payload::Decoded::Packed(p))
            if [CpuFeatures::detect(), CpuFeatures::portable()]
                .into_iter()
                .any(|cpu| e.kernel_abi == super::kernel_abi(cpu)) =>
        {
            onnx_prepared_kernels::check_packed(&p)
                .err()
                .map(|err| format!("payload `{}` is not usable: {err}", e.location))
        }
        Ok(payload::Decoded::Packed(_)) => None,
        Ok(payload::Decoded::Tensor(_)) => None,
    }
}

/// What [`verify`] found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Companion models checked.
    pub companions: usize,
    /// Entries checked.
    pub entries: usize,
    /// Payload bytes checked.
    pub bytes: u64,
    /// Every problem, one line each (empty: the cache verifies).
    pub problems: Vec<String>,
}

/// Checks every companion model and entry of `dir`: parses, payload
/// present, size, checksum, decodes.
///
/// # Errors
/// `dir` cannot be listed.
pub fn verify(dir: &Path) -> Result<VerifyReport, CacheError> {
    let mut report = VerifyReport::default();
    for c in companions(dir)? {
        report.companions += 1;
        let name = c.path.display();
        match &c.manifest {
            Err(why) => report.problems.push(format!("{name}: {why}")),
            Ok(m) => {
                for (entry, why) in &m.rejected {
                    report
                        .problems
                        .push(format!("{name}: entry `{entry}`: {why}"));
                }
                for e in m.entries.values() {
                    report.entries += 1;
                    report.bytes += e.length;
                    if let Some(why) = check_entry(dir, e) {
                        report
                            .problems
                            .push(format!("{name}: entry `{}`: {why}", e.name));
                    }
                }
            }
        }
    }
    Ok(report)
}

/// What [`prune`] removed and kept.
#[derive(Debug, Default)]
pub struct PruneReport {
    /// Files removed (temp files of dead writers, unreferenced payloads).
    pub removed: Vec<PathBuf>,
    /// Entries dropped from companion models (damaged or missing payload).
    pub dropped_entries: usize,
    /// What was kept and why (companion models it cannot read, payloads
    /// kept because of them).
    pub kept: Vec<String>,
}

/// Whether `name` is a temp file this runtime creates for a file named by
/// `target` (`.<target>.<pid>.<n>.tmp`, pid and n decimal).
fn own_temp(name: &str, target: impl Fn(&str) -> bool) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    let mut parts = inner.rsplitn(3, '.');
    let (Some(n), Some(pid), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let decimal = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    decimal(n) && decimal(pid) && target(file)
}

/// Whether `name` is a companion model name this runtime writes
/// (`<32 hex>.prepared.onnx`).
fn companion_name(name: &str) -> bool {
    name.strip_suffix(".prepared.onnx").is_some_and(is_hex32)
}

fn is_hex32(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is a payload file name this runtime writes.
fn payload_file_name(name: &str) -> bool {
    name.strip_suffix(".bin").is_some_and(is_hex32)
}

/// Prunes `dir` (see the module docs).
///
/// # Errors
/// The directory cannot be locked or listed, its payload folder is a link
/// or not a folder, or a file could not be removed or rewritten.
pub fn prune(dir: &Path) -> Result<PruneReport, CacheError> {
    let _exclusive = lock_dir(dir, true)?;
    let mut report = PruneReport::default();
    let io = |path: &Path, what, source| CacheError::Io {
        path: path.to_owned(),
        what,
        source,
    };
    // Temp files of dead writers (no live one holds the shared lock now).
    let list = std::fs::read_dir(dir).map_err(|e| io(dir, "list the cache directory", e))?;
    for entry in list.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let regular = entry.file_type().is_ok_and(|t| t.is_file());
        if regular && own_temp(&name, companion_name) {
            let path = dir.join(&name);
            std::fs::remove_file(&path).map_err(|e| io(&path, "remove", e))?;
            report.removed.push(path);
        }
    }
    let payloads = PayloadDir::open(dir, false)?;
    let mut referenced = BTreeSet::new();
    let mut all_read = true;
    for c in companions(dir)? {
        let mut m = match c.manifest {
            Ok(m) => m,
            Err(why) => {
                all_read = false;
                report.kept.push(format!(
                    "{}: kept, it cannot be read: {why}",
                    c.path.display()
                ));
                continue;
            }
        };
        let before = m.entries.len() + m.rejected.len();
        m.entries.retain(|_, e| match &payloads {
            Some(p) => check_payload(p, e).is_none(),
            None => false,
        });
        m.rejected.clear();
        if m.entries.len() != before {
            report.dropped_entries += before - m.entries.len();
            publish_manifest(&c.path, &m.to_bytes())?;
        }
        referenced.extend(
            m.entries
                .values()
                .map(|e| payload_name(&e.location).to_owned()),
        );
    }
    let Some(payloads) = payloads else {
        return Ok(report);
    };
    for (name, regular) in payloads.list()? {
        let path = payloads.path().join(&name);
        if regular && own_temp(&name, payload_file_name) {
            payloads.remove(&name)?;
            report.removed.push(path);
        } else if regular && payload_file_name(&name) && !referenced.contains(&name) {
            if all_read {
                payloads.remove(&name)?;
                report.removed.push(path);
            } else {
                report.kept.push(format!(
                    "{}: kept, a companion model that cannot be read may name it",
                    path.display()
                ));
            }
        }
    }
    Ok(report)
}
