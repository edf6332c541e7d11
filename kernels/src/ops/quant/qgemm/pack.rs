//! Packing of the integer product's operands (cold path for a constant
//! `B`, per call otherwise): `B` into panels of [`NR`] columns in the
//! layout of its [`Arith`], with column sums; blocks of [`MR`] rows of `A`
//! into broadcast words, with row sums.

use super::{AOperand, Arith, MR, NR, QIsa};
use crate::ParallelFor;

/// A `[k, n]` matrix of 8-bit values read with strides (`B`, or `B`
/// transposed when `row_stride == 1`), its rows possibly permuted as a
/// convolution's filters store them (`taps`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct QMatrix<'a> {
    /// The bytes (int8 values stored as their two's complement).
    pub(crate) data: &'a [u8],
    /// Whether the bytes are int8.
    pub(crate) signed: bool,
    /// Rows (the reduction length).
    pub(crate) k: usize,
    /// Columns.
    pub(crate) n: usize,
    /// Distance between rows.
    pub(crate) row_stride: usize,
    /// Distance between columns.
    pub(crate) col_stride: usize,
    /// Kernel taps per input channel: row `t * (k / taps) + c` is stored
    /// as row `c * taps + t` (a filter's `[c][tap]` order read as
    /// `[tap][c]`); 1 for a plain matrix.
    pub(crate) taps: usize,
}

impl QMatrix<'_> {
    /// Column `j`'s `k` bytes in row order, replacing `out`'s contents.
    fn column(&self, j: usize, out: &mut Vec<u8>) {
        out.clear();
        let col = &self.data[j * self.col_stride..];
        let (taps, rs) = (self.taps.max(1), self.row_stride);
        if taps == 1 && rs == 1 {
            out.extend_from_slice(&col[..self.k]);
        } else if taps == 1 {
            out.extend(col.iter().step_by(rs).take(self.k));
        } else if rs == 1 {
            // Tap by tap: input channel `c`'s tap `t` is byte `c taps + t`.
            let cg = self.k / taps;
            out.resize(self.k, 0);
            let src = &col[..self.k];
            for (t, dst) in out.chunks_exact_mut(cg).enumerate() {
                for (c, d) in dst.iter_mut().enumerate() {
                    *d = src[c * taps + t];
                }
            }
        } else {
            let cg = self.k / taps;
            for t in 0..taps {
                out.extend((0..cg).map(|c| col[(c * taps + t) * rs]));
            }
        }
    }

    /// The sum of `col`'s values in this matrix's signedness.
    fn sum(&self, col: &[u8]) -> i32 {
        if self.signed {
            col.iter().map(|&v| v as i8 as i32).sum()
        } else {
            col.iter().map(|&v| v as i32).sum()
        }
    }

    #[inline(always)]
    fn value(&self, v: u8) -> i32 {
        if self.signed {
            v as i8 as i32
        } else {
            v as i32
        }
    }
}

/// Words of the header of a packed `B`'s metadata part.
const HEADER: usize = 6;
/// Version of the packed layout (in the header and the layout key).
pub(crate) const VERSION: u64 = 1;

/// `B` packed for one kernel family and arithmetic: two parts, owned or
/// borrowed from a packed weight.
///
/// * `meta` (u64): `[VERSION, k, n, kp, isa, arith]`, then per column its
///   sum of values and its zero point (i32, sign-extended).
/// * `data` (bytes): per panel of [`NR`] columns, for [`Arith::Exact`]
///   per pair of `k` per column the two values as little-endian i16; for
///   [`Arith::SatPairs`] per quad of `k` per column the four bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedB<'a> {
    /// The reduction length.
    pub(crate) k: usize,
    /// Columns.
    pub(crate) n: usize,
    /// `k` padded ([`padded_k`]: a multiple of 4, of 64 on the AMX tiles).
    pub(crate) kp: usize,
    /// Kernel family.
    pub(crate) isa: QIsa,
    /// Arithmetic.
    pub(crate) arith: Arith,
    meta: &'a [u64],
    data: &'a [u8],
}

/// `k` padded with zeros for `isa` and `arith`: to a multiple of 4, and of
/// 64 for the AMX tiles (whole tiles of sixteen quads).
pub(crate) fn padded_k(isa: QIsa, arith: Arith, k: usize) -> usize {
    if isa.tiles(arith) {
        k.next_multiple_of(64)
    } else {
        k.next_multiple_of(4)
    }
}

/// Bytes of the data part per panel.
fn panel_bytes(arith: Arith, kp: usize) -> usize {
    match arith {
        Arith::Exact => kp * NR * 2,
        Arith::SatPairs | Arith::Dot4 => kp * NR,
    }
}

