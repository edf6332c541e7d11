//! 4-bit weights (`MatMulNBits`, bits = 4): the packed layout, its packing
//! (cold path) and the products on it (hot path).
//!
//! # Packed layout `matmul-nbits-q4-v1-b{B}-zp{Z}-t{T}-{isa}`
//!
//! Columns are grouped in tiles of `T` (16 for AVX-512: one `zmm` of lanes;
//! 8 for AVX2 and portable). Parts:
//!
//! 0. `U64` header `[MAGIC, isa code, K, N, block_size, T, has_zero_points]`;
//! 1. `U8` weights `[tile][block][block_size / 8][T][4]`: the 4 bytes of
//!    column `c` for group `g` of block `b` hold the nibbles of
//!    `k = b * block_size + 8g + j` at bits `4j` of a little-endian `u32` —
//!    exactly ONNX Runtime's bytes `B[n][b][4g..4g + 4]`, so lane `c` of a
//!    vector load holds 8 consecutive `k` of one column;
//! 2. `F32` scales `[tile][block][T]`;
//! 3. (zero points given) `F32` `-zero_point * scale`, `[tile][block][T]`.
//!
//! Padding (columns past `N`, nibbles past `K`) is zero, so one source always
//! packs to the same bytes. Without zero points the zero point is 8.
//!
//! # Kernels
//!
//! * `M` up to [`GEMV_MAX_M`]: [`gemv`] per row straight from the packed
//!   bytes. Each lane accumulates `a[k] * q` for its column over a block
//!   (AVX-512 converts nibbles with one `vpermps` from a 16-entry table; the
//!   table holds `q - 8` when the zero point is 8), then scales once per
//!   block; explicit zero points add `-zp * scale * sum(a over the block)`.
//! * Larger `M`: the f32 GEMM ([`super::sgemm`]) with `B` dequantized one
//!   `KC x NR` panel at a time into a stack scratch that stays in L1.
//! * Opt-in, `accuracy_level = 4`: activations quantized to int8 per block
//!   and integer dot products on the same bytes ([`int8`]).

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod int8;
mod int8_avx2;
mod int8_avx512;
pub(crate) mod portable;

use std::mem::MaybeUninit;

pub(crate) use super::Q4View;
use super::isa::Isa;
use super::reference::NBitsParams;
use super::sgemm::{self, BSrc, OutPtr, Problem};
use crate::packed::{PackedElement, PartWriter};
use crate::par::chunk;
use crate::{KernelError, PackedWeight, ParallelFor, TensorData};

const OP: &str = "MatMulNBits";

/// First header word of a 4-bit packed weight.
const MAGIC: u64 = 0x7134_6e62_6974_7301;

/// Words of the `U64` header part.
const HEADER_WORDS: usize = 7;
/// Packed weights from this size on are packed by tiles on several threads.
pub(crate) const PARALLEL_PACK_MIN_BYTES: usize = 1 << 20;
/// Rows up to which products run row by row on the packed bytes.
pub(crate) const GEMV_MAX_M: usize = 2;
/// Tiles one GEMV pass keeps in registers (and the task split alignment).
const GEMV_GROUP: usize = 4;
/// Packed weights from this many bytes are read by single-row products one
/// tile per pass, [`STREAM_PREFETCH`] bytes ahead, by the kernels bound by
/// arithmetic from the cache: AVX-512's exact kernel and AVX2's int8 one
/// (AVX-512's int8 kernel always reads one tile a pass; AVX2's exact kernel
/// keeps four tiles a pass, unmeasured from memory). A large weight
/// comes from memory (a decode step streams the model through the caches),
/// where several tiles a pass follow several streams each (weights and
/// scales) that one core cannot keep busy; from the cache, several tiles
/// share each activation load and win. On a Zen 5 core, 8x tiny-llm's
/// decode: exact path 231 -> 381-409 tokens/s (1 thread), 300 -> 423-466
/// (2 threads); AVX2 int8 kernel alone 17 -> 29-30 GB/s from memory, and
/// 47 -> 30 GB/s from the cache had it read small weights so too.
pub(crate) const STREAMED_WEIGHT: usize = 1 << 20;
/// Bytes ahead of a single-tile pass's weight stream that it prefetches
/// (its scales: a quarter as far, as they advance a quarter as fast).
pub(crate) const STREAM_PREFETCH: usize = 8192;

