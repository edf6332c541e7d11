//! NumPy `.npy` / `.npz` reading and writing (cold path): the file interface
//! of `onnx-prepared run`, through which outside tools (ONNX Runtime
//! parity, the ONNX backend node tests) exchange tensors with the runtime.

use std::io::Write;
use std::path::{Path, PathBuf};

use half::{bf16, f16};

use crate::limits::MAX_NPY_HEADER_BYTES;
use onnx_prepared_kernels::{DataRef, ElementType, Tensor, TensorData};

mod archive;
#[cfg(test)]
mod tests;

pub use archive::read_npz;

/// Reading or writing an `.npz` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NpzError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not a valid zip archive.
    #[error("{path} is not a valid .npz (zip) archive: {detail}")]
    Zip {
        /// The file.
        path: PathBuf,
        /// What the zip reader found.
        detail: String,
    },
    /// An array is not a valid `.npy`.
    #[error("array `{name}`: {detail}")]
    BadArray {
        /// The array.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// The path is not a regular file (a FIFO, a device, a directory, a
    /// symbolic link where one is refused): reading could block or never
    /// end, writing would replace or feed something that is not ours.
    #[error("{path} is {kind}, not a regular file{hint}")]
    NotRegularFile {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// An array, or all arrays together, decompress to more than the limit.
    #[error("{path}: arrays decompress to more than {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// The arrays' memory could not be charged to the process's allocation
    /// ceiling, or obtained from the system; nothing more was read.
    #[error("{path}: {source}")]
    Memory {
        /// The file.
        path: PathBuf,
        /// Why the memory was refused.
        source: crate::arena::ArenaError,
    },
    /// An array's dtype has no runtime representation.
    #[error("array `{name}` has dtype `{descr}`, which onnx-prepared does not read")]
    UnsupportedDtype {
        /// The array.
        name: String,
        /// The NumPy dtype descriptor.
        descr: String,
    },
}

fn descr(dtype: ElementType) -> Option<&'static str> {
    use ElementType as T;
    Some(match dtype {
        T::F32 => "<f4",
        T::F64 => "<f8",
        T::F16 => "<f2",
        T::I8 => "|i1",
        T::I16 => "<i2",
        T::I32 => "<i4",
        T::I64 => "<i8",
        T::U8 => "|u1",
        T::U16 => "<u2",
        T::U32 => "<u4",
        T::U64 => "<u8",
        T::Bool => "|b1",
        T::BF16 | T::I4 | T::U4 => return None,
    })
}

fn dtype_of(descr: &str) -> Option<ElementType> {
    use ElementType as T;
    // `=` is native order; this runtime is little-endian only.
    let d = descr.replace('=', "<");
    Some(match d.as_str() {
        "<f4" => T::F32,
        "<f8" => T::F64,
        "<f2" => T::F16,
        "|i1" | "<i1" => T::I8,
        "<i2" => T::I16,
        "<i4" => T::I32,
        "<i8" => T::I64,
        "|u1" | "<u1" => T::U8,
        "<u2" => T::U16,
        "<u4" => T::U32,
        "<u8" => T::U64,
        "|b1" | "<b1" => T::Bool,
        _ => return None,
    })
}

/// One value of a `.npy` header dict.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HeaderValue<'a> {
    Str(&'a str),
    Bool(bool),
    Tuple(Vec<usize>),
}

/// The three fields of a `.npy` header.
#[derive(Debug, PartialEq, Eq)]
struct Header<'a> {
    descr: &'a str,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// Parses a `.npy` header dict (`{'descr': '<f4', 'fortran_order': False,
