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
use std::mem::MaybeUninit;

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

    /// The strip of [`STRIP`] output pixels from `p0` read in place, its
    /// quad `q` at `q * stride` bytes: for a 1x1 convolution of stride 1
    /// without padding the quads hold every strip's panel already. `None`
    /// for other convolutions and for a strip past the last pixel.
    pub(super) fn in_place(&self, g3: &Geometry3, p0: usize) -> Option<(&[u8], usize)> {
        let unit = g3.kernel.iter().chain(&g3.stride).all(|&v| v == 1)
            && g3.pad.iter().all(|&p| p == 0)
            && self.dims == g3.input
            && g3.output == g3.input;
        let pixels = g3.output.iter().product::<usize>();
        (unit && p0 + STRIP <= pixels).then(|| (&self.data[p0 * 4..], self.volume()))
    }
}

/// The image `planes` (`cg` planes of `g3.input`) in quads, every byte
/// XORed with `xor` (0x80 turns int8 into `x + 128`), padded with `pad`;
/// the quads split across `par`'s threads when the copy is large
/// ([`PARALLEL_BYTES`]).
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
    let dims: [usize; 3] = std::array::from_fn(|a| {
        let reach = (g3.output[a].max(1) - 1) * g3.stride[a]
            + (g3.kernel[a].max(1) - 1) * g3.dilation[a]
            + 1;
        (g3.pad[a] + g3.input[a]).max(reach)
    });
    let quads = cg.div_ceil(4);
    let volume = dims.iter().product::<usize>() * 4;
    let total = quads * volume;
    let plane = g3.input.iter().product::<usize>();
    assert!(planes.len() >= cg * plane, "image shorter than its planes");
    // Every byte is written by its quad's task (the padding first, where
    // there is any), so nothing is filled before: the fill had been 3-4 %
    // of mobilenet_v2.
    let mut data: Vec<u8> = crate::scratch::with_capacity(op, total)?;
    let par = if total < PARALLEL_BYTES {
        &crate::Sequential
    } else {
        par
    };
    let per_task = quads.div_ceil(par.threads() * 4).max(1);
    let copy = QuadCopy {
        g3,
        dims,
        planes,
        cg,
        xor,
        pad,
    };
    crate::for_each_chunk_mut(
        par,
        &mut data.spare_capacity_mut()[..total],
        per_task * volume,
        &|start, chunk| {
            for (i, quad) in chunk.chunks_exact_mut(volume).enumerate() {
                // SAFETY: the CPU has the features (the caller); the quad is
                // one padded volume of `dims`.
                unsafe { copy.quad(start / volume + i, quad) };
            }
        },
    );
    // SAFETY: the chunks cover `0..total`, whole quads each, and
    // `QuadCopy::quad` writes every byte of its quad: a padded volume is
    // filled first; an unpadded one (`dims` the input's extent, so a run
    // is a whole slice of `ih * iw` words) is covered by its `id` runs,
    // `interleave` writing every byte of each.
    unsafe { data.set_len(total) };
    Ok(Quads { data, dims, quads })
}

/// The copy of at least this many bytes splits its quads across threads:
/// 576 channels at 14x14 (113 KB) took a fifth of a 2-thread pointwise
/// convolution on the calling thread alone.
const PARALLEL_BYTES: usize = 32 << 10;

/// What [`quads`] copies: the planes, the padded extents and the bytes'
/// XOR and padding.
struct QuadCopy<'a> {
    g3: &'a Geometry3,
    dims: [usize; 3],
    planes: &'a [u8],
    cg: usize,
    xor: u8,
    pad: u8,
}

impl QuadCopy<'_> {
    /// Quad `q` (channels `4 q .. 4 q + 4`) into `out`, one padded volume
    /// of `dims`, every byte written: the padding the zero point, except
    /// for the channels past `cg` (0, whose weights are 0).
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
    unsafe fn quad(&self, q: usize, out: &mut [MaybeUninit<u8>]) {
        let (g3, dims) = (self.g3, self.dims);
        let [id, ih, iw] = g3.input;
        let plane = id * ih * iw;
        let real = (self.cg - 4 * q).min(4);
        if dims != g3.input {
            let word =
                u32::from_le_bytes(std::array::from_fn(|i| if i < real { self.pad } else { 0 }));
            for w in out.chunks_exact_mut(4) {
                w.copy_from_slice(&word.to_le_bytes().map(MaybeUninit::new));
            }
        }
        // Unpadded rows lie back to back in both: one run per slice.
        let (rows_per, run) = if g3.pad[2] == 0 && dims[2] == iw {
            (ih, ih * iw)
        } else {
            (1, iw)
        };
        let base = out.as_mut_ptr().cast::<u8>();
        for z in 0..id {
            for y in (0..ih).step_by(rows_per) {
                let src = (z * ih + y) * iw;
                let rows: [Option<&[u8]>; 4] = std::array::from_fn(|i| {
                    (i < real).then(|| &self.planes[(4 * q + i) * plane + src..][..run])
                });
                let at = (((z + g3.pad[0]) * dims[1] + y + g3.pad[1]) * dims[2] + g3.pad[2]) * 4;
                assert!(at + 4 * run <= out.len(), "a row outside its quad");
                // SAFETY: the CPU has the features (this function's
                // contract); bytes at .. at + 4 run lie inside `out` (the
                // assertion).
                unsafe { interleave(&rows, self.xor, base.add(at), run) };
            }
        }
    }
}