/// Asks the caches for the scales (and zero terms) of the block a pass
/// reads once it is `ahead` bytes of weights further on: element `sidx`
/// of a tile's scale stream, which advances a quarter as fast as its
/// weights (a hint: nothing is read, and nothing happens off x86-64).
#[inline(always)]
pub(crate) fn prefetch_scales(v: &Q4View<'_>, sidx: usize, ahead: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let at = sidx + ahead / 16;
        // SAFETY: a prefetch never faults, so the address (which may lie
        // past the part) is never dereferenced.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(v.scales.as_ptr().wrapping_add(at).cast());
            if let Some(z) = v.nzs {
                _mm_prefetch::<_MM_HINT_T0>(z.as_ptr().wrapping_add(at).cast());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, sidx, ahead);
}

/// Quantized rows of `A` (made by `int8`, read by its ISA kernels): per row `blocks * block_size` permuted bytes,
/// `blocks` scales and `blocks` sums of the quantized values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuantRows<'a> {
    pub(crate) q: &'a [i8],
    pub(crate) scales: &'a [f32],
    pub(crate) sums: &'a [i32],
    /// Bytes per row (`blocks * block_size`).
    pub(crate) stride: usize,
    pub(crate) blocks: usize,
}

/// The layout key of a 4-bit packing.
/// The version of the 4-bit packed format, part of every layout key: a
/// change to what [`pack`] writes raises it, so an object packed by an
/// older build is never taken for one of this layout.
pub(crate) const PACK_VERSION: u32 = 1;

pub(crate) fn layout(
    block_size: usize,
    zero_points: Option<crate::ElementType>,
    isa: Isa,
) -> String {
    let zp = match zero_points {
        None => "0".to_string(),
        Some(t) => t.name().to_string(),
    };
    format!(
        "matmul-nbits-q4-v{PACK_VERSION}-b{block_size}-zp{zp}-t{}-{}",
        isa.q4_tile(),
        isa.name()
    )
}

/// Packs ONNX Runtime's 4-bit `B`, `scales` and optional `zero_points`
/// (checked by the caller) into the layout of `isa`: [`Q4Rows`] fed the
/// whole sources at once.
pub(crate) fn pack(
    p: &NBitsParams,
    isa: Isa,
    layout: String,
    b: &[u8],
    scales: &[f32],
    zero_points: Option<crate::DataRef<'_>>,
    par: &dyn ParallelFor,
) -> Result<PackedWeight, KernelError> {
    let mut rows = Q4Rows::new(*p, isa, layout, zero_points.is_some());
    rows.pack(b, scales, zero_points, par)?;
    rows.finish()
}

/// A 4-bit packing fed the rows of `B` (columns of the product) a range at
/// a time, in order; ranges start on a tile (whole tiles of `T` columns are
/// written at once), so every tile's bytes are written exactly once. A
/// range of at least [`PARALLEL_PACK_MIN_BYTES`] is split by tiles across
/// the given threads.
#[derive(Debug)]
pub(crate) struct Q4Rows {
    p: NBitsParams,
    isa: Isa,
    layout: String,
    zero_points: bool,
    /// Allocated by the first [`pack`](Self::pack).
    parts: Option<Q4Parts>,
    /// Columns packed so far.
    done: usize,
}

/// The parts a [`Q4Rows`] writes.
#[derive(Debug)]
struct Q4Parts {
    weights: PartWriter<u8>,
    scales: PartWriter<f32>,
    nzs: Option<PartWriter<f32>>,
}

impl Q4Rows {
    /// A packing of `p` on `isa`; nothing is allocated before the first
    /// piece.
    pub(crate) fn new(p: NBitsParams, isa: Isa, layout: String, zero_points: bool) -> Self {
        Self {
            p,
            isa,
            layout,
            zero_points,
            parts: None,
            done: 0,
        }
    }

    /// The parts, allocated (not written) on first use.
    fn parts(&mut self) -> Result<&mut Q4Parts, KernelError> {
        if self.parts.is_none() {
            let t = self.isa.q4_tile();
            let tiles = self.p.n.div_ceil(t);
            let scales_len = tiles * self.p.blocks() * t;
            self.parts = Some(Q4Parts {
                weights: PartWriter::new(OP, tiles * tile_bytes(&self.p, t))?,
                scales: PartWriter::new(OP, scales_len)?,
                nzs: match self.zero_points {
                    true => Some(PartWriter::new(OP, scales_len)?),
                    false => None,
                },
            });
        }
        Ok(self.parts.as_mut().expect("allocated above"))
    }

