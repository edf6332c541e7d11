//! Resize (opsets 10, 11, 13, 18, 19) and Upsample (opsets 7 and 9): the
//! attributes, the constant `roi`/`scales`/`sizes` operands and the output
//! shape (cold path). The sampling itself is in `resample`.

use super::common::{check_1d, float_values, interpolable};
use super::resample::{Coord, Filter, Nearest, Params, Plan, resample};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_rank, checked_count, input, normalize_axis, output, required,
};
use crate::ops::index::common::check_storable;
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// How the output size follows `sizes` (`keep_aspect_ratio_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Where the operands are.
#[derive(Debug, Clone, PartialEq)]
enum Form {
    /// Upsample-7: the `scales` attribute.
    ScalesAttribute(Vec<f64>),
    /// Upsample-9 and Resize-10: `X, scales`.
    ScalesInput,
    /// Resize-11+: `X, roi, scales, sizes`.
    Full,
}

/// Resize or Upsample.
#[derive(Debug)]
pub(crate) struct Resize {
    name: &'static str,
    form: Form,
    params: Params,
    axes: Option<Vec<i64>>,
    policy: Policy,
}

/// The optional operands of one resolution or run (empty ones as `None`).
struct Operands<'a> {
    roi: Option<&'a Tensor>,
    scales: Option<&'a Tensor>,
    sizes: Option<&'a Tensor>,
}

impl Resize {
    pub(crate) fn new(spec: &NodeSpec<'_>, upsample: bool) -> Result<Self, KernelError> {
        let name = if upsample { "Upsample" } else { "Resize" };
        let allowed: &[&'static str] = match (upsample, spec.opset) {
            (true, ..=8) => &["mode", "scales"],
            (true, _) | (false, ..=10) => &["mode"],
            (false, 11..=17) => &[
                "mode",
                "coordinate_transformation_mode",
                "cubic_coeff_a",
                "exclude_outside",
                "extrapolation_value",
                "nearest_mode",
            ],
            (false, _) => &[
                "mode",
                "coordinate_transformation_mode",
                "cubic_coeff_a",
                "exclude_outside",
                "extrapolation_value",
                "nearest_mode",
                "antialias",
                "axes",
                "keep_aspect_ratio_policy",
            ],
        };
        if upsample && spec.opset >= 10 || !upsample && spec.opset < 10 {
            return Err(KernelError::UnsupportedOp {
                domain: String::new(),
                op_type: name.into(),
                opset: spec.opset,
            });
        }
        let attrs = Attrs::new(spec, name, allowed)?;
        let legacy = upsample || spec.opset < 11;
        let cubic_a = f64::from(attrs.float("cubic_coeff_a")?.unwrap_or(-0.75));
        let filter = match attrs.string("mode")?.as_deref() {
            None | Some("nearest") => Filter::Nearest(if legacy {
                Nearest::Simple
            } else {
                nearest_mode(&attrs)?
            }),
            Some("linear") => Filter::Linear,
            Some("cubic") if !legacy => Filter::Cubic(cubic_a),
            Some(m) => {
                let known = if legacy {
                    "nearest, linear"
                } else {
                    "nearest, linear, cubic"
                };
                return Err(attrs.error(
                    "mode",
                    format!("`{m}` is not a mode of {name}-{} ({known})", spec.opset),
                ));
            }
        };
        let coord = if legacy {
            Coord::Asymmetric
        } else {
            coord_mode(&attrs, spec.opset)?
        };
        let antialias = attrs.int_or("antialias", 0)? != 0;
        if antialias && matches!(filter, Filter::Nearest(_)) {
            return Err(attrs.error("antialias", "applies to the linear and cubic modes only"));
        }
        let policy = match attrs.string("keep_aspect_ratio_policy")?.as_deref() {
            None | Some("stretch") => Policy::Stretch,
            Some("not_larger") => Policy::NotLarger,
            Some("not_smaller") => Policy::NotSmaller,
            Some(p) => {
                return Err(attrs.error(
                    "keep_aspect_ratio_policy",
                    format!("`{p}` is not one of stretch, not_larger, not_smaller"),
                ));
            }
        };
        let form = if upsample && spec.opset < 9 {
            let s = attrs
                .floats("scales")?
                .ok_or_else(|| attrs.error("scales", "is required by Upsample-7"))?;
            Form::ScalesAttribute(s.into_iter().map(f64::from).collect())
        } else if legacy {
            Form::ScalesInput
        } else {
            Form::Full
        };
        Ok(Self {
            name,
            form,
            params: Params {
                filter,
                coord,
                exclude_outside: attrs.int_or("exclude_outside", 0)? != 0,
                extrapolation: f64::from(attrs.float("extrapolation_value")?.unwrap_or(0.0)),
                antialias,
            },
            axes: attrs.ints("axes")?,
            policy,
        })
    }

    /// The input positions of `roi`, `scales` and `sizes` in this form.
    fn positions(&self) -> (Option<usize>, Option<usize>, Option<usize>) {
        match self.form {
            Form::ScalesAttribute(_) => (None, None, None),
            Form::ScalesInput => (None, Some(1), None),
            Form::Full => (Some(1), Some(2), Some(3)),
        }
    }

