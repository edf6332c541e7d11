//! The channel-major integer convolution (hot path; weight packing on the
//! cold path): QLinearConv and ConvInteger on AVX-512 VNNI with int8
//! weights, computed straight from the NCHW image into the NCHW output.
//!
//! The product is turned around against [`super::qgemm`]'s: its rows are
//! a group's output channels (the weights, broadcast four bytes at a
//! time), its columns output pixels (the image, sixteen pixels per
//! vector), so that each output channel's pixels are stored as one
//! contiguous row and nothing is transposed — no channels-last copy of the
//! input, no strided store of the output. There is no im2col matrix
//! either: each task packs a strip of [`STRIP`] output pixels at a time
//! ([`strip`]: per tap, per quad of input channels, four bytes per pixel,
//! read from four input planes and interleaved) and runs every output
//! channel against it while it is in L1 (implicit GEMM).
//!
//! # Arithmetic
//!
//! The reduction runs over `k = tap * cgp + c` with the group's channels
//! padded to `cgp`, a multiple of 4 (zero weights), so that every quad of
//! `k` is four channels of one tap. `vpdpbusd` sums four unsigned image
//! bytes times four signed weight bytes exactly ([`super::qgemm::Arith::Dot4`]);
//! an int8 image is read as `x + 128` with its zero point moved by 128.
//! Taps outside the input read the image's zero point. With the raw sums
//! `D`, `C = D - zx rowsum(W) - zw colsum(X) + K zx zw` (+ the bias), the
//! column sums computed only when a weight zero point is not 0.
//!
//! Files: `strip` (packing the image strips), `avx512` (the micro-kernel
//! and the output stage).

#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod strip;

use super::qgemm::{QIsa, Sink};
use crate::ops::conv::geometry::Geometry3;
use crate::ops::conv::shape::ConvShape;
use crate::{KernelError, ParallelFor};

/// Output pixels of a strip (two vectors of sixteen).
pub(crate) const STRIP: usize = 32;
/// Output channels of a micro-kernel block.
pub(crate) const ROWS: usize = 8;
/// Version of the packed layout (in the layout key and the header).
pub(crate) const VERSION: u64 = 1;

/// Whether a convolution runs here: on the VNNI family (not the AMX
/// tiles, whose pixel-major blocks stay in [`super::qgemm`]), int8 weights,
/// not depthwise.
pub(crate) fn applies(isa: QIsa, w_signed: bool, shape: &ConvShape) -> bool {
    cfg!(target_arch = "x86_64")
        && isa == QIsa::Avx512Vnni
        && w_signed
        && !shape.depthwise()
        && shape.cg() > 0
}

/// Words of a packed group's header.
const HEADER: usize = 5;

/// One group's weights packed: `[VERSION, cg, taps, mg, kp]`, then per
/// output channel its row sum and zero point (sign-extended i32); the
/// bytes, `mg` rounded up to [`ROWS`] rows of `kp` int8 values, row `r`'s
/// byte `t * cgp + c` filter `r`'s value at input channel `c`, tap `t`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedW<'a> {
    cg: usize,
    taps: usize,
    mg: usize,
    kp: usize,
    meta: &'a [u64],
    data: &'a [u8],
}

impl<'a> PackedW<'a> {
    /// The view of packed parts, or `None` when they do not hold a whole
    /// group of this layout.
    pub(crate) fn view(meta: &'a [u64], data: &'a [u8]) -> Option<Self> {
        let head = meta.get(..HEADER)?;
        if head[0] != VERSION {
            return None;
        }
        let [cg, taps, mg, kp] = [head[1], head[2], head[3], head[4]].map(|v| v as usize);
        let cgp = cg.next_multiple_of(4);
        let ok = cg > 0
            && taps > 0
            && mg > 0
            && cgp.checked_mul(taps) == Some(kp)
            && meta.len() == HEADER + 2 * mg
            && mg
                .next_multiple_of(ROWS)
                .checked_mul(kp)
                .is_some_and(|n| n == data.len());
        ok.then_some(Self {
            cg,
            taps,
            mg,
            kp,
            meta,
            data,
        })
    }

    /// Output channels.
    pub(crate) fn maps(&self) -> usize {
        self.mg
    }

    /// Whether these are the weights of a group of `cg` input and `mg`
    /// output channels over `taps` kernel taps.
    pub(crate) fn fits(&self, cg: usize, taps: usize, mg: usize) -> bool {
        (self.cg, self.taps, self.mg) == (cg, taps, mg)
    }

    fn rowsum(&self, r: usize) -> i32 {
        self.meta[HEADER + 2 * r] as i32
    }

    fn zero(&self, r: usize) -> i32 {
        self.meta[HEADER + 2 * r + 1] as i32
    }
}

