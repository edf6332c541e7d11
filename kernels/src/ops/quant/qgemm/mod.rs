//! Integer matrix product of 8-bit operands (hot path, packing on the cold
//! path when `B` is a constant):
//! `C[m][n] = sum_k (A[m][k] - za[m]) * (B[k][n] - zb[n])` in wrapping i32,
//! handed row by row to a [`Sink`] that stores it (int32), scales it to
//! float or requantizes it to 8 bits.
//!
//! # Arithmetic
//!
//! `A` is normalized to unsigned bytes (an int8 `A` is stored `a + 128`
//! with its zero point moved by 128, which leaves every difference equal),
//! `B` keeps its own signedness. The kernels compute the raw sums
//! `D = sum_k a * b`; the zero points enter afterwards through row sums of
//! `A` and column sums of `B`:
//! `C = D - zb * rowsum(A) - za * colsum(B) + K * za * zb`.
//!
//! Three arithmetics ([`Arith`]):
//!
//! * [`Arith::Exact`]: every product and sum exact (i32), on every kernel
//!   family. `B` is packed as i16 pairs of `k` (`vpmaddwd` on AVX2).
//! * [`Arith::SatPairs`]: uint8 `A` times int8 `B` on AVX2 the way ONNX
//!   Runtime's x86 kernels compute it (`vpmaddubsw` then `vpmaddwd`): the
//!   two products of each pair of consecutive `k` (`k = 2j, 2j + 1`) are
//!   summed and saturated to i16, then the pairs are summed exactly. Equal
//!   to [`Arith::Exact`] unless a pair exceeds the i16 range (a uint8 above
//!   128 times an int8 of magnitude above 128 both). `B` is packed as
//!   bytes, four `k` per column. [`reference`] models it for the tests.
//! * [`Arith::Dot4`]: every product and sum exact, over the byte layout of
//!   [`Arith::SatPairs`]: AVX-512 VNNI's `vpdpbusd` sums four unsigned `A`
//!   bytes times four signed `B` bytes into i32 exactly, as ONNX Runtime's
//!   kernels do on a CPU with VNNI; AMX's `tdpbusd` sums sixty-four.
//!
//! # Layouts
//!
//! `B` is cut into panels of [`NR`] columns (the last zero-padded) and `K`
//! is padded with zeros to a multiple of 4. Each task packs a block of
//! [`MR`] rows of `A` (zero-padded) once and runs it against its panels.
//!
//! The AMX family works on blocks of 32 rows and two panels on the tile
//! registers (`amx`), with `k` padded to a multiple of 64.
//!
//! Files: `pack` (packing `A` and `B`, column sums), `avx2`, `avx512` and
//! `amx` (the micro-kernels), `sink` (what is done with `C`), `tests`.

#[cfg(target_arch = "x86_64")]
mod amx;
mod avx2;
mod avx512;
mod pack;
pub(crate) mod sink;
#[cfg(test)]
mod tests;

pub(crate) use pack::{PackedB, QMatrix, VERSION, pack_b, packed_bytes};
pub(crate) use sink::Sink;

use crate::CpuFeatures;
use crate::ParallelFor;
use avx512::{GROUP, Tiles};

/// Rows of a micro-tile.
pub(crate) const MR: usize = 4;
/// Rows of a block of the AMX family (two tiles of 16).
const BLOCK_ROWS_AMX: usize = 32;
/// Columns of a panel (two AVX2 vectors of i32).
pub(crate) const NR: usize = 16;

/// How products are summed (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Arith {
    /// Every product and sum exact.
    Exact,
    /// Pairs of consecutive `k` saturated to i16, as `vpmaddubsw` does.
    SatPairs,
    /// Every product and sum exact, four `k` at a time over bytes, as
    /// `vpdpbusd` does (signed `B`).
    Dot4,
}

/// The kernel family of an integer product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum QIsa {
    /// Scalar Rust.
    Portable,
    /// AVX2 (`vpmaddubsw`, `vpmaddwd`).
    Avx2,
    /// AVX-512 VNNI (`vpdpbusd`) for signed `B`, AVX2 for unsigned.
    Avx512Vnni,
    /// AMX-INT8 (`tdpbusd` on tiles) for signed `B`, AVX2 for unsigned.
    Amx,
}