/// 'shape': (2, 3), }`) the way NumPy reads it (a Python literal), strictly:
/// exactly the keys `descr`, `fortran_order` and `shape`, each once (NumPy
/// keeps the last of a repeated key; a reader keeping the first would see
/// another array), a one-element shape written `(n,)`, nothing but
/// whitespace after the closing brace.
fn parse_header(header: &str) -> Result<Header<'_>, String> {
    let mut rest = header.trim_start();
    fn take(prefix: &str, rest: &mut &str) -> bool {
        let text = *rest;
        match text.strip_prefix(prefix) {
            Some(r) => {
                *rest = r.trim_start();
                true
            }
            None => false,
        }
    }
    fn string<'a>(rest: &mut &'a str) -> Option<&'a str> {
        let text = *rest;
        let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let body = &text[1..];
        let end = body.find(quote)?;
        let value = &body[..end];
        if value.contains('\\') {
            return None;
        }
        *rest = body[end + 1..].trim_start();
        Some(value)
    }
    if !take("{", &mut rest) {
        return Err("header is not a dict".into());
    }
    let mut fields: Vec<(&str, HeaderValue<'_>)> = Vec::new();
    while !take("}", &mut rest) {
        let key = string(&mut rest).ok_or("header keys must be quoted strings")?;
        if !take(":", &mut rest) {
            return Err(format!("header key '{key}' has no value"));
        }
        let value = if let Some(v) = string(&mut rest) {
            HeaderValue::Str(v)
        } else if take("True", &mut rest) {
            HeaderValue::Bool(true)
        } else if take("False", &mut rest) {
            HeaderValue::Bool(false)
        } else if take("(", &mut rest) {
            let mut dims = Vec::new();
            let mut trailing_comma = false;
            while !take(")", &mut rest) {
                let digits = rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                let dim = rest[..digits]
                    .parse::<usize>()
                    .map_err(|_| format!("unreadable shape in header {header:?}"))?;
                rest = rest[digits..].strip_prefix('L').unwrap_or(&rest[digits..]);
                rest = rest.trim_start();
                dims.push(dim);
                trailing_comma = take(",", &mut rest);
                if !trailing_comma && !rest.starts_with(')') {
                    return Err(format!("unreadable shape in header {header:?}"));
                }
            }
            if dims.len() == 1 && !trailing_comma {
                return Err(format!(
                    "shape ({}) is not a tuple; write ({},)",
                    dims[0], dims[0]
                ));
            }
            HeaderValue::Tuple(dims)
        } else {
            return Err(format!("header key '{key}' has an unreadable value"));
        };
        if fields.iter().any(|(k, _)| *k == key) {
            return Err(format!("header key '{key}' appears twice"));
        }
        fields.push((key, value));
        if !take(",", &mut rest) && !rest.starts_with('}') {
            return Err("header entries must be separated by commas".into());
        }
    }
    if !rest.is_empty() {
        return Err("text after the header dict".into());
    }
    let mut descr = None;
    let mut fortran_order = None;
    let mut shape = None;
    for (key, value) in fields {
        match (key, value) {
            ("descr", HeaderValue::Str(d)) => descr = Some(d),
            ("fortran_order", HeaderValue::Bool(b)) => fortran_order = Some(b),
            ("shape", HeaderValue::Tuple(t)) => shape = Some(t),
            ("descr" | "fortran_order" | "shape", _) => {
                return Err(format!("header key '{key}' has a value of the wrong type"));
            }
            _ => return Err(format!("header has an unexpected key '{key}'")),
        }
    }
    match (descr, fortran_order, shape) {
        (Some(descr), Some(fortran_order), Some(shape)) => Ok(Header {
            descr,
            fortran_order,
            shape,
        }),
        _ => Err("header needs 'descr', 'fortran_order' and 'shape'".into()),
    }
}

/// Where the data of a `.npy` starts, and what it holds.
struct NpyLayout {
    dtype: ElementType,
    shape: Vec<usize>,
    /// Bytes of magic, version, length and header before the data.
    data_offset: usize,
    /// Bytes of data the shape and dtype need.
    data_len: usize,
}

fn bad_array(name: &str, detail: &str) -> NpzError {
    NpzError::BadArray {
        name: name.to_owned(),
        detail: detail.to_owned(),
    }
}

