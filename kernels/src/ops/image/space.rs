//! DepthToSpace and SpaceToDepth: moving `blocksize x blocksize` blocks
//! between the channel axis and the two spatial axes of `[N, C, H, W]`
//! (modes DCR and CRD). Hot path: one pass over the output rows, each a
//! strided copy from the input.

use crate::ops::basic::common::{
    Attrs, Elem, check_inputs, input, output, required, typed, typed_mut,
};
use crate::ops::index::common::{by_rows, check_storable};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
};

/// Which way the blocks move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Channels into blocks of space.
    DepthToSpace,
    /// Blocks of space into channels.
    SpaceToDepth,
}

/// DepthToSpace or SpaceToDepth.
#[derive(Debug)]
pub(crate) struct Space {
    dir: Direction,
    block: usize,
    /// CRD (column, row, depth) rather than DCR: the block index is the
    /// fastest-varying part of the channel.
    crd: bool,
}

impl Space {
    pub(crate) fn new(spec: &NodeSpec<'_>, to_space: bool) -> Result<Self, KernelError> {
        let (dir, name, mode_since) = if to_space {
            (Direction::DepthToSpace, "DepthToSpace", 11)
        } else {
            (Direction::SpaceToDepth, "SpaceToDepth", 28)
        };
        let allowed: &[&'static str] = if spec.opset >= mode_since {
            &["blocksize", "mode"]
        } else {
            &["blocksize"]
        };
        let attrs = Attrs::new(spec, name, allowed)?;
        let block = attrs
            .int("blocksize")?
            .ok_or_else(|| attrs.error("blocksize", "is required"))?;
        let block = usize::try_from(block)
            .ok()
            .filter(|&b| b >= 1 && b <= u32::MAX as usize)
            .ok_or_else(|| attrs.error("blocksize", format!("{block} must be >= 1")))?;
        let crd = match attrs.string("mode")?.as_deref() {
            None | Some("DCR") => false,
            Some("CRD") => true,
            Some(m) => {
                return Err(attrs.error("mode", format!("`{m}` is not DCR or CRD")));
            }
        };
        Ok(Self { dir, block, crd })
    }

    /// Channel of block position `(i, j)` and channel `c` of `channels`.
    #[inline]
    fn channel(&self, i: usize, j: usize, c: usize, channels: usize) -> usize {
        let b = self.block;
        if self.crd {
            (c * b + i) * b + j
        } else {
            (i * b + j) * channels + c
        }
    }
}

/// DepthToSpace: `y[n, c, h*b+i, w*b+j] = x[n, channel(i, j, c), h, w]`.
fn to_space<T: Elem>(s: &Space, x: &[T], xs: &[usize], y: &mut [T], par: &dyn ParallelFor) {
    let b = s.block;
    let (c_out, h, w) = (xs[1] / (b * b), xs[2], xs[3]);
    let (oh, ow) = (h * b, w * b);
    by_rows(par, y, ow, &|first, rows| {
        for (r, row) in rows.chunks_exact_mut(ow).enumerate() {
            let r = first + r;
            let (nc, y_h) = (r / oh, r % oh);
            let (n, c) = (nc / c_out, nc % c_out);
            let (hh, i) = (y_h / b, y_h % b);
            for j in 0..b {
                let base = ((n * xs[1] + s.channel(i, j, c, c_out)) * h + hh) * w;
                let src = &x[base..base + w];
                for (ww, &v) in src.iter().enumerate() {
                    row[ww * b + j] = v;
                }
            }
        }
    });
}

/// SpaceToDepth: `y[n, channel(i, j, c), h, w] = x[n, c, h*b+i, w*b+j]`.
fn to_depth<T: Elem>(s: &Space, x: &[T], xs: &[usize], y: &mut [T], par: &dyn ParallelFor) {
    let b = s.block;
    let (c_in, h, w) = (xs[1], xs[2], xs[3]);
    let (oh, ow, oc) = (h / b, w / b, c_in * b * b);
    by_rows(par, y, ow, &|first, rows| {
        for (r, row) in rows.chunks_exact_mut(ow).enumerate() {
            let r = first + r;
            let (nc, y_h) = (r / oh, r % oh);
            let (n, ch) = (nc / oc, nc % oc);
            // Invert `channel`.
            let (i, j, c) = if s.crd {
                (ch / b % b, ch % b, ch / (b * b))
            } else {
                (ch / c_in / b, ch / c_in % b, ch % c_in)
            };
            let base = ((n * c_in + c) * h + y_h * b + i) * w + j;
            for (k, v) in row.iter_mut().enumerate() {
                *v = x[base + k * b];
            }
        }
    });
}

impl Operator for Space {
    fn name(&self) -> &'static str {
        match self.dir {
            Direction::DepthToSpace => "DepthToSpace",
            Direction::SpaceToDepth => "SpaceToDepth",
        }
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let x = required(op, check_inputs(op, inputs, 1, 1)?, 0)?;
        check_storable(op, x.dtype)?;
        let b = self.block;
        let bad = |why: &str| {
            KernelError::Shape(format!(
                "{op}: input {:?} with blocksize {b}: {why}",
                x.shape
            ))
        };
        let &[n, c, h, w] = x.shape else {
            return Err(bad("the input must be 4-D [N, C, H, W]"));
        };
        let bb = b.checked_mul(b).ok_or_else(|| bad("blocksize too large"))?;
        let shape = match self.dir {
            Direction::DepthToSpace => {
                if c % bb != 0 {
                    return Err(bad("C must be a multiple of blocksize^2"));
                }
                let big = |d: usize| d.checked_mul(b).ok_or_else(|| bad("output overflows"));
                vec![n, c / bb, big(h)?, big(w)?]
            }
            Direction::SpaceToDepth => {
                if h % b != 0 || w % b != 0 {
                    return Err(bad("H and W must be multiples of blocksize"));
                }
                let oc = c.checked_mul(bb).ok_or_else(|| bad("output overflows"))?;
                vec![n, oc, h / b, w / b]
            }
        };
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.name();
        let x = input(op, inputs, 0)?;
        let infos = [Some(InputInfo::dynamic(x.dtype(), x.shape()))];
        let want = self.infer(&infos)?.remove(0).shape;
        let y = output(op, outputs, 0)?;
        if y.shape() != want.as_slice() {
            return Err(KernelError::Invalid {
                op,
                detail: format!("output shape {:?} where {want:?} was computed", y.shape()),
            });
        }
        let xs = x.shape().to_vec();
        dispatch_any!(x.dtype(), T => {
            let (src, dst) = (typed::<T>(op, x)?, typed_mut::<T>(op, y)?);
            match self.dir {
                Direction::DepthToSpace => to_space(self, src, &xs, dst, par),
                Direction::SpaceToDepth => to_depth(self, src, &xs, dst, par),
            }
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}
