//! NumPy `.npy` / `.npz` reading and writing (cold path): the file interface
//! of `onnx-prepared run`, through which outside tools (ONNX Runtime
//! parity, the ONNX backend node tests) exchange tensors with the runtime.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use onnx_prepared_kernels::{ElementType, Tensor, TensorData};

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

/// The value of `key` in a `.npy` header dict (`{'descr': '<f4', ...}`).
fn header_field<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let start = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else if let Some(quoted) = rest.strip_prefix('\'') {
        quoted.find('\'')? + 2
    } else {
        rest.find([',', '}']).unwrap_or(rest.len())
    };
    Some(rest[..end].trim())
}

/// Parses one `.npy` file.
pub fn read_npy(name: &str, bytes: &[u8]) -> Result<Tensor, NpzError> {
    let bad = |detail: &str| NpzError::BadArray {
        name: name.to_owned(),
        detail: detail.to_owned(),
    };
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("missing the \\x93NUMPY magic"));
    }
    let (header_len, offset) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize,
            12,
        ),
        v => return Err(bad(&format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(offset..offset + header_len)
        .and_then(|h| std::str::from_utf8(h).ok())
        .ok_or_else(|| bad("truncated or non-UTF-8 header"))?;
    let descr = header_field(header, "descr")
        .map(|d| d.trim_matches('\''))
        .ok_or_else(|| bad("header has no 'descr'"))?;
    if header_field(header, "fortran_order") != Some("False") {
        return Err(bad(
            "Fortran-ordered arrays are not supported; save with np.ascontiguousarray",
        ));
    }
    let shape_text = header_field(header, "shape").ok_or_else(|| bad("header has no 'shape'"))?;
    let shape = shape_text
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad(&format!("unreadable shape {shape_text}")))?;
    let dtype = dtype_of(descr).ok_or_else(|| NpzError::UnsupportedDtype {
        name: name.to_owned(),
        descr: descr.to_owned(),
    })?;
    let count =
        onnx_prepared_kernels::element_count(&shape).ok_or_else(|| bad("shape overflows"))?;
    let byte_len = dtype
        .byte_len(count as u64)
        .ok_or_else(|| bad("shape overflows"))? as usize;
    let body = &bytes[offset + header_len..];
    if body.len() != byte_len {
        return Err(bad(&format!(
            "holds {} data bytes, shape {shape:?} needs {byte_len}",
            body.len()
        )));
    }
    let data = TensorData::from_le_bytes(dtype, body).ok_or_else(|| bad("undecodable data"))?;
    Tensor::new(shape, data).map_err(|e| bad(&e.to_string()))
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
        TensorData::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::F64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::F16(v) => v
            .iter()
            .for_each(|x: &f16| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::BF16(v) => v
            .iter()
            .for_each(|x: &bf16| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::I8(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::I16(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::I32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::I64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::U8(v) => out.extend_from_slice(v),
        TensorData::U16(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::U32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::U64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        TensorData::Bool(v) => v.iter().for_each(|&x| out.push(x as u8)),
    }
    Ok(out)
}

fn zip_err(path: &Path, e: impl std::fmt::Display) -> NpzError {
    NpzError::Zip {
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

/// Reads every array of an `.npz` (stored or deflated), in archive order.
pub fn read_npz(path: &Path) -> Result<Vec<(String, Tensor)>, NpzError> {
    let file = std::fs::File::open(path).map_err(|source| NpzError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_npz_from(path, file)
}

fn read_npz_from(path: &Path, reader: impl Read + Seek) -> Result<Vec<(String, Tensor)>, NpzError> {
    let mut archive = zip::ZipArchive::new(reader).map_err(|e| zip_err(path, e))?;
    let mut arrays = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let mut entry = archive.by_index(i).map_err(|e| zip_err(path, e))?;
        let Some(name) = entry.name().strip_suffix(".npy").map(str::to_owned) else {
            continue;
        };
        let mut bytes = Vec::with_capacity(entry.size().min(1 << 30) as usize);
        entry
            .read_to_end(&mut bytes)
            .map_err(|source| NpzError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let tensor = read_npy(&name, &bytes)?;
        arrays.push((name, tensor));
    }
    Ok(arrays)
}

/// Writes `arrays` as an uncompressed `.npz` (what `numpy.savez` writes),
/// atomically: a temporary file in the same folder renamed into place.
pub fn write_npz(path: &Path, arrays: &[(String, Tensor)]) -> Result<(), NpzError> {
    let io = |source| NpzError::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    let result = (|| {
        let file = std::fs::File::create(&tmp).map_err(io)?;
        let mut zip = zip::ZipWriter::new(file);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(true);
        for (name, tensor) in arrays {
            let npy = write_npy(name, tensor)?;
            zip.start_file(format!("{name}.npy"), options)
                .map_err(|e| zip_err(path, e))?;
            zip.write_all(&npy).map_err(io)?;
        }
        let file = zip.finish().map_err(|e| zip_err(path, e))?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields() {
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        assert_eq!(header_field(h, "descr"), Some("'<f4'"));
        assert_eq!(header_field(h, "fortran_order"), Some("False"));
        assert_eq!(header_field(h, "shape"), Some("(2, 3)"));
    }

    #[test]
    fn npy_round_trip_every_type() {
        let cases = [
            Tensor::from_f32(vec![2, 2], vec![1.0, -2.5, 3.0, 0.0]).unwrap(),
            Tensor::from_i64(vec![3], vec![-1, 0, 1 << 40]).unwrap(),
            Tensor::new(vec![], TensorData::I32(vec![7])).unwrap(),
            Tensor::new(vec![2], TensorData::Bool(vec![true, false])).unwrap(),
            Tensor::new(vec![0, 4], TensorData::U8(vec![])).unwrap(),
        ];
        for t in cases {
            let bytes = write_npy("x", &t).unwrap();
            assert_eq!(read_npy("x", &bytes).unwrap(), t);
        }
    }

    #[test]
    fn malformed_npy_is_an_error() {
        assert!(matches!(
            read_npy("x", b"garbage!!!!!"),
            Err(NpzError::BadArray { .. })
        ));
        let mut bytes =
            write_npy("x", &Tensor::from_f32(vec![2], vec![1.0, 2.0]).unwrap()).unwrap();
        bytes.pop();
        assert!(matches!(
            read_npy("x", &bytes),
            Err(NpzError::BadArray { .. })
        ));
    }
}