/// Packs `b` with zero points `zero` (one, or one per column) for
/// products in `arith` on `isa` ([`QIsa::arith`] gives ONNX Runtime's
/// choice for the operand signs): the `(meta, data)` parts of [`PackedB`].
pub(crate) fn pack_b(
    b: &QMatrix<'_>,
    zero: &[i32],
    isa: QIsa,
    arith: Arith,
    par: &dyn ParallelFor,
) -> (Vec<u64>, Vec<u8>) {
    let (k, n) = (b.k, b.n);
    let kp = padded_k(isa, arith, k);
    let panels = n.div_ceil(NR);
    let per_panel = panel_bytes(arith, kp);
    let mut data = vec![0u8; panels * per_panel];
    let mut colsum = vec![0i32; n];
    // Each panel with its columns' sums, the panels split across `par`.
    let mut outs: Vec<PanelOut<'_>> = data
        .chunks_exact_mut(per_panel.max(1))
        .zip(colsum.chunks_mut(NR))
        .map(|(bytes, sums)| PanelOut { bytes, sums })
        .collect();
    let per_task = panels.div_ceil(par.threads().max(1) * 4).max(1);
    crate::for_each_chunk_mut(par, &mut outs, per_task, &|first, chunk| {
        let mut col = Vec::with_capacity(kp);
        for (i, out) in chunk.iter_mut().enumerate() {
            pack_panel(b, arith, kp, first + i, out, &mut col);
        }
    });
    let isa_code = match isa {
        QIsa::Portable => 0,
        QIsa::Avx2 => 1,
        QIsa::Avx512Vnni => 2,
        QIsa::Amx => 3,
    };
    let arith_code = match arith {
        Arith::Exact => 0,
        Arith::SatPairs => 1,
        Arith::Dot4 => 2,
    };
    let mut meta = vec![VERSION, k as u64, n as u64, kp as u64, isa_code, arith_code];
    meta.extend(colsum.iter().map(|&c| c as i64 as u64));
    meta.extend((0..n).map(|j| {
        let z = zero.get(j).or(zero.first()).copied().unwrap_or(0);
        z as i64 as u64
    }));
    (meta, data)
}

/// One panel's packed bytes and its columns' sums.
struct PanelOut<'a> {
    bytes: &'a mut [u8],
    sums: &'a mut [i32],
}

/// Panel `p` of `b`: column by column, each column's bytes gathered in
/// row order once (`col` scratch), then stored four (bytes) or two (i16
/// pairs) rows at a time.
fn pack_panel(
    b: &QMatrix<'_>,
    arith: Arith,
    kp: usize,
    p: usize,
    out: &mut PanelOut<'_>,
    col: &mut Vec<u8>,
) {
    let panel = &mut *out.bytes;
    for (j, sum) in out.sums.iter_mut().enumerate() {
        b.column(p * NR + j, col);
        *sum = b.sum(col);
        col.resize(kp, 0);
        match arith {
            Arith::Exact => {
                for (qq, pair) in col.chunks_exact(2).enumerate() {
                    let at = (qq * NR * 2 + j * 2) * 2;
                    let (lo, hi) = (b.value(pair[0]) as i16, b.value(pair[1]) as i16);
                    panel[at..at + 2].copy_from_slice(&lo.to_le_bytes());
                    panel[at + 2..at + 4].copy_from_slice(&hi.to_le_bytes());
                }
            }
            Arith::SatPairs | Arith::Dot4 => {
                let quads = panel.chunks_exact_mut(NR * 4).zip(col.chunks_exact(4));
                for (dst, quad) in quads {
                    dst[j * 4..j * 4 + 4].copy_from_slice(quad);
                }
            }
        }
    }
}

impl<'a> PackedB<'a> {
    /// The view of parts made by [`pack_b`] (or read back from a cache),
    /// checked: `None` when they do not hold a packed `B` this CPU runs.
    pub(crate) fn view(meta: &'a [u64], data: &'a [u8]) -> Option<Self> {
        let h = meta.get(..HEADER)?;
        if h[0] != VERSION {
            return None;
        }
        let (k, n, kp) = (
            usize::try_from(h[1]).ok()?,
            usize::try_from(h[2]).ok()?,
            usize::try_from(h[3]).ok()?,
        );
        let isa = match h[4] {
            0 => QIsa::Portable,
            1 if crate::CpuFeatures::detect().avx2 => QIsa::Avx2,
            2 if crate::CpuFeatures::detect().avx512vnni => QIsa::Avx512Vnni,
            3 if crate::CpuFeatures::detect().amx_int8 => QIsa::Amx,
            _ => return None,
        };
        let arith = match h[5] {
            0 => Arith::Exact,
            1 => Arith::SatPairs,
            2 => Arith::Dot4,
            _ => return None,
        };
        let bytes = n.div_ceil(NR).checked_mul(panel_bytes(arith, kp))?;
        let ok =
            kp == padded_k(isa, arith, k) && meta.len() == HEADER + 2 * n && data.len() == bytes;
        ok.then_some(Self {
            k,
            n,
            kp,
            isa,
            arith,
            meta,
            data,
        })
    }