    /// Columns in all (rows of `B`).
    pub(crate) fn columns(&self) -> usize {
        self.p.n
    }

    /// Columns a range holds a multiple of (but the last range).
    pub(crate) fn tile(&self) -> usize {
        self.isa.q4_tile()
    }

    /// Packs the next `c` columns: `b` their `c` rows of `B`, `scales`
    /// their `c * blocks` scales and `zero_points` their zero points
    /// (`c * ceil(blocks / 2)` bytes or `c * blocks` values), `c` a
    /// multiple of the tile unless it ends the weight.
    pub(crate) fn pack(
        &mut self,
        b: &[u8],
        scales: &[f32],
        zero_points: Option<crate::DataRef<'_>>,
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let (t, blocks) = (self.tile(), self.p.blocks());
        let row = blocks * self.p.block_size / 2;
        // K = 0: the columns have no bytes; one call packs all of them.
        let c = match row {
            0 => self.p.n - self.done,
            _ => b.len() / row,
        };
        let zp_len = |z: crate::DataRef<'_>| match z {
            crate::DataRef::U8(_) => c * blocks.div_ceil(2),
            _ => c * blocks,
        };
        let fits = b.len() == c * row
            && scales.len() == c * blocks
            && zero_points.is_some() == self.zero_points
            && zero_points.is_none_or(|z| z.len() == zp_len(z))
            && self.done + c <= self.p.n
            && (c.is_multiple_of(t) || self.done + c == self.p.n);
        if !fits {
            return Err(KernelError::Shape(format!(
                "MatMulNBits: a piece of {} bytes of B and {} scales is not whole columns \
                 {}.. of N = {} in tiles of {t}",
                b.len(),
                scales.len(),
                self.done,
                self.p.n
            )));
        }
        let p = NBitsParams { n: c, ..self.p };
        let src = Q4Source { p: &p, b, scales };
        let (first, tiles) = (self.done / t, c.div_ceil(t));
        let per_tile = tile_bytes(&p, t);
        let par = if tiles * per_tile >= PARALLEL_PACK_MIN_BYTES {
            par
        } else {
            &crate::Sequential
        };
        let isa = self.isa;
        let parts = self.parts()?;
        write_tiles(
            par,
            &mut parts.weights,
            first,
            tiles,
            per_tile,
            &|tile, out| match isa {
                Isa::Avx512 => src.tile_words::<16>(tile, out),
                Isa::Avx2 | Isa::Portable => src.tile_words::<8>(tile, out),
            },
        )?;
        write_tiles(
            par,
            &mut parts.scales,
            first,
            tiles,
            blocks * t,
            &|tile, out| src.tile_scales(tile, t, out, |_, s| s),
        )?;
        if let Some(nzs) = &mut parts.nzs {
            write_tiles(par, nzs, first, tiles, blocks * t, &|tile, out| {
                src.tile_scales(tile, t, out, |(col, blk), s| {
                    -super::reference::zero_point(zero_points, blocks, col, blk) * s
                })
            })?;
        }
        self.done += c;
        Ok(())
    }

    /// The packed weight, once every column was packed.
    pub(crate) fn finish(mut self) -> Result<PackedWeight, KernelError> {
        if self.done != self.p.n {
            return Err(KernelError::Shape(format!(
                "MatMulNBits: packing ended after {} of N = {} columns",
                self.done, self.p.n
            )));
        }
        let p = self.p;
        let header: Vec<u64> = vec![
            MAGIC,
            self.isa.code(),
            p.k as u64,
            p.n as u64,
            p.block_size as u64,
            self.isa.q4_tile() as u64,
            self.zero_points as u64,
        ];
        debug_assert_eq!(header.len(), HEADER_WORDS);
        // N = 0 packs no piece: its (empty) parts are made here.
        self.parts()?;
        let parts = self.parts.take().expect("allocated above");
        // SAFETY: `pack` wrote whole tiles `0..tiles` of every part (each
        // call the tiles of its columns, and the calls covered all `N`
        // columns in order), and `tile_words` / `tile_scales` write every
        // element of the slice they are given.
        let (weights, scales, nzs) = unsafe {
            (
                parts.weights.finish()?,
                parts.scales.finish()?,
                parts.nzs.map(|z| z.finish()).transpose()?,
            )
        };
        let mut parts = vec![TensorData::U64(header).into(), weights, scales];
        parts.extend(nzs);
        Ok(PackedWeight {
            layout: self.layout,
            parts,
        })
    }
}

