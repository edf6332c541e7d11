//! The f32 GEMM driver (hot path): `C = alpha * A * B (+ C)` cut into
//! `MR x NR` register tiles run by the ISA's micro-kernel, with `K` blocked
//! so one `KC x NR` panel of `B` stays in L1 while every row tile of the
//! task streams past it. Tasks split `N` panels first (so a 4-bit panel is
//! dequantized once) and then `M` tiles, over the caller's [`ParallelFor`].
//!
//! `A` is read in place (row-major, row stride `lda`) or from panels of
//! `MR` rows packed by the caller (`[row tile][k][MR]`, [`packed_a_len`]: the kernels
//! broadcast its elements at constant offsets from one pointer). `B` comes from a
//! [`BSrc`]: panels prepacked by [`pack_b`], a row-major or transposed
//! matrix read as is or copied panel by panel into a stack scratch, or
//! 4-bit weights dequantized panel by panel.

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod portable;

use super::Q4View;
use super::isa::Isa;
use crate::par::chunk;
use crate::{KernelError, ParallelFor};

/// `K` block length: a multiple of every 4-bit block size (16..=128) and
/// of 8; `KC x 32` floats fill 32 KiB of the 48 KiB L1.
pub(crate) const KC: usize = 256;
/// Bytes of `C` one pass over `K` keeps hot: a task's panels are taken in
/// chunks of about this much output (its rows x the chunk's columns), and
/// `K` is walked chunk by chunk, so the `K / KC` visits to an output tile
/// find it in L2 (for tiny-llm's LM head, 128 x 8192, whole-width passes
/// went to memory: 12-15 % slower).
const C_CHUNK_BYTES: usize = 256 << 10;
/// Widest panel of any ISA.
const NR_MAX: usize = 32;

/// Where `B[k][n]` comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BSrc<'a> {
    /// Panels from [`pack_b`] for this ISA's `NR`: `[panel][k][NR]`.
    Packed(&'a [f32]),
    /// Row-major: `B[k][n] = data[k * ldb + n]`.
    Rows { data: &'a [f32], ldb: usize },
    /// Transposed: `B[k][n] = data[n * ldb + k]`.
    Cols { data: &'a [f32], ldb: usize },
    /// 4-bit weights, dequantized one `KC x NR` panel at a time.
    Q4(&'a Q4View<'a>),
}

impl BSrc<'_> {
    /// The same source moved by `offset` elements (one batch matrix).
    fn at(self, offset: usize) -> Self {
        match self {
            Self::Packed(d) => Self::Packed(&d[offset..]),
            Self::Rows { data, ldb } => Self::Rows {
                data: &data[offset..],
                ldb,
            },
            Self::Cols { data, ldb } => Self::Cols {
                data: &data[offset..],
                ldb,
            },
            Self::Q4(v) => Self::Q4(v),
        }
    }
}

/// One (possibly batched) product. Batch `i` reads `A` at
/// `a[offsets(i).0..]`, `B` at `offsets(i).1` and writes `C` at `offsets(i).2`.
#[derive(Clone, Copy)]
pub(crate) struct Problem<'a> {
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) a: &'a [f32],
    /// Row stride of a row-major `A`; ignored for panels.
    pub(crate) lda: usize,
    /// `A` is in panels of this ISA's `MR` rows ([`packed_a_len`]).
    pub(crate) a_panels: bool,
    pub(crate) b: BSrc<'a>,
    pub(crate) ldc: usize,
    pub(crate) alpha: f32,
    /// `C` already holds an addend (bias, `beta * C`): add to it.
    pub(crate) accumulate: bool,
    pub(crate) batches: usize,
    pub(crate) offsets: &'a (dyn Fn(usize) -> (usize, usize, usize) + Sync),
}

/// The output, shared by tasks that write disjoint tiles.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutPtr {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: an `OutPtr` is only dereferenced by tasks of one `par.run` call
// that write pairwise disjoint regions of the buffer it came from (one region
// per task index, each index run once: the unsafe `ParallelFor` contract),
// while the `&mut [f32]` it was made from is borrowed for the whole call.
unsafe impl Send for OutPtr {}
// SAFETY: as above: concurrent users write disjoint elements only.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    pub(crate) fn new(out: &mut [f32]) -> Self {
        Self {
            ptr: out.as_mut_ptr(),
            len: out.len(),
        }
    }

    pub(crate) fn len(self) -> usize {
        self.len
    }

    pub(crate) fn ptr(self) -> *mut f32 {
        self.ptr
    }
}

