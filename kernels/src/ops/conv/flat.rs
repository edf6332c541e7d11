//! Whole-plane vector loops for 1-D and 2-D windows (hot path): the
//! input plane, padded with a fill value, is split into `stride_h x
//! stride_w` phases (rows and columns by their remainder modulo the
//! stride) of `qw` columns each, so that every tap of the window reads one
//! phase at a fixed offset from the output position. A tap is then one
//! vector loop over `oh * qw` contiguous elements; the `qw - ow` columns
//! past each output row are computed and dropped. Depthwise convolution,
//! the f32 pools and the 8-bit MaxPool run on it.

use super::geometry::{Geometry3, valid_range};

/// A phase row's columns `lo..hi` inside the image: input row `r`, from
/// input column `start` on.
#[derive(Debug, Clone, Copy)]
struct Run {
    r: usize,
    lo: usize,
    hi: usize,
    start: usize,
}

/// The phase layout of one geometry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flat {
    qh: usize,
    qw: usize,
    pub(crate) oh: usize,
    pub(crate) ow: usize,
    sh: usize,
    sw: usize,
}

impl Flat {
    /// The layout for `g`, when it is 1-D or 2-D.
    pub(crate) fn of(g: &Geometry3) -> Option<Self> {
        if g.kernel[0] != 1 || g.output[0] != 1 || g.input[0] != 1 {
            return None;
        }
        let [_, oh, ow] = g.output;
        let [_, kh, kw] = g.kernel;
        let (sh, sw) = (g.stride[1], g.stride[2]);
        Some(Self {
            qh: oh + (kh - 1) * g.dilation[1] / sh + 1,
            qw: ow + (kw - 1) * g.dilation[2] / sw + 1,
            oh,
            ow,
            sh,
            sw,
        })
    }

    /// Elements of one phase (a spare row: the last output row's dropped
    /// columns read past the phase's end).
    fn phase_len(self) -> usize {
        (self.qh + 1) * self.qw
    }

    /// Elements of every phase.
    pub(crate) fn phases_len(self) -> usize {
        self.sh * self.sw * self.phase_len()
    }

    /// Elements of the output rows at `qw` columns.
    pub(crate) fn acc_len(self) -> usize {
        self.oh * self.qw
    }

    /// The phases and the output rows.
    pub(crate) fn scratch_len(self) -> usize {
        self.phases_len() + self.acc_len()
    }

    /// The elements of the phases outside the image set to `fill`: phase
    /// `(rp, cp)`, element `(i, j)` is the padded input at `(i * sh + rp,
    /// j * sw + cp)`. They are the same for every plane of the geometry,
    /// so a task's phases are padded once and then [`Self::copy`] writes
    /// each plane.
    #[inline(always)]
    pub(crate) fn pad<T: Copy>(self, g: &Geometry3, fill: T, phases: &mut [T]) {
        self.rows_of(
            g,
            phases,
            #[inline(always)]
            |row, image| match image {
                None => row.fill(fill),
                Some(run) => {
                    row[..run.lo].fill(fill);
                    row[run.hi..].fill(fill);
                }
            },
        );
    }

    /// The elements of the phases inside the image from plane `x`.
    #[inline(always)]
    pub(crate) fn copy<T: Copy>(self, g: &Geometry3, x: &[T], phases: &mut [T]) {
        let iw = g.input[2];
        let sw = self.sw;
        self.rows_of(
            g,
            phases,
            #[inline(always)]
            |row, image| {
                let Some(Run { r, lo, hi, start }) = image else {
                    return;
                };
                let src = &x[r * iw..][..iw];
                if sw == 1 {
                    row[lo..hi].copy_from_slice(&src[start..start + (hi - lo)]);
                } else if sw == 2 {
                    // A constant stride: whole pairs, whose first elements the
                    // loop keeps with no bounds check (it vectorizes as
                    // interleaved loads), then the last element alone (its
                    // pair may end past the row).
                    let n = hi - lo;
                    let (body, last) = row[lo..hi].split_at_mut(n - 1);
                    let pairs = src[start..start + 2 * (n - 1)].chunks_exact(2);
                    for (v, pair) in body.iter_mut().zip(pairs) {
                        *v = pair[0];
                    }
                    last[0] = src[start + 2 * (n - 1)];
                } else {
                    for (v, s) in row[lo..hi].iter_mut().zip(src[start..].chunks(sw)) {
                        *v = s[0];
                    }
                }
            },
        );
    }

    /// `visit(row, image)` for every row of every phase: `image` the run of
    /// its columns inside the image, `None` for a row all padding.
    #[inline(always)]
    fn rows_of<T>(
        self,
        g: &Geometry3,
        phases: &mut [T],
        mut visit: impl FnMut(&mut [T], Option<Run>),
    ) {
        let Self { qw, sh, sw, .. } = self;
        let [_, ih, iw] = g.input;
        let (pt, pl) = (g.pad[1], g.pad[2]);
        let len = self.phase_len();
        for rp in 0..sh {
            for cp in 0..sw {
                let phase = &mut phases[(rp * sw + cp) * len..][..len];
                // Columns j whose input column j * sw + cp - pl is inside.
                let (lo, hi) = valid_range(qw, sw, cp as isize - pl as isize, iw);
                for (i, row) in phase.chunks_exact_mut(qw).enumerate() {
                    let r = (i * sh + rp) as isize - pt as isize;
                    let image = (r >= 0 && (r as usize) < ih && lo < hi).then(|| Run {
                        r: r as usize,
                        lo,
                        hi,
                        start: lo * sw + cp - pl,
                    });
                    visit(row, image);
                }
            }
        }
    }

    /// Tap `(b, e)` of every output position, `acc_len` elements in the
    /// order of the output rows at `qw` columns.
    #[inline(always)]
    pub(crate) fn tap<'a, T>(self, g: &Geometry3, b: usize, e: usize, phases: &'a [T]) -> &'a [T] {
        let (r, c) = (b * g.dilation[1], e * g.dilation[2]);
        let phase = &phases[((r % self.sh) * self.sw + c % self.sw) * self.phase_len()..];
        &phase[(r / self.sh) * self.qw + c / self.sw..][..self.acc_len()]
    }

    /// The output rows of `acc` (the first `ow` of each `qw` columns).
    pub(crate) fn rows<T>(self, acc: &[T]) -> impl Iterator<Item = &[T]> {
        acc.chunks_exact(self.qw).map(move |r| &r[..self.ow])
    }
}
