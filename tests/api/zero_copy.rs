//! Source tensors used in place from read-only mappings: a session under
//! `map_weights` maps the external data and uses aligned weights without a
//! read buffer, copy or decode, and computes bit-identical outputs.

use crate::support;

use onnx_prepared::cache::PreparedModelPolicy;
use onnx_prepared::model::{MmapSource, PayloadSource};
use onnx_prepared::{ElementType, Model, RuntimeSession, SessionOptions, Tensor};

fn options(map_weights: bool) -> SessionOptions {
    SessionOptions::default()
        .with_cpu_workers(1)
        .with_io_workers(1)
        .with_map_weights(map_weights)
        // Read weights hold the embedding too (it is compared with the
        // mapped one below).
        .with_resident_tables(true)
}

/// Bits of every output, so that equality is bit-for-bit (NaN included).
fn bits(outputs: &[(String, Tensor)]) -> Vec<(String, Vec<u32>)> {
    outputs
        .iter()
        .map(|(n, t)| {
            let v = t.as_f32().expect("f32 outputs");
            (n.clone(), v.iter().map(|x| x.to_bits()).collect())
        })
        .collect()
}

/// How many of `held` view the same bytes as another of them (one
/// mapping): 0 when every source has its own buffer.
fn sharing(held: &[(String, Tensor)]) -> usize {
    held.iter()
        .enumerate()
        .filter(|&(i, (_, t))| {
            held.iter()
                .enumerate()
                .any(|(j, (_, u))| i != j && t.shares_bytes_with(u))
        })
        .count()
}

/// The source tensors the session holds, by weight name.
fn sources(session: &RuntimeSession) -> Vec<(String, Tensor)> {
    let store = session.internals().store();
    let resolved = session.plan().resolved();
    let requirements = resolved.requirements();
    let weights = resolved.model().weights();
    (0..store.len())
        .filter_map(|r| {
            let pin = store.pin(r)?;
            let t = pin.object.as_source()?.clone();
            let w = requirements[r].sources[0];
            Some((weights[w.index()].name().to_owned(), t))
        })
        .collect()
}

#[test]
fn mapped_weights_are_used_in_place_with_identical_outputs() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());

    let owned = RuntimeSession::open(&model, options(false)).unwrap();
    owned.prepare().unwrap();
    let reference = support::run_tiny_llm(&owned);
    // Read, every source has its own buffer.
    assert_eq!(sharing(&sources(&owned)), 0);

    let mapped = RuntimeSession::open(&model, options(true)).unwrap();
    mapped.prepare().unwrap();
    let outputs = support::run_tiny_llm(&mapped);
    assert_eq!(bits(&outputs), bits(&reference));
    assert_eq!(outputs, reference);
    // A second (hot) run agrees too.
    assert_eq!(bits(&support::run_tiny_llm(&mapped)), bits(&reference));

    // The embedding (f16, external, aligned) is used in place, and equals
    // the decoded one element for element.
    let held = sources(&mapped);
    let embed = held
        .iter()
        .find(|(n, _)| n == "embed.weight")
        .map(|(_, t)| t)
        .expect("the embedding is a source object");
    assert!(
        held.iter()
            .any(|(n, t)| n != "embed.weight" && embed.shares_bytes_with(t)),
        "the embedding lies in the mapping, with the other weights used in place"
    );
    assert_eq!(embed.dtype(), ElementType::F16);
    let owned_sources = sources(&owned);
    let decoded = owned_sources
        .iter()
        .find(|(n, _)| n == "embed.weight")
        .map(|(_, t)| t)
        .unwrap();
    assert!(
        !owned_sources
            .iter()
            .any(|(n, t)| n != "embed.weight" && decoded.shares_bytes_with(t))
    );
    assert_eq!(embed, decoded);

    // Bytes used in place still count as read, and no more than a copy.
    let (a, b) = (mapped.preparation_stats(), owned.preparation_stats());
    assert!(a.source_bytes_read > 0);
    assert_eq!(a.source_bytes_read, b.source_bytes_read);
}

