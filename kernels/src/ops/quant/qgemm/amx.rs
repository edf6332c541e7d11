//! AMX-INT8 blocks of the integer product (hot path): up to [`ROWS`] rows
//! of `A` against two panels of `B` on the tile registers, `tdpbusd`
//! summing 64 products of unsigned `A` bytes and signed `B` bytes into each
//! of 16 x 16 i32 per instruction, exactly ([`super::Arith::Dot4`]).
//!
//! A panel of the byte layout is already what a `B` tile loads: per quad of
//! `k` one row of 64 bytes (16 columns x 4 bytes), so sixteen quads (64 of
//! `k`) are one tile, read with a stride of 64. The AMX family pads `k` to
//! a multiple of 64 ([`K_STEP`]) so that every tile is whole. `A` tiles
//! take 16 rows of 64 bytes, read in place (stride `lda`) for a whole
//! block of 16 or 32 unsigned rows whose `k` is a multiple of 64, from a
//! zero-padded copy otherwise.
//!
//! Tiles: `tmm0`, `tmm1` the two 16-row halves of `A`; `tmm2`, `tmm3` the
//! two panels; `tmm4..tmm7` the four 16 x 16 sums. The tile registers are
//! not modelled by the compiler: each block configures them, runs its
//! instructions in separate `asm!` statements (nothing else in the process
//! touches tiles) and stores the sums to memory before returning.

use std::arch::asm;

use super::{AOperand, Arith, NR, PackedB, Sink, column_terms, put_row};

/// Rows of `A` per block (two tiles of 16).
pub(super) const ROWS: usize = super::BLOCK_ROWS_AMX;
/// Columns per block (two panels of 16).
pub(super) const COLS: usize = 32;
/// `k` per tile step, and the multiple the family pads `k` to.
pub(super) const K_STEP: usize = 64;

/// The `ldtilecfg` operand: palette 1, every tile 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Loads the tile configuration on this thread (a task, before its
/// blocks); [`release`] undoes it.
///
/// # Safety
/// The CPU has AMX-TILE and the process the permission to use it
/// (`CpuFeatures::amx_int8`).
pub(super) unsafe fn configure() {
    // SAFETY: CONFIG is a valid palette-1 configuration (64 aligned
    // bytes, reserved fields zero); the caller guarantees AMX.
    unsafe { asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly)) };
}

