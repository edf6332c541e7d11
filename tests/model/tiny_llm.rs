//! tiny-llm opened metadata-only: no payload byte read at open, descriptors
//! that match the configuration arithmetic, payloads that match their digests.

use std::path::{Path, PathBuf};

use onnx_prepared::Error;
use onnx_prepared::model::{
    FileSource, MmapSource, Model, PayloadError, PayloadSource, WeightSource, read_to_vec,
};
use onnx_prepared_fixtures::{TinyLlmConfig, WriteMode, tiny_llm, write_fixture};

/// Writes the default tiny-llm into a fresh folder.
fn tiny_llm_in(dir: &Path) -> PathBuf {
    let fixture = tiny_llm(&TinyLlmConfig::default()).expect("generates");
    write_fixture(dir, &fixture, WriteMode::Verify).expect("writes")[0].clone()
}

/// Descriptors as comparable tuples (name, type, dims, len, offset, checksum).
fn summary(model: &Model) -> Vec<String> {
    model
        .weights()
        .iter()
        .map(|w| {
            let at = match w.source() {
                WeightSource::External { offset, .. } => *offset as i64,
                WeightSource::Embedded { .. } => -1,
            };
            format!(
                "{} {} {:?} {} {} {:?}",
                w.name(),
                w.element_type(),
                w.dims(),
                w.byte_len(),
                at,
                w.checksum()
            )
        })
        .collect()
}

#[test]
fn open_reads_no_payload_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = tiny_llm_in(dir.path());
    let real = Model::open(&path).unwrap();
    let source = FileSource::open(&real).unwrap();
    assert_eq!(source.counters().total(), 0, "opening read payload bytes");

    // Replace the data file by a sparse file of the same size: all zeros.
    // Open sees exactly the same weights (digests included), which it could
    // not if it read or hashed any payload.
    let data = dir.path().join("tiny-llm.data");
    let size = std::fs::metadata(&data).unwrap().len();
    std::fs::remove_file(&data).unwrap();
    std::fs::File::create(&data).unwrap().set_len(size).unwrap();
    let hollow = Model::open(&path).expect("opens without looking at payloads");
    assert_eq!(summary(&hollow), summary(&real));

    // The digests are checked when a payload is read, not before.
    let source = FileSource::open(&hollow).unwrap();
    let w = hollow.weight_by_name("layer0.qkv.weight").unwrap();
    let bytes = read_to_vec(&source, w.id()).unwrap();
    assert_eq!(source.counters().bytes_read(w.id()), w.byte_len());
    assert!(matches!(
        w.verify_checksum(&bytes),
        Err(PayloadError::ChecksumMismatch { .. })
    ));
}

/// Bytes of one `MatMulNBits` weight (4-bit B plus f32 scales) for K×N.
fn nbits_bytes(k: u64, n: u64, group: u64) -> u64 {
    n * (k / group) * (group / 2) + n * (k / group) * 4
}

