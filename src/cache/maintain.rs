//! Cache maintenance (cold path): what `onnx-prepared cache inspect`,
//! `verify` and `prune` do to a cache directory.
//!
//! `prune` removes temp files of writers that are gone, companion models
//! that do not parse, entries whose payload is missing or damaged, and
//! payload files no companion model names. Run it when no process is
//! writing the cache: a payload a live writer published but has not
//! entered in a manifest yet looks unreferenced.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::files::{publish_manifest, read_bounded};
use super::manifest::{CacheEntry, Manifest, PAYLOAD_DIR};
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
    let path = dir.join(&e.location);
    let bytes = match read_bounded(&path, e.length) {
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
    payload::decode(&bytes).err().map(|err| err.to_string())
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

/// What [`prune`] removed.
#[derive(Debug, Default)]
pub struct PruneReport {
    /// Files removed (temp files, unparsable companions, unreferenced
    /// payloads).
    pub removed: Vec<PathBuf>,
    /// Entries dropped from companion models (damaged or missing payload).
    pub dropped_entries: usize,
}

/// Whether temp file `name` (`.<target>.<pid>.<n>.tmp`) belongs to a live
/// process.
fn temp_owner_alive(name: &str) -> bool {
    let pid = name
        .strip_suffix(".tmp")
        .and_then(|s| s.rsplit('.').nth(1))
        .and_then(|pid| pid.parse::<u32>().ok());
    pid.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
}

fn temps(dir: &Path) -> Vec<PathBuf> {
    let Ok(list) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    list.filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.') && n.ends_with(".tmp") && !temp_owner_alive(n))
        })
        .collect()
}

/// Prunes `dir` (see the module docs).
///
/// # Errors
/// A file could not be listed, removed or rewritten.
pub fn prune(dir: &Path) -> Result<PruneReport, CacheError> {
    let mut report = PruneReport::default();
    let remove = |path: &Path, report: &mut PruneReport| -> Result<(), CacheError> {
        std::fs::remove_file(path).map_err(|source| CacheError::Io {
            path: path.to_owned(),
            what: "remove",
            source,
        })?;
        report.removed.push(path.to_owned());
        Ok(())
    };
    let payloads = dir.join(PAYLOAD_DIR);
    for t in temps(dir).into_iter().chain(temps(&payloads)) {
        remove(&t, &mut report)?;
    }
    let mut referenced = BTreeSet::new();
    for c in companions(dir)? {
        let mut m = match c.manifest {
            Ok(m) => m,
            Err(_) => {
                remove(&c.path, &mut report)?;
                continue;
            }
        };
        let before = m.entries.len() + m.rejected.len();
        m.entries.retain(|_, e| check_entry(dir, e).is_none());
        m.rejected.clear();
        if m.entries.len() != before {
            report.dropped_entries += before - m.entries.len();
            publish_manifest(&c.path, &m.to_bytes())?;
        }
        referenced.extend(m.entries.values().map(|e| dir.join(&e.location)));
    }
    if let Ok(list) = std::fs::read_dir(&payloads) {
        for p in list.filter_map(|e| e.ok().map(|e| e.path())) {
            let name = p
                .strip_prefix(dir)
                .map(|r| r.to_string_lossy().into_owned());
            let is_payload = name.as_deref().is_ok_and(CacheEntry::location_is_safe);
            if is_payload && !referenced.contains(&p) {
                remove(&p, &mut report)?;
            }
        }
    }
    Ok(report)
}
