//! The image in quads of channels and the strips packed from it (hot
//! path).
//!
//! Once per image and group the NCHW planes are interleaved four channels
//! at a time into a padded copy, `[quad][z][y][x][4]` with the
//! convolution's padding around every plane (the zero point for real
//! channels, 0 for the channels that pad the last quad, whose weights are
//! 0). A strip of [`STRIP`] output pixels is then, per tap and quad, one
//! run of four-byte words per output row it crosses: a copy for stride 1,
//! every `stride`-th word otherwise. Pixels past the strip's end read 0
//! (their sums are never stored).

use std::arch::x86_64::*;

use super::STRIP;
use crate::ops::conv::geometry::Geometry3;
use crate::{KernelError, ParallelFor};

/// The padded image in quads of channels.
#[derive(Debug)]
pub(super) struct Quads {
    data: Vec<u8>,
    /// Padded extents `[d, h, w]`.
    dims: [usize; 3],
    /// Quads of channels.
    quads: usize,
}

impl Quads {
    /// Bytes of one quad's padded volume.
    fn volume(&self) -> usize {
        self.dims.iter().product::<usize>() * 4
    }
}

/// The image `planes` (`cg` planes of `g3.input`) in quads, every byte
/// XORed with `xor` (0x80 turns int8 into `x + 128`), padded with `pad`;
/// quads across `par`.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
pub(super) unsafe fn quads(
    op: &'static str,
    g3: &Geometry3,
    planes: &[u8],
    cg: usize,
    (xor, pad): (u8, u8),
    par: &dyn ParallelFor,
) -> Result<Quads, KernelError> {
    let mut dims = [0; 3];
    for a in 0..3 {
        let reach = (g3.output[a].max(1) - 1) * g3.stride[a]
            + (g3.kernel[a].max(1) - 1) * g3.dilation[a]
            + 1;
        dims[a] = (g3.pad[a] + g3.input[a]).max(reach);
    }
    let quads = cg.div_ceil(4);
    let volume = dims.iter().product::<usize>() * 4;
    let mut data = crate::scratch::filled(op, quads * volume, 0u8)?;
    let [id, ih, iw] = g3.input;
    let plane = id * ih * iw;
    assert!(planes.len() >= cg * plane, "image shorter than its planes");
    crate::for_each_chunk_mut(par, &mut data, volume, &|start, out| {
        let q = start / volume;
        let real = (cg - 4 * q).min(4);
        let mut word = [0u8; 4];
        word[..real].fill(pad);
        for w in out.chunks_exact_mut(4) {
            w.copy_from_slice(&word);
        }
        for z in 0..id {
            for y in 0..ih {
                let src = (z * ih + y) * iw;
                let rows: [Option<&[u8]>; 4] = std::array::from_fn(|i| {
                    (i < real).then(|| &planes[(4 * q + i) * plane + src..][..iw])
                });
                let at = (((z + g3.pad[0]) * dims[1] + y + g3.pad[1]) * dims[2] + g3.pad[2]) * 4;
                // SAFETY: the CPU has the features (the caller).
                unsafe { interleave(&rows, xor, &mut out[at..at + 4 * iw]) };
            }
        }
    });
    Ok(Quads { data, dims, quads })
}

