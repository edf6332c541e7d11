//! Reading an `.npz` archive (cold path): each array is sized from its
//! `.npy` header before any of its data is inflated.
//!
//! Per array:
//!
//! 1. Inflate only the preamble and header (at most
//!    [`MAX_NPY_HEADER_BYTES`] and a few bytes) and parse them: dtype ×
//!    shape gives the data's size.
//! 2. Refuse the array unless the zip entry's uncompressed size is exactly
//!    header plus data (a bomb or a lying header disagrees), unless the
//!    arrays so far fit in the limit, and unless the process's allocation
//!    ceiling (`arena::Ceiling`) takes them all: a refusal allocates nothing.
//! 3. Allocate the data once (fallibly) and inflate into it, refusing a
//!    stream that ends early or runs on; types that can be used in place
//!    become tensors over those bytes, with no second copy.

use std::io::{Read, Seek};
use std::path::Path;

use onnx_prepared_kernels::{Tensor, ZeroedBlock};

use super::{NpyLayout, NpzError, bad_array, decode, non_regular_kind, npy_layout, npy_preamble};
use crate::arena::{ArenaError, Ceiling, Domain, Reservation};
use crate::limits::{MAX_NPY_HEADER_BYTES, MAX_NPZ_BYTES};

/// Reads every array of an `.npz` (stored or deflated), in archive order.
/// The path must be a regular file (a FIFO or a device is refused before it
/// is opened, so reading never blocks); each array and all of them together
/// hold at most [`MAX_NPZ_BYTES`], and are charged to the process's
/// allocation ceiling while they are read, so a deflate bomb or a header
/// declaring a huge shape is an error before its data is inflated.
pub fn read_npz(path: &Path) -> Result<Vec<(String, Tensor)>, NpzError> {
    let io = |source| NpzError::Io {
        path: path.to_path_buf(),
        source,
    };
    let regular = |meta: std::fs::Metadata| match non_regular_kind(meta.file_type()) {
        None => Ok(()),
        Some(kind) => Err(NpzError::NotRegularFile {
            path: path.to_path_buf(),
            kind,
            hint: "",
        }),
    };
    regular(std::fs::metadata(path).map_err(io)?)?;
    let file = std::fs::File::open(path).map_err(io)?;
    // The path may have been swapped between the check and the open.
    regular(file.metadata().map_err(io)?)?;
    read_npz_from(path, file, MAX_NPZ_BYTES, &Ceiling::process())
}

/// [`read_npz`] of an open archive: its arrays' data together at most
/// `limit` bytes, charged to `ceiling` (released when this returns).
pub(super) fn read_npz_from(
    path: &Path,
    reader: impl Read + Seek,
    limit: u64,
    ceiling: &Ceiling,
) -> Result<Vec<(String, Tensor)>, NpzError> {
    let zip_err = |e: zip::result::ZipError| NpzError::Zip {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let memory = |source| NpzError::Memory {
        path: path.to_path_buf(),
        source,
    };
    let mut archive = zip::ZipArchive::new(reader).map_err(zip_err)?;
    let mut arrays = Vec::new();
    let mut total: u64 = 0;
    let mut charge: Option<Reservation> = None;
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(zip_err)?;
        let Some(name) = entry.name().strip_suffix(".npy").map(str::to_owned) else {
            continue;
        };
        let declared = entry.size();
        let io = |source| NpzError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Step 1.
        let prefix = read_prefix(&name, &mut entry).map_err(|e| e.into_npz(&name, io))?;
        let layout = npy_layout(&name, &prefix)?;
        // Step 2.
        let needs = (layout.data_offset as u64).checked_add(layout.data_len as u64);
        if needs != Some(declared) {
            return Err(bad_array(
                &name,
                &format!(
                    "the archive declares {declared} bytes for it, its header {} ({} of data for shape {:?})",
                    layout.data_offset as u64 + layout.data_len as u64,
                    layout.data_len,
                    layout.shape
                ),
            ));
        }
        total = total
            .checked_add(layout.data_len as u64)
            .filter(|&t| t <= limit)
            .ok_or_else(|| NpzError::TooLarge {
                path: path.to_path_buf(),
                limit,
            })?;
        let bytes = usize::try_from(total).unwrap_or(usize::MAX);
        let what = || format!("reading the arrays of {} up to `{name}`", path.display());
        match &mut charge {
            Some(held) => ceiling.resize(held, what, bytes).map_err(memory)?,
            None => charge = Some(ceiling.charge(Domain::Io, what, bytes).map_err(memory)?),
        }
        // Step 3.
        let tensor = read_data(&name, layout, &mut entry).map_err(|e| match e {
            DataError::Npz(e) => e,
            DataError::Io(e) => io(e),
            DataError::Memory(requested) => memory(ArenaError::AllocationFailed {
                domain: Domain::Io,
                requested,
            }),
        })?;
        arrays.push((name, tensor));
    }
    Ok(arrays)
}

