//! NonMaxSuppression (opsets 10 and 11), as the ONNX reference selects:
//! per batch and class, the boxes whose score is above `score_threshold`
//! (when given) in descending score order, ties to the lower box index,
//! each kept unless its IoU with a box already kept exceeds
//! `iou_threshold`, at most `max_output_boxes_per_class` of them (absent:
//! none). The selection count is the output length, so shape inference
//! needs every operand's value ([`KernelError::ValueDependent`] without
//! them); `infer` counts and `execute` writes through one routine
//! ([`select`]). Box geometry is f32 arithmetic in the reference's order;
//! a NaN score ranks below every number.

use std::cmp::Ordering;

use super::{check_outputs, counted};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_len, input, numel, optional, output, required, typed_mut,
};
use crate::ops::normalize::common::{FloatView, flag};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const OP: &str = "NonMaxSuppression";

/// NonMaxSuppression.
#[derive(Debug)]
pub(crate) struct Nms {
    /// `center_point_box = 1`: boxes are `[x_center, y_center, width,
    /// height]`; otherwise `[y1, x1, y2, x2]` (any two opposite corners).
    center: bool,
}

impl Nms {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, OP, &["center_point_box"])?;
        check_outputs(OP, spec, 1, 1)?;
        Ok(Self {
            center: flag(&attrs, "center_point_box", false)?,
        })
    }
}

/// The element types of `boxes` and `scores`.
fn check_float(dtype: ElementType) -> Result<(), KernelError> {
    match dtype {
        ElementType::F32 | ElementType::F16 | ElementType::BF16 => Ok(()),
        _ => Err(KernelError::UnsupportedType { op: OP, dtype }),
    }
}

/// `[batches, classes, boxes]` from the shapes of `boxes` and `scores`.
fn dims(boxes: &[usize], scores: &[usize]) -> Result<[usize; 3], KernelError> {
    let bad = |what: String| Err(KernelError::Shape(format!("{OP}: {what}")));
    match (boxes, scores) {
        (&[nb, ns, 4], &[sb, nc, ss]) if nb == sb && ns == ss => Ok([nb, nc, ns]),
        (&[_, _, 4], &[_, _, _]) => bad(format!(
            "boxes {boxes:?} and scores {scores:?} disagree ([num_batches, \
             spatial_dimension, 4] and [num_batches, num_classes, spatial_dimension])"
        )),
        (&[_, _, 4], _) => bad(format!(
            "scores must be [num_batches, num_classes, spatial_dimension], got {scores:?}"
        )),
        _ => bad(format!(
            "boxes must be [num_batches, spatial_dimension, 4], got {boxes:?}"
        )),
    }
}

/// Checks an optional scalar operand: at most one element (none: the
/// default) of an accepted type.
fn check_scalar(i: usize, dtype: ElementType, shape: &[usize]) -> Result<(), KernelError> {
    let ok = if i == 2 {
        matches!(dtype, ElementType::I64 | ElementType::I32)
    } else {
        check_float(dtype).is_ok() || dtype == ElementType::F64
    };
    if !ok {
        return Err(KernelError::UnsupportedType { op: OP, dtype });
    }
    if numel(shape) > 1 {
        return Err(KernelError::Shape(format!(
            "{OP}: input {i} must be a scalar or a one-element tensor, got shape {shape:?}"
        )));
    }
    Ok(())
}

/// The scalar operands.
#[derive(Debug, Clone, Copy)]
struct Params {
    max_per_class: usize,
    iou: f32,
    score: Option<f32>,
}

impl Params {
    /// `max_output_boxes_per_class` (absent or empty: 0; negative: 0).
    fn max_of(t: Option<&Tensor>) -> Result<usize, KernelError> {
        let Some(t) = t else { return Ok(0) };
        check_scalar(2, t.dtype(), t.shape())?;
        let v = t.to_i64_vec().ok_or(KernelError::UnsupportedType {
            op: OP,
            dtype: t.dtype(),
        })?;
        Ok(v.first().map_or(0, |&m| usize::try_from(m).unwrap_or(0)))
    }