/// Bytes of one tile of packed 4-bit weights.
fn tile_bytes(p: &NBitsParams, t: usize) -> usize {
    p.blocks() * (p.block_size / 2) * t
}

/// Writes tiles `first..first + tiles` of `part` (`per_tile` elements
/// each), tile `first + i` by `fill(i, ..)`, chunks of whole tiles in
/// parallel on `par`. `fill` must write every element of the slice it is
/// given.
fn write_tiles<T: PackedElement>(
    par: &dyn ParallelFor,
    part: &mut PartWriter<T>,
    first: usize,
    tiles: usize,
    per_tile: usize,
    fill: &(dyn Fn(usize, &mut [MaybeUninit<T>]) + Sync),
) -> Result<(), KernelError> {
    let out = &mut part.elements()?[first * per_tile..(first + tiles) * per_tile];
    let chunk = crate::par::rows_chunk(par, tiles, per_tile);
    crate::for_each_chunk_mut(par, out, chunk, &|offset, out| {
        for (i, tile) in out.chunks_exact_mut(per_tile.max(1)).enumerate() {
            fill(offset / per_tile.max(1) + i, tile);
        }
    });
    Ok(())
}

/// ONNX Runtime's 4-bit sources of one weight, read tile by tile.
struct Q4Source<'a> {
    p: &'a NBitsParams,
    b: &'a [u8],
    scales: &'a [f32],
}

impl Q4Source<'_> {
    /// Writes tile `tile`'s weights (`[block][block_size / 8][T][4]`),
    /// every byte of `out`. The bytes of one column are `W` words in a row
    /// (`K` rounded up to the block, over 8) and the tile's layout lists
    /// word `w` of its `T` columns together, so this is a transpose of a
    /// `T x W` matrix of words; missing columns and nibbles past `K` are
    /// zero.
    fn tile_words<const T: usize>(&self, tile: usize, out: &mut [MaybeUninit<u8>]) {
        let p = self.p;
        debug_assert_eq!(T, out.len() / (p.blocks() * p.block_size / 2).max(1));
        let row = p.blocks() * p.block_size / 2;
        let words = row / 4;
        let (body, rest) = out.split_at_mut(words * T * 4);
        let present = p.n.saturating_sub(tile * T).min(T);
        let col = |lane: usize| &self.b[(tile * T + lane) * row..][..row];
        // Word `w` of a column holds k in 8w..8w + 8. The words wholly
        // inside K are copied column by column: reads in order, writes
        // within one tile (a few KiB to tens of KiB, in L1).
        let full_words = (p.k / 8).min(words);
        for lane in 0..present {
            for (w, src) in col(lane)[..full_words * 4].chunks_exact(4).enumerate() {
                let at = (w * T + lane) * 4;
                body[at..at + 4].write_copy_of_slice(src);
            }
        }
        // Then missing columns (zero) and the words at or past K: the one
        // K ends in keeps its nibbles below K, the others are zero.
        let tail_mask = (1u32 << (4 * (p.k % 8))) - 1;
        for (w, dst) in body.chunks_exact_mut(T * 4).enumerate() {
            let done = if w < full_words { present } else { 0 };
            for (lane, d) in dst.chunks_exact_mut(4).enumerate().skip(done) {
                let tail = (lane < present && w == full_words)
                    .then(|| col(lane).get(w * 4..w * 4 + 4))
                    .flatten();
                let word = match tail {
                    Some(&[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]) & tail_mask,
                    _ => 0,
                };
                d.write_copy_of_slice(&word.to_le_bytes());
            }
        }
        // A tile is whole rows; anything past them would be padding.
        for d in rest {
            d.write(0);
        }
    }

    /// Writes `f((column, block), scale)` for tile `tile`'s `[block][T]`
    /// (zero for missing columns), every element of `out`.
    fn tile_scales(
        &self,
        tile: usize,
        t: usize,
        out: &mut [MaybeUninit<f32>],
        f: impl Fn((usize, usize), f32) -> f32,
    ) {
        let blocks = self.p.blocks();
        let present = self.p.n.saturating_sub(tile * t).min(t);
        let (body, rest) = out.split_at_mut((blocks * t).min(out.len()));
        // Column by column: its scales are read in order, the writes stay
        // within the tile.
        for lane in 0..t.min(body.len()) {
            let col = tile * t + lane;
            let scales = match lane < present {
                true => &self.scales[col * blocks..][..blocks],
                false => &[],
            };
            for (blk, d) in body[lane..].iter_mut().step_by(t).enumerate() {
                d.write(scales.get(blk).map_or(0.0, |&s| f((col, blk), s)));
            }
        }
        for d in rest {
            d.write(0.0);
        }
    }
}