impl QIsa {
    /// The best family `cpu` asks for that this CPU has.
    pub(crate) fn select(cpu: CpuFeatures) -> Self {
        let have = CpuFeatures::detect();
        if cpu.amx_int8 && have.amx_int8 {
            Self::Amx
        } else if cpu.avx512vnni && have.avx512vnni {
            Self::Avx512Vnni
        } else if cpu.avx2 && have.avx2 {
            Self::Avx2
        } else {
            Self::Portable
        }
    }

    /// The name used in layout keys.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Portable => "portable",
            Self::Avx2 => "avx2",
            Self::Avx512Vnni => "avx512vnni",
            Self::Amx => "amx",
        }
    }

    /// The arithmetic this family uses for these operand signs: ONNX
    /// Runtime's saturating pairs for uint8 `A` times int8 `B` on AVX2,
    /// four-byte dot products for any `A` times int8 `B` on VNNI (`A` is
    /// normalized to unsigned), exact pairs otherwise.
    pub(crate) fn arith(self, a_signed: bool, b_signed: bool) -> Arith {
        match self {
            Self::Avx2 if !a_signed && b_signed => Arith::SatPairs,
            Self::Avx512Vnni | Self::Amx if b_signed => Arith::Dot4,
            _ => Arith::Exact,
        }
    }

    /// Whether the CPU runs this family's AVX2 code (every family but the
    /// portable one).
    pub(crate) fn avx2(self) -> bool {
        self != Self::Portable
    }

    /// Whether products in `arith` run on the AMX tiles.
    pub(crate) fn tiles(self, arith: Arith) -> bool {
        self == Self::Amx && arith == Arith::Dot4
    }
}

/// Zero points of `A`: one, or one per row.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ZeroA<'a> {
    /// One zero point (in `A`'s own signedness).
    Scalar(i32),
    /// One per row of the folded `M`, repeating every `period` rows.
    PerRow(&'a [i32]),
}

impl ZeroA<'_> {
    #[inline(always)]
    fn at(&self, m: usize) -> i32 {
        match *self {
            Self::Scalar(z) => z,
            Self::PerRow(z) => z[m % z.len()],
        }
    }
}

/// The `A` operand: `m` rows of `k` 8-bit values, `lda` apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AOperand<'a> {
    /// The bytes (int8 values stored as their two's complement).
    pub(crate) data: &'a [u8],
    /// Whether the bytes are int8.
    pub(crate) signed: bool,
    /// Rows.
    pub(crate) m: usize,
    /// Distance between rows.
    pub(crate) lda: usize,
    /// Zero points.
    pub(crate) zero: ZeroA<'a>,
}

/// `C = (A - za) (B - zb)` for `A` against packed `B`, each corrected row
/// segment given to `sink` (rows and panels split across `par`).
pub(crate) fn run<S: Sink>(a: &AOperand<'_>, b: &PackedB<'_>, sink: &S, par: &dyn ParallelFor) {
    let (m, n) = (a.m, b.n);
    if m == 0 || n == 0 {
        return;
    }
    // The AMX blocks take 32 rows and panels in pairs.
    let (unit, pair) = if b.isa.tiles(b.arith) {
        (BLOCK_ROWS_AMX, 2)
    } else {
        (MR, 1)
    };
    let blocks = m.div_ceil(unit);
    let panels = n.div_ceil(NR);
    let threads = par.threads().max(1);
    let work = m * n * b.k.max(1);
    let (row_tasks, col_tasks) = if threads == 1 || work < 64 * 1024 {
        (1, 1)
    } else {
        let rows = blocks.min(threads * 4);
        let cols = if rows >= threads * 2 {
            1
        } else {
            panels.div_ceil(pair).min((threads * 4).div_ceil(rows))
        };
        (rows, cols)
    };
    let task = |t: usize| {
        let rb = crate::par::chunk(blocks, row_tasks, 1, t / col_tasks);
        let pc = crate::par::chunk(panels, col_tasks, pair, t % col_tasks);
        block_range(a, b, rb, pc, sink);
    };
    if row_tasks * col_tasks == 1 {
        task(0);
    } else {
        par.run(row_tasks * col_tasks, &task);
    }
}