/// Packs group `g` of the int8 filters `w` (shape `ws`: `[maps, cg,
/// kernel...]`; `zero` one or `maps` zero points) into the parts
/// [`PackedW::view`] reads.
pub(crate) fn pack(
    op: &'static str,
    ws: &[usize],
    group: usize,
    w: &[u8],
    zero: &[i32],
    g: usize,
) -> Result<(Vec<u64>, Vec<u8>), KernelError> {
    let (maps, cg) = (ws[0], ws[1]);
    let taps = ws[2..].iter().product::<usize>();
    if zero.len() != 1 && zero.len() != maps {
        return Err(KernelError::Shape(format!(
            "{op}: w_zero_point has {} values for {maps} output channels",
            zero.len()
        )));
    }
    let mg = maps / group;
    let cgp = cg.next_multiple_of(4);
    let kp = cgp * taps;
    let k = cg * taps;
    let mut data = crate::scratch::filled(op, mg.next_multiple_of(ROWS) * kp, 0u8)?;
    let mut meta = Vec::with_capacity(HEADER + 2 * mg);
    meta.extend([VERSION, cg as u64, taps as u64, mg as u64, kp as u64]);
    for r in 0..mg {
        let co = g * mg + r;
        let filter = &w[co * k..(co + 1) * k];
        let row = &mut data[r * kp..(r + 1) * kp];
        let mut sum = 0i32;
        for c in 0..cg {
            for t in 0..taps {
                let v = filter[c * taps + t];
                row[t * cgp + c] = v;
                sum += v as i8 as i32;
            }
        }
        let z = if zero.len() == 1 { zero[0] } else { zero[co] };
        meta.extend([sum as i64 as u64, z as i64 as u64]);
    }
    Ok((meta, data))
}

/// One image's group: its input planes and its zero point.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Image<'a> {
    /// The group's `cg` input planes, `g3.input_len()` bytes each.
    pub(crate) planes: &'a [u8],
    /// Whether the bytes are int8.
    pub(crate) signed: bool,
    /// Zero point in the image's own signedness.
    pub(crate) zero: i32,
}

/// `y = conv(x, w)` for one image's group: `bias` (one per output channel
/// of the group) added to `C`, row `r` (output channel `r` of the group),
/// pixels `p0..` given to `sink`.
pub(crate) fn run<S: Sink>(
    op: &'static str,
    g3: &Geometry3,
    img: Image<'_>,
    w: &PackedW<'_>,
    bias: Option<&[i32]>,
    sink: &S,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (g3, img, w, bias, sink, par);
        Err(KernelError::Invalid {
            op,
            detail: "the channel-major convolution runs on x86-64 only".into(),
        })
    }
    #[cfg(target_arch = "x86_64")]
    {
        let pixels = g3.output.iter().product::<usize>();
        if pixels == 0 || w.mg == 0 {
            return Ok(());
        }
        // The image as unsigned bytes: an int8 image is read as `x + 128`.
        let (xor, zx) = if img.signed {
            (0x80u8, img.zero + 128)
        } else {
            (0, img.zero)
        };
        let k = (w.cg * w.taps) as i32;
        let row_const: Vec<i32> = (0..w.mg)
            .map(|r| {
                let b = bias.map_or(0, |b| b[r]);
                k.wrapping_mul(zx)
                    .wrapping_mul(w.zero(r))
                    .wrapping_sub(zx.wrapping_mul(w.rowsum(r)))
                    .wrapping_add(b)
            })
            .collect();
        let colsums = (0..w.mg).any(|r| w.zero(r) != 0);
        // SAFETY: this module runs only where `applies` chose the VNNI family,
        // which QIsa::select picks only on a CPU with AVX-512 F, BW, VL and
        // VNNI.
        let quads = unsafe { strip::quads(op, g3, img.planes, w.cg, (xor, zx as u8), par)? };
        let strips = pixels.div_ceil(STRIP);
        let blocks = w.mg.div_ceil(ROWS);
        let threads = par.threads().max(1);
        let work = pixels * w.mg * w.kp;
        let (strip_tasks, row_tasks) = if threads == 1 || work < 256 * 1024 {
            (1, 1)
        } else {
            let s = strips.min(threads * 4);
            let r = if s >= threads * 2 {
                1
            } else {
                blocks.min((threads * 4).div_ceil(s))
            };
            (s, r)
        };
        let panel_len = w.kp * STRIP;
        let job = Job {
            img: &quads,
            g3,
            w,
            row_const: &row_const,
            colsums,
            sink,
            pixels,
        };
        if row_tasks > 1 {
            // Fewer strips than tasks: each strip is packed once, then its
            // row blocks are split across the tasks (each task packing its
            // own copy of a strip had every strip packed `row_tasks` times).
            let mut packed = crate::scratch::filled(op, strips * panel_len, 0u8)?;
            let in_place = (0..strips).all(|s| quads.in_place(g3, s * STRIP).is_some());
            if !in_place {
                crate::for_each_chunk_mut(par, &mut packed, panel_len, &|start, panel| {
                    let s = start / panel_len;
                    let p0 = s * STRIP;
                    // SAFETY: this module runs only where `applies` chose
                    // the VNNI family (QIsa::select: AVX-512 F, BW, VL and
                    // VNNI on this CPU).
                    unsafe { strip::pack(&quads, g3, p0, STRIP.min(pixels - p0), panel) };
                });
            }
            par.run(strips * row_tasks, &|t| {
                let (s, rb) = (
                    t / row_tasks,
                    crate::par::chunk(blocks, row_tasks, 1, t % row_tasks),
                );
                let (panel, stride) = match quads.in_place(g3, s * STRIP) {
                    Some(found) if in_place => found,
                    _ => (&packed[s * panel_len..][..panel_len], avx512::PACKED),
                };
                // SAFETY: as for the packing above.
                unsafe { job.strip_avx512(s, rb, panel, stride) };
            });
            return Ok(());
        }
        let mut panels = crate::scratch::filled(op, strip_tasks * panel_len, 0u8)?;
        crate::for_each_chunk_mut(par, &mut panels, panel_len, &|start, panel| {
            let sr = crate::par::chunk(strips, strip_tasks, 1, start / panel_len);
            // SAFETY: this module runs only where `applies` chose the VNNI
            // family, which QIsa::select picks only on a CPU with AVX-512 F,
            // BW, VL and VNNI.
            unsafe { job.strips_avx512(sr, 0..blocks, panel) };
        });
        Ok(())
    }
}

