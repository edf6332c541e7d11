//! Portable f32 micro-kernels (hot path fallback): `4 x 16` tiles in plain
//! Rust (the compiler may vectorize them with the baseline SSE2) and the
//! dequantization of 4-bit panels.

use super::{Arch, Tile};
use crate::ops::linalg::Q4View;

/// The portable family.
#[derive(Debug)]
pub(crate) struct Portable;

const MR: usize = 4;
const NR: usize = 16;

impl Arch for Portable {
    const MR: usize = MR;
    const NR: usize = NR;

    unsafe fn tile(t: &Tile) {
        debug_assert!(t.mr >= 1 && t.mr <= MR && t.nvalid >= 1 && t.nvalid <= NR);
        let mut acc = [[0f32; NR]; MR];
        for p in 0..t.k {
            let mut brow = [0f32; NR];
            for (j, v) in brow.iter_mut().enumerate().take(t.b_cols) {
                // SAFETY: p < k and j < b_cols: B row p is readable (Tile contract).
                *v = unsafe { *t.b.add(p * t.ldb + j) };
            }
            for (i, row) in acc.iter_mut().enumerate().take(t.mr) {
                // SAFETY: i < mr and p < k: A[i][p] is readable (Tile contract).
                let av = unsafe { *t.a.add(i * t.lda + p * t.a_step) };
                for (c, &bv) in row.iter_mut().zip(&brow) {
                    *c += av * bv;
                }
            }
        }
        for (i, row) in acc.iter().enumerate().take(t.mr) {
            for (j, &v) in row.iter().enumerate().take(t.nvalid) {
                // SAFETY: i < mr, j < nvalid: inside this task's tile of C.
                unsafe {
                    let c = t.c.add(i * t.ldc + j);
                    *c = if t.accumulate {
                        *c + t.alpha * v
                    } else {
                        t.alpha * v
                    };
                }
            }
        }
    }

    unsafe fn q4_panel(v: &Q4View<'_>, panel: usize, k0: usize, kl: usize, out: *mut f32) {
        debug_assert!(v.tile == 8 && k0.is_multiple_of(v.block_size));
        let groups = v.block_size / 8;
        let rows = kl.div_ceil(8) * 8;
        for half in 0..2 {
            let tile = panel * 2 + half;
            for r in 0..rows {
                let kk = k0 + r;
                let (blk, g, j) = (kk / v.block_size, (kk % v.block_size) / 8, kk % 8);
                for c in 0..8 {
                    let w = if tile < v.tiles {
                        let base = (tile * v.blocks + blk) * 8 + c;
                        let byte =
                            v.weights[((tile * v.blocks + blk) * groups + g) * 32 + c * 4 + j / 2];
                        let q = if j % 2 == 0 { byte & 15 } else { byte >> 4 };
                        let s = v.scales[base];
                        let z = v.nzs.map_or(-8.0 * s, |z| z[base]);
                        q as f32 * s + z
                    } else {
                        0.0
                    };
                    // SAFETY: r < ceil8(kl) and half * 8 + c < 16: inside `out`.
                    unsafe { out.add(r * NR + half * 8 + c).write(w) };
                }
            }
        }
    }
}
