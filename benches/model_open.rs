//! tiny-llm: opening metadata-only against opening and reading every payload
//! (what a loader that materializes weights at open pays before the first
//! inference can start), and reading every payload and checking its declared
//! SHA-256 (the cost of `ChecksumPolicy::Strict`). Setup (fixture
//! generation) is outside the loop.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use onnx_prepared::model::{FileSource, Model, PayloadSource};

fn open(c: &mut Criterion) {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let path = dir.join("tiny-llm.onnx");
    let mut group = c.benchmark_group("tiny-llm/open");
    group.sample_size(20);
    group.bench_function("metadata_only", |b| {
        b.iter(|| black_box(Model::open(&path).expect("opens")))
    });
    group.bench_function("read_all_payloads", |b| {
        let mut buf = Vec::new();
        b.iter(|| {
            let model = Model::open(&path).expect("opens");
            let source = FileSource::open(&model).expect("source");
            for w in model.weights() {
                buf.resize(w.byte_len() as usize, 0);
                source.read(w.id(), &mut buf).expect("reads");
            }
            black_box(source.counters().total())
        })
    });
    group.bench_function("read_and_verify_all_payloads", |b| {
        let mut buf = Vec::new();
        b.iter(|| {
            let model = Model::open(&path).expect("opens");
            let source = FileSource::open(&model).expect("source");
            for w in model.weights() {
                buf.resize(w.byte_len() as usize, 0);
                source.read(w.id(), &mut buf).expect("reads");
                w.verify_checksum(&buf).expect("intact");
            }
            black_box(source.counters().total())
        })
    });
    group.finish();
}

criterion_group!(benches, open);
criterion_main!(benches);
