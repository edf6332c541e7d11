//! The int8-activation kernels against each other (bit for bit), against
//! an independent scalar model of the same scheme, and against the exact
//! f32 product.

use super::*;
use crate::ops::linalg::q4;
use crate::ops::linalg::reference::NBitsParams;
use crate::{DataRef, ParallelFor, Sequential};

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
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
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

#[derive(Debug, Clone, Copy, PartialEq)]
enum Zp {
    None,
    U8,
    F32,
}

/// ONNX Runtime's sources for one weight.
struct Case {
    p: NBitsParams,
    b: Vec<u8>,
    scales: Vec<f32>,
    zp_u8: Vec<u8>,
    zp_f32: Vec<f32>,
    zp: Zp,
}

impl Case {
    fn new(rng: &mut Rng, k: usize, n: usize, bs: usize, zp: Zp) -> Self {
        let p = NBitsParams {
            k,
            n,
            bits: 4,
            block_size: bs,
        };
        let blocks = p.blocks();
        let b = (0..n * blocks * bs / 2).map(|_| rng.next() as u8).collect();
        let scales = (0..n * blocks).map(|_| 0.02 + 0.01 * rng.f32()).collect();
        let zp_u8 = (0..n * blocks.div_ceil(2))
            .map(|_| rng.next() as u8)
            .collect();
        let zp_f32 = (0..n * blocks)
            .map(|_| (rng.next() % 16) as f32 + 0.25 * rng.f32())
            .collect();
        Self {
            p,
            b,
            scales,
            zp_u8,
            zp_f32,
            zp,
        }
    }

    fn zero_points(&self) -> Option<DataRef<'_>> {
        match self.zp {
            Zp::None => None,
            Zp::U8 => Some(DataRef::U8(&self.zp_u8)),
            Zp::F32 => Some(DataRef::F32(&self.zp_f32)),
        }
    }

    fn packed(&self, isa: Isa) -> crate::PackedWeight {
        let dtype = self.zero_points().map(|z| z.dtype());
        q4::pack(
            &self.p,
            isa,
            q4::layout(self.p.block_size, dtype, isa),
            &self.b,
            &self.scales,
            self.zero_points(),
            &crate::Sequential,
        )
        .expect("pack")
    }

    /// The weight `k` of column `n` and its zero point, from the sources.
    fn weight(&self, n: usize, k: usize) -> (i32, f32) {
        let (bs, blocks) = (self.p.block_size, self.p.blocks());
        let (blk, i) = (k / bs, k % bs);
        let byte = self.b[(n * blocks + blk) * bs / 2 + i / 2];
        let q = if i % 2 == 0 { byte & 15 } else { byte >> 4 };
        let zp = crate::ops::linalg::reference::zero_point(self.zero_points(), blocks, n, blk);
        (q as i32, zp)
    }

    /// The scheme, written out plainly: quantize each block of each row,
    /// multiply in integers, scale.
    fn model(&self, a: &[f32], rows: usize) -> Vec<f64> {
        let (k, n, bs) = (self.p.k, self.p.n, self.p.block_size);
        let mut y = vec![0f64; rows * n];
        for r in 0..rows {
            let row = &a[r * k..][..k];
            for blk in 0..self.p.blocks() {
                let ks = blk * bs..((blk + 1) * bs).min(k);
                let amax = row[ks.clone()].iter().fold(0f32, |m, x| m.max(x.abs()));
                let a_scale = amax / 127.0;
                let inv = if amax == 0.0 { 0.0 } else { 1.0 / a_scale };
                let qa: Vec<i32> = row[ks.clone()]
                    .iter()
                    .map(|&x| (x * inv).round_ties_even() as i32)
                    .collect();
                for c in 0..n {
                    let s = self.scales[c * self.p.blocks() + blk] as f64;
                    let mut dot = 0f64;
                    for (i, kk) in ks.clone().enumerate() {
                        let (q, zp) = self.weight(c, kk);
                        dot += (q as f64 - zp as f64) * qa[i] as f64;
                    }
                    y[r * n + c] += dot * s * a_scale as f64;
                }
            }
        }
        y
    }
}

/// The kernel families this CPU runs, with their layouts.
fn families() -> Vec<(Int8Isa, Isa)> {
    let have = CpuFeatures::detect();
    let mut out = vec![
        (Int8Isa::Portable, Isa::Portable),
        (Int8Isa::Portable, Isa::Avx512),
    ];
    if have.avx2 {
        out.push((Int8Isa::Avx2, Isa::Avx2));
        out.push((Int8Isa::Portable, Isa::Avx2));
    }
    if have.avx512 {
        out.push((Int8Isa::Avx512Bw, Isa::Avx512));
    }
    if have.avx512vnni {
        out.push((Int8Isa::Avx512Vnni, Isa::Avx512));
    }
    out
}

