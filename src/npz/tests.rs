//! Tests of `.npy` / `.npz` reading and writing.

use super::*;
use crate::limits::MAX_NPZ_BYTES;

#[test]
fn header_fields() {
    let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }  \n";
    assert_eq!(
        parse_header(h),
        Ok(Header {
            descr: "<f4",
            fortran_order: false,
            shape: vec![2, 3]
        })
    );
    let h = "{\"descr\":\"|u1\",\"shape\":(7,),\"fortran_order\":True}";
    assert_eq!(parse_header(h).unwrap().shape, vec![7]);
    assert_eq!(
        parse_header("{'descr': '<i8', 'fortran_order': False, 'shape': ()}")
            .unwrap()
            .shape,
        Vec::<usize>::new()
    );
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
    let mut bytes = write_npy("x", &Tensor::from_f32(vec![2], vec![1.0, 2.0]).unwrap()).unwrap();
    bytes.pop();
    assert!(matches!(
        read_npy("x", &bytes),
        Err(NpzError::BadArray { .. })
    ));
}

/// A deflated entry whose array decompresses past the limit is an
/// error once the limit is read, whatever sizes the archive declares.
#[test]
fn a_deflate_bomb_stops_at_the_limit() {
    let zeros = Tensor::new(vec![1 << 22], TensorData::U8(vec![0; 1 << 22])).unwrap();
    let npy = write_npy("x", &zeros).unwrap();
    let mut cursor = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut cursor);
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("x.npy", options).unwrap();
        zip.write_all(&npy).unwrap();
        zip.finish().unwrap();
    }
    let archive = cursor.into_inner();
    assert!(archive.len() < 1 << 16, "{} bytes", archive.len());
    let path = Path::new("bomb.npz");
    let ceiling = crate::arena::Ceiling::new(1 << 30);
    let read =
        |limit| archive::read_npz_from(path, std::io::Cursor::new(&archive), limit, &ceiling);
    assert!(matches!(
        read(1 << 20),
        Err(NpzError::TooLarge { limit, .. }) if limit == 1 << 20
    ));
    // Under a limit it can hold, the same archive reads.
    assert_eq!(read(1 << 23).unwrap()[0].1, zeros);
}

/// An archive of `(name, npy bytes)` entries.
fn zip_of(entries: &[(&str, &[u8])], method: zip::CompressionMethod) -> Vec<u8> {
    let mut cursor = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut cursor);
        let options = zip::write::SimpleFileOptions::default().compression_method(method);
        for (name, bytes) in entries {
            zip.start_file(format!("{name}.npy"), options).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
    }
    cursor.into_inner()
}

/// A `.npy` preamble and header for `descr` and `shape` (a Python tuple),
/// with no data.
fn npy_header(descr: &str, shape: &str) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out
}

fn read_with(
    archive: &[u8],
    limit: u64,
    ceiling: usize,
) -> Result<Vec<(String, Tensor)>, NpzError> {
    let ceiling = crate::arena::Ceiling::new(ceiling);
    archive::read_npz_from(
        Path::new("t.npz"),
        std::io::Cursor::new(archive),
        limit,
        &ceiling,
    )
}

/// A header declaring 4 TiB over 16 bytes of data: the archive's size
/// disagrees, so nothing is inflated past the header.
#[test]
fn a_header_declaring_a_huge_shape_is_refused_before_inflating() {
    let mut npy = npy_header("<f4", "(1099511627776,)");
    npy.extend_from_slice(&[0; 16]);
    for method in [
        zip::CompressionMethod::Stored,
        zip::CompressionMethod::Deflated,
    ] {
        let archive = zip_of(&[("x", &npy)], method);
        let e = read_with(&archive, MAX_NPZ_BYTES, usize::MAX).unwrap_err();
        assert!(
            matches!(&e, NpzError::BadArray { name, detail } if name == "x" && detail.contains("declares")),
            "{e}"
        );
    }
}

