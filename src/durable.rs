//! Files published whole (cold path): a temp file created new next to the
//! target, written, fsynced, then renamed — so a reader (or a process
//! killed midway) sees the old file or the new one, never a part. The
//! prepared cache, `.npz` outputs and `run --stats` use it.

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
