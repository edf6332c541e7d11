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
//! # Locks (`flock`, between processes and between sessions of one process)
//! * The cache directory itself: held **shared** by every writer while it
//!   publishes a payload and while it commits; **exclusive** by `prune`, so
//!   prune never sees a payload half-published or a commit half-done.
//! * `.commit.lock` in the cache directory: **exclusive** across a commit's
//!   read–merge–rename, so two writers committing at once both keep their
//!   entries (each merges into what the other published).
//!
//! A payload published and not yet named by a manifest may still be pruned
//! between its publication and its writer's commit; the commit checks under
//! its locks that every payload it names is there and drops (and reports)
//! an entry whose payload is gone: a miss for the next process, never a
//! dangling entry.
//!
//! The payload folder is opened once per use with `O_DIRECTORY |
//! O_NOFOLLOW` and every file in it is created, opened, renamed and removed
//! relative to that handle (`*at` calls), never by path: a `payloads` link
//! planted in the cache directory is refused, not followed.
//!
//! Fault injection: with `ONNX_PREPARED_CACHE_PAUSE_AT=<step>` in the
//! environment the writer stops at that step (`payload-temp`,
//! `payload-rename`, `manifest-temp`, `manifest-rename`, `dir-sync`), prints
//! `onnx-prepared: cache write paused at <step>` to stderr and sleeps, so a
//! test can kill the process exactly there — or, with
//! `ONNX_PREPARED_CACHE_RESUME_FILE=<path>` too, goes on once that file
//! exists.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags, RenameFlags};

use crate::durable::FileIdentity;

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

/// The environment variable naming a file whose creation resumes a paused
/// writer (tests only).
pub const RESUME_ENV: &str = "ONNX_PREPARED_CACHE_RESUME_FILE";