/// The zip entry's uncompressed size says more than the header: refused.
#[test]
fn an_archive_size_that_disagrees_with_the_header_is_refused() {
    let npy = write_npy("x", &Tensor::from_f32(vec![4], vec![1.0; 4]).unwrap()).unwrap();
    let mut longer = npy.clone();
    longer.extend_from_slice(&[0; 4]);
    let archive = zip_of(&[("x", &longer)], zip::CompressionMethod::Deflated);
    let e = read_with(&archive, MAX_NPZ_BYTES, usize::MAX).unwrap_err();
    assert!(
        matches!(&e, NpzError::BadArray { detail, .. } if detail.contains("declares")),
        "{e}"
    );
    // The honest one reads, in place.
    let archive = zip_of(&[("x", &npy)], zip::CompressionMethod::Deflated);
    let arrays = read_with(&archive, MAX_NPZ_BYTES, usize::MAX).unwrap();
    assert_eq!(arrays[0].1.as_f32().unwrap(), &[1.0; 4]);
}

/// Sets the uncompressed size of the archive's one entry (local header and
/// central directory) to `size`: a crafted archive whose sizes agree with a
/// huge header.
fn declare_size(archive: &mut [u8], size: u32) {
    let find = |archive: &[u8], sig: &[u8]| archive.windows(4).position(|w| w == sig).unwrap();
    let local = find(archive, b"PK\x03\x04");
    archive[local + 22..local + 26].copy_from_slice(&size.to_le_bytes());
    let central = find(archive, b"PK\x01\x02");
    archive[central + 24..central + 28].copy_from_slice(&size.to_le_bytes());
}

/// Header and archive agree on 3 GiB of data (the archive holds none):
/// over the limit, or over the ceiling, it is refused before any of it is
/// allocated or inflated.
#[test]
fn a_huge_array_past_the_limit_or_the_ceiling_is_refused_before_inflating() {
    let npy = npy_header("<f4", "(805306368,)");
    let mut archive = zip_of(&[("x", &npy)], zip::CompressionMethod::Deflated);
    declare_size(&mut archive, npy.len() as u32 + (3 << 30));
    let e = read_with(&archive, 1 << 30, usize::MAX).unwrap_err();
    assert!(
        matches!(e, NpzError::TooLarge { limit, .. } if limit == 1 << 30),
        "{e}"
    );
    let e = read_with(&archive, MAX_NPZ_BYTES, 1 << 30).unwrap_err();
    assert!(
        matches!(
            &e,
            NpzError::Memory {
                source: crate::arena::ArenaError::AboveCeiling { requested, .. },
                ..
            } if *requested == 3 << 30
        ),
        "{e}"
    );
    assert!(e.to_string().contains("ceiling"), "{e}");
}

/// The arrays of one file are charged together, and share the ceiling
/// with the other requests of the process.
#[test]
fn arrays_share_the_ceiling() {
    let a = write_npy("a", &Tensor::from_f32(vec![150], vec![0.5; 150]).unwrap()).unwrap();
    let archive = zip_of(&[("a", &a), ("b", &a)], zip::CompressionMethod::Deflated);
    assert_eq!(read_with(&archive, MAX_NPZ_BYTES, 1200).unwrap().len(), 2);
    let e = read_with(&archive, MAX_NPZ_BYTES, 1000).unwrap_err();
    assert!(
        matches!(
            &e,
            NpzError::Memory {
                source: crate::arena::ArenaError::AboveCeiling {
                    requested: 1200,
                    ..
                },
                ..
            }
        ),
        "{e}"
    );
    let ceiling = crate::arena::Ceiling::new(1200);
    let read = || {
        let reader = std::io::Cursor::new(&archive);
        archive::read_npz_from(Path::new("t.npz"), reader, MAX_NPZ_BYTES, &ceiling)
    };
    let other = ceiling
        .charge(crate::arena::Domain::Execution, || "a lowering".into(), 700)
        .unwrap();
    let e = read().unwrap_err();
    assert!(
        matches!(
            &e,
            NpzError::Memory {
                source: crate::arena::ArenaError::CeilingHeld { live: 700, .. },
                ..
            }
        ),
        "{e}"
    );
    drop(other);
    assert_eq!(read().unwrap().len(), 2);
    assert_eq!(ceiling.live(), 0);
}

/// A stream shorter than its header and archive declare is an error.
#[test]
fn a_truncated_stream_is_an_error() {
    let npy = npy_header("<f4", "(4,)");
    let mut archive = zip_of(&[("x", &npy)], zip::CompressionMethod::Deflated);
    declare_size(&mut archive, npy.len() as u32 + 16);
    assert!(read_with(&archive, MAX_NPZ_BYTES, usize::MAX).is_err());
}