/// Why the data of an array could not be read.
enum DataError {
    Npz(NpzError),
    Io(std::io::Error),
    /// The system refused this many bytes.
    Memory(usize),
}

impl DataError {
    /// A short read is a truncated array; other errors keep their kind.
    fn into_npz(self, name: &str, io: impl FnOnce(std::io::Error) -> NpzError) -> NpzError {
        match self {
            DataError::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                bad_array(name, "truncated .npy")
            }
            DataError::Io(e) => io(e),
            DataError::Npz(e) => e,
            DataError::Memory(n) => bad_array(name, &format!("no memory for {n} bytes")),
        }
    }
}

/// The preamble and header of a `.npy`, and nothing past them.
fn read_prefix(name: &str, entry: &mut impl Read) -> Result<Vec<u8>, DataError> {
    let mut prefix = vec![0u8; 8];
    entry.read_exact(&mut prefix).map_err(DataError::Io)?;
    for more in [2, 2] {
        if npy_preamble(name, &prefix)
            .map_err(DataError::Npz)?
            .is_some()
        {
            break;
        }
        let at = prefix.len();
        prefix.resize(at + more, 0);
        entry.read_exact(&mut prefix[at..]).map_err(DataError::Io)?;
    }
    let Some((offset, header_len)) = npy_preamble(name, &prefix).map_err(DataError::Npz)? else {
        return Err(DataError::Npz(bad_array(name, "truncated .npy preamble")));
    };
    debug_assert!(header_len <= MAX_NPY_HEADER_BYTES);
    prefix.resize(offset + header_len, 0);
    entry
        .read_exact(&mut prefix[offset..])
        .map_err(DataError::Io)?;
    Ok(prefix)
}

/// Step 3: exactly `layout.data_len` bytes of data, then the end.
fn read_data(name: &str, layout: NpyLayout, entry: &mut impl Read) -> Result<Tensor, DataError> {
    let len = layout.data_len;
    let mut block = ZeroedBlock::zeroed(len, 64).ok_or(DataError::Memory(len))?;
    let short = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            DataError::Npz(bad_array(
                name,
                &format!("holds fewer data bytes than shape {:?} needs", layout.shape),
            ))
        } else {
            DataError::Io(e)
        }
    };
    entry.read_exact(block.bytes_mut()).map_err(short)?;
    let mut extra = [0u8; 1];
    if entry.read(&mut extra).map_err(DataError::Io)? != 0 {
        return Err(DataError::Npz(bad_array(
            name,
            &format!(
                "holds more data bytes than shape {:?} needs ({len})",
                layout.shape
            ),
        )));
    }
    if Tensor::views_in_place(layout.dtype) {
        let (shape, dtype) = (layout.shape, layout.dtype);
        return Tensor::shared(shape, dtype, std::sync::Arc::new(block), 0)
            .ok_or_else(|| DataError::Npz(bad_array(name, "undecodable data")));
    }
    decode(name, layout, block.bytes()).map_err(DataError::Npz)
}