/// Fault injection: pauses at `step` when the environment asks — for good,
/// or until the file [`RESUME_ENV`] names exists.
pub fn pause_point(step: &str) {
    if std::env::var_os(PAUSE_ENV).is_some_and(|v| v == step) {
        eprintln!("onnx-prepared: cache write paused at {step}");
        let resume = std::env::var_os(RESUME_ENV).map(PathBuf::from);
        loop {
            if resume.as_deref().is_some_and(Path::exists) {
                return;
            }
            crate::sync::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Protocol step 1: `bytes` in a new, fsynced temp file in `dir`.
fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf, CacheError> {
    crate::durable::write_temp(dir, name, bytes).map_err(io(dir, "write a temp file"))
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

/// A `flock` held on a cache directory or its commit lock file; released
/// when dropped.
#[derive(Debug)]
pub struct CacheLock(#[allow(dead_code)] OwnedFd);

/// Name of the commit lock file in a cache directory.
pub const COMMIT_LOCK: &str = ".commit.lock";

fn flock(fd: OwnedFd, op: FlockOperation, path: &Path) -> Result<CacheLock, CacheError> {
    loop {
        match rustix::fs::flock(&fd, op) {
            Ok(()) => return Ok(CacheLock(fd)),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(io(path, "lock")(e.into())),
        }
    }
}

/// Locks the cache directory `dir` itself: shared by writers, exclusive by
/// `prune` (blocks until the other side lets go).
pub fn lock_dir(dir: &Path, exclusive: bool) -> Result<CacheLock, CacheError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty()).map_err(|e| io(dir, "open")(e.into()))?;
    let op = if exclusive {
        FlockOperation::LockExclusive
    } else {
        FlockOperation::LockShared
    };
    flock(fd, op, dir)
}

/// Takes the commit lock of the cache directory `dir` (exclusive; the lock
/// file is created if missing and never followed if it is a link).
pub fn lock_commit(dir: &Path) -> Result<CacheLock, CacheError> {
    let path = dir.join(COMMIT_LOCK);
    let flags =
        OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(&path, flags, Mode::from_raw_mode(0o644))
        .map_err(|e| io(&path, "open")(e.into()))?;
    flock(fd, FlockOperation::LockExclusive, &path)
}

/// The payload folder of a cache directory, opened without following a
/// link; every file in it is reached through this handle.
#[derive(Debug)]
pub struct PayloadDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl PayloadDir {
    /// Opens `<cache_dir>/payloads` (creating it when `create`); `None`
    /// when it does not exist and is not created.
    ///
    /// # Errors
    /// It is a link or not a folder, or cannot be created or opened.
    pub fn open(cache_dir: &Path, create: bool) -> Result<Option<Self>, CacheError> {
        let path = cache_dir.join(super::manifest::PAYLOAD_DIR);
        if create {
            match rustix::fs::mkdir(&path, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io(&path, "create the payload folder")(e.into())),
            }
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::open(&path, flags, Mode::empty()) {
            Ok(fd) => Ok(Some(Self { fd, path })),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(CacheError::Corrupt {
                detail: format!(
                    "the payload folder cannot be opened as a folder (a link or a file is refused): {e}"
                ),
                path,
            }),
        }
    }

    /// The folder's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens payload file `name` read-only, never following a link, never
    /// blocking on a FIFO; `None` when it does not exist.
    fn open_file(&self, name: &str) -> Result<Option<(File, std::fs::Metadata)>, CacheError> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let path = self.path.join(name);
        let file = match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => File::from(fd),
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io(&path, "open")(e.into())),
        };
        let meta = file.metadata().map_err(io(&path, "stat"))?;
        if !meta.is_file() {
            return Err(CacheError::Corrupt {
                path,
                detail: "not a regular file".into(),
            });
        }
        Ok(Some((file, meta)))
    }

    /// Reads payload file `name` whole when it holds at most `limit` bytes.
    pub fn read(&self, name: &str, limit: u64) -> Result<Option<Vec<u8>>, CacheError> {
        let Some((file, meta)) = self.open_file(name)? else {
            return Ok(None);
        };
        let path = self.path.join(name);
        if meta.len() > limit {
            return Err(CacheError::Corrupt {
                path,
                detail: format!("{} bytes, more than the {limit} expected", meta.len()),
            });
        }
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(meta.len() as usize)
            .map_err(|_| io(&path, "read")(std::io::ErrorKind::OutOfMemory.into()))?;
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(io(&path, "read"))?;
        Ok(Some(bytes))
    }

    /// The identity of payload file `name` (opened, `fstat`); `None` when
    /// it does not exist.
    pub fn identity(&self, name: &str) -> Result<Option<FileIdentity>, CacheError> {
        Ok(self
            .open_file(name)?
            .map(|(_, meta)| FileIdentity::from_metadata(&meta)))
    }

    /// Payload file `name` for use: mapped read-only, or copied into
    /// memory when `copy_in`; `None` when it does not exist. A file whose
    /// size is not `length` is an error (never mapped).
    pub fn load(
        &self,
        name: &str,
        length: u64,
        copy_in: bool,
    ) -> Result<Option<Arc<LoadedPayload>>, CacheError> {
        let Some((file, meta)) = self.open_file(name)? else {
            return Ok(None);
        };
        let path = self.path.join(name);
        if meta.len() != length || length == 0 {
            return Err(CacheError::Corrupt {
                path,
                detail: format!(
                    "not a payload of the entry's {length} bytes ({} bytes)",
                    meta.len()
                ),
            });
        }
        let identity = FileIdentity::from_metadata(&meta);
        let bytes = if copy_in {
            let mut block =
                onnx_prepared_kernels::ZeroedBlock::zeroed(length as usize, super::payload::ALIGN)
                    .ok_or_else(|| io(&path, "read")(std::io::ErrorKind::OutOfMemory.into()))?;
            read_exact_at(&file, block.bytes_mut()).map_err(io(&path, "read"))?;
            PayloadBytes::Copied(block)
        } else {
            // SAFETY: the mapping is read-only and read as plain bytes (the
            // parts used in place are `u8`, `u64` and `f32`, valid for any
            // bits). Payload files are published by rename and never
            // written in place by this runtime, so the mapped inode never
            // changes under the mapping; another program truncating the
            // file while it is mapped would fault it (SIGBUS) — the hazard
            // `SessionOptions::with_cache_copy_in` removes, documented
            // there. Populated: one call faults every page in instead of
            // one fault per page as the checksum or a kernel touches it.
            let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
                .map_err(io(&path, "map"))?;
            PayloadBytes::Mapped(map)
        };
        // The file is checked again after it was mapped or copied: a
        // change between the open and the map (or during the copy) is a
        // miss, never bytes of another file under this identity.
        let after = FileIdentity::of(&file).map_err(io(&path, "stat"))?;
        if !identity.same_contents(&after) {
            return Err(CacheError::Corrupt {
                path,
                detail: format!("changed while read ({})", identity.difference(&after)),
            });
        }
        Ok(Some(Arc::new(LoadedPayload { bytes, identity })))
    }

    /// Protocol steps 1–2: publishes a payload under `name`. A file of that
    /// name holding exactly these bytes (checked by `checksum`, the XXH3-128
    /// its name is made of) is kept; a damaged one (truncated, a flipped
    /// byte) is replaced atomically. Returns whether this call wrote.
    pub fn publish(&self, name: &str, bytes: &[u8], checksum: u128) -> Result<bool, CacheError> {
        let existing = self.read(name, bytes.len() as u64);
        let exists = !matches!(existing, Ok(None));
        if let Ok(Some(b)) = &existing
            && b.len() == bytes.len()
            && xxhash_rust::xxh3::xxh3_128(b) == checksum
        {
            return Ok(false);
        }
        let temp = self.write_temp(name, bytes)?;
        pause_point("payload-temp");
        // A new name is published without replacing anything (a concurrent
        // writer's payload wins: it holds the same bytes); a damaged one is
        // replaced.
        let flags = if exists {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        let wrote = match rustix::fs::renameat_with(&self.fd, &temp, &self.fd, name, flags) {
            Ok(()) => true,
            Err(rustix::io::Errno::EXIST) => false,
            Err(e) => {
                let _ = self.remove(&temp);
                return Err(io(&self.path.join(name), "publish a payload")(e.into()));
            }
        };
        if !wrote {
            let _ = self.remove(&temp);
        }
        pause_point("payload-rename");
        Ok(wrote)
    }

    /// Protocol step 1: `bytes` in a new, fsynced temp file
    /// `.<name>.<pid>.<n>.tmp` of this folder.
    fn write_temp(&self, name: &str, bytes: &[u8]) -> Result<String, CacheError> {
        let pid = std::process::id();
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        for n in 0u32.. {
            let temp = format!(".{name}.{pid}.{n}.tmp");
            let mut f = match rustix::fs::openat(&self.fd, &temp, flags, Mode::from_raw_mode(0o644))
            {
                Ok(fd) => File::from(fd),
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(io(&self.path, "write a temp file")(e.into())),
            };
            return match f.write_all(bytes).and_then(|()| f.sync_all()) {
                Ok(()) => Ok(temp),
                Err(e) => {
                    let _ = self.remove(&temp);
                    Err(io(&self.path, "write a temp file")(e))
                }
            };
        }
        Err(io(&self.path, "write a temp file")(std::io::Error::other(
            "no unused temp file name",
        )))
    }

    /// Removes file `name` of the folder (never follows a link: a link is
    /// removed itself).
    pub fn remove(&self, name: &str) -> Result<(), CacheError> {
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())
            .map_err(|e| io(&self.path.join(name), "remove")(e.into()))
    }

    /// The names in the folder, with whether each is a regular file (not
    /// followed).
    pub fn list(&self) -> Result<Vec<(String, bool)>, CacheError> {
        let fd = rustix::io::dup(&self.fd).map_err(|e| io(&self.path, "list")(e.into()))?;
        let dir = rustix::fs::Dir::read_from(&fd).map_err(|e| io(&self.path, "list")(e.into()))?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| io(&self.path, "list")(e.into()))?;
            let Ok(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let regular = rustix::fs::statat(&self.fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| {
                    rustix::fs::FileType::from_raw_mode(st.st_mode)
                        == rustix::fs::FileType::RegularFile
                });
            names.push((name, regular));
        }
        names.sort();
        Ok(names)
    }

    /// Fsyncs the folder (its entries: renames into it are durable).
    pub fn sync(&self) -> Result<(), CacheError> {
        rustix::fs::fsync(self.fd.as_fd()).map_err(|e| io(&self.path, "sync the folder")(e.into()))
    }
}

/// Fills `buf` from `file` at offset 0.
fn read_exact_at(file: &File, buf: &mut [u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, 0)
}

/// A payload's bytes: mapped read-only, or copied into memory.
#[derive(Debug)]
enum PayloadBytes {
    Mapped(memmap2::Mmap),
    Copied(onnx_prepared_kernels::ZeroedBlock),
}

/// A payload loaded for use, with the identity of the file it came from.
#[derive(Debug)]
pub struct LoadedPayload {
    bytes: PayloadBytes,
    identity: FileIdentity,
}

impl LoadedPayload {
    /// The file's identity when it was loaded.
    pub fn identity(&self) -> FileIdentity {
        self.identity
    }
}

impl onnx_prepared_kernels::SharedBytes for LoadedPayload {
    fn bytes(&self) -> &[u8] {
        match &self.bytes {
            PayloadBytes::Mapped(m) => m,
            PayloadBytes::Copied(b) => b.bytes(),
        }
    }
}
