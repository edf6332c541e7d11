//! Files published whole (cold path): a temp file created new next to the
//! target, written, fsynced, then renamed — so a reader (or a process
//! killed midway) sees the old file or the new one, never a part. The
//! prepared cache, `.npz` outputs and `run --stats` use it. And what a
//! file *is* when it is checked: [`FileIdentity`].

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The folder a file at `path` is published in (`.` for a bare name) and
/// its file name: where its temp file goes.
pub(crate) fn split_target(path: &Path) -> (&Path, String) {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    (dir, name)
}

/// Creates a new temp file for `name` in `dir`: `.<name>.<pid>.<n>.tmp`,
/// never an existing path.
pub(crate) fn create_temp(dir: &Path, name: &str) -> std::io::Result<(PathBuf, File)> {
    let pid = std::process::id();
    for n in 0u32.. {
        let temp = dir.join(format!(".{name}.{pid}.{n}.tmp"));
        match File::options().write(true).create_new(true).open(&temp) {
            Ok(f) => return Ok((temp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no unused temp file name"))
}

/// `bytes` in a new, fsynced temp file for `name` in `dir`; the temp file
/// is removed on error.
pub(crate) fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let (temp, mut f) = create_temp(dir, name)?;
    match f.write_all(bytes).and_then(|()| f.sync_all()) {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// Replaces the regular file at `path` (or creates it) with `bytes`,
/// atomically. A path that exists and is not a regular file (a folder, a
/// link, a FIFO) is refused.
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && !meta.is_file()
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file; give the path of a regular file (or of none)",
        ));
    }
    let (dir, name) = split_target(path);
    let temp = write_temp(dir, &name, bytes)?;
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}

/// Which file an open handle shows and whether its bytes may have changed,
/// as far as the file system tells (`fstat` on the handle, never a path):
/// device, inode, size, modification time and status-change time.
///
/// The status-change time (`ctime`) is what makes this an identity: every
/// write, truncation or `utime` of the inode sets it to the current time,
/// and no unprivileged call can set it back — so a file rewritten in place
/// with its size and modification time restored (`cp -p`, `rsync -a`,
/// `tar` extraction, normalized build timestamps) has another identity.
/// A file copied elsewhere has another device or inode. Equal identities
/// mean the same bytes unless the clock went backwards or someone wrote
/// the block device under the file system.
///
/// One change of `ctime` leaves the bytes alone: a change of the link
/// count (the path removed, or another file renamed over it, while the
/// handle keeps the old inode open). [`same_contents`](Self::same_contents)
/// tells it apart by the link count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    nlink: u64,
}

impl FileIdentity {
    /// The identity of the file `file` has open (`fstat`, about 1 µs).
    ///
    /// # Errors
    /// `fstat` fails.
    pub fn of(file: &File) -> std::io::Result<Self> {
        Ok(Self::from_metadata(&file.metadata()?))
    }

    /// The identity `meta` (of an open handle) describes.
    pub fn from_metadata(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
            nlink: meta.nlink(),
        }
    }

    /// Whether a file that had identity `self` when checked may still hold
    /// the same bytes with identity `now`: the same inode, size and
    /// modification time, and a status-change time that is the same or
    /// moved with the link count (the path unlinked or renamed over; the
    /// handle's bytes are untouched). Any write, truncation, `utime` or
    /// mode change in place is a change.
    pub fn same_contents(&self, now: &Self) -> bool {
        (self.dev, self.ino, self.len, self.mtime_ns) == (now.dev, now.ino, now.len, now.mtime_ns)
            && (self.ctime_ns == now.ctime_ns || self.nlink != now.nlink)
    }

    /// The size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A stable text key of the identity (`dev:ino:len:mtime:ctime`, not
    /// the link count), for keys recorded on disk.
    pub fn key(&self) -> String {
        format!(
            "{}:{}:{}:{}:{}",
            self.dev, self.ino, self.len, self.mtime_ns, self.ctime_ns
        )
    }

    /// What differs from `other`, in words (for error messages).
    pub fn difference(&self, other: &Self) -> String {
        let mut what = Vec::new();
        if (self.dev, self.ino) != (other.dev, other.ino) {
            what.push("another file".to_owned());
        }
        if self.len != other.len {
            what.push(format!("size {} -> {}", self.len, other.len));
        }
        if self.mtime_ns != other.mtime_ns {
            what.push("modification time".to_owned());
        }
        if self.ctime_ns != other.ctime_ns {
            what.push("status-change time (written or touched)".to_owned());
        }
        what.join(", ")
    }
}