/// The bytes of a `.npy` before its header dict (magic, version, header
/// length), and the header's length; `None` when `bytes` is too short to
/// tell.
fn npy_preamble(name: &str, bytes: &[u8]) -> Result<Option<(usize, usize)>, NpzError> {
    if bytes.len() < 8 {
        return Ok(None);
    }
    if &bytes[..6] != b"\x93NUMPY" {
        return Err(bad_array(name, "missing the \\x93NUMPY magic"));
    }
    let (offset, header_len) = match bytes[6] {
        1 if bytes.len() >= 10 => (10, u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        2 | 3 if bytes.len() >= 12 => (
            12,
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
        ),
        1..=3 => return Ok(None),
        v => {
            return Err(bad_array(name, &format!("unsupported .npy version {v}")));
        }
    };
    if header_len > MAX_NPY_HEADER_BYTES {
        return Err(bad_array(
            name,
            &format!("header of {header_len} bytes is longer than {MAX_NPY_HEADER_BYTES}"),
        ));
    }
    Ok(Some((offset, header_len)))
}

/// The layout a `.npy`'s header declares; `bytes` holds at least the
/// header (the data may follow).
fn npy_layout(name: &str, bytes: &[u8]) -> Result<NpyLayout, NpzError> {
    let bad = |detail: &str| bad_array(name, detail);
    let Some((offset, header_len)) = npy_preamble(name, bytes)? else {
        return Err(bad("missing the \\x93NUMPY magic"));
    };
    let header = bytes
        .get(offset..offset + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad("truncated or non-UTF-8 header"))?;
    let Header {
        descr,
        fortran_order,
        shape,
    } = parse_header(header).map_err(|detail| bad(&detail))?;
    if fortran_order {
        return Err(bad(
            "Fortran-ordered arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    let dtype = dtype_of(descr).ok_or_else(|| NpzError::UnsupportedDtype {
        name: name.to_owned(),
        descr: descr.to_owned(),
    })?;
    let data_len = onnx_prepared_kernels::element_count(&shape)
        .and_then(|count| dtype.byte_len(count as u64))
        .and_then(|len| usize::try_from(len).ok())
        .ok_or_else(|| bad(&format!("shape {shape:?} overflows")))?;
    Ok(NpyLayout {
        dtype,
        shape,
        data_offset: offset + header_len,
        data_len,
    })
}

/// Parses one `.npy` file.
pub fn read_npy(name: &str, bytes: &[u8]) -> Result<Tensor, NpzError> {
    let layout = npy_layout(name, bytes)?;
    let body = &bytes[layout.data_offset..];
    if body.len() != layout.data_len {
        return Err(bad_array(
            name,
            &format!(
                "holds {} data bytes, shape {:?} needs {}",
                body.len(),
                layout.shape,
                layout.data_len
            ),
        ));
    }
    decode(name, layout, body)
}

/// The tensor of `layout` from its data bytes (copied).
fn decode(name: &str, layout: NpyLayout, body: &[u8]) -> Result<Tensor, NpzError> {
    let data = TensorData::from_le_bytes(layout.dtype, body)
        .ok_or_else(|| bad_array(name, "undecodable data"))?;
    Tensor::new(layout.shape, data).map_err(|e| bad_array(name, &e.to_string()))
}

/// Encodes one tensor as `.npy` (version 1.0).
pub fn write_npy(name: &str, tensor: &Tensor) -> Result<Vec<u8>, NpzError> {
    let descr = descr(tensor.dtype()).ok_or_else(|| NpzError::UnsupportedDtype {
        name: name.to_owned(),
        descr: tensor.dtype().name().to_owned(),
    })?;
    let shape = match tensor.shape() {
        [] => "()".to_owned(),
        [d] => format!("({d},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Pad so the data starts 64-byte aligned, header ending in '\n'.
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + tensor.len() * 8);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    match tensor.data() {
        DataRef::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::F16(v) => v
            .iter()
            .for_each(|x: &f16| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::BF16(v) => v
            .iter()
            .for_each(|x: &bf16| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::I8(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::I16(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::I32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::I64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::U8(v) => out.extend_from_slice(v),
        DataRef::U16(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::U32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::U64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        DataRef::Bool(v) => v.iter().for_each(|&x| out.push(x as u8)),
    }
    Ok(out)
}

fn zip_err(path: &Path, e: impl std::fmt::Display) -> NpzError {
    NpzError::Zip {
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

/// What a file type is, for messages; `None` for a regular file.
fn non_regular_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_file() {
        None
    } else if file_type.is_symlink() {
        Some("a symbolic link")
    } else if file_type.is_dir() {
        Some("a directory")
    } else if file_type.is_fifo() {
        Some("a FIFO")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else if file_type.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

/// Writes `arrays` as an uncompressed `.npz` (what `numpy.savez` writes).
///
/// * `path` absent or a regular file: atomically, a new temporary file in
///   the same folder (created exclusively, never through an existing path)
///   renamed over `path`.
/// * `path` a character device (`/dev/null`): written through, in place;
///   the device is never replaced.
/// * anything else (a symbolic link, a FIFO, a directory, a socket, a block
///   device): refused with [`NpzError::NotRegularFile`], nothing written.
pub fn write_npz(path: &Path, arrays: &[(String, Tensor)]) -> Result<(), NpzError> {
    let io = |source| NpzError::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            let file_type = meta.file_type();
            if file_type.is_char_device() {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io)?;
                write_zip(path, file, arrays)?;
                return Ok(());
            }
            if let Some(kind) = non_regular_kind(file_type) {
                return Err(NpzError::NotRegularFile {
                    path: path.to_path_buf(),
                    kind,
                    hint: "; give the path of a regular file (or of none) to write the outputs to",
                });
            }
        }
    }
    let (dir, name) = crate::durable::split_target(path);
    let (tmp, file) = crate::durable::create_temp(dir, &name).map_err(io)?;
    let result = (|| {
        let file = write_zip(path, file, arrays)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes `arrays` as a stored zip into `file`; returns the file.
fn write_zip(
    path: &Path,
    file: std::fs::File,
    arrays: &[(String, Tensor)],
) -> Result<std::fs::File, NpzError> {
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    for (name, tensor) in arrays {
        let npy = write_npy(name, tensor)?;
        zip.start_file(format!("{name}.npy"), options)
            .map_err(|e| zip_err(path, e))?;
        zip.write_all(&npy).map_err(|source| NpzError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    }
    zip.finish().map_err(|e| zip_err(path, e))
}
