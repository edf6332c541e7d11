//! The prepared cache's integrity check: XXH3-128 (what a read-packed task
//! runs over every payload byte) against SHA-256 (what a source read runs
//! under `ChecksumPolicy::Strict`), per 16 MiB; and opening tiny-llm's
//! complete cache (companion model parse + lookup of every object) against
//! resolving and planning without one.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use onnx_prepared::cache::{PreparedCache, PreparedModelPolicy};
use onnx_prepared::model::{Model, ResolveOptions, ResolvedModel};
use onnx_prepared::plan::PreparedExecutionPlan;
use onnx_prepared::{RuntimeSession, SessionOptions};
use sha2::Digest;

fn checksums(c: &mut Criterion) {
    let bytes: Vec<u8> = (0..16usize << 20).map(|i| (i * 31 % 251) as u8).collect();
    let mut group = c.benchmark_group("checksum/16MiB");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.sample_size(20);
    group.bench_function("xxh3_128", |b| {
        b.iter(|| black_box(xxhash_rust::xxh3::xxh3_128(black_box(&bytes))))
    });
    group.bench_function("sha256", |b| {
        b.iter(|| black_box(sha2::Sha256::digest(black_box(&bytes))))
    });
    group.finish();
}

fn plan_with_cache(c: &mut Criterion) {
    let dir = onnx_prepared_fixtures::default_dir();
    onnx_prepared_fixtures::ensure_all(&dir).expect("fixtures");
    let path = dir.join("tiny-llm.onnx");
    let cache = tempfile::tempdir().expect("tempdir");
    {
        let session = RuntimeSession::open(
            &path,
            SessionOptions::default()
                .with_cache_dir(cache.path().to_owned())
                .with_cache_policy(PreparedModelPolicy::BuildIfMissing),
        )
        .expect("opens");
        session.prepare().expect("prepares");
        session.flush_cache();
    }
    let options = ResolveOptions::default();
    let mut group = c.benchmark_group("tiny-llm/plan");
    group.sample_size(20);
    group.bench_function("no_cache", |b| {
        b.iter(|| {
            let model = Model::open(&path).expect("opens");
            let resolved = ResolvedModel::resolve(model, &options).expect("resolves");
            black_box(PreparedExecutionPlan::build(resolved).expect("plans"))
        })
    });
    group.bench_function("complete_cache", |b| {
        b.iter(|| {
            let model = Model::open(&path).expect("opens");
            let store = PreparedCache::open(
                cache.path(),
                PreparedModelPolicy::RequireComplete,
                &model,
                options.cpu,
            )
            .expect("cache");
            let resolved = ResolvedModel::resolve(model, &options).expect("resolves");
            black_box(PreparedExecutionPlan::build_cached(resolved, store).expect("plans"))
        })
    });
    group.finish();
}

criterion_group!(benches, checksums, plan_with_cache);
criterion_main!(benches);