/// Returns the tile registers to their initial state.
///
/// # Safety
/// As [`configure`].
pub(super) unsafe fn release() {
    // SAFETY: the caller guarantees AMX.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// Raw sums of one block into `out` (row-major, [`COLS`] per row): rows
/// `0..16` from `a`, rows `16..32` from `a + 16 lda` when `two_row_tiles`,
/// against `panels[0]` and, when `two_panels`, `panels[1]`. Each panel
/// holds `ksteps * K_STEP / 4` quads of 64 bytes.
///
/// # Safety
/// The tiles are configured on this thread ([`configure`]); the rows of
/// `A` read — 16 (or 32) of `ksteps * K_STEP` bytes each, `lda` apart —
/// lie inside one allocation starting at `a`; each panel read is at least
/// `ksteps * 1024` bytes.
pub(super) unsafe fn block(
    a: *const u8,
    lda: usize,
    panels: [&[u8]; 2],
    two_row_tiles: bool,
    two_panels: bool,
    ksteps: usize,
    out: &mut [i32; ROWS * COLS],
) {
    assert!(
        panels[0].len() >= ksteps * 1024 && (!two_panels || panels[1].len() >= ksteps * 1024),
        "panels shorter than the reduction"
    );
    // SAFETY: the tiles are configured (the caller); tilezero touches
    // only tile registers.
    unsafe {
        asm!("tilezero tmm4", options(nostack, nomem));
        asm!("tilezero tmm5", options(nostack, nomem));
        asm!("tilezero tmm6", options(nostack, nomem));
        asm!("tilezero tmm7", options(nostack, nomem));
    }
    let (b0, b1) = (panels[0].as_ptr(), panels[1].as_ptr());
    for s in 0..ksteps {
        // SAFETY: A's 16-row tiles at byte `s * 64` of their rows and the
        // panels' 16 quads at byte `s * 1024` lie inside the operands (the
        // caller's sizes, the assertion above).
        unsafe {
            let a0 = a.add(s * K_STEP);
            asm!("tileloadd tmm0, [{p} + {s}*1]", p = in(reg) a0, s = in(reg) lda, options(nostack, readonly));
            asm!("tileloadd tmm2, [{p} + {s}*1]", p = in(reg) b0.add(s * 1024), s = in(reg) 64usize, options(nostack, readonly));
            asm!("tdpbusd tmm4, tmm0, tmm2", options(nostack, nomem));
            if two_panels {
                asm!("tileloadd tmm3, [{p} + {s}*1]", p = in(reg) b1.add(s * 1024), s = in(reg) 64usize, options(nostack, readonly));
                asm!("tdpbusd tmm5, tmm0, tmm3", options(nostack, nomem));
            }
            if two_row_tiles {
                let a1 = a0.add(16 * lda);
                asm!("tileloadd tmm1, [{p} + {s}*1]", p = in(reg) a1, s = in(reg) lda, options(nostack, readonly));
                asm!("tdpbusd tmm6, tmm1, tmm2", options(nostack, nomem));
                if two_panels {
                    asm!("tdpbusd tmm7, tmm1, tmm3", options(nostack, nomem));
                }
            }
        }
    }
    let o = out.as_mut_ptr().cast::<u8>();
    let stride = COLS * 4;
    // SAFETY: each store writes 16 rows of 64 bytes, `stride` apart, at
    // offsets inside `out` (32 rows of 128 bytes).
    unsafe {
        asm!("tilestored [{p} + {s}*1], tmm4", p = in(reg) o, s = in(reg) stride, options(nostack));
        asm!("tilestored [{p} + {s}*1], tmm5", p = in(reg) o.add(64), s = in(reg) stride, options(nostack));
        asm!("tilestored [{p} + {s}*1], tmm6", p = in(reg) o.add(16 * stride), s = in(reg) stride, options(nostack));
        asm!("tilestored [{p} + {s}*1], tmm7", p = in(reg) o.add(16 * stride + 64), s = in(reg) stride, options(nostack));
    }
}

/// Row blocks `rb` (of [`ROWS`] rows) of `a` against panels `pc` of `b`,
/// two panels at a time on the tiles, each corrected row handed to `sink`.
///
/// # Safety
/// The CPU has AMX-INT8 and the process the permission
/// (`CpuFeatures::amx_int8`); `b` is of the AMX family ([`Arith::Dot4`],
/// `kp` a multiple of [`K_STEP`]).
#[inline(always)]
pub(super) unsafe fn blocks<S: Sink>(
    a: &AOperand<'_>,
    b: &PackedB<'_>,
    rb: std::ops::Range<usize>,
    pc: std::ops::Range<usize>,
    sink: &S,
) {
    if pc.is_empty() || rb.is_empty() {
        return;
    }
    let (k, kp) = (b.k, b.kp);
    assert!(
        b.arith == Arith::Dot4 && kp.is_multiple_of(K_STEP),
        "an AMX-packed B"
    );
    let (flip, shift) = if a.signed { (0x80u8, 128) } else { (0, 0) };
    // Unsigned rows of `k = kp` bytes are read in place; any other block
    // goes through this zero-padded copy.
    let in_place = !a.signed && k == kp;
    let mut copy: Vec<u8> = Vec::new();
    let (zb, kzcs) = column_terms(b, &pc);
    let rowsums = zb.iter().any(|&z| z != 0);
    let mut out = [0i32; ROWS * COLS];
    let mut row = [0i32; NR];
    let (mut za, mut rs) = ([0i32; ROWS], [0i32; ROWS]);
    // SAFETY: the CPU has AMX with the permission (the caller).
    unsafe { configure() };
    for blk in rb {
        let m0 = blk * ROWS;
        let rows = ROWS.min(a.m - m0);
        let two_row_tiles = rows > 16;
        let tile_rows = if two_row_tiles { 32 } else { 16 };
        for r in 0..rows {
            let src = &a.data[(m0 + r) * a.lda..][..k];
            za[r] = a.zero.at(m0 + r) + shift;
            if rowsums {
                rs[r] = src.iter().map(|&v| (v ^ flip) as i32).sum();
            }
        }
        let (base, lda) = if in_place && rows == tile_rows {
            (a.data[m0 * a.lda..].as_ptr(), a.lda)
        } else {
            copy.resize(ROWS * kp, 0);
            for (r, dst) in copy.chunks_exact_mut(kp).take(tile_rows).enumerate() {
                if r < rows {
                    let src = &a.data[(m0 + r) * a.lda..][..k];
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d = v ^ flip;
                    }
                    dst[k..].fill(0);
                } else {
                    dst.fill(0);
                }
            }
            (copy.as_ptr(), kp)
        };
        let mut p = pc.start;
        while p < pc.end {
            let two_panels = p + 1 < pc.end;
            let second = if two_panels { p + 1 } else { p };
            // SAFETY: the tiles are configured above; `base` starts
            // `tile_rows` rows of `kp` bytes, `lda` apart, inside `a.data`
            // (16 or 32 whole rows of an unsigned `A` with `k = kp`) or
            // `copy` (`ROWS` rows of `kp`); each panel holds `kp / 4` quads
            // of 64 bytes (PackedB::view), `kp / K_STEP` steps of 1024.
            unsafe {
                block(
                    base,
                    lda,
                    [b.panel(p), b.panel(second)],
                    two_row_tiles,
                    two_panels,
                    kp / K_STEP,
                    &mut out,
                );
            }
            for (i, q) in (p..=second).enumerate() {
                let at = (q - pc.start) * NR;
                let (n0, cols) = (q * NR, NR.min(b.n - q * NR));
                for r in 0..rows {
                    let raw = &out[r * COLS + i * NR..][..NR];
                    let terms = (&zb[at..at + NR], &kzcs[at..at + NR]);
                    put_row::<true, S>(
                        sink,
                        &[raw],
                        (za[r], rs[r]),
                        terms,
                        (m0 + r, n0, cols),
                        &mut row,
                    );
                }
            }
            p += 2;
        }
    }
    // SAFETY: as `configure`.
    unsafe { release() };
}
