//! Keys stored transposed for attention rows that share them (the hot path
//! of a prefill): [`KeyPanels`].
//!
//! A row's scores against a block of keys are `KEY_BLOCK` dot products of
//! length `d`. Computed key by key, each ends in a horizontal reduction
//! across vector lanes. With the keys of one (batch, key/value head) stored
//! as a `d x keys` panel of f32, the same block is `d` broadcast
//! multiply-adds of the query's element into `KEY_BLOCK` lanes: no
//! reduction, no conversion from f16, every load contiguous. Building a
//! panel reads each key once; it pays off when several query rows score the
//! same keys (prefill: every later position, and every query head of a
//! group), and is skipped otherwise.

use super::Float;
use super::problem::{KEY_BLOCK, Problem};
use crate::vector::madd;
use crate::{ParallelFor, Sequential, for_each_chunk_mut};

/// Query rows per key (positions times the heads of a group) from which
/// panels are built.
const MIN_ROWS_PER_KEY: usize = 8;
/// Largest panel buffer built (bytes); longer contexts score key by key.
const MAX_PANEL_BYTES: usize = 64 << 20;
/// Key elements below which panels are built on the calling thread.
const PARALLEL_MIN_KEYS: usize = 1 << 16;

/// The keys of every (batch, key/value head) as `d x ld` f32 panels
/// (column `j` = key `j`; columns past a batch's last key are zero).
#[derive(Debug)]
pub(crate) struct KeyPanels {
    data: Vec<f32>,
    d: usize,
    /// Panel row length: every key plus one block of zero padding, so a
    /// block starting at any key reads `KEY_BLOCK` columns in bounds.
    ld: usize,
    kv_heads: usize,
}

impl KeyPanels {
    /// Panels for `p`'s keys, or `None` when too few rows share each key
    /// or the panels would be too large.
    pub(crate) fn build<T: Float>(p: &Problem<'_, T>, par: &dyn ParallelFor) -> Option<Self> {
        let group = p.q_heads / p.kv_heads.max(1);
        if p.q_len.saturating_mul(group) < MIN_ROWS_PER_KEY || p.d == 0 {
            return None;
        }
        // Keys each batch's rows may reach (the rows past them are never read).
        let ends: Vec<usize> = (0..p.batch)
            .map(|b| (0..p.q_len).map(|i| (p.keys)(b, i).end).max().unwrap_or(0))
            .collect();
        let total = ends.iter().copied().max().unwrap_or(0);
        let ld = (total + KEY_BLOCK).next_multiple_of(16);
        let panel = p.d.checked_mul(ld)?;
        let len = panel.checked_mul(p.batch)?.checked_mul(p.kv_heads)?;
        if total == 0 || len.checked_mul(4)? > MAX_PANEL_BYTES {
            return None;
        }
        let mut data = vec![0.0f32; len];
        let par: &dyn ParallelFor = if len < PARALLEL_MIN_KEYS {
            &Sequential
        } else {
            par
        };
        let (d, kv) = (p.d, p.kv_heads);
        for_each_chunk_mut(par, &mut data, panel, &|offset, out: &mut [f32]| {
            let bg = offset / panel;
            let (b, g) = (bg / kv, bg % kv);
            for j in 0..ends[b] {
                let key = &p.k.row(b, g, j)[..d];
                for (dd, &x) in key.iter().enumerate() {
                    out[dd * ld + j] = x.to_f32();
                }
            }
        });
        Some(Self {
            data,
            d,
            ld,
            kv_heads: kv,
        })
    }

    /// `s[t] = q . key(j0 + t)` for the `KEY_BLOCK` keys from `j0` of
    /// (batch `b`, key/value head `g`); `q` holds `d` floats and `j0` is
    /// below the batch's key count (keys past it score 0).
    #[inline(always)]
    pub(crate) fn scores<const FMA: bool>(
        &self,
        b: usize,
        g: usize,
        q: &[f32],
        j0: usize,
        s: &mut [f32; KEY_BLOCK],
    ) {
        let panel = &self.data[(b * self.kv_heads + g) * self.d * self.ld..][..self.d * self.ld];
        // Two accumulator sets (even and odd `d`) keep twice as many
        // multiply-adds in flight.
        let mut even = [0.0f32; KEY_BLOCK];
        let mut odd = [0.0f32; KEY_BLOCK];
        let q = &q[..self.d];
        let mut pairs = q.chunks_exact(2);
        let mut row = j0;
        for pair in pairs.by_ref() {
            let c0: &[f32; KEY_BLOCK] = panel[row..row + KEY_BLOCK]
                .try_into()
                .expect("a panel row holds a block past every key");
            let c1: &[f32; KEY_BLOCK] = panel[row + self.ld..row + self.ld + KEY_BLOCK]
                .try_into()
                .expect("a panel row holds a block past every key");
            for t in 0..KEY_BLOCK {
                even[t] = madd::<FMA>(pair[0], c0[t], even[t]);
                odd[t] = madd::<FMA>(pair[1], c1[t], odd[t]);
            }
            row += 2 * self.ld;
        }
        if let [last] = pairs.remainder() {
            let c: &[f32; KEY_BLOCK] = panel[row..row + KEY_BLOCK]
                .try_into()
                .expect("a panel row holds a block past every key");
            for t in 0..KEY_BLOCK {
                even[t] = madd::<FMA>(*last, c[t], even[t]);
            }
        }
        for t in 0..KEY_BLOCK {
            s[t] = even[t] + odd[t];
        }
    }
}
