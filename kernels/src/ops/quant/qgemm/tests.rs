//! The integer product's kernels against the scalar models of their
//! arithmetic, on every family this CPU runs, with ragged shapes, every
//! sign combination, zero points per row and column, and values that
//! saturate `vpmaddubsw` pairs.

use super::sink::{I32Sink, Shared};
use super::*;
use crate::ParallelFor;

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }
}

/// Runs tasks in reverse on the caller, claiming 3 threads.
struct Reversed;

// SAFETY: every index of `0..tasks` exactly once, on the calling thread,
// all before `run` returns.
unsafe impl ParallelFor for Reversed {
    fn threads(&self) -> usize {
        3
    }
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).rev().for_each(task);
    }
}

fn families() -> Vec<QIsa> {
    let mut f = vec![QIsa::Portable];
    if crate::CpuFeatures::detect().avx2 {
        f.push(QIsa::Avx2);
    }
    if crate::CpuFeatures::detect().avx512vnni {
        f.push(QIsa::Avx512Vnni);
    }
    if crate::CpuFeatures::detect().amx_int8 {
        f.push(QIsa::Amx);
    }
    f
}

fn value(b: u8, signed: bool) -> i32 {
    if signed { b as i8 as i32 } else { b as i32 }
}

#[allow(clippy::too_many_arguments)]
fn check(
    rng: &mut Rng,
    m: usize,
    k: usize,
    n: usize,
    a_signed: bool,
    b_signed: bool,
    per_row: bool,
    per_col: bool,
    extreme: bool,
) {
    let mut bytes = |len: usize| -> Vec<u8> {
        (0..len)
            .map(|_| {
                let v = rng.byte();
                // Extreme values make most vpmaddubsw pairs saturate.
                if extreme {
                    if v & 1 == 0 { 0xFF } else { 0x81 }
                } else {
                    v
                }
            })
            .collect()
    };
    let a = bytes(m * k);
    let b = bytes(k * n);
    let za: Vec<i32> = bytes(if per_row { m } else { 1 })
        .iter()
        .map(|&v| value(v, a_signed))
        .collect();
    let zb: Vec<i32> = bytes(if per_col { n } else { 1 })
        .iter()
        .map(|&v| value(v, b_signed))
        .collect();
    let ai: Vec<i32> = a.iter().map(|&v| value(v, a_signed)).collect();
    let bi: Vec<i32> = b.iter().map(|&v| value(v, b_signed)).collect();
    for isa in families() {
        let arith = isa.arith(a_signed, b_signed);
        let want = reference::qgemm(arith, &ai, a_signed, &bi, m, k, n, &za, &zb);
        let qb = QMatrix {
            data: &b,
            signed: b_signed,
            k,
            n,
            row_stride: n,
            col_stride: 1,
            taps: 1,
        };
        let (meta, data) = pack_b(&qb, &zb, isa, arith, &Reversed);
        let packed = PackedB::view(&meta, &data).expect("a packed B");
        let zero = if per_row {
            ZeroA::PerRow(&za)
        } else {
            ZeroA::Scalar(za[0])
        };
        let aop = AOperand {
            data: &a,
            signed: a_signed,
            m,
            lda: k,
            zero,
        };
        for par in [&crate::Sequential as &dyn ParallelFor, &Reversed] {
            let mut got = vec![0i32; m * n];
            run(&aop, &packed, &I32Sink(Shared::new(&mut got, n, 1)), par);
            assert_eq!(
                got, want,
                "{isa:?} {arith:?} m={m} k={k} n={n} signs=({a_signed},{b_signed}) \
                 per_row={per_row} per_col={per_col} extreme={extreme}"
            );
        }
    }
}

#[test]
fn every_family_equals_the_model_of_its_arithmetic() {
    let mut rng = Rng(7);
    for &(m, k, n) in &[
        (1, 1, 1),
        (3, 5, 17),
        (4, 8, 16),
        (9, 33, 31),
        (130, 70, 40),
        // The AMX blocks: whole 32- and 16-row blocks read in place (k a
        // multiple of 64), partial ones copied, odd panel counts, several
        // tile steps.
        (32, 64, 32),
        (48, 128, 48),
        (16, 192, 16),
        (33, 64, 50),
        (70, 320, 65),
        // The VNNI family's panel groups: whole groups, groups and single
        // panels after them, an odd number of quads.
        (5, 12, 64),
        (7, 36, 200),
    ] {
        for a_signed in [false, true] {
            for b_signed in [false, true] {
                for (per_row, per_col) in [(false, false), (true, true), (false, true)] {
                    check(
                        &mut rng, m, k, n, a_signed, b_signed, per_row, per_col, false,
                    );
                }
            }
        }
    }
}

#[test]
fn saturating_pairs_follow_the_model_and_exact_sums_do_not_saturate() {
    let mut rng = Rng(11);
    check(&mut rng, 7, 37, 19, false, true, false, true, true);
    // The models differ on such values: the test above is not vacuous.
    let a = vec![255i32; 4];
    let b = vec![127i32; 4];
    let sat = reference::qgemm(Arith::SatPairs, &a, false, &b, 1, 4, 1, &[0], &[0]);
    let exact = reference::qgemm(Arith::Exact, &a, false, &b, 1, 4, 1, &[0], &[0]);
    assert_eq!(exact, vec![255 * 127 * 4]);
    assert_eq!(sat, vec![32767 * 2]);
}

#[test]
fn a_transposed_b_reads_by_strides() {
    let mut rng = Rng(3);
    let (m, k, n) = (5, 13, 21);
    let a: Vec<u8> = (0..m * k).map(|_| rng.byte()).collect();
    let bt: Vec<u8> = (0..n * k).map(|_| rng.byte()).collect();
    let b: Vec<u8> = (0..k * n).map(|i| bt[(i % n) * k + i / n]).collect();
    for isa in families() {
        let run_with = |data: &[u8], rs: usize, cs: usize| {
            let qb = QMatrix {
                data,
                signed: true,
                k,
                n,
                row_stride: rs,
                col_stride: cs,
                taps: 1,
            };
            let (meta, data) = pack_b(&qb, &[3], isa, isa.arith(false, true), &Reversed);
            let packed = PackedB::view(&meta, &data).expect("a packed B");
            let aop = AOperand {
                data: &a,
                signed: false,
                m,
                lda: k,
                zero: ZeroA::Scalar(9),
            };
            let mut got = vec![0i32; m * n];
            run(
                &aop,
                &packed,
                &I32Sink(Shared::new(&mut got, n, 1)),
                &crate::Sequential,
            );
            got
        };
        assert_eq!(run_with(&b, n, 1), run_with(&bt, 1, k));
    }
}