/// One register tile: `C[0..mr][0..nvalid] (+)= alpha * A[0..mr][0..k] * B[0..k][0..NR]`.
///
/// Contract for the kernels (they read and write through these pointers):
/// `a + i * lda + p * a_step` is readable for `i < mr`, `p < k`, where
/// either `a_step == 1` (row-major) or `lda == 1` and `a_step == MR` (a
/// panel, [`packed_a_len`]); `b + p * ldb + j` is
/// readable for `p < k`, `j < b_cols` (`NR`, or `nvalid` for the last panel
/// of a matrix read in place); `c + i * ldc + j` is
/// writable (and readable when `accumulate`) for `i < mr`, `j < nvalid`;
/// `1 <= mr <= MR`, `1 <= nvalid <= NR`; no other thread touches that part of `C`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tile {
    pub(crate) mr: usize,
    pub(crate) k: usize,
    pub(crate) a: *const f32,
    pub(crate) lda: usize,
    /// Distance between `A[i][p]` and `A[i][p + 1]`: 1, or `MR` in panels.
    pub(crate) a_step: usize,
    pub(crate) b: *const f32,
    pub(crate) ldb: usize,
    pub(crate) c: *mut f32,
    pub(crate) ldc: usize,
    pub(crate) nvalid: usize,
    /// Readable columns of each `B` row: `NR`, or `nvalid` (masked loads).
    pub(crate) b_cols: usize,
    pub(crate) alpha: f32,
    pub(crate) accumulate: bool,
}

/// The offset of `A[i][p]` from a tile's `a`: row-major (`PANEL == 0`,
/// row stride `lda`) or in a panel `PANEL` rows high (a constant, so the
/// kernels broadcast at fixed offsets from one pointer).
#[inline(always)]
pub(crate) fn a_index<const PANEL: usize>(i: usize, p: usize, lda: usize) -> usize {
    if PANEL == 0 {
        i * lda + p
    } else {
        p * PANEL + i
    }
}

// `Isa::f32_mr`, the height of packed `A` panels, is each family's `MR`.
const _: () = assert!(
    Isa::Avx512.f32_mr() == <avx512::Avx512 as Arch>::MR
        && Isa::Avx2.f32_mr() == <avx2::Avx2 as Arch>::MR
        && Isa::Portable.f32_mr() == <portable::Portable as Arch>::MR
);