/// Row blocks `rb` against panels `pc`, on the kernel family of `b`.
fn block_range<S: Sink>(
    a: &AOperand<'_>,
    b: &PackedB<'_>,
    rb: std::ops::Range<usize>,
    pc: std::ops::Range<usize>,
    sink: &S,
) {
    #[cfg(target_arch = "x86_64")]
    match b.isa {
        QIsa::Amx if b.arith == Arith::Dot4 => {
            // SAFETY: a packed B of the AMX family exists only when the CPU
            // has AMX-INT8 with the permission, and AVX-512 VNNI
            // (QIsa::select, PackedB::view); its `k` is padded to 64
            // (pack::padded_k).
            return unsafe { block_range_amx(a, b, rb, pc, sink) };
        }
        // SAFETY: a packed B of the VNNI (or AMX) family exists only when
        // the CPU has AVX-512 VNNI (QIsa::select, PackedB::view).
        QIsa::Avx512Vnni | QIsa::Amx => return unsafe { block_range_avx512(a, b, rb, pc, sink) },
        // SAFETY: a packed B of the AVX2 family exists only when the CPU
        // has AVX2 (QIsa::select, PackedB::view).
        QIsa::Avx2 => return unsafe { block_range_avx2(a, b, rb, pc, sink) },
        QIsa::Portable => {}
    }
    blocks::<false, S>(a, b, rb, pc, sink);
}

/// [`blocks`] compiled for AVX-512: the correction and the sink's output
/// stage 16 wide.
///
/// # Safety
/// The CPU has AVX-512 F, BW, DQ, VL and VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
unsafe fn block_range_avx512<S: Sink>(
    a: &AOperand<'_>,
    b: &PackedB<'_>,
    rb: std::ops::Range<usize>,
    pc: std::ops::Range<usize>,
    sink: &S,
) {
    blocks::<true, S>(a, b, rb, pc, sink);
}

/// The AMX blocks ([`amx::blocks`]) with the correction and the sink's
/// output stage compiled for AVX-512.
///
/// # Safety
/// The CPU has AMX-INT8 (with the permission) and AVX-512 F, BW, DQ, VL
/// and VNNI; `b` is of the AMX family with [`Arith::Dot4`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma")]
unsafe fn block_range_amx<S: Sink>(
    a: &AOperand<'_>,
    b: &PackedB<'_>,
    rb: std::ops::Range<usize>,
    pc: std::ops::Range<usize>,
    sink: &S,
) {
    // SAFETY: the caller's guarantees are amx::blocks's.
    unsafe { amx::blocks(a, b, rb, pc, sink) };
}

/// [`blocks`] compiled for AVX2, so that the zero-point correction and the
/// sink's output stage are vectorized 8 wide.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_range_avx2<S: Sink>(
    a: &AOperand<'_>,
    b: &PackedB<'_>,
    rb: std::ops::Range<usize>,
    pc: std::ops::Range<usize>,
    sink: &S,
) {
    blocks::<false, S>(a, b, rb, pc, sink);
}

