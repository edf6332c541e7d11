//! Model::open validates every `external_data` entry, each failure its own
//! typed error naming the tensor, and reads no payload byte doing so.

use crate::support;

use onnx_prepared::Error;
use onnx_prepared::model::proto::tensor_proto::{DataLocation, DataType};
use onnx_prepared::model::{
    Checksum, ExternalDataError as X, FileSource, Model, ModelError as M, PayloadSource,
    WeightSource, read_to_vec,
};
use support::{Init, tempdir, write_data, write_model};

/// A [2, 4] f32 tensor: 32 bytes.
const DIMS: &[i64] = &[2, 4];
const BYTES: usize = 32;

fn open_err(inits: &[Init], data: &[(&str, usize)]) -> Error {
    let dir = tempdir();
    for (name, len) in data {
        write_data(dir.path(), name, *len);
    }
    let path = write_model(dir.path(), inits);
    let err = Error::from(Model::open(&path).expect_err("model must be rejected"));
    assert!(
        err.to_string().contains("`w`"),
        "message names the tensor: {err}"
    );
    err
}

fn ext(entries: &[(&str, &str)]) -> Vec<Init> {
    vec![Init::external("w", DIMS, entries)]
}

#[test]
fn empty_location() {
    let err = open_err(&ext(&[("location", "")]), &[]);
    assert!(
        matches!(err, Error::ExternalData(X::EmptyLocation { .. })),
        "{err:?}"
    );
}

#[test]
fn missing_location() {
    let err = open_err(&ext(&[("offset", "0")]), &[("w.bin", BYTES)]);
    assert!(
        matches!(err, Error::ExternalData(X::MissingLocation { .. })),
        "{err:?}"
    );
}

#[test]
fn absolute_location() {
    let dir = tempdir();
    let data = write_data(dir.path(), "w.bin", BYTES);
    let abs = data.to_str().unwrap().to_owned();
    let err = open_err(&ext(&[("location", &abs)]), &[]);
    assert!(
        matches!(err, Error::ExternalData(X::AbsoluteLocation { .. })),
        "{err:?}"
    );
}

#[test]
fn parent_component_escapes() {
    for location in ["../w.bin", "sub/../../w.bin", "sub\\..\\..\\w.bin"] {
        let err = open_err(&ext(&[("location", location)]), &[("w.bin", BYTES)]);
        assert!(
            matches!(err, Error::ExternalData(X::ParentComponent { .. })),
            "{location}: {err:?}"
        );
    }
}

#[test]
fn dots_inside_a_name_are_legal() {
    let dir = tempdir();
    write_data(dir.path(), "w..v2.bin", BYTES);
    let path = write_model(dir.path(), &ext(&[("location", "w..v2.bin")]));
    let model = Model::open(&path).expect("w..v2.bin is an ordinary file name");
    assert_eq!(model.weights()[0].byte_len(), BYTES as u64);
}

#[test]
fn symlink_out_of_the_model_folder_is_rejected() {
    let outside = tempdir();
    let target = write_data(outside.path(), "secret.bin", BYTES);
    let dir = tempdir();
    std::os::unix::fs::symlink(&target, dir.path().join("w.bin")).unwrap();
    // A symlinked folder that leaves the model folder is rejected the same way.
    std::os::unix::fs::symlink(outside.path(), dir.path().join("sub")).unwrap();
    for location in ["w.bin", "sub/secret.bin"] {
        let path = write_model(dir.path(), &ext(&[("location", location)]));
        let err = Error::from(Model::open(&path).expect_err("escape through a symlink"));
        assert!(
            matches!(&err, Error::ExternalData(X::SymlinkEscape { tensor, .. }) if tensor == "w"),
            "{location}: {err:?}"
        );
    }
}

