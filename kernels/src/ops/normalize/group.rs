//! InstanceNormalization and GroupNormalization: statistics over each
//! instance's group of channels (contiguous in `[N, C, spatial...]`), then
//! one fused scale-and-shift pass per channel. Blocks are independent and
//! split across threads (hot path); construction and inference are cold.

use super::common::{
    Float, FloatView, affine, check_param, dispatch_float, epsilon, mean_var, nc_layout,
};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_len, input, output, required, typed, typed_mut,
};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
    for_each_chunk_mut,
};

/// Which operator a [`GroupNorm`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One group per channel; scale and bias per channel.
    Instance,
    /// `groups` groups; scale and bias per group (opset 18) or per channel
    /// (opset 21).
    Group { groups: usize, per_group: bool },
}

/// InstanceNormalization or GroupNormalization.
#[derive(Debug)]
pub(crate) struct GroupNorm {
    kind: Kind,
    epsilon: f64,
}

impl GroupNorm {
    /// InstanceNormalization.
    pub(crate) fn instance(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "InstanceNormalization", &["epsilon"])?;
        Ok(Self {
            kind: Kind::Instance,
            epsilon: epsilon(&attrs, 1e-5)?,
        })
    }

    /// GroupNormalization (opset 18: per-group scale and bias; 21: per
    /// channel, with `stash_type`).
    pub(crate) fn group(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let op = "GroupNormalization";
        let attrs = Attrs::new(spec, op, &["epsilon", "num_groups", "stash_type"])?;
        // Statistics are always computed in f64, at least the precision
        // any stash type asks for.
        match attrs.int("stash_type")? {
            None | Some(1 | 10 | 11 | 16) => {}
            Some(v) => {
                return Err(attrs.error(
                    "stash_type",
                    format!("{v} is not a float type (1, 10, 11 or 16)"),
                ));
            }
        }
        let groups = match attrs.int("num_groups")? {
            Some(g) if g > 0 => g as usize,
            Some(g) => return Err(attrs.error("num_groups", format!("{g} must be >= 1"))),
            None => return Err(attrs.error("num_groups", "is required")),
        };
        Ok(Self {
            kind: Kind::Group {
                groups,
                per_group: spec.opset < 21,
            },
            epsilon: epsilon(&attrs, 1e-5)?,
        })
    }

    /// `(groups, parameters expected)` for `channels` channels.
    fn groups(&self, channels: usize) -> Result<(usize, usize), KernelError> {
        match self.kind {
            Kind::Instance => Ok((channels, channels)),
            Kind::Group { groups, per_group } => {
                if !channels.is_multiple_of(groups) {
                    return Err(KernelError::Shape(format!(
                        "GroupNormalization: {channels} channels do not divide into num_groups = {groups}"
                    )));
                }
                Ok((groups, if per_group { groups } else { channels }))
            }
        }
    }
}

/// One normalization's numbers for [`normalize`].
#[derive(Clone, Copy)]
struct Layout<'a> {
    groups: usize,
    /// Channels per group.
    cpg: usize,
    plane: usize,
    /// Scale and bias are indexed by group, not channel.
    per_group: bool,
    eps: f64,
    scale: FloatView<'a>,
    bias: FloatView<'a>,
}

/// Normalizes every group block of `x` into `y`, blocks split across `par`.
fn normalize<T: Float + Send + Sync>(x: &[T], y: &mut [T], l: Layout<'_>, par: &dyn ParallelFor) {
    let block = l.cpg * l.plane;
    if block == 0 || y.is_empty() {
        return;
    }
    let chunk = if y.len() < PARALLEL_MIN_ELEMENTS {
        y.len()
    } else {
        rows_chunk(par, y.len() / block, block)
    };
    for_each_chunk_mut(par, y, chunk, &|offset, part: &mut [T]| {
        for (i, yb) in part.chunks_exact_mut(block).enumerate() {
            let b = offset / block + i;
            let grp = b % l.groups;
            let xb = &x[b * block..(b + 1) * block];
            let (mean, var) = mean_var(xb);
            let inv = 1.0 / (var + l.eps).sqrt();
            for (j, (xc, yc)) in xb
                .chunks_exact(l.plane)
                .zip(yb.chunks_exact_mut(l.plane))
                .enumerate()
            {
                let p = if l.per_group { grp } else { grp * l.cpg + j };
                let a = l.scale.get(p) * inv;
                affine(xc, yc, a, l.bias.get(p) - mean * a);
            }
        }
    });
}

impl Operator for GroupNorm {
    fn name(&self) -> &'static str {
        match self.kind {
            Kind::Instance => "InstanceNormalization",
            Kind::Group { .. } => "GroupNormalization",
        }
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name();
        let inputs = check_inputs(op, inputs, 3, 3)?;
        let x = required(op, inputs, 0)?;
        let min_rank = if self.kind == Kind::Instance { 3 } else { 2 };
        let (_, channels, _) = nc_layout(op, x.dtype, x.shape, min_rank)?;
        let (_, params) = self.groups(channels)?;
        for (i, what) in [(1, "scale"), (2, "B")] {
            let p = required(op, inputs, i)?;
            check_param(op, what, p.dtype, p.shape, params)?;
            if p.dtype != x.dtype {
                return Err(KernelError::Shape(format!(
                    "{op}: {what} type {} differs from X type {}",
                    p.dtype, x.dtype
                )));
            }
        }
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: x.shape.to_vec(),
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
        let min_rank = if self.kind == Kind::Instance { 3 } else { 2 };
        let (_, channels, plane) = nc_layout(op, x.dtype(), x.shape(), min_rank)?;
        let (groups, params) = self.groups(channels)?;
        let scale = FloatView::of(op, input(op, inputs, 1)?)?;
        let bias = FloatView::of(op, input(op, inputs, 2)?)?;
        check_len(op, "scale", scale.len(), params)?;
        check_len(op, "B", bias.len(), params)?;
        let layout = Layout {
            groups,
            cpg: channels / groups.max(1),
            plane,
            per_group: matches!(
                self.kind,
                Kind::Group {
                    per_group: true,
                    ..
                }
            ),
            eps: self.epsilon,
            scale,
            bias,
        };
        let y = output(op, outputs, 0)?;
        dispatch_float!(x.dtype(), T => {
            let (xs, ys) = (typed::<T>(op, x)?, typed_mut::<T>(op, y)?);
            check_len(op, "Y", ys.len(), xs.len())?;
            normalize(xs, ys, layout, par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}
