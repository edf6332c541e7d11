//! AffineGrid (opset 20): the sampling grid of GridSample for a batch of
//! affine matrices `theta [N, 2, 3]` (2-D) or `[N, 3, 4]` (3-D) over the
//! normalized coordinates of the constant `size` `[N, C, H, W]` or
//! `[N, C, D, H, W]`. Hot path: per output row, each point is the matrix
//! applied to its homogeneous base coordinates (computed in f64).

use super::common::{Real, Widen};
use crate::ops::basic::common::{
    Attrs, check_inputs, constant_ints, input, output, required, typed, typed_mut,
};
use crate::ops::index::common::{by_rows, check_index_type};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// AffineGrid.
#[derive(Debug)]
pub(crate) struct AffineGrid {
    align_corners: bool,
}

impl AffineGrid {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "AffineGrid", &["align_corners"])?;
        let align_corners = match attrs.int_or("align_corners", 0)? {
            0 => false,
            1 => true,
            v => return Err(attrs.error("align_corners", format!("{v} is not 0 or 1"))),
        };
        Ok(Self { align_corners })
    }

    /// `[N, D.., k]` for theta `[N, k, k + 1]` and `size` `[N, C, D..]`
    /// with k = 2 or 3 spatial axes.
    fn out_shape(&self, theta: &[usize], size: &[i64]) -> Result<Vec<usize>, KernelError> {
        let bad = |why: &str| {
            KernelError::Shape(format!(
                "AffineGrid: theta {theta:?} and size {size:?}: {why}"
            ))
        };
        let k = match size.len() {
            4 => 2,
            5 => 3,
            _ => return Err(bad("size must be [N, C, H, W] or [N, C, D, H, W]")),
        };
        if theta != [theta.first().copied().unwrap_or(0), k, k + 1] {
            return Err(bad(
                "theta must be [N, 2, 3] for a 2-D size, [N, 3, 4] for 3-D",
            ));
        }
        let dims = size
            .iter()
            .map(|&v| usize::try_from(v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad("size values must not be negative"))?;
        if dims[0] != theta[0] {
            return Err(bad("theta and size disagree on N"));
        }
        let mut out = vec![dims[0]];
        out.extend_from_slice(&dims[2..]);
        out.push(k);
        crate::ops::basic::common::checked_count("AffineGrid", &out)?;
        Ok(out)
    }

    /// The normalized base coordinate of index `i` on an axis of `len`.
    #[inline]
    fn base(&self, i: usize, len: usize) -> f64 {
        if self.align_corners {
            if len <= 1 {
                -1.0
            } else {
                -1.0 + 2.0 * i as f64 / (len - 1) as f64
            }
        } else {
            -1.0 + (2 * i + 1) as f64 / len as f64
        }
    }
}

/// Fills `y` (`[N, D.., k]` of `out` dims) with `theta` applied to the base
/// coordinates.
fn fill<T: Widen>(ag: &AffineGrid, theta: &[T], out: &[usize], y: &mut [T], par: &dyn ParallelFor) {
    let k = out.len() - 2;
    let w = out[k];
    let row = w * k;
    // The rows are (n, [d,] h); within a row, x varies.
    by_rows(par, y, row, &|first, rows| {
        for (r, dst) in rows.chunks_exact_mut(row).enumerate() {
            let r = first + r;
            let mut rest = r;
            // Homogeneous coordinates (x, y[, z], 1).
            let mut base = [0.0f64, 0.0, 0.0, 1.0];
            for d in (1..k).rev() {
                let len = out[d];
                // Axis d of out (1 = D or H) is coordinate k - d.
                base[k - d] = ag.base(rest % len, len);
                rest /= len;
            }
            base[k] = 1.0;
            let t = &theta[rest * k * (k + 1)..][..k * (k + 1)];
            for (j, p) in dst.chunks_exact_mut(k).enumerate() {
                base[0] = ag.base(j, w);
                for (i, v) in p.iter_mut().enumerate() {
                    let m = &t[i * (k + 1)..][..k + 1];
                    let mut acc = 0.0;
                    for (&a, &b) in m.iter().zip(&base[..=k]) {
                        acc += a.load().to_f64() * b;
                    }
                    *v = T::store(T::Acc::from_f64(acc));
                }
            }
        }
    });
}

impl Operator for AffineGrid {
    fn name(&self) -> &'static str {
        "AffineGrid"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = "AffineGrid";
        let inputs = check_inputs(op, inputs, 2, 2)?;
        let (theta, size) = (required(op, inputs, 0)?, required(op, inputs, 1)?);
        if !matches!(
            theta.dtype,
            ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16
        ) {
            return Err(KernelError::UnsupportedType {
                op,
                dtype: theta.dtype,
            });
        }
        check_index_type(op, size.dtype)?;
        let size = constant_ints(op, size, 1)?;
        Ok(vec![OutputInfo {
            dtype: theta.dtype,
            shape: self.out_shape(theta.shape, &size)?,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = "AffineGrid";
        let (theta, s) = (input(op, inputs, 0)?, input(op, inputs, 1)?);
        let size = s.to_i64_vec().ok_or(KernelError::UnsupportedType {
            op,
            dtype: s.dtype(),
        })?;
        let want = self.out_shape(theta.shape(), &size)?;
        let y = output(op, outputs, 0)?;
        if y.shape() != want.as_slice() {
            return Err(KernelError::Invalid {
                op,
                detail: format!("output shape {:?} where {want:?} was computed", y.shape()),
            });
        }
        if y.is_empty() {
            return Ok(());
        }
        dispatch_types!(theta.dtype(), [F32 => f32, F64 => f64, F16 => ::half::f16, BF16 => ::half::bf16], T => {
            fill::<T>(self, typed::<T>(op, theta)?, &want, typed_mut::<T>(op, y)?, par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: theta.dtype() }))
    }
}