/// The operands of one [`run`], shared by its tasks.
#[cfg(target_arch = "x86_64")]
struct Job<'a, S> {
    img: &'a strip::Quads,
    g3: &'a Geometry3,
    w: &'a PackedW<'a>,
    row_const: &'a [i32],
    colsums: bool,
    sink: &'a S,
    pixels: usize,
}

#[cfg(target_arch = "x86_64")]
impl<S: Sink> Job<'_, S> {
    /// Strips `sr` against row blocks `rb`, each strip read in place or
    /// packed into `panel`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, VL and VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
    unsafe fn strips_avx512(
        &self,
        sr: std::ops::Range<usize>,
        rb: std::ops::Range<usize>,
        panel: &mut [u8],
    ) {
        for s in sr {
            let p0 = s * STRIP;
            let np = STRIP.min(self.pixels - p0);
            let (panel, stride): (&[u8], usize) = match self.img.in_place(self.g3, p0) {
                Some(found) => found,
                None => {
                    // SAFETY: as above (AVX-512 F, BW and VL).
                    unsafe { strip::pack(self.img, self.g3, p0, np, panel) };
                    (panel, avx512::PACKED)
                }
            };
            // SAFETY: as above.
            unsafe { self.strip_avx512(s, rb.clone(), panel, stride) };
        }
    }

    /// Row blocks `rb` of strip `s` against its panel (quad `q` at `q *
    /// stride`); the correction and the sink's output stage compiled for
    /// AVX-512.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW, VL and VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
    unsafe fn strip_avx512(
        &self,
        s: usize,
        rb: std::ops::Range<usize>,
        panel: &[u8],
        stride: usize,
    ) {
        use std::arch::x86_64::*;
        let kp = self.w.kp;
        let p0 = s * STRIP;
        let np = STRIP.min(self.pixels - p0);
        let mut col = [0i32; STRIP];
        if self.colsums {
            // SAFETY: as above; the panel holds `kp / 4` quads.
            unsafe { avx512::column_sums(panel, stride, kp / 4, &mut col) };
        }
        // SAFETY: `col` holds two vectors of i32.
        let col = unsafe {
            [
                _mm512_loadu_si512(col.as_ptr().cast()),
                _mm512_loadu_si512(col.as_ptr().add(16).cast()),
            ]
        };
        for blk in rb {
            let r0 = blk * ROWS;
            let rows = ROWS.min(self.w.mg - r0);
            let wrows = &self.w.data[r0 * kp..(r0 + ROWS) * kp];
            // Each row's sums start at the row's constant and, corrected
            // in registers (minus its weights' zero point times the column
            // sums), go to the sink's output stage as they are.
            let start: [__m512i; ROWS] = std::array::from_fn(|r| {
                _mm512_set1_epi32(if r < rows { self.row_const[r0 + r] } else { 0 })
            });
            // SAFETY: as above; `wrows` holds ROWS rows of `kp` bytes and
            // the panel `kp / 4` quads of STRIP pixels.
            let mut acc = unsafe { avx512::block(panel, stride, wrows, kp, start) };
            if self.colsums {
                for (r, v) in acc.iter_mut().enumerate().take(rows) {
                    let zw = _mm512_set1_epi32(self.w.zero(r0 + r));
                    for (v, &cs) in v.iter_mut().zip(&col) {
                        *v = _mm512_sub_epi32(*v, _mm512_mullo_epi32(zw, cs));
                    }
                }
            }
            // SAFETY: as above (AVX-512 F, BW and VL).
            unsafe { self.sink.put_pairs_avx512(r0, p0, &acc[..rows], np) };
        }
    }
}