/// Bytes of the object [`pack`] returns: its header and
/// [`packed_bytes`].
pub(crate) fn packed_object_bytes(p: &NBitsParams, isa: Isa, zero_points: bool) -> usize {
    packed_bytes(p, isa, zero_points).saturating_add(HEADER_WORDS * 8)
}

/// Bytes [`pack`] allocates for `p` on `isa` (with zero points or not).
pub(crate) fn packed_bytes(p: &NBitsParams, isa: Isa, zero_points: bool) -> usize {
    let t = isa.q4_tile();
    let cols = p.n.div_ceil(t).saturating_mul(t);
    let per_block = (p.block_size / 2).saturating_add(4 * (1 + zero_points as usize));
    cols.saturating_mul(p.blocks()).saturating_mul(per_block)
}

/// Checks a packed weight that carries this layout's magic word against
/// the parameters its own header names (`None`: not a 4-bit packing).
pub(crate) fn check_self_consistent(packed: &PackedWeight) -> Option<Result<(), KernelError>> {
    let header = packed.parts.first()?.as_u64()?;
    let &[magic, _, k, n, bs, _, _] = header else {
        return None;
    };
    if magic != MAGIC {
        return None;
    }
    let p = NBitsParams {
        k: usize::try_from(k).ok()?,
        n: usize::try_from(n).ok()?,
        bits: 4,
        block_size: usize::try_from(bs).ok()?,
    };
    if p.block_size == 0 || !p.block_size.is_power_of_two() {
        return Some(Err(KernelError::Invalid {
            op: "MatMulNBits",
            detail: format!("packed weight `{}`: bad header", packed.layout),
        }));
    }
    Some(view(packed, &p).map(|_| ()))
}

/// Checks that `packed` is a 4-bit packing for `p` on `isa` (header,
/// parts and their sizes), as [`view`] would before a kernel reads it.
pub(crate) fn validate(
    packed: &PackedWeight,
    p: &NBitsParams,
    isa: Isa,
) -> Result<(), KernelError> {
    let (packed_isa, _) = view(packed, p)?;
    if packed_isa != isa {
        return Err(KernelError::Invalid {
            op: "MatMulNBits",
            detail: format!(
                "packed weight `{}`: packed for {}, this packing targets {}",
                packed.layout,
                packed_isa.name(),
                isa.name()
            ),
        });
    }
    Ok(())
}

/// Reads a packed weight for `p`, checking it was made for these
/// attributes and that this CPU runs its kernels.
pub(crate) fn view<'a>(
    packed: &'a PackedWeight,
    p: &NBitsParams,
) -> Result<(Isa, Q4View<'a>), KernelError> {
    let bad = |detail: &str| KernelError::Invalid {
        op: "MatMulNBits",
        detail: format!("packed weight `{}`: {detail}", packed.layout),
    };
    let parts = &packed.parts;
    let (Some(header), Some(weights), Some(scales)) = (
        parts.first().and_then(|p| p.as_u64()),
        parts.get(1).and_then(|p| p.as_u8()),
        parts.get(2).and_then(|p| p.as_f32()),
    ) else {
        return Err(bad("not a 4-bit packed layout"));
    };
    let nzs = match parts.get(3) {
        None => None,
        Some(z) => Some(z.as_f32().ok_or_else(|| bad("not a 4-bit packed layout"))?),
    };
    if parts.len() > 4 {
        return Err(bad("not a 4-bit packed layout"));
    }
    let &[magic, code, k, n, bs, t, has_zp] = header else {
        return Err(bad("bad header"));
    };
    if magic != MAGIC {
        return Err(bad("not a 4-bit packed layout"));
    }
    let isa = Isa::from_code(code)
        .ok_or_else(|| bad("this CPU lacks the instructions of this layout"))?;
    if (k as usize, n as usize, bs as usize) != (p.k, p.n, p.block_size) {
        return Err(bad("packed for different K, N or block_size"));
    }
    let (t, tiles, blocks) = (t as usize, p.n.div_ceil(t.max(1) as usize), p.blocks());
    let ok = t == isa.q4_tile()
        && (has_zp == 1) == nzs.is_some()
        && weights.len() == tiles * blocks * p.block_size / 8 * t * 4
        && scales.len() == tiles * blocks * t
        && nzs.is_none_or(|z| z.len() == scales.len());
    if !ok {
        return Err(bad("inconsistent parts"));
    }
    Ok((
        isa,
        Q4View {
            k: p.k,
            n: p.n,
            block_size: p.block_size,
            blocks,
            tile: t,
            tiles,
            weights,
            scales,
            nzs,
        },
    ))
}