#[test]
fn symlinks_that_stay_inside_are_followed() {
    let dir = tempdir();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    write_data(&dir.path().join("real"), "w.bin", BYTES);
    std::os::unix::fs::symlink("real", dir.path().join("linked")).unwrap();
    std::os::unix::fs::symlink("real/w.bin", dir.path().join("w.bin")).unwrap();
    for location in ["linked/w.bin", "w.bin"] {
        let path = write_model(dir.path(), &ext(&[("location", location)]));
        Model::open(&path).unwrap_or_else(|e| panic!("{location}: {e}"));
    }
}

/// A Hugging Face-style cache: `snapshots/rev/` holds symlinks into `blobs/`.
/// The data file resolves into the folder of the model file's real path.
#[test]
fn hugging_face_cache_layout_loads() {
    let cache = tempdir();
    let blobs = cache.path().join("blobs");
    let snap = cache.path().join("snapshots").join("rev");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snap).unwrap();
    write_data(&blobs, "3f2a", BYTES);
    std::fs::write(
        blobs.join("9c1b"),
        support::model_bytes(&ext(&[("location", "model.data")])),
    )
    .unwrap();
    std::os::unix::fs::symlink("../../blobs/9c1b", snap.join("model.onnx")).unwrap();
    std::os::unix::fs::symlink("../../blobs/3f2a", snap.join("model.data")).unwrap();
    let model = Model::open(snap.join("model.onnx")).expect("HF cache layout loads");
    let source = FileSource::open(&model).unwrap();
    let bytes = read_to_vec(&source, model.weights()[0].id()).unwrap();
    assert_eq!(
        bytes,
        (0..BYTES).map(|i| (i % 251) as u8).collect::<Vec<_>>()
    );
}

#[test]
fn hardlinks_are_ordinary_files() {
    let outside = tempdir();
    let dir = tempdir();
    let original = write_data(dir.path(), "orig.bin", BYTES);
    std::fs::hard_link(&original, dir.path().join("w.bin")).unwrap();
    let path = write_model(dir.path(), &ext(&[("location", "w.bin")]));
    Model::open(&path).expect("a hardlink is a regular file");
    drop(outside);
}

#[test]
fn unknown_key() {
    let err = open_err(
        &ext(&[("location", "w.bin"), ("basepath", "/tmp")]),
        &[("w.bin", BYTES)],
    );
    assert!(
        matches!(&err, Error::ExternalData(X::UnknownKey { key, .. }) if key == "basepath"),
        "{err:?}"
    );
}

#[test]
fn duplicate_key() {
    let err = open_err(
        &ext(&[("location", "w.bin"), ("offset", "0"), ("offset", "0")]),
        &[("w.bin", BYTES)],
    );
    assert!(
        matches!(err, Error::ExternalData(X::DuplicateKey { .. })),
        "{err:?}"
    );
}

#[test]
fn missing_file() {
    let err = open_err(&ext(&[("location", "absent.bin")]), &[]);
    assert!(
        matches!(err, Error::ExternalData(X::FileNotFound { .. })),
        "{err:?}"
    );
}

#[test]
fn not_a_regular_file() {
    let dir = tempdir();
    std::fs::create_dir(dir.path().join("w.bin")).unwrap();
    let path = write_model(dir.path(), &ext(&[("location", "w.bin")]));
    let err = Error::from(Model::open(&path).unwrap_err());
    assert!(
        matches!(err, Error::ExternalData(X::NotRegularFile { .. })),
        "{err:?}"
    );
}

#[test]
fn negative_or_non_numeric_offset() {
    for value in ["-32", "abc", "0x10", " 0", ""] {
        let err = open_err(
            &ext(&[("location", "w.bin"), ("offset", value)]),
            &[("w.bin", 64)],
        );
        assert!(
            matches!(err, Error::ExternalData(X::InvalidOffset { .. })),
            "{value:?}: {err:?}"
        );
    }
}

