//! A large 4-bit weight is packed from pieces of its sources, read from the
//! data file or copied out of a mapping: the session never holds a source
//! whole, each weight is read once, the outputs are bit-identical to a
//! session that packs whole sources, and a piece whose bytes do not match
//! the declared digest fails the weight with a typed error naming it.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use onnx_prepared::arena::Domain;
use onnx_prepared::model::{
    ChecksumPolicy, FileSource, Model, PayloadError, PayloadSource, ReadCounters, ResolveOptions,
    ResolvedModel, WeightDescriptor, WeightId, WeightSource,
};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::{RuntimeSession, SessionOptions};

/// tiny-llm's LM head: 8192 rows of 4-bit weights, the largest packed
/// weight, several pieces long.
const HEAD: &str = "lm_head.weight";
const HEAD_SCALES: &str = "lm_head.scales";

fn open(model: &Path, map_weights: bool, checksums: ChecksumPolicy) -> RuntimeSession {
    RuntimeSession::open(
        model,
        SessionOptions::default()
            .with_cpu_workers(2)
            .with_io_workers(1)
            .with_map_weights(map_weights)
            .with_checksums(checksums),
    )
    .unwrap()
}

fn byte_len(model: &Path, name: &str) -> u64 {
    Model::open(model)
        .unwrap()
        .weight_by_name(name)
        .unwrap()
        .byte_len()
}

/// A source that reads whole weights only (as one that cannot seek would):
/// every packing takes its sources whole, the reference for pieces.
#[derive(Debug)]
struct WholeReads(FileSource);

impl PayloadSource for WholeReads {
    fn descriptor(&self, id: WeightId) -> Option<&WeightDescriptor> {
        self.0.descriptor(id)
    }

    fn read(&self, id: WeightId, buf: &mut [u8]) -> Result<(), PayloadError> {
        self.0.read(id, buf)
    }

    fn counters(&self) -> &ReadCounters {
        self.0.counters()
    }
}

fn whole(model: &Path) -> RuntimeSession {
    let m = Model::open(model).unwrap();
    let source = Arc::new(WholeReads(FileSource::open(&m).unwrap()));
    let plan = PreparedExecutionPlan::build(
        ResolvedModel::resolve(m, &ResolveOptions::default()).unwrap(),
    )
    .unwrap();
    let options = SessionOptions::default()
        .with_cpu_workers(2)
        .with_io_workers(1);
    RuntimeSession::with_source(plan, source, options).unwrap()
}

#[test]
fn a_large_weight_packed_from_pieces_matches_a_whole_packing_and_is_never_held_whole() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let whole = whole(&model);
    let read = open(&model, false, ChecksumPolicy::Strict);
    let mapped = open(&model, true, ChecksumPolicy::Strict);
    for session in [&whole, &read, &mapped] {
        session.prepare().unwrap();
    }
    // The head's sources are 2.6 MB: packing whole sources held them;
    // packing from pieces, read or copied out of the mapping, held no
    // source whole.
    let head = byte_len(&model, HEAD) + byte_len(&model, HEAD_SCALES);
    let peak = |s: &RuntimeSession| s.memory().domain(Domain::Preparation).peak as u64;
    assert!(peak(&whole) >= head, "whole sources: peak {}", peak(&whole));
    for (name, s) in [("read", &read), ("mapped", &mapped)] {
        assert!(
            peak(s) > 0 && peak(s) < head,
            "{name}: peak {} vs {head}",
            peak(s)
        );
        // Every weight was read once while loading: nothing read twice.
        assert_eq!(s.preparation_stats().source_bytes_reread, 0, "{name}");
    }
    let want = support::f32_bits(&support::run_tiny_llm(&whole));
    assert_eq!(support::f32_bits(&support::run_tiny_llm(&read)), want);
    assert_eq!(support::f32_bits(&support::run_tiny_llm(&mapped)), want);
}

/// The data file the LM head's weight lies in, its offset there and its
/// length (it declares a `sha256:` digest).
fn head_in_file(model: &Path) -> (std::path::PathBuf, u64, u64) {
    let m = Model::open(model).unwrap();
    let w = m.weight_by_name(HEAD).unwrap();
    assert!(w.checksum().and_then(|c| c.tensor_sha256()).is_some());
    let WeightSource::External { file, offset, .. } = w.source() else {
        panic!("{HEAD} is external");
    };
    let data = m.external_files()[file.index()].path().to_path_buf();
    (data, *offset, w.byte_len())
}

#[test]
fn a_piece_that_does_not_match_its_digest_fails_the_weight() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let (data, offset, len) = head_in_file(&model);
    // A byte in the head's last piece: the packing has packed the others.
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[(offset + len - 3) as usize] ^= 0x21;
    std::fs::write(&data, bytes).unwrap();

    let strict = open(&model, false, ChecksumPolicy::Strict);
    let err = strict.prepare().unwrap_err().error.to_string();
    assert!(
        err.contains(&format!("tensor `{HEAD}`"))
            && err.contains("does not match the declared checksum"),
        "{err}"
    );
    // Nothing of the failed weight stays: a run fails the same way.
    let mut ctx = onnx_prepared::RuntimeContext::new(&strict);
    for (name, t) in support::tiny_llm_prefill(8) {
        ctx = ctx.with_input(&name, t).unwrap();
    }
    assert!(strict.run(ctx).is_err());

    // With checksums off the same bytes load and run.
    let off = open(&model, false, ChecksumPolicy::Off);
    off.prepare().unwrap();
    assert!(!support::run_tiny_llm(&off).is_empty());
}

#[test]
fn a_data_file_cut_under_a_packing_is_a_short_read_naming_the_weight() {
    let dir = support::tempdir();
    let model = support::tiny_llm_in(dir.path());
    let (data, offset, len) = head_in_file(&model);
    // Cut inside the head's last quarter: its first pieces read and pack,
    // a later one comes up short.
    let cut = offset + len * 3 / 4 + 5;
    // The session opens before the cut (opening checks the file's size).
    let session = open(&model, false, ChecksumPolicy::Off);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(cut)
        .unwrap();
    // The first read after the cut fails as a typed error naming its
    // tensor: the file changed since it was opened (any weight's whole
    // read checks), or a piece past the cut (of the head, or of its
    // scales, which lie after it in the file) comes up short.
    let err = session.prepare().unwrap_err().error.to_string();
    let named = [HEAD, HEAD_SCALES]
        .iter()
        .any(|w| err.contains(&format!("tensor `{w}`")));
    let changed = err.contains("changed since it was verified") && err.contains("tensor `");
    assert!(changed || (named && err.contains("truncated")), "{err}");
}
