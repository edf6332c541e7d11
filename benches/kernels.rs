//! Kernel benchmarks (filled in with the matrix-product kernels).

use criterion::{Criterion, criterion_group, criterion_main};

fn kernels(_c: &mut Criterion) {}

criterion_group!(benches, kernels);
criterion_main!(benches);
