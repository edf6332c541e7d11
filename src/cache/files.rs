//! Cache files on disk (cold path): atomic publication and safe reads.
//!
//! # Protocol "write" (one payload, then one manifest generation)
//! 1. The payload goes to a temp file `.<name>.<pid>.<n>.tmp` in the
//!    payload folder (created new, never an existing path), is written
//!    whole and fsynced.
//! 2. It is renamed to its content-addressed name with `RENAME_NOREPLACE`:
//!    a live payload is never replaced (one with that name holds the same
//!    bytes); if the name exists the temp file is removed. Only a file of
//!    that name whose bytes do not match its name (damaged) is replaced,
//!    atomically.
//! 3. Once the payload folder is fsynced (so every payload a manifest may
//!    name is durable), the new manifest goes to a temp file in the cache
//!    directory, is fsynced, and renamed over the old manifest (an atomic
//!    replace).
//! 4. The directory is fsynced, so the rename is durable.
//!
//! A process killed at any point leaves the previous complete manifest or
//! the new complete one; a payload no manifest names yet is harmless (and
//! reused by content), a temp file is ignored and removed by `prune`.
//!
//! Fault injection: with `ONNX_PREPARED_CACHE_PAUSE_AT=<step>` in the
//! environment the writer stops at that step (`payload-temp`,
//! `payload-rename`, `manifest-temp`, `manifest-rename`, `dir-sync`), prints
//! `onnx-prepared: cache write paused at <step>` to stderr and sleeps, so a
//! test can kill the process exactly there.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::CacheError;

/// The environment variable naming the step to pause at (tests only).
pub const PAUSE_ENV: &str = "ONNX_PREPARED_CACHE_PAUSE_AT";

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> CacheError + 'a {
    move |source| CacheError::Io {
        path: path.to_owned(),
        what,
        source,
    }
}

/// Fault injection: pauses for good at `step` when the environment asks.
pub fn pause_point(step: &str) {
    if std::env::var_os(PAUSE_ENV).is_some_and(|v| v == step) {
        eprintln!("onnx-prepared: cache write paused at {step}");
        loop {
            crate::sync::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// Protocol step 1: `bytes` in a new, fsynced temp file in `dir`.
fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, CacheError> {
    crate::durable::write_temp(dir, name, bytes).map_err(io(dir, "write a temp file"))
}

/// Protocol steps 1–2: publishes a payload under `name` in `dir`. A file
/// of that name holding exactly these bytes (checked by `checksum`, the
/// XXH3-128 its name is made of) is kept; a damaged one (truncated, a
/// flipped byte) is replaced atomically. Returns whether this call wrote.
pub fn publish_payload(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    checksum: u128,
) -> Result<bool, CacheError> {
    std::fs::create_dir_all(dir).map_err(io(dir, "create the payload folder"))?;
    let target = dir.join(name);
    let intact = |path: &Path| {
        matches!(read_bounded(path, bytes.len() as u64), Ok(Some(b))
            if b.len() == bytes.len() && xxhash_rust::xxh3::xxh3_128(&b) == checksum)
    };
    let exists = std::fs::symlink_metadata(&target).is_ok();
    if exists && intact(&target) {
        return Ok(false);
    }
    let temp = write_temp(dir, name, bytes)?;
    pause_point("payload-temp");
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    // A new name is published without replacing anything (a concurrent
    // writer's payload wins: it holds the same bytes); a damaged one is
    // replaced.
    let flags = if exists {
        RenameFlags::empty()
    } else {
        RenameFlags::NOREPLACE
    };
    let wrote = match renameat_with(CWD, &temp, CWD, &target, flags) {
        Ok(()) => true,
        Err(rustix::io::Errno::EXIST) => false,
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            return Err(CacheError::Io {
                path: target,
                what: "publish a payload",
                source: e.into(),
            });
        }
    };
    if !wrote {
        let _ = std::fs::remove_file(&temp);
    }
    pause_point("payload-rename");
    Ok(wrote)
}

/// Fsyncs the folder `dir` (its entries: renames into it are durable).
pub fn sync_dir(dir: &Path) -> Result<(), CacheError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "sync the folder"))
}