/// A micro-kernel family.
pub(crate) trait Arch {
    /// Rows per tile.
    const MR: usize;
    /// Columns per tile (the packed panel width).
    const NR: usize;
    /// Runs one tile.
    ///
    /// # Safety
    /// The CPU has this family's features, and `t` meets the [`Tile`] contract.
    unsafe fn tile(t: &Tile);
    /// Writes `B[k0 + p][panel * NR + j]` for `p < ceil8(kl)`, `j < NR` to
    /// `out[p * NR + j]` (zero beyond `N`).
    ///
    /// # Safety
    /// The CPU has this family's features; `k0` is a multiple of the block
    /// size, `k0 + kl <= K`, `panel * NR < N` (rounded up to tiles) and `out`
    /// holds `ceil8(kl) * NR` floats.
    unsafe fn q4_panel(v: &Q4View<'_>, panel: usize, k0: usize, kl: usize, out: *mut f32);
}

/// Packs `B` (`[K, N]`, or `[N, K]` when `trans_b`) into zero-padded panels
/// `[ceil(N / nr)][K][nr]` (a block of its own when large:
/// [`crate::packed::zeroed_part`]).
pub(crate) fn pack_b(
    b: &[f32],
    k: usize,
    n: usize,
    trans_b: bool,
    nr: usize,
) -> Result<crate::PackedPart, KernelError> {
    let panels = n.div_ceil(nr);
    crate::packed::zeroed_part("MatMul", panels * k * nr, |out: &mut [f32]| {
        for p in 0..panels {
            let dst = &mut out[p * k * nr..][..k * nr];
            let cols = nr.min(n - p * nr);
            for q in 0..k {
                for j in 0..cols {
                    let col = p * nr + j;
                    dst[q * nr + j] = if trans_b {
                        b[col * k + q]
                    } else {
                        b[q * n + col]
                    };
                }
            }
        }
    })
}

/// Floats of `A` (`[m, k]`) in zero-padded panels of `isa`'s `MR` rows,
/// `[ceil(m / MR)][k][MR]`: what [`Problem::a_panels`] reads.
pub(crate) fn packed_a_len(isa: Isa, m: usize, k: usize) -> usize {
    m.div_ceil(isa.f32_mr()) * isa.f32_mr() * k
}

/// Stack scratch for one `KC x NR` panel of `B`.
#[repr(C, align(64))]
struct Scratch([f32; KC * NR_MAX]);

/// Runs `prob` on `isa`'s kernels, writing `out`.
pub(crate) fn run(isa: Isa, prob: &Problem<'_>, out: &mut [f32], par: &dyn ParallelFor) {
    match isa {
        Isa::Avx512 => run_arch::<avx512::Avx512>(prob, out, par),
        Isa::Avx2 => run_arch::<avx2::Avx2>(prob, out, par),
        Isa::Portable => run_arch::<portable::Portable>(prob, out, par),
    }
}

/// Runs every batch of `prob` on the calling thread, writing through
/// `out` (for callers that split a larger output between their own tasks).
///
/// # Safety
/// `out` comes from a `&mut [f32]` that stays borrowed while this runs, and
/// no other thread reads or writes the elements of it that `prob` writes
/// (rows `0..m` x columns `0..n` at `ldc` from each batch's `C` offset).
pub(crate) unsafe fn run_on_caller(isa: Isa, prob: &Problem<'_>, out: OutPtr) {
    fn all<A: Arch>(prob: &Problem<'_>, out: OutPtr) {
        if prob.m == 0 || prob.n == 0 {
            return;
        }
        for batch in 0..prob.batches {
            block::<A>(prob, batch, 0..prob.m, 0..prob.n.div_ceil(A::NR), out);
        }
    }
    match isa {
        Isa::Avx512 => all::<avx512::Avx512>(prob, out),
        Isa::Avx2 => all::<avx2::Avx2>(prob, out),
        Isa::Portable => all::<portable::Portable>(prob, out),
    }
}

/// Below this many multiply-adds a product runs on the calling thread (a
/// parallel region costs about a microsecond of hand-offs).
pub(crate) const PARALLEL_MIN_MACS: usize = 1 << 17;
/// Tasks per thread when the work allows: the pool hands out tasks
/// dynamically, so a few per thread absorb a late or interrupted helper.
pub(crate) const TASKS_PER_THREAD: usize = 4;
/// Tasks per thread of a matrix product (by panels of `B`): a task's
/// panels are its own, so finer tasks cost no extra traffic, and the
/// region's tail — one thread finishing its last task while the other
/// waits — shrinks with them (threads run at unequal speeds on shared
/// machines).
const GEMM_TASKS_PER_THREAD: usize = 16;
/// Work per task of a large product (tens of microseconds): the tail
/// stays a small part of the region however long it runs.
const TARGET_TASK_MACS: usize = 1 << 22;
/// Least work worth a task of its own.
const MIN_TASK_MACS: usize = 1 << 16;

fn run_arch<A: Arch>(prob: &Problem<'_>, out: &mut [f32], par: &dyn ParallelFor) {
    let (m, n, k) = (prob.m, prob.n, prob.k);
    if m == 0 || n == 0 || prob.batches == 0 {
        return;
    }
    let outp = OutPtr::new(out);
    let panels = n.div_ceil(A::NR);
    let mtiles = m.div_ceil(A::MR);
    let threads = par.threads();
    let macs = prob.batches * m * n * k.max(1);
    if threads <= 1 || macs < PARALLEL_MIN_MACS {
        for batch in 0..prob.batches {
            block::<A>(prob, batch, 0..m, 0..panels, outp);
        }
        return;
    }
    let per_batch = (threads * GEMM_TASKS_PER_THREAD)
        .max(macs / TARGET_TASK_MACS)
        .div_ceil(prob.batches)
        .min((m * n * k.max(1) / MIN_TASK_MACS).max(1));
    let n_parts = panels.min(per_batch);
    // Splitting rows makes each task read (or decode) its panels of B
    // again: only when there are fewer panels than threads.
    let m_parts = if n_parts * prob.batches >= threads {
        1
    } else {
        mtiles.min(per_batch / n_parts).max(1)
    };
    let tasks = prob.batches * n_parts * m_parts;
    par.run(tasks, &|i| {
        let batch = i / (n_parts * m_parts);
        let rest = i % (n_parts * m_parts);
        let (mi, ni) = (rest / n_parts, rest % n_parts);
        let pr = chunk(panels, n_parts, 1, ni);
        let tr = chunk(mtiles, m_parts, 1, mi);
        let rows = (tr.start * A::MR).min(m)..(tr.end * A::MR).min(m);
        if !pr.is_empty() && !rows.is_empty() {
            block::<A>(prob, batch, rows, pr, outp);
        }
    });
}

/// Computes rows `rows` and panels `panels` of batch `batch`.
fn block<A: Arch>(
    prob: &Problem<'_>,
    batch: usize,
    rows: std::ops::Range<usize>,
    panels: std::ops::Range<usize>,
    out: OutPtr,
) {
    let (n, k, lda, ldc) = (prob.n, prob.k, prob.lda, prob.ldc);
    let (ao, bo, co) = (prob.offsets)(batch);
    let a = &prob.a[ao..];
    let b = prob.b.at(bo);
    // Bounds the kernels rely on (the operators check shapes first).
    let last_row = rows.end - 1;
    if prob.a_panels {
        assert!(
            rows.start.is_multiple_of(A::MR) && a.len() >= (last_row / A::MR + 1) * A::MR * k,
            "A panels too short"
        );
    } else {
        assert!(k == 0 || a.len() >= last_row * lda + k, "A too short");
    }
    let (a_lda, a_step) = if prob.a_panels { (1, A::MR) } else { (lda, 1) };
    assert!(co + last_row * ldc + n <= out.len(), "C too short");
    match b {
        BSrc::Packed(d) => assert!(
            d.len() >= n.div_ceil(A::NR) * k * A::NR,
            "packed B too short"
        ),
        BSrc::Rows { data, ldb } => {
            assert!(k == 0 || data.len() >= (k - 1) * ldb + n, "B too short")
        }
        BSrc::Cols { data, ldb } => {
            assert!(k == 0 || data.len() >= (n - 1) * ldb + k, "B too short")
        }
        BSrc::Q4(v) => assert!(v.k == k && v.n == n, "4-bit B mismatch"),
    }
    // SAFETY: `co` is within `out` (asserted above through `co + ... <= len`).
    let c = unsafe { out.ptr().add(co) };
    if k == 0 {
        if !prob.accumulate {
            for i in rows {
                for j in panels.start * A::NR..(panels.end * A::NR).min(n) {
                    // SAFETY: (i, j) is inside this task's disjoint tile range of C.
                    unsafe { c.add(i * ldc + j).write(0.0) };
                }
            }
        }
        return;
    }
    // A row-major B reused by several row tiles is copied panel by panel
    // into the scratch: contiguous rows stay in L1, strided ones may not.
    let copy_rows = rows.len() > A::MR;
    let needs_scratch = match b {
        BSrc::Packed(_) => false,
        BSrc::Rows { .. } => copy_rows,
        BSrc::Cols { .. } | BSrc::Q4(_) => true,
    };
    let mut scratch_store = std::mem::MaybeUninit::<Scratch>::uninit();
    let scratch: &mut [f32] = if needs_scratch {
        // Only the rows one K block uses (rounded up to 8 for 4-bit
        // panels), zeroed: a short K does not pay for a whole block.
        let len = KC.min(k).div_ceil(8) * 8 * NR_MAX;
        let p = scratch_store.as_mut_ptr().cast::<f32>();
        // SAFETY: `len <= KC * NR_MAX` floats of the store are zeroed
        // (0.0f32 is all zero bits) before the slice over exactly them is
        // made; the store outlives the slice.
        unsafe {
            p.write_bytes(0, len);
            std::slice::from_raw_parts_mut(p, len)
        }
    } else {
        &mut []
    };
    let chunk_panels = (C_CHUNK_BYTES / (rows.len() * A::NR * 4)).max(1);
    let mut chunk_start = panels.start;
    while chunk_start < panels.end {
        let chunk = chunk_start..(chunk_start + chunk_panels).min(panels.end);
        chunk_start = chunk.end;
        let mut k0 = 0;
        while k0 < k {
            let kl = KC.min(k - k0);
            for p in chunk.clone() {
                let n0 = p * A::NR;
                let nvalid = A::NR.min(n - n0);
                let (bp, ldb, b_cols): (*const f32, usize, usize) = match b {
                    BSrc::Packed(d) => (d[p * k * A::NR + k0 * A::NR..].as_ptr(), A::NR, A::NR),
                    BSrc::Rows { data, ldb } if copy_rows => {
                        for q in 0..kl {
                            let src = &data[(k0 + q) * ldb + n0..][..nvalid];
                            let dst = &mut scratch[q * A::NR..][..A::NR];
                            dst[..nvalid].copy_from_slice(src);
                            dst[nvalid..].fill(0.0);
                        }
                        (scratch.as_ptr(), A::NR, A::NR)
                    }
                    BSrc::Rows { data, ldb } => (data[k0 * ldb + n0..].as_ptr(), ldb, nvalid),
                    BSrc::Cols { data, ldb } => {
                        for j in 0..A::NR {
                            if j < nvalid {
                                let src = &data[(n0 + j) * ldb + k0..][..kl];
                                for (q, &x) in src.iter().enumerate() {
                                    scratch[q * A::NR + j] = x;
                                }
                            } else {
                                for q in 0..kl {
                                    scratch[q * A::NR + j] = 0.0;
                                }
                            }
                        }
                        (scratch.as_ptr(), A::NR, A::NR)
                    }
                    BSrc::Q4(v) => {
                        debug_assert!(
                            k0.is_multiple_of(v.block_size)
                                && kl.div_ceil(8) * 8 * A::NR <= scratch.len()
                        );
                        // SAFETY: the kernel family was selected on this CPU; k0 is a
                        // multiple of KC (a multiple of every block size), k0 + kl <= K,
                        // p < panels of N and the scratch holds KC * NR >= ceil8(kl) * NR floats.
                        unsafe { A::q4_panel(v, p, k0, kl, scratch.as_mut_ptr()) };
                        (scratch.as_ptr(), A::NR, A::NR)
                    }
                };
                let mut i = rows.start;
                while i < rows.end {
                    let mr = A::MR.min(rows.end - i);
                    let a_at = if prob.a_panels {
                        i * k + k0 * A::MR
                    } else {
                        i * lda + k0
                    };
                    let t = Tile {
                        mr,
                        k: kl,
                        a: a[a_at..].as_ptr(),
                        lda: a_lda,
                        a_step,
                        b: bp,
                        ldb,
                        // SAFETY: (i, n0) is inside C (asserted above).
                        c: unsafe { c.add(i * ldc + n0) },
                        ldc,
                        nvalid,
                        b_cols,
                        alpha: prob.alpha,
                        accumulate: prob.accumulate || k0 > 0,
                    };
                    // SAFETY: the family was selected on this CPU (`Isa` invariant).
                    // A rows i..i+mr hold k0 + kl <= K floats from `a` (asserted
                    // length; in panels, i is a multiple of MR and the tile's
                    // panel holds K x MR floats); B rows: packed panels hold K x NR, row-major
                    // panels have b_cols = min(NR, N - n0) columns for k0 + kl
                    // rows, the scratch holds kl x NR; C rows i..i+mr, columns n0..n0+nvalid
                    // are inside C and belong to this task only.
                    unsafe { A::tile(&t) };
                    i += mr;
                }
            }
            k0 += kl;
        }
    }
}
