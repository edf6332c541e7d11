//! GroupQueryAttention's windowed KV cache (`sliding_window_cache = 1`), as
//! ONNX Runtime's CPU provider lays it out for onnxruntime-genai's
//! sliding-window layers (Gemma-2's local layers).
//!
//! The past and present buffers hold `C` positions (at least the window
//! `W`), indexed relative to the cache rather than to the sequence: the
//! resident rows sit at `0..end`, new rows are appended at `end`, and when
//! an append would run past `C` the oldest rows are dropped in whole blocks
//! of `gap = C - W + 1`, so `end` is a function of the absolute past length
//! alone and the op stays stateless. Masks depend only on the distance
//! between query and key, so attention over cache-relative rows is exact;
//! rotary embedding uses absolute positions.
//!
//! A step whose compaction would drop rows its first query still reads
//! attends over every resident row plus the new ones (a staging buffer) and
//! keeps only the surviving tail; otherwise the dropped rows are gone before
//! attention. Which of the two a step takes decides which keys its queries
//! see at the edge of the window, so this module reproduces the decision
//! exactly.

use std::ops::Range;

use super::Float;
use super::core::{attend, fill_rows};
use super::problem::{Problem, QueryRotary, Rows, Strides};
use super::rotary::Rotary;
use crate::{KernelError, ParallelFor};

/// Where one batch row's buffers come from and go to in a windowed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Step {
    /// First past row copied into the attention buffer.
    pub(super) seed_offset: usize,
    /// Past rows copied into the attention buffer (the new rows follow).
    pub(super) resident: usize,
    /// First attention-buffer row that becomes present row 0.
    pub(super) keep_from: usize,
    /// Present rows written (the rest are zero).
    pub(super) present_rows: usize,
}

/// One past past the last resident row for absolute past length `past`.
fn cache_end(past: u64, capacity: u64, gap: u64) -> u64 {
    if past <= capacity {
        return past;
    }
    let overflow = past - capacity;
    past - gap * overflow.div_ceil(gap)
}

/// The layout of one step: `pasts[b]` absolute past lengths, `s` new
/// tokens, cache `capacity`, attention `window` (≥ 1).
///
/// # Errors
/// A capacity below the window.
pub(super) fn plan(
    pasts: &[usize],
    s: usize,
    capacity: usize,
    window: usize,
) -> Result<Vec<Step>, KernelError> {
    if window == 0 || capacity < window {
        return Err(KernelError::Invalid {
            op: "GroupQueryAttention",
            detail: format!(
                "sliding_window_cache needs a local_window_size of at least 1 and a cache of at \
                 least that many positions (window {window}, cache {capacity})"
            ),
        });
    }
    let (c, w, s64) = (capacity as u64, window as u64, s as u64);
    let gap = c - w + 1;
    // (end before, end after, rows kept) per batch; kept may be negative
    // when the step alone outgrows the cache.
    let ends: Vec<(u64, u64, i128)> = pasts
        .iter()
        .map(|&p| {
            let p = p as u64;
            let before = cache_end(p, c, gap);
            let after = cache_end(p + s64, c, gap);
            (before, after, i128::from(after) - i128::from(s64))
        })
        .collect();
    let staging = pasts
        .iter()
        .zip(&ends)
        .any(|(&p, &(_, _, kept))| kept < i128::from((p as u64).min(w - 1)));
    Ok(ends
        .iter()
        .map(|&(before, after, kept)| {
            let dropped = (i128::from(before) - kept) as usize; // rows before the kept ones
            let before = before as usize;
            if staging {
                Step {
                    seed_offset: 0,
                    resident: before,
                    keep_from: dropped,
                    present_rows: after as usize,
                }
            } else {
                Step {
                    seed_offset: dropped,
                    resident: before - dropped,
                    keep_from: 0,
                    present_rows: after as usize,
                }
            }
        })
        .collect())
}

/// One windowed step's operands (batch rows laid out by [`plan`]).
pub(super) struct Windowed<'a, T> {
    /// Query heads, KV heads.
    pub(super) heads: (usize, usize),
    pub(super) d: usize,
    /// New tokens.
    pub(super) s: usize,
    pub(super) window: usize,
    pub(super) scale: f32,
    pub(super) softcap: f32,
    pub(super) steps: &'a [Step],
    pub(super) q: (&'a [T], Strides),
    /// New keys, new values and their strides.
    pub(super) new: (&'a [T], &'a [T], Strides),
    /// Past keys, past values (cache-relative) and their strides.
    pub(super) past: (&'a [T], &'a [T], Strides),
    pub(super) rotary: Option<Rotary<'a, T>>,
    /// Absolute position of new token `i` of batch row `b`.
    pub(super) position: &'a (dyn Fn(usize, usize) -> usize + Sync),
}