/// Dropping a weight's mapped pages (after a copy or a check) never
/// changes what a view of them or a later read sees: the pages fault back
/// in from the file.
#[test]
fn released_pages_read_the_same_bytes_again() {
    use onnx_prepared::model::PayloadSource;
    let dir = support::tempdir();
    let model = Model::open(support::tiny_llm_in(dir.path())).unwrap();
    let source = MmapSource::open(&model).unwrap();
    let on_disk = std::fs::read(dir.path().join("tiny-llm.data")).expect("the data file");
    for weight in model.weights().iter().filter(|w| w.is_external()) {
        let (bytes, offset) = source.shared(weight.id()).expect("mapped");
        let len = weight.byte_len() as usize;
        let view = Tensor::shared(vec![len], ElementType::U8, bytes.clone(), offset).unwrap();
        let before = view.as_u8().unwrap().to_vec();
        let mut copy = vec![0; len];
        source.read(weight.id(), &mut copy).unwrap(); // releases the pages
        source.release(weight.id());
        assert_eq!(view.as_u8().unwrap(), &before[..], "{}", weight.name());
        assert_eq!(copy, before, "{}", weight.name());
        if let onnx_prepared::model::WeightSource::External { offset, .. } = weight.source() {
            let at = *offset as usize;
            assert_eq!(&on_disk[at..at + len], &before[..], "{}", weight.name());
        }
    }
}

#[test]
fn unsuitable_bytes_fall_back_to_a_decoded_copy() {
    let dir = support::tempdir();
    let model = Model::open(support::tiny_llm_in(dir.path())).unwrap();
    let source = MmapSource::open(&model).unwrap();
    let embed = model
        .weights()
        .iter()
        .find(|w| w.name() == "embed.weight")
        .unwrap();
    let (bytes, offset) = source
        .shared(embed.id())
        .expect("an external weight is mapped");
    let dims: Vec<usize> = embed.dims().iter().map(|&d| d as usize).collect();
    assert!(Tensor::shared(dims.clone(), ElementType::F16, bytes.clone(), offset).is_some());
    // One byte off: misaligned for f16, so the session reads and decodes.
    assert!(Tensor::shared(dims.clone(), ElementType::F16, bytes.clone(), offset + 1).is_none());
    // Bool and 4-bit weights are never used in place.
    assert!(Tensor::shared(dims.clone(), ElementType::Bool, bytes.clone(), offset).is_none());
    assert!(Tensor::shared(dims, ElementType::I4, bytes, offset).is_none());
    // Embedded (small) weights are not offered in place.
    let embedded = model
        .weights()
        .iter()
        .find(|w| w.name() == "attn.scale")
        .unwrap();
    assert!(source.shared(embedded.id()).is_none());
}

#[test]
fn a_cached_session_uses_its_source_tensors_in_place() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let cache = dir.path().join("cache");
    let cached = |policy| {
        options(false)
            .with_cache_dir(cache.clone())
            .with_cache_policy(policy)
    };
    let first = RuntimeSession::open(&model, cached(PreparedModelPolicy::BuildIfMissing)).unwrap();
    let reference = support::run_tiny_llm(&first);
    first.flush_cache();
    drop(first);

    let second =
        RuntimeSession::open(&model, cached(PreparedModelPolicy::RequireComplete)).unwrap();
    assert_eq!(bits(&support::run_tiny_llm(&second)), bits(&reference));
    let held = sources(&second);
    assert!(!held.is_empty());
    // Every source tensor lies in a mapped payload (tiny-llm has no bool or
    // 4-bit source), and bytes_in_place counts them with the packed parts.
    assert!(
        held.iter()
            .all(|(n, t)| t.is_shared() || panic!("{n} was copied"))
    );
    let store = second.internals().store();
    let packed: u64 = (0..store.len())
        .filter_map(|r| store.pin(r))
        .filter_map(|pin| pin.object.as_packed().map(|p| p.byte_len() as u64))
        .sum();
    let tensors: u64 = held.iter().map(|(_, t)| t.byte_len() as u64).sum();
    let stats = second.preparation_stats();
    assert_eq!(stats.cache.bytes_in_place, packed + tensors);
}