/// Where a block's rows of `A` come from.
enum Rows<'a> {
    /// Packed into broadcast words ([`pack::APack`]).
    Packed(pack::APack),
    /// Read in place: unsigned rows whose `k` is a multiple of 4 feed the
    /// byte-layout kernels their words directly.
    Direct([&'a [u8]; MR]),
}

/// `WIDE`: compiled for AVX-512 (the sink's vector output stage).
#[inline(always)]
fn blocks<const WIDE: bool, S: Sink>(
    a: &AOperand<'_>,
    b: &PackedB<'_>,
    rb: std::ops::Range<usize>,
    pc: std::ops::Range<usize>,
    sink: &S,
) {
    let k = b.k;
    let direct = matches!(
        (b.isa, b.arith),
        (QIsa::Avx2, Arith::SatPairs) | (QIsa::Avx512Vnni | QIsa::Amx, Arith::Dot4)
    ) && !a.signed
        && k == b.kp;
    let mut rows_of = if direct {
        Rows::Direct([&[][..]; MR])
    } else {
        Rows::Packed(pack::APack::new(b.arith, b.kp))
    };
    let (zb, kzcs) = column_terms(b, &pc);
    let rowsums = zb.iter().any(|&z| z != 0);
    // The VNNI family runs GROUP panels at once.
    let grouped = cfg!(target_arch = "x86_64")
        && b.arith == Arith::Dot4
        && matches!(b.isa, QIsa::Avx512Vnni | QIsa::Amx);
    let mut tiles = [[0i32; MR * NR]; GROUP];
    let mut row = [0i32; GROUP * NR];
    for blk in rb {
        let m0 = blk * MR;
        let rows = MR.min(a.m - m0);
        let (mut za, mut rs) = ([0i32; MR], [0i32; MR]);
        match &mut rows_of {
            Rows::Packed(p) => {
                p.pack(a, m0, rows, k);
                (za, rs) = (p.zero, p.rowsum);
            }
            Rows::Direct(d) => {
                for (r, slot) in d.iter_mut().enumerate() {
                    // Rows past the block's last repeat it (their sums
                    // are never stored).
                    let src = &a.data[(m0 + r.min(rows - 1)) * a.lda..][..k];
                    *slot = src;
                    za[r] = a.zero.at(m0 + r.min(rows - 1));
                    if rowsums {
                        rs[r] = src.iter().map(|&v| v as i32).sum();
                    }
                }
            }
        }
        let mut p = pc.start;
        while p < pc.end {
            let group = if grouped && pc.end - p >= GROUP {
                kernel_group(b, &rows_of, p, &mut tiles);
                GROUP
            } else {
                kernel(b, &rows_of, p, &mut tiles[0]);
                1
            };
            let at = (p - pc.start) * NR;
            let width = group * NR;
            let terms = (&zb[at..at + width], &kzcs[at..at + width]);
            let (n0, cols) = (p * NR, width.min(b.n - p * NR));
            for r in 0..rows {
                let raw: [&[i32]; GROUP] = std::array::from_fn(|g| &tiles[g][r * NR..][..NR]);
                put_row::<WIDE, S>(
                    sink,
                    &raw[..group],
                    (za[r], rs[r]),
                    terms,
                    (m0 + r, n0, cols),
                    &mut row,
                );
            }
            p += group;
        }
    }
}

/// Row `m`'s raw sums of consecutive panels, one segment of [`NR`] per
/// panel in `raw` (columns `n0..n0 + cols`), corrected by the zero points
/// — `za` and the row sum `rs` of the row, the panels' `zb` and
/// `K zb - colsum` per column — and handed to `sink` in one call (through
/// its AVX-512 output stage when `WIDE`: only code compiled for AVX-512 F,
/// BW and VL on such a CPU passes it).
#[inline(always)]
fn put_row<const WIDE: bool, S: Sink>(
    sink: &S,
    raw: &[&[i32]],
    (za, rs): (i32, i32),
    (zb, kzcs): (&[i32], &[i32]),
    (m, n0, cols): (usize, usize, usize),
    row: &mut [i32],
) {
    let width = raw.len() * NR;
    let (row, zb, kzcs) = (&mut row[..width], &zb[..width], &kzcs[..width]);
    for (s, seg) in raw.iter().enumerate() {
        for (j, &v) in seg[..NR].iter().enumerate() {
            let c = s * NR + j;
            row[c] = v
                .wrapping_add(za.wrapping_mul(kzcs[c]))
                .wrapping_sub(zb[c].wrapping_mul(rs));
        }
    }
    #[cfg(target_arch = "x86_64")]
    if WIDE {
        // SAFETY: WIDE only in code compiled for AVX-512 and run on a CPU
        // that has it (block_range_avx512, amx::blocks).
        unsafe { sink.put_avx512(m, n0, &row[..cols]) };
        return;
    }
    sink.put(m, n0, &row[..cols]);
}

/// Per column of panels `pc`: its zero point and `K zb - colsum`, so that
/// `C = D - zb rowsum(A) + za (K zb - colsum(B))`.
fn column_terms(b: &PackedB<'_>, pc: &std::ops::Range<usize>) -> (Vec<i32>, Vec<i32>) {
    let (c0, width) = (pc.start * NR, pc.len() * NR);
    let mut zb = vec![0i32; width];
    let mut kzcs = vec![0i32; width];
    for j in c0..(c0 + width).min(b.n) {
        zb[j - c0] = b.zero(j);
        kzcs[j - c0] = (b.k as i32)
            .wrapping_mul(b.zero(j))
            .wrapping_sub(b.colsum(j));
    }
    (zb, kzcs)
}

/// One `MR x NR` tile of raw sums for panel `p`.
#[inline(always)]
fn kernel(b: &PackedB<'_>, rows: &Rows<'_>, p: usize, tile: &mut [i32; MR * NR]) {
    let a = match rows {
        #[cfg(target_arch = "x86_64")]
        Rows::Direct(d) => {
            if b.arith == Arith::Dot4 {
                // SAFETY: direct rows are used with Dot4 only for a packed
                // B of the VNNI family (the CPU has it); each row holds
                // `k = kp` bytes (`blocks`), the panel `kp / 4` quads
                // (PackedB::view).
                unsafe { avx512::dot4_rows(b.panel(p), d, b.kp / 4, std::array::from_mut(tile)) };
            } else {
                // SAFETY: as above, for the AVX2 family and SatPairs.
                unsafe { avx2::sat_pairs_rows(b.panel(p), d, b.kp / 4, tile) };
            }
            return;
        }
        #[cfg(not(target_arch = "x86_64"))]
        Rows::Direct(_) => unreachable!("direct rows need an x86 family"),
        Rows::Packed(a) => a,
    };
    match (b.isa, b.arith) {
        #[cfg(target_arch = "x86_64")]
        (QIsa::Avx512Vnni | QIsa::Amx, Arith::Dot4) => {
            // SAFETY: a packed B of the VNNI family exists only when the CPU
            // has AVX-512 VNNI (QIsa::select); the panel and the packed rows
            // hold `kp / 4` quads (APack::pack and PackedB's constructor).
            unsafe { avx512::dot4(b.panel(p), &a.quads, b.kp / 4, std::array::from_mut(tile)) }
        }
        #[cfg(target_arch = "x86_64")]
        (QIsa::Avx2 | QIsa::Avx512Vnni | QIsa::Amx, Arith::SatPairs) => {
            // SAFETY: a packed B of the AVX2 family exists only when the CPU
            // has AVX2 (QIsa::select); the panel and the packed rows hold
            // `kp / 4` quads (APack::pack and PackedB's constructor).
            unsafe { avx2::sat_pairs(b.panel(p), &a.quads, b.kp / 4, tile) }
        }
        #[cfg(target_arch = "x86_64")]
        (QIsa::Avx2 | QIsa::Avx512Vnni | QIsa::Amx, Arith::Exact) => {
            // SAFETY: as above, with `kp / 2` pairs of i16.
            unsafe { avx2::exact(b.panel(p), &a.pairs, b.kp / 2, tile) }
        }
        (_, Arith::Exact) => portable_exact(b.panel(p), &a.pairs, b.kp / 2, tile),
        (_, Arith::SatPairs) => portable_sat_pairs(b.panel(p), &a.quads, b.kp / 4, tile),
        (_, Arith::Dot4) => portable_dot4(b.panel(p), &a.quads, b.kp / 4, tile),
    }
}

/// [`GROUP`] tiles of raw sums for panels `p..p + GROUP` of a packed `B`
/// of the VNNI family with [`Arith::Dot4`] (`blocks` calls it only then).
#[inline(always)]
fn kernel_group(b: &PackedB<'_>, rows: &Rows<'_>, p: usize, tiles: &mut Tiles<GROUP>) {
    #[cfg(target_arch = "x86_64")]
    {
        let panels = b.panels(p, GROUP);
        let kquads = b.kp / 4;
        match rows {
            // SAFETY: a packed B of the VNNI family exists only when the
            // CPU has AVX-512 VNNI (QIsa::select); each direct row holds
            // `k = kp` bytes (`blocks`), the packed rows `kp / 4` quads
            // (APack::pack), and `panels` GROUP panels of `kp / 4` quads.
            Rows::Direct(d) => unsafe { avx512::dot4_rows(panels, d, kquads, tiles) },
            // SAFETY: as above.
            Rows::Packed(a) => unsafe { avx512::dot4(panels, &a.quads, kquads, tiles) },
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (b, rows, p, tiles);
        unreachable!("grouped panels need the VNNI family");
    }
}

/// Scalar exact tile over the byte layout (the arithmetic of the VNNI
/// kernel, for a CPU without it).
fn portable_dot4(panel: &[u8], quads: &[u32], kquads: usize, tile: &mut [i32; MR * NR]) {
    tile.fill(0);
    for q in 0..kquads {
        let bq = &panel[q * NR * 4..(q + 1) * NR * 4];
        for r in 0..MR {
            let a = quads[q * MR + r].to_le_bytes();
            for j in 0..NR {
                let b = &bq[4 * j..4 * j + 4];
                let dot: i32 = (0..4).map(|i| a[i] as i32 * b[i] as i8 as i32).sum();
                tile[r * NR + j] = tile[r * NR + j].wrapping_add(dot);
            }
        }
    }
}

/// Scalar exact tile over the i16 pair layout.
fn portable_exact(panel: &[u8], pairs: &[u32], kpairs: usize, tile: &mut [i32; MR * NR]) {
    tile.fill(0);
    for q in 0..kpairs {
        let bq = &panel[q * NR * 4..(q + 1) * NR * 4];
        for r in 0..MR {
            let w = pairs[q * MR + r];
            let (a0, a1) = ((w & 0xFFFF) as i32, (w >> 16) as i32);
            for j in 0..NR {
                let b0 = i16::from_le_bytes([bq[4 * j], bq[4 * j + 1]]) as i32;
                let b1 = i16::from_le_bytes([bq[4 * j + 2], bq[4 * j + 3]]) as i32;
                tile[r * NR + j] += a0 * b0 + a1 * b1;
            }
        }
    }
}

/// Scalar saturating-pairs tile over the byte layout (the arithmetic of
/// the AVX2 kernel, for a CPU without it).
fn portable_sat_pairs(panel: &[u8], quads: &[u32], kquads: usize, tile: &mut [i32; MR * NR]) {
    tile.fill(0);
    for q in 0..kquads {
        let bq = &panel[q * NR * 4..(q + 1) * NR * 4];
        for r in 0..MR {
            let a = quads[q * MR + r].to_le_bytes();
            for j in 0..NR {
                let b = &bq[4 * j..4 * j + 4];
                let pair = |i: usize| {
                    let s =
                        a[i] as i32 * b[i] as i8 as i32 + a[i + 1] as i32 * b[i + 1] as i8 as i32;
                    s.clamp(i16::MIN as i32, i16::MAX as i32)
                };
                tile[r * NR + j] += pair(0) + pair(2);
            }
        }
    }
}

/// Scalar models of both arithmetics on unpacked operands (for tests and
/// as the definition the kernels are checked against).
#[cfg(test)]
pub(crate) mod reference {
    use super::Arith;

    /// `C[m][n] = sum_k (a - za[m]) (b - zb[n])`, `a` row-major `[m, k]`,
    /// `b` row-major `[k, n]`, both as i32 values of their own type.
    /// [`Arith::SatPairs`] saturates `a * b` pair sums of the raw values
    /// (with `A` normalized to unsigned) to i16 before summing.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn qgemm(
        arith: Arith,
        a: &[i32],
        a_signed: bool,
        b: &[i32],
        m: usize,
        k: usize,
        n: usize,
        za: &[i32],
        zb: &[i32],
    ) -> Vec<i32> {
        let shift = if a_signed { 128 } else { 0 };
        let mut c = vec![0i32; m * n];
        for i in 0..m {
            for j in 0..n {
                let za = za[i % za.len()] + shift;
                let zb = zb[j % zb.len()];
                let av = |p: usize| a[i * k + p] + shift;
                let bv = |p: usize| b[p * n + j];
                let raw: i32 = match arith {
                    Arith::Exact | Arith::Dot4 => (0..k).map(|p| av(p) * bv(p)).sum(),
                    Arith::SatPairs => (0..k.div_ceil(2))
                        .map(|q| {
                            let s = (2 * q..(2 * q + 2).min(k))
                                .map(|p| av(p) * bv(p))
                                .sum::<i32>();
                            s.clamp(i16::MIN as i32, i16::MAX as i32)
                        })
                        .sum(),
                };
                let rs: i32 = (0..k).map(av).sum();
                let cs: i32 = (0..k).map(bv).sum();
                c[i * n + j] = raw - zb * rs - za * cs + k as i32 * za * zb;
            }
        }
        c
    }
}