impl<T: Float> Windowed<'_, T> {
    /// Attention over each batch row's buffer (resident rows, then the new
    /// ones), then the surviving rows into the presents (`capacity` rows
    /// each, zero past the valid ones).
    ///
    /// # Errors
    /// The attention buffers cannot be allocated.
    pub(super) fn run(
        &self,
        y: &mut [T],
        presents: [&mut [T]; 2],
        capacity: usize,
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let (h, kvh) = self.heads;
        let (d, s) = (self.d, self.s);
        let batch = self.steps.len();
        let rows = self
            .steps
            .iter()
            .map(|st| st.resident + s)
            .max()
            .unwrap_or(0);
        let strides = Strides::bnsh(rows, kvh, d);
        let elements = batch * kvh * rows * d;
        let buffer = || -> Result<Vec<T>, KernelError> {
            let mut v = Vec::new();
            v.try_reserve_exact(elements)
                .map_err(|_| KernelError::Allocation {
                    op: "GroupQueryAttention",
                    bytes: elements * std::mem::size_of::<T>(),
                })?;
            v.resize(elements, T::default());
            Ok(v)
        };
        let (mut kbuf, mut vbuf) = (buffer()?, buffer()?);
        let (new_k, new_v, new_strides) = self.new;
        let (past_k, past_v, past_strides) = self.past;
        for (dst, past, new, rotate) in [
            (&mut kbuf, past_k, new_k, true),
            (&mut vbuf, past_v, new_v, false),
        ] {
            let rot = if rotate { self.rotary } else { None };
            fill_rows(dst, kvh, (rows, s), d, par, &|b, g, j, row| {
                let st = self.steps[b];
                if j < st.resident {
                    let o = past_strides.b * b + past_strides.h * g + (st.seed_offset + j) * d;
                    row.copy_from_slice(&past[o..o + d]);
                } else if j < st.resident + s {
                    let i = j - st.resident;
                    let o = new_strides.b * b + new_strides.s * i + new_strides.h * g;
                    match &rot {
                        Some(r) => r.apply(&new[o..o + d], row, (self.position)(b, i)),
                        None => row.copy_from_slice(&new[o..o + d]),
                    }
                } else {
                    row.fill(T::default());
                }
            });
        }
        let window = self.window;
        let keys = |b: usize, i: usize| -> Range<usize> {
            let r = self.steps[b].resident + i;
            (r + 1).saturating_sub(window)..r + 1
        };
        let view = |buf| Rows::single(buf, strides, d);
        let problem = Problem {
            batch,
            q_heads: h,
            kv_heads: kvh,
            q_len: s,
            d,
            dv: d,
            q: self.q.0,
            q_strides: self.q.1,
            k: view(&kbuf),
            v: view(&vbuf),
            keys: &keys,
            mask: None,
            scale: self.scale,
            softcap: self.softcap,
            rotary: self.rotary.map(|rotary| QueryRotary {
                rotary,
                position: self.position,
            }),
            out_bsnh: true,
        };
        attend(&problem, y, par);
        for (dst, src) in presents.into_iter().zip([&kbuf, &vbuf]) {
            fill_rows(dst, kvh, (capacity, 0), d, par, &|b, g, j, row| {
                let st = self.steps[b];
                if j < st.present_rows {
                    let o = strides.b * b + strides.h * g + (st.keep_from + j) * d;
                    row.copy_from_slice(&src[o..o + d]);
                } else {
                    row.fill(T::default());
                }
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_that_is_not_full_appends_in_place() {
        // C 8, W 4: 3 past + 2 new fit.
        let st = plan(&[3], 2, 8, 4).unwrap()[0];
        assert_eq!(
            st,
            Step {
                seed_offset: 0,
                resident: 3,
                keep_from: 0,
                present_rows: 5
            }
        );
    }

    #[test]
    fn compaction_drops_whole_gaps_in_place_while_the_window_survives() {
        // C 8, W 4, gap 5. Past 8 (full), 1 new: end after = 9 - 5 = 4,
        // kept 3 >= min(8, 3): in place, 5 rows dropped.
        let st = plan(&[8], 1, 8, 4).unwrap()[0];
        assert_eq!(
            st,
            Step {
                seed_offset: 5,
                resident: 3,
                keep_from: 0,
                present_rows: 4
            }
        );
        // The following steps append without moving: end 4 -> 5.
        let st = plan(&[9], 1, 8, 4).unwrap()[0];
        assert_eq!(
            st,
            Step {
                seed_offset: 0,
                resident: 4,
                keep_from: 0,
                present_rows: 5
            }
        );
    }

    #[test]
    fn a_step_that_would_drop_rows_its_queries_read_stages() {
        // C 4, W 4, gap 1. Past 4, 3 new: end after 4, kept 1 < 3: staging
        // over 4 resident + 3 new rows, the last 4 kept.
        let st = plan(&[4], 3, 4, 4).unwrap()[0];
        assert_eq!(
            st,
            Step {
                seed_offset: 0,
                resident: 4,
                keep_from: 3,
                present_rows: 4
            }
        );
        // A prompt longer than the cache: only its tail stays.
        let st = plan(&[0], 10, 4, 4).unwrap()[0];
        assert_eq!(
            st,
            Step {
                seed_offset: 0,
                resident: 0,
                keep_from: 6,
                present_rows: 4
            }
        );
        // One batch row staging makes every row stage.
        let steps = plan(&[4, 1], 3, 4, 4).unwrap();
        assert_eq!(
            steps[1],
            Step {
                seed_offset: 0,
                resident: 1,
                keep_from: 0,
                present_rows: 4
            }
        );
    }

    #[test]
    fn a_cache_below_the_window_is_refused() {
        assert!(plan(&[0], 1, 3, 4).is_err());
        assert!(plan(&[0], 1, 3, 0).is_err());
    }
}