#[test]
fn negative_or_non_numeric_length() {
    for value in ["-32", "thirty-two", "3.2e1"] {
        let err = open_err(
            &ext(&[("location", "w.bin"), ("length", value)]),
            &[("w.bin", 64)],
        );
        assert!(
            matches!(err, Error::ExternalData(X::InvalidLength { .. })),
            "{value:?}: {err:?}"
        );
    }
}

#[test]
fn range_beyond_the_file() {
    // Ends one byte past the end.
    let err = open_err(
        &ext(&[("location", "w.bin"), ("offset", "33")]),
        &[("w.bin", 64)],
    );
    assert!(
        matches!(err, Error::ExternalData(X::OutOfBounds { .. })),
        "{err:?}"
    );
    // offset + length overflows u64: checked arithmetic, not a wrap-around.
    let max = u64::MAX.to_string();
    let err = open_err(
        &ext(&[("location", "w.bin"), ("offset", &max)]),
        &[("w.bin", 64)],
    );
    assert!(
        matches!(err, Error::ExternalData(X::OutOfBounds { .. })),
        "{err:?}"
    );
}

#[test]
fn range_ending_exactly_at_the_end_is_accepted() {
    let dir = tempdir();
    write_data(dir.path(), "w.bin", 64);
    let path = write_model(dir.path(), &ext(&[("location", "w.bin"), ("offset", "32")]));
    let model = Model::open(&path).unwrap();
    assert!(matches!(
        model.weights()[0].source(),
        WeightSource::External {
            offset: 32,
            length: 32,
            ..
        }
    ));
}

#[test]
fn length_must_match_type_and_dims() {
    let err = open_err(
        &ext(&[("location", "w.bin"), ("length", "16")]),
        &[("w.bin", 64)],
    );
    assert!(
        matches!(
            err,
            Error::ExternalData(X::LengthMismatch {
                declared: 16,
                expected: 32,
                ..
            })
        ),
        "{err:?}"
    );
}

#[test]
fn absent_length_is_derived_from_type_and_dims() {
    let dir = tempdir();
    write_data(dir.path(), "w.bin", 64);
    let init = Init::external("w", &[3, 5], &[("location", "w.bin")]).data_type(DataType::Uint4);
    let path = write_model(dir.path(), &[init]);
    let model = Model::open(&path).unwrap();
    // 15 four-bit values round up to 8 bytes.
    assert!(matches!(
        model.weights()[0].source(),
        WeightSource::External { length: 8, .. }
    ));
}

#[test]
fn dims_product_overflow() {
    let huge = ext(&[("location", "w.bin")])
        .into_iter()
        .map(|mut i| {
            i.dims = vec![1 << 32, 1 << 32, 16];
            i
        })
        .collect::<Vec<_>>();
    let err = open_err(&huge, &[("w.bin", 64)]);
    assert!(
        matches!(err, Error::Model(M::DimsOverflow { .. })),
        "{err:?}"
    );
    // Element count fits but the byte size does not.
    let mut bytes_overflow = huge;
    bytes_overflow[0].dims = vec![1 << 31, 1 << 31];
    let err = open_err(&bytes_overflow, &[("w.bin", 64)]);
    assert!(
        matches!(err, Error::Model(M::DimsOverflow { .. })),
        "{err:?}"
    );
}

#[test]
fn negative_dim() {
    let mut inits = ext(&[("location", "w.bin")]);
    inits[0].dims = vec![2, -4];
    let err = open_err(&inits, &[("w.bin", 64)]);
    assert!(
        matches!(err, Error::Model(M::NegativeDim { dim: -4, .. })),
        "{err:?}"
    );
}

#[test]
fn unsupported_element_type_is_named() {
    for (t, name) in [
        (DataType::String, "STRING"),
        (DataType::Complex64, "COMPLEX64"),
    ] {
        let inits = vec![Init::external("w", DIMS, &[("location", "w.bin")]).data_type(t)];
        let err = open_err(&inits, &[("w.bin", 64)]);
        assert!(
            matches!(&err, Error::Model(M::UnsupportedElementType { element_type, .. }) if element_type == name),
            "{err:?}"
        );
        assert!(err.to_string().contains(name));
    }
}

