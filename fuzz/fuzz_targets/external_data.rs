//! External-data descriptors: a small model whose initializers carry
//! fuzzer-chosen `external_data` entries beside data files of fuzzer-chosen
//! sizes, links, a folder, a FIFO and a file outside the model's folder;
//! `w0.data` may be swapped after validation. When the model opens, every
//! payload is read through `FileSource`.
//!
//! Oracles: a `sha256:` digest the model accepted is 64 hex digits; a data
//! file the model accepted lies inside its folder; a read
//! that succeeds returns exactly the bytes of the file as it was when the
//! model was validated, at the validated offset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_prepared::model::{Checksum, FileSource, Model, WeightSource, read_to_vec};
use onnx_prepared_fuzz::external::{ExternalCase, content};

fuzz_target!(|case: ExternalCase| {
    let dir = onnx_prepared_fuzz::scratch();
    let layout = case.write(dir.path()).expect("write the case");
    let Ok(model) = Model::open(&layout.model) else {
        return;
    };
    for w in model.weights() {
        if let Some(Checksum::Sha256(_)) = w.checksum() {
            let index = w.name()[1..].parse().expect("initializers are named w<i>");
            let declared = case.checksums(index, &layout);
            assert!(
                declared.iter().any(|v| v
                    .strip_prefix("sha256:")
                    .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))),
                "{}: accepted a digest that is not 64 hex digits: {declared:?}",
                w.name()
            );
        }
    }
    let folder = layout.folder.canonicalize().expect("the model folder");
    // What each accepted file held at validation.
    let files: Vec<Vec<u8>> = model
        .external_files()
        .iter()
        .map(|f| {
            let real = f
                .path()
                .canonicalize()
                .expect("an accepted data file exists");
            assert!(
                real.starts_with(&folder),
                "accepted {:?} ({real:?}) outside the model folder",
                f.location()
            );
            let index = match real.file_name().and_then(|n| n.to_str()) {
                Some("w0.data") => 0,
                Some("w1.data") => 1,
                other => panic!("accepted {other:?}, which is not a regular data file"),
            };
            content(index, layout.sizes[index])
        })
        .collect();
    if let Some(swap) = case.swap {
        swap.apply(&layout).expect("swap w0.data");
    }
    let Ok(source) = FileSource::open(&model) else {
        return;
    };
    for w in model.weights() {
        let Ok(bytes) = read_to_vec(&source, w.id()) else {
            continue;
        };
        assert_eq!(
            bytes.len() as u64,
            w.byte_len(),
            "{}: read length",
            w.name()
        );
        if let WeightSource::External {
            file,
            offset,
            length,
        } = w.source()
        {
            let held = &files[file.index()];
            let range = *offset as usize..(*offset + *length) as usize;
            assert_eq!(
                &bytes[..],
                &held[range],
                "{}: bytes differ from the validated file",
                w.name()
            );
        }
        let _ = w.verify_checksum(&bytes);
    }
});