/// Packs output pixels `p0..p0 + np` from `img` into `panel` (`taps *
/// quads` quads of `STRIP * 4` bytes).
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
pub(super) unsafe fn pack(img: &Quads, g3: &Geometry3, p0: usize, np: usize, panel: &mut [u8]) {
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
                        // SAFETY: the CPU has the features (this function's
                        // contract).
                        unsafe { words(from, step, dst) };
                    }
                    t += 1;
                }
            }
        }
        p += len;
    }
}

/// `dst`'s four-byte words from every `step`-th word of `from`: up to
/// [`STRIP`] words, in registers (a stride of 1 or 2) instead of a call
/// to `memcpy` or a word at a time.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
#[inline]
unsafe fn words(from: &[u8], step: usize, dst: &mut [u8]) {
    let n = dst.len() / 4;
    assert!(
        n <= STRIP && n > 0 && from.len() >= ((n - 1) * step + 1) * 4,
        "a strip row outside the image"
    );
    let mask = |count: usize| -> __mmask16 { if count >= 16 { !0 } else { (1u16 << count) - 1 } };
    let (src, out) = (from.as_ptr(), dst.as_mut_ptr());
    match step {
        1 => {
            for h in 0..n.div_ceil(16) {
                let m = mask(n - 16 * h);
                // SAFETY: the masks read words 16 h .. n of `from` and write
                // those of `dst` (the assertion).
                unsafe {
                    let v = _mm512_maskz_loadu_epi32(m, src.add(64 * h).cast());
                    _mm512_mask_storeu_epi32(out.add(64 * h).cast(), m, v);
                }
            }
        }
        2 => {
            // Words 0, 2, 4, ... of 32 read words.
            let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            let last = 2 * (n - 1); // the last word read
            for h in 0..n.div_ceil(16) {
                let base = 32 * h;
                let (lo, hi) = (
                    mask(last + 1 - base),
                    mask((last + 1).saturating_sub(base + 16)),
                );
                // SAFETY: the masks read words base .. last + 1 of `from`
                // (the assertion) and write words 16 h .. n of `dst`.
                unsafe {
                    let a = _mm512_maskz_loadu_epi32(lo, src.add(4 * base).cast());
                    let b = _mm512_maskz_loadu_epi32(hi, src.add(4 * (base + 16)).cast());
                    let v = _mm512_permutex2var_epi32(a, even, b);
                    _mm512_mask_storeu_epi32(out.add(64 * h).cast(), mask(n - 16 * h), v);
                }
            }
        }
        _ => {
            for (j, d) in dst.chunks_exact_mut(4).enumerate() {
                d.copy_from_slice(&from[j * step * 4..j * step * 4 + 4]);
            }
        }
    }
}

/// `dst[4 j + i] = rows[i][j] ^ xor` (0 for a missing row) for the `n`
/// pixels `j`: every byte of `dst .. dst + 4 n` written.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL; `dst` is valid for writes of `4 n`
/// bytes (which need not be initialized).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn interleave(rows: &[Option<&[u8]>; 4], xor: u8, dst: *mut u8, n: usize) {
    assert!(
        rows.iter().flatten().all(|r| r.len() >= n),
        "rows shorter than the pixels"
    );
    // The XOR of each word: `xor` in the bytes of present rows.
    let flip = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_some())
        .fold(0u32, |f, (i, _)| f | (xor as u32) << (8 * i));
    let flip = _mm512_set1_epi32(flip as i32);
    let mut j = 0;
    while j < n {
        let count = (n - j).min(16);
        let mask: __mmask16 = if count == 16 { !0 } else { (1u16 << count) - 1 };
        // SAFETY: the CPU has the features (the caller); each row holds
        // the pixels (the assertion).
        let (a, b, c, d) = unsafe {
            (
                widen(rows[0], j, mask),
                widen(rows[1], j, mask),
                widen(rows[2], j, mask),
                widen(rows[3], j, mask),
            )
        };
        // a | b << 8 | c << 16, then | d << 24, then the XOR.
        let abc = _mm512_ternarylogic_epi32(
            a,
            _mm512_slli_epi32::<8>(b),
            _mm512_slli_epi32::<16>(c),
            0xFE,
        );
        let words = _mm512_xor_si512(_mm512_or_si512(abc, _mm512_slli_epi32::<24>(d)), flip);
        // SAFETY: the mask writes the `count` words of pixels j.., inside
        // `dst` (n pixels: the caller).
        unsafe { _mm512_mask_storeu_epi32(dst.add(4 * j).cast(), mask, words) };
        j += count;
    }
}

/// Bytes `j..` of `row` under `mask`, one per 32-bit lane; zeros for a
/// missing row.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL; `row` holds the bytes `mask` selects.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
#[inline]
unsafe fn widen(row: Option<&[u8]>, j: usize, mask: __mmask16) -> __m512i {
    match row {
        None => _mm512_setzero_si512(),
        // SAFETY: the masked bytes lie inside the row (the caller); bytes
        // masked off are not read.
        Some(r) => unsafe {
            _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask, r.as_ptr().add(j).cast()))
        },
    }
}