#[test]
fn checksum_forms() {
    let dir = tempdir();
    write_data(dir.path(), "w.bin", 64);
    let sha = format!("sha256:{}", "00".repeat(32));
    let inits = vec![
        Init::external("a", DIMS, &[("location", "w.bin"), ("checksum", &sha)]),
        Init::external(
            "b",
            DIMS,
            &[
                ("location", "w.bin"),
                ("offset", "32"),
                ("checksum", "da39a3ee"),
            ],
        ),
    ];
    let model = Model::open(write_model(dir.path(), &inits)).unwrap();
    assert_eq!(
        model.weights()[0].checksum(),
        Some(&Checksum::Sha256([0; 32]))
    );
    // An unprefixed value is the spec's whole-file SHA-1, never a tensor digest.
    let b = &model.weights()[1];
    assert!(matches!(b.checksum(), Some(Checksum::WholeFileSha1(v)) if v == "da39a3ee"));
    assert_eq!(b.checksum().unwrap().tensor_sha256(), None);
    assert!(!b.verify_checksum(&[0; 32]).unwrap(), "nothing to verify");

    let err = open_err(
        &ext(&[("location", "w.bin"), ("checksum", "sha256:abc")]),
        &[("w.bin", 64)],
    );
    assert!(
        matches!(err, Error::ExternalData(X::InvalidChecksum { .. })),
        "{err:?}"
    );
}

#[test]
fn data_location_must_agree_with_entries() {
    let mut inits = ext(&[("location", "w.bin")]);
    inits[0].data_location = Some(DataLocation::Default);
    let err = open_err(&inits, &[("w.bin", 64)]);
    assert!(
        matches!(err, Error::ExternalData(X::DataLocationMismatch { .. })),
        "{err:?}"
    );
    let mut inits = ext(&[]);
    inits[0].external = Some(vec![]);
    let err = open_err(&inits, &[]);
    assert!(
        matches!(err, Error::ExternalData(X::MissingLocation { .. })),
        "{err:?}"
    );
}

#[test]
fn embedded_size_must_match() {
    let err = open_err(&[Init::embedded("w", DIMS, vec![0; 31])], &[]);
    assert!(
        matches!(
            err,
            Error::Model(M::EmbeddedSizeMismatch {
                expected: 32,
                found: 31,
                ..
            })
        ),
        "{err:?}"
    );
}

#[test]
fn embedded_raw_data_is_served_without_a_file() {
    let dir = tempdir();
    let raw: Vec<u8> = (0..32).collect();
    let path = write_model(dir.path(), &[Init::embedded("w", DIMS, raw.clone())]);
    let model = Model::open(&path).unwrap();
    assert!(model.external_files().is_empty());
    let source = FileSource::open(&model).unwrap();
    assert_eq!(read_to_vec(&source, model.weights()[0].id()).unwrap(), raw);
    assert_eq!(source.counters().total(), 32);
}

#[test]
fn garbage_is_a_decode_error_and_a_missing_model_an_io_error() {
    let dir = tempdir();
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, [0xff; 64]).unwrap();
    let err = Error::from(Model::open(&path).unwrap_err());
    assert!(matches!(err, Error::Model(M::Decode { .. })), "{err:?}");
    let err = Error::from(Model::open(dir.path().join("absent.onnx")).unwrap_err());
    assert!(matches!(err, Error::Model(M::Io { .. })), "{err:?}");
}

#[test]
fn duplicate_initializer_names() {
    let inits = vec![
        Init::embedded("w", DIMS, vec![0; 32]),
        Init::embedded("w", DIMS, vec![0; 32]),
    ];
    let err = open_err(&inits, &[]);
    assert!(
        matches!(err, Error::Model(M::DuplicateInitializer { .. })),
        "{err:?}"
    );
}