/// The int8 product of `case` on one family (the layout need not be one
/// this CPU runs for the portable kernel: it reads bytes only).
fn product(
    case: &Case,
    fam: (Int8Isa, Isa),
    a: &[f32],
    rows: usize,
    bias: Option<f32>,
    par: &dyn ParallelFor,
) -> Vec<f32> {
    let packed = case.packed(fam.1);
    let v = view_any(&packed, &case.p);
    let mut y = vec![bias.unwrap_or(0.0); rows * case.p.n];
    matmul(fam.0, &v, a, rows, &mut y, bias.is_some(), par).expect("int8 product");
    y
}

/// [`q4::view`] without the check that this CPU runs the layout's f32
/// kernels (the portable int8 kernel reads any tile width).
fn view_any<'a>(packed: &'a crate::PackedWeight, p: &NBitsParams) -> Q4View<'a> {
    let parts = &packed.parts;
    let t = parts[0].as_u64().expect("header")[5] as usize;
    Q4View {
        k: p.k,
        n: p.n,
        block_size: p.block_size,
        blocks: p.blocks(),
        tile: t,
        tiles: p.n.div_ceil(t),
        weights: parts[1].as_u8().expect("weights"),
        scales: parts[2].as_f32().expect("scales"),
        nzs: parts.get(3).map(|z| z.as_f32().expect("zero terms")),
    }
}