    /// The input count range of this form.
    fn arity(&self) -> (usize, usize) {
        match self.form {
            Form::ScalesAttribute(_) => (1, 1),
            Form::ScalesInput => (2, 2),
            Form::Full => (1, 4),
        }
    }

    /// The resized axes (each once, in `[0, rank)`), in operand order.
    fn axes(&self, rank: usize) -> Result<Vec<usize>, KernelError> {
        let Some(axes) = &self.axes else {
            return Ok((0..rank).collect());
        };
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let a = normalize_axis(self.name, "axis", a, rank)?;
            if out.contains(&a) {
                return Err(KernelError::Shape(format!(
                    "{}: axis {a} appears twice in `axes` {axes:?}",
                    self.name
                )));
            }
            out.push(a);
        }
        Ok(out)
    }

    /// The output shape, per-axis scales and roi for an input shape.
    fn plan(&self, x: &[usize], ops: &Operands<'_>) -> Result<Plan, KernelError> {
        let op = self.name;
        let rank = x.len();
        if rank == 0 {
            return Err(KernelError::Shape(format!("{op}: X must have rank >= 1")));
        }
        check_rank(op, rank)?;
        let axes = self.axes(rank)?;
        let mut scales = vec![1.0f64; rank];
        let mut out = x.to_vec();
        let given_scales = match (&self.form, ops.scales) {
            (Form::ScalesAttribute(s), _) => Some(s.clone()),
            (_, Some(t)) => {
                check_1d(op, "scales", t.shape())?;
                Some(float_values(op, "scales", t)?)
            }
            (_, None) => None,
        };
        match (given_scales, ops.sizes) {
            (Some(_), Some(_)) => {
                return Err(KernelError::Shape(format!(
                    "{op}: give either scales or sizes, not both (pass an empty tensor or name for the other)"
                )));
            }
            (None, None) => {
                return Err(KernelError::Shape(format!(
                    "{op}: one of scales or sizes is required"
                )));
            }
            (Some(s), None) => self.apply_scales(x, &axes, &s, &mut scales, &mut out)?,
            (None, Some(t)) => self.apply_sizes(x, &axes, t, &mut scales, &mut out)?,
        }
        checked_count(op, &out)?;
        let mut roi = [vec![0.0; rank], vec![1.0; rank]].concat();
        if self.params.coord == Coord::TfCropAndResize {
            let t = ops.roi.ok_or_else(|| {
                KernelError::Shape(format!(
                    "{op}: coordinate_transformation_mode tf_crop_and_resize needs the roi input"
                ))
            })?;
            check_1d(op, "roi", t.shape())?;
            let v = float_values(op, "roi", t)?;
            if v.len() != 2 * axes.len() {
                return Err(KernelError::Shape(format!(
                    "{op}: roi has {} values; 2 per resized axis ({}) are needed",
                    v.len(),
                    2 * axes.len()
                )));
            }
            for (i, &a) in axes.iter().enumerate() {
                roi[a] = v[i];
                roi[rank + a] = v[axes.len() + i];
            }
        }
        Ok(Plan { out, scales, roi })
    }

    /// Output dims `floor(dim * scale)` for given scales.
    fn apply_scales(
        &self,
        x: &[usize],
        axes: &[usize],
        s: &[f64],
        scales: &mut [f64],
        out: &mut [usize],
    ) -> Result<(), KernelError> {
        let op = self.name;
        if s.len() != axes.len() {
            return Err(KernelError::Shape(format!(
                "{op}: {} scales for {} resized axes of X {x:?}",
                s.len(),
                axes.len()
            )));
        }
        for (&a, &v) in axes.iter().zip(s) {
            if !(v > 0.0 && v.is_finite()) {
                return Err(KernelError::Shape(format!(
                    "{op}: scale {v} on axis {a} must be a finite number > 0"
                )));
            }
            let dim = (x[a] as f64 * v).floor();
            if dim < 1.0 && x[a] > 0 {
                return Err(KernelError::Shape(format!(
                    "{op}: scale {v} leaves axis {a} (size {}) empty",
                    x[a]
                )));
            }
            scales[a] = v;
            // A huge value saturates and fails the element count check.
            out[a] = dim as usize;
        }
        Ok(())
    }

    /// Output dims and scales for given sizes (with the aspect policy).
    fn apply_sizes(
        &self,
        x: &[usize],
        axes: &[usize],
        t: &Tensor,
        scales: &mut [f64],
        out: &mut [usize],
    ) -> Result<(), KernelError> {
        let op = self.name;
        check_1d(op, "sizes", t.shape())?;
        let sizes = t.to_i64_vec().ok_or(KernelError::UnsupportedType {
            op,
            dtype: t.dtype(),
        })?;
        if sizes.len() != axes.len() {
            return Err(KernelError::Shape(format!(
                "{op}: {} sizes for {} resized axes of X {x:?}",
                sizes.len(),
                axes.len()
            )));
        }
        for (&a, &v) in axes.iter().zip(&sizes) {
            if v < 1 || x[a] == 0 {
                return Err(KernelError::Shape(format!(
                    "{op}: size {v} for axis {a} of X {x:?}: sizes and resized input dims must be >= 1"
                )));
            }
            out[a] = usize::try_from(v).map_err(|_| {
                KernelError::Shape(format!("{op}: size {v} does not fit in memory"))
            })?;
            scales[a] = v as f64 / x[a] as f64;
        }
        if self.policy != Policy::Stretch {
            let pick = axes.iter().map(|&a| scales[a]);
            let s = if self.policy == Policy::NotLarger {
                pick.fold(f64::INFINITY, f64::min)
            } else {
                pick.fold(0.0, f64::max)
            };
            for &a in axes {
                scales[a] = s;
                // Round half up, as ONNX defines.
                out[a] = (s * x[a] as f64 + 0.5).floor() as usize;
                if out[a] == 0 {
                    return Err(KernelError::Shape(format!(
                        "{op}: keep_aspect_ratio_policy leaves axis {a} of X {x:?} empty"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// `nearest_mode` of Resize-11+.
fn nearest_mode(attrs: &Attrs<'_>) -> Result<Nearest, KernelError> {
    Ok(match attrs.string("nearest_mode")?.as_deref() {
        None | Some("round_prefer_floor") => Nearest::RoundPreferFloor,
        Some("round_prefer_ceil") => Nearest::RoundPreferCeil,
        Some("floor") => Nearest::Floor,
        Some("ceil") => Nearest::Ceil,
        Some(m) => {
            return Err(attrs.error(
                "nearest_mode",
                format!("`{m}` is not one of round_prefer_floor, round_prefer_ceil, floor, ceil"),
            ));
        }
    })
}

/// `coordinate_transformation_mode` of Resize-11+.
fn coord_mode(attrs: &Attrs<'_>, opset: i64) -> Result<Coord, KernelError> {
    Ok(
        match attrs.string("coordinate_transformation_mode")?.as_deref() {
            None | Some("half_pixel") => Coord::HalfPixel,
            Some("half_pixel_symmetric") if opset >= 19 => Coord::HalfPixelSymmetric,
            Some("pytorch_half_pixel") => Coord::PytorchHalfPixel,
            Some("align_corners") => Coord::AlignCorners,
            Some("asymmetric") => Coord::Asymmetric,
            Some("tf_half_pixel_for_nn") if opset < 13 => Coord::TfHalfPixelForNn,
            Some("tf_crop_and_resize") => Coord::TfCropAndResize,
            Some(m) => {
                return Err(attrs.error(
                    "coordinate_transformation_mode",
                    format!(
                        "`{m}` is not a mode of Resize-{opset} (half_pixel, pytorch_half_pixel, \
                         align_corners, asymmetric, tf_crop_and_resize; half_pixel_symmetric \
                         from 19, tf_half_pixel_for_nn before 13)"
                    ),
                ));
            }
        },
    )
}

impl Operator for Resize {
    fn name(&self) -> &'static str {
        self.name
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.name;
        let (min, max) = self.arity();
        let inputs = check_inputs(op, inputs, min, max)?;
        let x = required(op, inputs, 0)?;
        check_storable(op, x.dtype)?;
        if !matches!(self.params.filter, Filter::Nearest(_)) && !interpolable(x.dtype) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        // An operand is absent when omitted or empty; a present one must
        // be a constant in memory (it decides the output shape).
        let operand = |pos: Option<usize>| -> Result<Option<&Tensor>, KernelError> {
            let Some(i) = pos else { return Ok(None) };
            match inputs.get(i).copied().flatten() {
                Some(info) if info.shape.contains(&0) => Ok(None),
                Some(info) => info
                    .value
                    .map(Some)
                    .ok_or(KernelError::NeedsConstant { op, input: i }),
                None => Ok(None),
            }
        };
        let (roi, scales, sizes) = self.positions();
        let roi = if self.params.coord == Coord::TfCropAndResize {
            operand(roi)?
        } else {
            None
        };
        let ops = Operands {
            roi,
            scales: operand(scales)?,
            sizes: operand(sizes)?,
        };
        if let Some(s) = ops.sizes
            && s.dtype() != ElementType::I64
        {
            return Err(KernelError::UnsupportedType {
                op,
                dtype: s.dtype(),
            });
        }
        let plan = self.plan(x.shape, &ops)?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: plan.out,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.name;
        let x = input(op, inputs, 0)?;
        let operand = |pos: Option<usize>| {
            pos.and_then(|i| inputs.get(i).copied().flatten())
                .filter(|t| !t.is_empty())
        };
        let (roi, scales, sizes) = self.positions();
        let ops = Operands {
            roi: operand(roi),
            scales: operand(scales),
            sizes: operand(sizes),
        };
        let plan = self.plan(x.shape(), &ops)?;
        let y = output(op, outputs, 0)?;
        if y.shape() != plan.out.as_slice() {
            return Err(KernelError::Invalid {
                op,
                detail: format!(
                    "output shape {:?} where {:?} was computed",
                    y.shape(),
                    plan.out
                ),
            });
        }
        resample(op, x, y, &plan, &self.params, par)
    }
}
