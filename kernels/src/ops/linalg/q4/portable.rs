//! Portable 4-bit matrix-vector product (hot path fallback) on the 8-column
//! tile layout, in plain Rust.

use super::Q4View;

/// See [`super::gemv`]; `pad` holds the zero-padded last partial block of `a`.
///
/// # Safety
/// `a` readable for the full blocks, `pad` for one block; `y` writable for
/// the columns of `tiles`, which are in range.
pub(super) unsafe fn gemv(
    v: &Q4View<'_>,
    a: *const f32,
    pad: *const f32,
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) {
    let bs = v.block_size;
    let gpb = bs / 8;
    let full = v.k / bs;
    // SAFETY: the caller guarantees `full * bs` readable floats at `a` and
    // one block at `pad`.
    let (a, pad) = unsafe {
        (
            std::slice::from_raw_parts(a, full * bs),
            std::slice::from_raw_parts(pad, bs),
        )
    };
    for tile in tiles {
        let mut total = [0f32; 8];
        for blk in 0..v.blocks {
            let ab = if blk < full {
                &a[blk * bs..][..bs]
            } else {
                pad
            };
            let asum: f32 = ab.iter().sum();
            for (c, tot) in total.iter_mut().enumerate() {
                let mut acc = 0f32;
                for g in 0..gpb {
                    let at = ((tile * v.blocks + blk) * gpb + g) * 32 + c * 4;
                    let word =
                        u32::from_le_bytes(v.weights[at..at + 4].try_into().expect("4 bytes"));
                    for j in 0..8 {
                        acc += ab[g * 8 + j] * ((word >> (4 * j)) & 15) as f32;
                    }
                }
                let at = (tile * v.blocks + blk) * 8 + c;
                let s = v.scales[at];
                let z = v.nzs.map_or(-8.0 * s, |z| z[at]);
                *tot += acc * s + z * asum;
            }
        }
        let col = tile * 8;
        for (j, &x) in total.iter().enumerate().take((v.n - col).min(8)) {
            // SAFETY: column col + j < N of y belongs to this task.
            unsafe {
                let p = y.add(col + j);
                *p = if accumulate { *p + x } else { x };
            }
        }
    }
}