#[test]
fn weights_match_the_configuration_arithmetic() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = TinyLlmConfig::default();
    let model = Model::open(tiny_llm_in(dir.path())).unwrap();
    let (h, i, v, b, g) = (
        cfg.hidden as u64,
        cfg.intermediate as u64,
        cfg.vocab as u64,
        cfg.blocks as u64,
        cfg.group_size as u64,
    );
    // Per block: two RMS norm scales and four MatMulNBits (B + scales each):
    // qkv h→3h, attention out h→h, gate_up h→2i, down i→h.
    let per_block_weights = 2 + 4 * 2;
    let per_block_bytes = 2 * h * 4
        + nbits_bytes(h, 3 * h, g)
        + nbits_bytes(h, h, g)
        + nbits_bytes(h, 2 * i, g)
        + nbits_bytes(i, h, g);
    // Plus the f16 embedding, the final norm and the LM head (B + scales).
    let external_weights = b * per_block_weights + 4;
    let external_bytes = b * per_block_bytes + v * h * 2 + h * 4 + nbits_bytes(h, v, g);

    let external: Vec<_> = model.weights().iter().filter(|w| w.is_external()).collect();
    assert_eq!(external.len() as u64, external_weights);
    assert_eq!(
        external.iter().map(|w| w.byte_len()).sum::<u64>(),
        external_bytes
    );
    assert_eq!(external_bytes, 21_514_240, "the design's 4-block model");
    // One data file, every tensor 64-byte aligned, every one with a digest.
    assert_eq!(model.external_files().len(), 1);
    for w in &external {
        let WeightSource::External { offset, .. } = w.source() else {
            unreachable!()
        };
        assert_eq!(offset % 64, 0, "{}", w.name());
        assert!(w.checksum().and_then(|c| c.tensor_sha256()).is_some());
    }
    // What is embedded is small: shape constants and the attention scale.
    let embedded: u64 = model
        .weights()
        .iter()
        .filter(|w| !w.is_external())
        .map(|w| w.byte_len())
        .sum();
    assert!(embedded < 1024, "{embedded} embedded bytes");
    // The graph keeps its nodes; its initializers moved into the descriptors.
    assert!(model.graph().initializer.is_empty());
    assert_eq!(model.opset_version("ai.onnx"), Some(23));
    assert_eq!(model.opset_version("com.microsoft"), Some(1));
}

fn read_all_and_verify(model: &Model, source: &dyn PayloadSource) {
    for w in model.weights() {
        let bytes = read_to_vec(source, w.id()).unwrap();
        assert_eq!(
            w.verify_checksum(&bytes).unwrap(),
            w.is_external(),
            "{}",
            w.name()
        );
        assert_eq!(source.counters().bytes_read(w.id()), w.byte_len());
    }
    let total: u64 = model.weights().iter().map(|w| w.byte_len()).sum();
    assert_eq!(source.counters().total(), total);
}

#[test]
fn file_and_mmap_sources_deliver_the_checksummed_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::open(tiny_llm_in(dir.path())).unwrap();
    read_all_and_verify(&model, &FileSource::open(&model).unwrap());
    read_all_and_verify(&model, &MmapSource::open(&model).unwrap());
}

#[test]
fn file_truncated_after_open_is_a_short_read_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::open(tiny_llm_in(dir.path())).unwrap();
    let source = FileSource::open(&model).unwrap();
    let data = dir.path().join("tiny-llm.data");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let last = model.weight_by_name("lm_head.scales").unwrap();
    let err = read_to_vec(&source, last.id()).unwrap_err();
    assert!(
        matches!(&err, PayloadError::ShortRead { tensor, read: 0, .. } if tensor == "lm_head.scales"),
        "{err:?}"
    );
    // A weight that starts inside what remains gets those bytes, then fails.
    let first = model.weight_by_name("embed.weight").unwrap();
    let mut buf = vec![0u8; first.byte_len() as usize];
    let err = source.read(first.id(), &mut buf).unwrap_err();
    assert!(
        matches!(err, PayloadError::ShortRead { read: 1048576, .. }),
        "{err:?}"
    );

    // Reopening the model sees the short file at open.
    let err = Error::from(Model::open(dir.path().join("tiny-llm.onnx")).unwrap_err());
    assert!(matches!(err, Error::ExternalData(_)), "{err:?}");
}

#[test]
fn buffer_size_and_unknown_ids_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let model = Model::open(tiny_llm_in(dir.path())).unwrap();
    let source = FileSource::open(&model).unwrap();
    let w = model.weight_by_name("final_norm.weight").unwrap();
    let mut small = vec![0u8; 10];
    assert!(matches!(
        source.read(w.id(), &mut small),
        Err(PayloadError::BufferSize {
            expected: 2048,
            buffer: 10,
            ..
        })
    ));
    let bogus = onnx_prepared::model::WeightId(10_000);
    assert!(matches!(
        read_to_vec(&source, bogus),
        Err(PayloadError::UnknownWeight { id: 10_000 })
    ));
    assert_eq!(source.counters().total(), 0);
}