#[test]
fn mapped_weights_are_checked_against_their_digest() {
    use onnx_prepared::model::WeightSource;
    use onnx_prepared::{ChecksumPolicy, Error};
    use onnx_prepared_fixtures::{GEMM_CHAIN, WriteMode, gemm_fixtures, write_fixture};
    // gemm-chain: every external weight declares a `sha256:` digest.
    let dir = support::tempdir();
    let fixture = gemm_fixtures()
        .into_iter()
        .find(|f| f.name == GEMM_CHAIN)
        .unwrap();
    let path = write_fixture(dir.path(), &fixture, WriteMode::Verify).unwrap()[0].clone();
    let model = Model::open(&path).unwrap();
    let w = model.weight_by_name("chain1.weight").unwrap();
    let WeightSource::External { file, offset, .. } = w.source() else {
        panic!("chain1.weight is external");
    };
    let data = model.external_files()[file.index()].path().to_path_buf();
    let intact = || {
        let s = RuntimeSession::open(&path, options(true)).unwrap();
        s.prepare().unwrap();
        s
    };
    let s = intact();
    assert!(
        sources(&s).iter().any(|(_, t)| t.is_shared()),
        "gemm-chain has a source used in place"
    );
    drop(s);
    // One flipped byte (the file keeps its size): the mapped weight fails
    // its digest like a read one, naming the tensor.
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[*offset as usize + 5] ^= 0x40;
    std::fs::write(&data, bytes).unwrap();
    let failed = RuntimeSession::open(&path, options(true))
        .unwrap()
        .prepare()
        .unwrap_err();
    let (task, why) = failed.diagnostics.failed_task.clone().unwrap();
    assert!(task.contains("chain1.weight"), "{task}");
    assert!(
        why.contains("does not match the declared checksum"),
        "{why}"
    );
    // Under ChecksumPolicy::Off the mapped bytes are used unchecked.
    let off = options(true).with_checksums(ChecksumPolicy::Off);
    let r: Result<(), Error> = RuntimeSession::open(&path, off)
        .unwrap()
        .prepare()
        .map_err(|e| e.error);
    r.unwrap();
}

#[test]
fn a_session_decodes_what_it_cannot_use_in_place() {
    use onnx_prepared::model::proto::tensor_proto::DataType;
    use onnx_prepared::model::proto::{Message, ModelProto, TypeProto, ValueInfoProto, type_proto};
    use support::{Init, model_bytes, write_data};
    let dir = support::tempdir();
    write_data(dir.path(), "w.bin", 256);
    // f32 at offset 2 (misaligned), bool, and f32 at an aligned offset,
    // each the input of an Identity whose output is a graph output.
    let inits = [
        Init::external(
            "odd",
            &[8],
            &[("location", "w.bin"), ("offset", "2"), ("length", "32")],
        ),
        Init::external(
            "flags",
            &[8],
            &[("location", "w.bin"), ("offset", "64"), ("length", "8")],
        )
        .data_type(DataType::Bool),
        Init::external(
            "even",
            &[8],
            &[("location", "w.bin"), ("offset", "128"), ("length", "32")],
        ),
        Init::external(
            "even2",
            &[8],
            &[("location", "w.bin"), ("offset", "192"), ("length", "32")],
        ),
    ];
    let mut model = ModelProto::decode(&model_bytes(&inits)[..]).unwrap();
    let graph = model.graph.as_mut().unwrap();
    graph.output = inits
        .iter()
        .map(|i| ValueInfoProto {
            name: Some(format!("{}.out", i.name)),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(i.data_type),
                    shape: None,
                })),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let held = |map_weights| {
        let s = RuntimeSession::open(&path, options(map_weights)).unwrap();
        s.prepare().unwrap();
        let mut v = sources(&s);
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let (mapped, owned) = (held(true), held(false));
    // In the mapping: the two aligned f32 weights; the misaligned one is
    // read into a buffer of its own, the bool one decoded.
    let in_mapping: Vec<(&str, bool)> = mapped
        .iter()
        .map(|(n, t)| {
            let with_other = mapped.iter().any(|(m, u)| m != n && t.shares_bytes_with(u));
            (n.as_str(), with_other)
        })
        .collect();
    assert_eq!(
        in_mapping,
        [
            ("even", true),
            ("even2", true),
            ("flags", false),
            ("odd", false)
        ]
    );
    assert!(!mapped[2].1.is_shared(), "bool values are decoded");
    assert_eq!(sharing(&owned), 0);
    assert_eq!(mapped, owned, "the same values either way");
}