/// `Y[m] (+)= A[m] * W` for `m < rows`, `A` row-major `[rows, K]`, `Y` `[rows, N]`.
pub(crate) fn matmul(
    isa: Isa,
    v: &Q4View<'_>,
    a: &[f32],
    rows: usize,
    y: &mut [f32],
    accumulate: bool,
    par: &dyn ParallelFor,
) {
    let (k, n) = (v.k, v.n);
    assert!(
        a.len() >= rows * k && y.len() >= rows * n,
        "MatMulNBits operands too short"
    );
    if rows == 0 || n == 0 {
        return;
    }
    if rows > GEMV_MAX_M {
        let prob = Problem {
            m: rows,
            n,
            k,
            a,
            lda: k,
            a_panels: false,
            b: BSrc::Q4(v),
            ldc: n,
            alpha: 1.0,
            accumulate,
            batches: 1,
            offsets: &|_| (0, 0, 0),
        };
        sgemm::run(isa, &prob, y, par);
        return;
    }
    let out = OutPtr::new(y);
    let task = |range: std::ops::Range<usize>| {
        for r in 0..rows {
            let a_row = &a[r * k..][..k];
            // SAFETY: the family was selected on this CPU (`Isa` invariant);
            // `a_row` holds K floats; row r of Y holds N floats (asserted),
            // and this task writes only the columns of its tiles.
            unsafe {
                gemv(
                    isa,
                    v,
                    a_row,
                    out.ptr().add(r * n),
                    range.clone(),
                    accumulate,
                )
            };
        }
    };
    split_tiles(
        par,
        v.tiles,
        rows.saturating_mul(k).saturating_mul(n),
        GEMV_GROUP,
        &task,
    );
}

/// Runs `task` over `0..tiles`: whole on this thread for one thread or a
/// product below [`sgemm::PARALLEL_MIN_MACS`] multiply-adds, else split
/// across `par` in chunks of whole `group`s of tiles.
pub(crate) fn split_tiles(
    par: &dyn ParallelFor,
    tiles: usize,
    macs: usize,
    group: usize,
    task: &(dyn Fn(std::ops::Range<usize>) + Sync),
) {
    let threads = par.threads();
    if threads <= 1 || macs < sgemm::PARALLEL_MIN_MACS {
        task(0..tiles);
    } else {
        let parts = tiles.div_ceil(group).min(threads * sgemm::TASKS_PER_THREAD);
        par.run(parts, &|i| {
            let range = chunk(tiles, parts, group, i);
            if !range.is_empty() {
                task(range);
            }
        });
    }
}

/// One row: `y[c] (+)= sum_k a[k] * W[k][c]` for the columns of `tiles`.
///
/// # Safety
/// The CPU has `isa`'s features; `y` is writable for the columns of `tiles`
/// (below `N`) and nobody else writes them meanwhile; `a.len() >= K`.
unsafe fn gemv(
    isa: Isa,
    v: &Q4View<'_>,
    a: &[f32],
    y: *mut f32,
    tiles: std::ops::Range<usize>,
    accumulate: bool,
) {
    assert!(a.len() >= v.k && tiles.end <= v.tiles);
    // The last, partial block reads `A` through a zero-padded copy.
    let full = v.k / v.block_size;
    let mut pad = [0f32; 128];
    pad[..v.k - full * v.block_size].copy_from_slice(&a[full * v.block_size..v.k]);
    // SAFETY: forwarded contract; `a` holds the full blocks, `pad` the rest.
    unsafe {
        match isa {
            Isa::Avx512 => avx512::gemv(v, a.as_ptr(), pad.as_ptr(), y, tiles, accumulate),
            Isa::Avx2 => avx2::gemv(v, a.as_ptr(), pad.as_ptr(), y, tiles, accumulate),
            Isa::Portable => portable::gemv(v, a.as_ptr(), pad.as_ptr(), y, tiles, accumulate),
        }
    }
}
