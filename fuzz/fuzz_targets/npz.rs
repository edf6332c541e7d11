//! The `.npz` reader on a file in a scratch folder. The first byte picks
//! what the rest is: `0` the whole `.npz` file; `1`/`2` one `.npy` member
//! wrapped in a valid zip archive (stored / deflated), so that mutations
//! reach the `.npy` header parser past the archive's CRC.
//!
//! Oracle: an array read back, written with the runtime's own writer and
//! read again, encodes to the same `.npy` bytes.
#![no_main]

use std::io::Write as _;

use libfuzzer_sys::fuzz_target;
use onnx_prepared::npz::{read_npz, write_npy, write_npz};
use zip::CompressionMethod;
use zip::write::SimpleFileOptions;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let dir = onnx_prepared_fuzz::scratch();
    let path = dir.path().join("in.npz");
    let file = match mode % 3 {
        0 => rest.to_vec(),
        m => {
            let method = if m == 1 {
                CompressionMethod::Stored
            } else {
                CompressionMethod::Deflated
            };
            let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            zip.start_file(
                "a.npy",
                SimpleFileOptions::default().compression_method(method),
            )
            .expect("start a member");
            zip.write_all(rest).expect("write a member");
            zip.finish().expect("finish the archive").into_inner()
        }
    };
    std::fs::write(&path, file).expect("write the input");
    let Ok(arrays) = read_npz(&path) else {
        return;
    };
    let Ok(first) = arrays
        .iter()
        .map(|(n, t)| write_npy(n, t))
        .collect::<Result<Vec<_>, _>>()
    else {
        return;
    };
    let again = dir.path().join("again.npz");
    write_npz(&again, &arrays).expect("write what was read");
    let back = read_npz(&again).expect("read what was written");
    let second: Vec<Vec<u8>> = back
        .iter()
        .map(|(n, t)| write_npy(n, t).expect("encode again"))
        .collect();
    assert_eq!(first, second, "an array changed through write and read");
});