    /// The sum of column `j`'s values.
    #[inline(always)]
    pub(crate) fn colsum(&self, j: usize) -> i32 {
        self.meta[HEADER + j] as i32
    }

    /// Column `j`'s zero point.
    #[inline(always)]
    pub(crate) fn zero(&self, j: usize) -> i32 {
        self.meta[HEADER + self.n + j] as i32
    }

    /// Panel `p`'s bytes.
    #[inline(always)]
    pub(crate) fn panel(&self, p: usize) -> &'a [u8] {
        self.panels(p, 1)
    }

    /// Panels `p..p + count`'s bytes, one after another.
    #[inline(always)]
    pub(crate) fn panels(&self, p: usize, count: usize) -> &'a [u8] {
        let len = panel_bytes(self.arith, self.kp);
        &self.data[p * len..(p + count) * len]
    }
}

/// A block of up to [`MR`] rows of `A`, packed for broadcasting.
pub(crate) struct APack {
    arith: Arith,
    kp: usize,
    /// [`Arith::SatPairs`]: per quad of `k`, per row, four bytes.
    pub(crate) quads: Vec<u32>,
    /// [`Arith::Exact`]: per pair of `k`, per row, two u16 values.
    pub(crate) pairs: Vec<u32>,
    /// Per row, the sum of its (unsigned-normalized) values.
    pub(crate) rowsum: [i32; MR],
    /// Per row, its zero point (unsigned-normalized).
    pub(crate) zero: [i32; MR],
}

impl APack {
    pub(crate) fn new(arith: Arith, kp: usize) -> Self {
        let (quads, pairs) = match arith {
            Arith::SatPairs | Arith::Dot4 => (vec![0u32; kp / 4 * MR], Vec::new()),
            Arith::Exact => (Vec::new(), vec![0u32; kp / 2 * MR]),
        };
        Self {
            arith,
            kp,
            quads,
            pairs,
            rowsum: [0; MR],
            zero: [0; MR],
        }
    }

    /// Packs rows `m0..m0 + rows` of `a` (first `k` values each); the
    /// rows past `rows` and the values past `k` are zeros.
    pub(crate) fn pack(&mut self, a: &AOperand<'_>, m0: usize, rows: usize, k: usize) {
        let flip = if a.signed { 0x80u8 } else { 0 };
        let shift = if a.signed { 128 } else { 0 };
        for r in 0..MR {
            let src: &[u8] = if r < rows {
                let s = (m0 + r) * a.lda;
                &a.data[s..s + k]
            } else {
                &[]
            };
            self.zero[r] = if r < rows {
                a.zero.at(m0 + r) + shift
            } else {
                0
            };
            self.rowsum[r] = src.iter().map(|&v| (v ^ flip) as i32).sum();
            let val = |q: usize| src.get(q).map_or(0u32, |&v| (v ^ flip) as u32);
            match self.arith {
                Arith::SatPairs | Arith::Dot4 => {
                    let whole = src.len() / 4;
                    let mask = u32::from_ne_bytes([flip; 4]);
                    for (q, w) in src.chunks_exact(4).enumerate() {
                        let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                        self.quads[q * MR + r] = w ^ mask;
                    }
                    for q in whole..self.kp / 4 {
                        let b = 4 * q;
                        self.quads[q * MR + r] =
                            val(b) | val(b + 1) << 8 | val(b + 2) << 16 | val(b + 3) << 24;
                    }
                }
                Arith::Exact => {
                    for (q, w) in src.chunks_exact(2).enumerate() {
                        self.pairs[q * MR + r] =
                            (w[0] ^ flip) as u32 | ((w[1] ^ flip) as u32) << 16;
                    }
                    for q in src.len() / 2..self.kp / 2 {
                        self.pairs[q * MR + r] = val(2 * q) | val(2 * q + 1) << 16;
                    }
                }
            }
        }
    }
}

/// Bytes of the two parts [`pack_b`] makes for a `[k, n]` `B`.
pub(crate) fn packed_bytes(k: usize, n: usize, isa: QIsa, arith: Arith) -> usize {
    let kp = padded_k(isa, arith, k);
    (HEADER + 2 * n) * 8 + n.div_ceil(NR) * panel_bytes(arith, kp)
}