/// Protocol steps 3–4: `bytes` replace the manifest at `path` atomically.
pub fn publish_manifest(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("manifest");
    let temp = write_temp(dir, name, bytes)?;
    pause_point("manifest-temp");
    if let Err(e) = std::fs::rename(&temp, path) {
        let _ = std::fs::remove_file(&temp);
        return Err(io(path, "publish the manifest")(e));
    }
    pause_point("manifest-rename");
    sync_dir(dir)?;
    pause_point("dir-sync");
    Ok(())
}

/// Reads at most `limit` bytes of the regular file at `path` without
/// following a final symbolic link; `None` when it does not exist.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, CacheError> {
    let file = match crate::model::open_no_follow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, "open")(e)),
    };
    let meta = file.metadata().map_err(io(path, "stat"))?;
    if !meta.is_file() {
        return Err(CacheError::Corrupt {
            path: path.to_owned(),
            detail: "not a regular file".into(),
        });
    }
    if meta.len() > limit {
        return Err(CacheError::Corrupt {
            path: path.to_owned(),
            detail: format!("{} bytes, more than the {limit} expected", meta.len()),
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(io(path, "read"))?;
    if bytes.len() as u64 > limit {
        return Err(CacheError::Corrupt {
            path: path.to_owned(),
            detail: format!("grew past the {limit} bytes expected while read"),
        });
    }
    Ok(Some(bytes))
}

/// A payload file mapped read-only.
#[derive(Debug)]
pub struct MappedPayload {
    map: memmap2::Mmap,
    identity: FileIdentity,
}

/// Which file a mapping shows, as far as the file system tells: device,
/// inode, size and modification time. The same identity after a check
/// means the same bytes, unless another program rewrote the file in place
/// within the timestamp's resolution — which the mapping of a checked file
/// would show anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl MappedPayload {
    /// The mapped file's identity.
    pub fn identity(&self) -> FileIdentity {
        self.identity
    }
}

impl onnx_prepared_kernels::SharedBytes for MappedPayload {
    fn bytes(&self) -> &[u8] {
        &self.map
    }
}

/// Maps the regular file at `path` (not following a final link) when it
/// holds exactly `length` bytes; `None` when it does not exist.
pub fn map_payload(
    path: &Path,
    length: u64,
) -> Result<Option<std::sync::Arc<MappedPayload>>, CacheError> {
    let file = match crate::model::open_no_follow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path, "open")(e)),
    };
    let meta = file.metadata().map_err(io(path, "stat"))?;
    if !meta.is_file() || meta.len() != length || length == 0 {
        return Err(CacheError::Corrupt {
            path: path.to_owned(),
            detail: format!(
                "not a regular file of the entry's {length} bytes ({} bytes)",
                meta.len()
            ),
        });
    }
    // SAFETY: the mapping is read-only and read as plain bytes (the parts
    // used in place are `u8`, `u64` and `f32`, valid for any bits). Payload
    // files are published by rename and never written in place by this
    // runtime (a damaged one is replaced by a new file), so the mapped
    // inode never changes under the mapping; only another program
    // truncating the file could fault it (SIGBUS), as with any mapped model.
    // Populated: one call faults every page in instead of one fault per
    // page as the checksum or a kernel first touches it.
    let map =
        unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(io(path, "map"))?;
    use std::os::unix::fs::MetadataExt;
    let identity = FileIdentity {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    };
    Ok(Some(std::sync::Arc::new(MappedPayload { map, identity })))
}

/// `<size>:<mtime ns>` of a data file: change detection for recorded
/// source digests (never their identity).
pub fn stamp(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let mtime = meta.modified().ok()?;
    let ns = mtime.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos();
    Some(format!("{}:{ns}", meta.len()))
}