/// Packs output pixels `p0..p0 + np` from `img` into `panel` (`taps *
/// quads` quads of `STRIP * 4` bytes).
pub(super) fn pack(img: &Quads, g3: &Geometry3, p0: usize, np: usize, panel: &mut [u8]) {
    let [_, oh, ow] = g3.output;
    let [kd, kh, kw] = g3.kernel;
    let [_, ph, pw] = img.dims;
    let (quads, volume) = (img.quads, img.volume());
    let taps = kd * kh * kw;
    assert!(
        panel.len() >= taps * quads * STRIP * 4,
        "strip panel shorter than the convolution"
    );
    if np < STRIP {
        for q in 0..taps * quads {
            panel[(q * STRIP + np) * 4..(q + 1) * STRIP * 4].fill(0);
        }
    }
    let step = g3.stride[2];
    let mut p = p0;
    while p < p0 + np {
        let (z, y, x) = (p / (oh * ow), p / ow % oh, p % ow);
        let len = (ow - x).min(p0 + np - p);
        let at = (p - p0) * 4;
        let mut t = 0;
        for a in 0..kd {
            let pz = z * g3.stride[0] + a * g3.dilation[0];
            for b in 0..kh {
                let py = y * g3.stride[1] + b * g3.dilation[1];
                for c in 0..kw {
                    let px = x * step + c * g3.dilation[2];
                    let src = ((pz * ph + py) * pw + px) * 4;
                    for q in 0..quads {
                        let from = &img.data[q * volume + src..];
                        let dst = &mut panel[(t * quads + q) * STRIP * 4 + at..][..len * 4];
                        if step == 1 {
                            dst.copy_from_slice(&from[..len * 4]);
                        } else {
                            for (j, d) in dst.chunks_exact_mut(4).enumerate() {
                                d.copy_from_slice(&from[j * step * 4..j * step * 4 + 4]);
                            }
                        }
                    }
                    t += 1;
                }
            }
        }
        p += len;
    }
}

/// `dst[4 j + i] = rows[i][j] ^ xor` (0 for a missing row) for the
/// `dst.len() / 4` pixels `j`.
///
/// # Safety
/// The CPU has AVX-512 BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn interleave(rows: &[Option<&[u8]>; 4], xor: u8, dst: &mut [u8]) {
    let n = dst.len() / 4;
    assert!(
        rows.iter().flatten().all(|r| r.len() >= n),
        "rows shorter than the pixels"
    );
    let x = _mm_set1_epi8(xor as i8);
    let mut j = 0;
    while j < n {
        let count = (n - j).min(16);
        let mask: __mmask16 = if count == 16 { !0 } else { (1u16 << count) - 1 };
        // SAFETY: the CPU has the features (the caller); each row holds
        // the pixels (the assertion).
        let (a, b, c, d) = unsafe {
            (
                load(rows[0], j, mask, x),
                load(rows[1], j, mask, x),
                load(rows[2], j, mask, x),
                load(rows[3], j, mask, x),
            )
        };
        let (ab_lo, ab_hi) = (_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b));
        let (cd_lo, cd_hi) = (_mm_unpacklo_epi8(c, d), _mm_unpackhi_epi8(c, d));
        let out = [
            _mm_unpacklo_epi16(ab_lo, cd_lo),
            _mm_unpackhi_epi16(ab_lo, cd_lo),
            _mm_unpacklo_epi16(ab_hi, cd_hi),
            _mm_unpackhi_epi16(ab_hi, cd_hi),
        ];
        let d = &mut dst[4 * j..4 * (j + count)];
        for (i, v) in out.iter().enumerate() {
            let words = count.saturating_sub(4 * i).min(4);
            if words == 0 {
                break;
            }
            let m: __mmask16 = if words == 4 {
                !0
            } else {
                (1u16 << (4 * words)) - 1
            };
            // SAFETY: the mask writes bytes 16 i .. 16 i + 4 words of `d`,
            // inside it.
            unsafe { _mm_mask_storeu_epi8(d.as_mut_ptr().add(16 * i).cast(), m, *v) };
        }
        j += count;
    }
}

/// Bytes `j..` of `row` under `mask`, XORed with `x`; zeros for a missing
/// row.
///
/// # Safety
/// The CPU has AVX-512 BW and VL; `row` holds the bytes `mask` selects.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
#[inline]
unsafe fn load(row: Option<&[u8]>, j: usize, mask: __mmask16, x: __m128i) -> __m128i {
    match row {
        None => _mm_setzero_si128(),
        // SAFETY: the masked bytes lie inside the row (the caller); bytes
        // masked off are not read.
        Some(r) => unsafe {
            _mm_xor_si128(_mm_maskz_loadu_epi8(mask, r.as_ptr().add(j).cast()), x)
        },
    }
}