    /// A float operand's value (`None`: absent or empty).
    fn float_of(i: usize, t: Option<&Tensor>) -> Result<Option<f32>, KernelError> {
        let Some(t) = t else { return Ok(None) };
        check_scalar(i, t.dtype(), t.shape())?;
        let v = FloatView::of(OP, t)?;
        Ok((v.len() == 1).then(|| v.get(0) as f32))
    }

    /// The operands (inputs 2, 3, 4) read as the reference does.
    fn read(
        max: Option<&Tensor>,
        iou: Option<&Tensor>,
        score: Option<&Tensor>,
    ) -> Result<Self, KernelError> {
        let iou = Self::float_of(3, iou)?.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&iou) {
            return Err(KernelError::Invalid {
                op: OP,
                detail: format!("iou_threshold {iou} is not in [0, 1]"),
            });
        }
        Ok(Self {
            max_per_class: Self::max_of(max)?,
            iou,
            score: Self::float_of(4, score)?,
        })
    }
}

/// A box's extent: `[x_min, x_max, y_min, y_max]`.
type Extent = [f32; 4];

/// `(min, max)` of two coordinates as the reference orders them.
#[inline]
fn min_max(a: f32, b: f32) -> (f32, f32) {
    if a >= b { (b, a) } else { (a, b) }
}

/// Python's `max(a, b)` (the first unless the second is greater).
#[inline]
fn py_max(a: f32, b: f32) -> f32 {
    if b > a { b } else { a }
}

/// Python's `min(a, b)` (the first unless the second is less).
#[inline]
fn py_min(a: f32, b: f32) -> f32 {
    if b < a { b } else { a }
}

/// The extent of box `b` in its layout.
fn extent(b: [f32; 4], center: bool) -> Extent {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [b[0] - hw, b[0] + hw, b[1] - hh, b[1] + hh]
    } else {
        let (x0, x1) = min_max(b[1], b[3]);
        let (y0, y1) = min_max(b[0], b[2]);
        [x0, x1, y0, y1]
    }
}

/// Whether candidate `a` is suppressed by kept box `b`: IoU > `iou`.
fn suppressed(a: &Extent, b: &Extent, iou: f32) -> bool {
    let (ix0, ix1) = (py_max(a[0], b[0]), py_min(a[1], b[1]));
    if ix1 <= ix0 {
        return false;
    }
    let (iy0, iy1) = (py_max(a[2], b[2]), py_min(a[3], b[3]));
    if iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    if inter <= 0.0 {
        return false;
    }
    let area_a = (a[1] - a[0]) * (a[3] - a[2]);
    let area_b = (b[1] - b[0]) * (b[3] - b[2]);
    let union = area_a + area_b - inter;
    if area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > iou
}

/// Descending scores, NaN last (a stable sort keeps ties in index order).
fn descending(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => b.partial_cmp(&a).unwrap_or(Ordering::Equal),
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
    }
}

/// An empty vector with room for `n` items, refusing an allocation the
/// system does not grant.
fn with_room<T>(n: usize) -> Result<Vec<T>, KernelError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| KernelError::Allocation {
            op: OP,
            bytes: n.saturating_mul(size_of::<T>()),
        })?;
    Ok(v)
}

/// The selection: calls `emit` with `[batch, class, box]` of every kept
/// box in output order. The one routine `infer` counts and `execute`
/// writes.
fn select(
    boxes: FloatView<'_>,
    scores: FloatView<'_>,
    [nb, nc, ns]: [usize; 3],
    center: bool,
    p: Params,
    mut emit: impl FnMut([usize; 3]) -> Result<(), KernelError>,
) -> Result<(), KernelError> {
    if p.max_per_class == 0 || nb == 0 || nc == 0 || ns == 0 {
        return Ok(());
    }
    let limit = p.max_per_class.min(ns);
    let mut extents: Vec<Extent> = with_room(ns)?;
    let mut cand: Vec<(f32, usize)> = with_room(ns)?;
    let mut kept: Vec<usize> = with_room(limit)?;
    for b in 0..nb {
        extents.clear();
        extents.extend((0..ns).map(|i| {
            let at = (b * ns + i) * 4;
            let v = |k: usize| boxes.get(at + k) as f32;
            extent([v(0), v(1), v(2), v(3)], center)
        }));
        for c in 0..nc {
            let base = (b * nc + c) * ns;
            cand.clear();
            cand.extend((0..ns).filter_map(|i| {
                let s = scores.get(base + i) as f32;
                // Strictly above the threshold (a NaN score never is).
                let above = p.score.is_none_or(|t| s > t);
                above.then_some((s, i))
            }));
            cand.sort_by(|x, y| descending(x.0, y.0));
            kept.clear();
            for &(_, i) in &cand {
                if kept.len() == limit {
                    break;
                }
                if !kept
                    .iter()
                    .any(|&k| suppressed(&extents[i], &extents[k], p.iou))
                {
                    kept.push(i);
                    emit([b, c, i])?;
                }
            }
        }
    }
    Ok(())
}

