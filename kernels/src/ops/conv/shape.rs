//! The checked shapes of one convolution and what its paths derive from
//! them.

use super::geometry::Geometry;
use crate::{ElementType, InputInfo, KernelError};

/// Output columns of one im2col tile are chosen so that its panels hold
/// about this many floats (256 KiB: the panels and the weights' rows they
/// meet stay in L2).
const TILE_FLOATS: usize = 64 * 1024;
/// The shapes of one convolution, checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvShape {
    pub(crate) batch: usize,
    pub(crate) channels: usize,
    pub(crate) maps: usize,
    pub(crate) group: usize,
    pub(crate) geometry: Geometry,
}

impl ConvShape {
    /// Input channels per group.
    pub(crate) fn cg(&self) -> usize {
        self.channels / self.group
    }

    /// Output channels per group.
    pub(crate) fn mg(&self) -> usize {
        self.maps / self.group
    }

    /// Rows of one group's im2col matrix (input channels × taps).
    pub(crate) fn k(&self) -> usize {
        self.cg() * self.geometry.kernel_len()
    }

    pub(crate) fn pointwise(&self) -> bool {
        let g = &self.geometry;
        (0..g.rank).all(|a| g.kernel[a] == 1 && g.stride[a] == 1 && g.pad_begin[a] == 0)
    }

    pub(crate) fn depthwise(&self) -> bool {
        self.cg() == 1 && self.mg() == 1
    }

    /// im2col tile width (a multiple of `nr`).
    pub(crate) fn tile(&self, nr: usize) -> usize {
        let cols = self.geometry.output_len();
        (TILE_FLOATS / self.k().max(1) / nr * nr)
            .max(nr)
            .min(cols.div_ceil(nr) * nr)
    }
}

/// Checks that X is of a type in `allowed` and that W and B are of X's.
pub(crate) fn check_types(
    op: &'static str,
    x: InputInfo<'_>,
    w: InputInfo<'_>,
    bias: Option<InputInfo<'_>>,
    allowed: &[ElementType],
) -> Result<(), KernelError> {
    if !allowed.contains(&x.dtype) {
        return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
    }
    if w.dtype != x.dtype || bias.is_some_and(|b| b.dtype != x.dtype) {
        return Err(KernelError::Shape(format!(
            "{op}: X, W and B must have one element type (X is {})",
            x.dtype
        )));
    }
    Ok(())
}