#[test]
fn every_family_and_tile_width_gives_the_same_bits() {
    let mut rng = Rng(11);
    let fams = families();
    for (k, bs) in [(40, 32), (64, 16), (200, 64), (130, 128), (32, 32)] {
        for n in [1, 7, 17, 40, 65] {
            for zp in [Zp::None, Zp::U8, Zp::F32] {
                let case = Case::new(&mut rng, k, n, bs, zp);
                for rows in [1, 2, 3, 5, 17] {
                    let a = rng.f32s(rows * k);
                    let bias = (rows % 2 == 1).then_some(0.5);
                    let want = product(&case, fams[0], &a, rows, bias, &Sequential);
                    for &fam in &fams {
                        for par in [&Sequential as &dyn ParallelFor, &Reversed] {
                            let got = product(&case, fam, &a, rows, bias, par);
                            let same = got
                                .iter()
                                .zip(&want)
                                .all(|(x, y)| x.to_bits() == y.to_bits());
                            assert!(same, "{fam:?} K {k} N {n} bs {bs} {zp:?} M {rows}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn large_m_families_agree_and_use_the_heap_scratch() {
    let mut rng = Rng(12);
    let fams = families();
    for zp in [Zp::None, Zp::U8] {
        let case = Case::new(&mut rng, 300, 70, 32, zp);
        let rows = 128; // 128 * 320 bytes: past the stack scratch
        assert!(rows * 320 > STACK_Q);
        let a = rng.f32s(rows * 300);
        let want = product(&case, fams[0], &a, rows, None, &Sequential);
        for &fam in &fams {
            let got = product(&case, fam, &a, rows, None, &Reversed);
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{fam:?} {zp:?}"
            );
        }
    }
}

#[test]
fn matches_an_independent_model_of_the_scheme() {
    let mut rng = Rng(13);
    let fam = *families().last().expect("a family");
    for (k, n, bs) in [(40, 9, 32), (256, 33, 64), (100, 20, 16)] {
        for zp in [Zp::None, Zp::U8, Zp::F32] {
            let case = Case::new(&mut rng, k, n, bs, zp);
            for rows in [1, 3] {
                let a = rng.f32s(rows * k);
                let got = product(&case, fam, &a, rows, None, &Sequential);
                let want = case.model(&a, rows);
                let max = want.iter().fold(0f64, |m, x| m.max(x.abs()));
                for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g as f64 - w).abs() <= 1e-5 * max,
                        "{fam:?} K {k} N {n} {zp:?} [{i}]: {g} vs {w}"
                    );
                }
            }
        }
    }
}

/// The relative error against the exact f32 product, as a fraction of
/// max|y|, stays under 2 % (0.55 % measured on these uniform inputs).
#[test]
fn stays_within_the_stated_bound_of_the_exact_product() {
    let mut rng = Rng(14);
    let fam = *families().last().expect("a family");
    let mut worst = 0f32;
    for (k, n, bs) in [(512, 64, 32), (2048, 16, 32), (96, 40, 16), (256, 24, 128)] {
        for zp in [Zp::None, Zp::U8, Zp::F32] {
            let case = Case::new(&mut rng, k, n, bs, zp);
            let rows = 4;
            let a = rng.f32s(rows * k);
            let got = product(&case, fam, &a, rows, None, &Sequential);
            let packed = case.packed(Isa::Portable);
            let (isa, v) = q4::view(&packed, &case.p).expect("view");
            let mut exact = vec![0f32; rows * n];
            q4::matmul(isa, &v, &a, rows, &mut exact, false, &Sequential);
            let max = exact.iter().fold(0f32, |m, x| m.max(x.abs()));
            let err = got
                .iter()
                .zip(&exact)
                .fold(0f32, |m, (g, e)| m.max((g - e).abs()));
            worst = worst.max(err / max);
        }
    }
    eprintln!(
        "int8 vs exact: worst relative error {worst}, families {:?}",
        families()
    );
    assert!(worst > 0.0 && worst <= 0.02, "worst relative error {worst}");
}

#[test]
fn quantization_rounds_to_even_permutes_and_sums() {
    // One block of 16: max |a| = 127 / 16, so the scale is 1/16 exactly.
    let mut a = [0f32; 16];
    a[0] = 7.9375; // 127
    a[1] = 0.03125; // 0.5 rounds to 0 (even)
    a[2] = -0.09375; // -1.5 rounds to -2
    a[3] = -7.9375; // -127
    a[5] = 0.1875; // 3
    a[9] = 0.15625; // 2.5 rounds to 2
    let (mut q, mut s, mut d) = ([0i8; 16], [0f32; 1], [0i32; 1]);
    quantize_row(&a, 16, &mut q, &mut s, &mut d);
    assert_eq!(s[0], 0.0625);
    // Group 0 stores k = 0, 2, 4, 6 then 1, 3, 5, 7.
    assert_eq!(&q[..8], &[127, -2, 0, 0, 0, -127, 3, 0]);
    assert_eq!(&q[8..], &[0, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(d[0], 127 - 2 - 127 + 3 + 2);
    // A partial block is padded with zeros; zeros have scale 0.
    let (mut q, mut s, mut d) = ([1i8; 32], [1f32; 2], [1i32; 2]);
    quantize_row(&[0.0; 20], 16, &mut q, &mut s, &mut d);
    assert_eq!((q, s, d), ([0; 32], [0.0; 2], [0; 2]));
}

#[test]
fn non_finite_activations_give_nan_in_their_row_only() {
    let mut rng = Rng(15);
    let case = Case::new(&mut rng, 64, 20, 32, Zp::None);
    let mut a = rng.f32s(2 * 64);
    a[70] = f32::INFINITY;
    for fam in families() {
        let y = product(&case, fam, &a, 2, None, &Sequential);
        assert!(y[..20].iter().all(|x| x.is_finite()), "{fam:?}");
        assert!(y[20..].iter().all(|x| x.is_nan()), "{fam:?}");
    }
    a[70] = f32::NAN;
    let y = product(&case, families()[0], &a, 2, None, &Sequential);
    assert!(y[20..].iter().all(|x| x.is_nan()));
}

#[test]
fn the_vectorized_quantizer_writes_the_portable_bytes() {
    let mut rng = Rng(16);
    for (k, bs) in [(100usize, 32usize), (256, 128), (40, 16)] {
        // Values on and off the rounding ties.
        let a: Vec<f32> = (0..k)
            .map(|i| match i % 3 {
                0 => rng.f32(),
                1 => (rng.next() % 255) as f32 * 0.5 - 63.5,
                _ => 0.0,
            })
            .collect();
        let blocks = k.div_ceil(bs);
        let mut one = (
            vec![0i8; blocks * bs],
            vec![0f32; blocks],
            vec![0i32; blocks],
        );
        let mut two = one.clone();
        quantize_row(&a, bs, &mut one.0, &mut one.1, &mut one.2);
        quantize_row_body(&a, bs, &mut two.0, &mut two.1, &mut two.2);
        assert_eq!(one.0, two.0);
        assert_eq!(one.2, two.2);
        assert!(
            one.1
                .iter()
                .zip(&two.1)
                .all(|(x, y)| x.to_bits() == y.to_bits())
        );
    }
}

#[test]
fn streamed_weights_read_a_tile_a_pass_to_the_same_bits() {
    // From STREAMED_WEIGHT bytes a single row reads one tile a pass on
    // AVX2 too (AVX-512 always does), with prefetch; the bits are those of
    // every family.
    let mut rng = Rng(13);
    let fams = families();
    for (k, n, zp) in [(1024, 2056, Zp::None), (1040, 2050, Zp::U8)] {
        let case = Case::new(&mut rng, k, n, 32, zp);
        assert!(n * k / 2 >= q4::STREAMED_WEIGHT, "large enough to stream");
        let a = rng.f32s(k);
        let want = product(&case, fams[0], &a, 1, Some(0.25), &Sequential);
        for &fam in &fams {
            let got = product(&case, fam, &a, 1, Some(0.25), &Reversed);
            let same = got
                .iter()
                .zip(&want)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{fam:?} K {k} N {n} {zp:?}");
        }
    }
}