/// The `[num_selected, 3]` output shape.
fn out_info(count: usize) -> Vec<OutputInfo> {
    vec![OutputInfo {
        dtype: ElementType::I64,
        shape: vec![count, 3],
    }]
}

impl Operator for Nms {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 2, 5)?;
        let (boxes, scores) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        check_float(boxes.dtype)?;
        check_float(scores.dtype)?;
        if scores.dtype != boxes.dtype {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: scores.dtype,
            });
        }
        let d = dims(boxes.shape, scores.shape)?;
        for i in 2..5 {
            if let Some(info) = optional(inputs, i) {
                check_scalar(i, info.dtype, info.shape)?;
            }
        }
        // An operand with no element is its default, whatever its value.
        let given = |i: usize| optional(inputs, i).filter(|info| numel(info.shape) > 0);
        let known = |i: usize| given(i).and_then(|info| info.value);
        // Nothing is selected without boxes or with a limit of 0, whatever
        // the other values.
        let none = d.contains(&0)
            || match given(2) {
                None => true,
                Some(info) => info.value.is_some() && Params::max_of(info.value)? == 0,
            };
        if none {
            Params::read(None, known(3), known(4))?;
            return Ok(out_info(0));
        }
        let value = |i: usize| given(i).map(|info| counted(OP, info)).transpose();
        let p = Params::read(value(2)?, value(3)?, value(4)?)?;
        let (bv, sv) = (counted(OP, boxes)?, counted(OP, scores)?);
        let (bv, sv) = (FloatView::of(OP, bv)?, FloatView::of(OP, sv)?);
        let mut count = 0usize;
        select(bv, sv, d, self.center, p, |_| {
            count += 1;
            Ok(())
        })?;
        Ok(out_info(count))
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        // Extents, candidates and kept boxes of one class.
        optional(inputs, 0).map_or(0, |b| {
            b.shape.get(1).map_or(0, |&n| {
                n.saturating_mul(size_of::<Extent>() + size_of::<(f32, usize)>() + 8)
            })
        })
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let (boxes, scores) = (input(OP, inputs, 0)?, input(OP, inputs, 1)?);
        check_float(boxes.dtype())?;
        if scores.dtype() != boxes.dtype() {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: scores.dtype(),
            });
        }
        let d = dims(boxes.shape(), scores.shape())?;
        let operand = |i: usize| inputs.get(i).copied().flatten();
        let p = Params::read(operand(2), operand(3), operand(4))?;
        let out = output(OP, outputs, 0)?;
        let m = match *out.shape() {
            [m, 3] => m,
            _ => {
                return Err(KernelError::Invalid {
                    op: OP,
                    detail: format!("output of shape {:?} is not [count, 3]", out.shape()),
                });
            }
        };
        let ys = typed_mut::<i64>(OP, out)?;
        check_len(OP, "selected_indices", ys.len(), numel(&[m, 3]))?;
        let mut rows = ys.chunks_exact_mut(3);
        let mut j = 0usize;
        select(
            FloatView::of(OP, boxes)?,
            FloatView::of(OP, scores)?,
            d,
            self.center,
            p,
            |sel| {
                let row = rows.next().ok_or_else(|| KernelError::Invalid {
                    op: OP,
                    detail: format!("more than the {m} boxes inferred are selected"),
                })?;
                for (y, v) in row.iter_mut().zip(sel) {
                    *y = v as i64;
                }
                j += 1;
                Ok(())
            },
        )?;
        if j != m {
            return Err(KernelError::Invalid {
                op: OP,
                detail: format!("{j} boxes are selected where {m} were inferred"),
            });
        }
        Ok(())
    }
}
