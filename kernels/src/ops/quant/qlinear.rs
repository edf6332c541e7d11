//! The `com.microsoft` quantized elementwise, pooling and concatenation
//! operators ONNX Runtime's quantizer emits: QLinearAdd, QLinearMul,
//! QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool,
//! QLinearAveragePool and QLinearConcat (cold path: attributes and shapes;
//! hot path: `execute`).
//!
//! Each dequantizes its inputs (`(q - zero_point) * scale`), computes in
//! f32 and quantizes the result (round half to even, saturate), which is
//! ONNX Runtime's arithmetic up to the rounding of one f32 operation: the
//! outputs agree within one quantization step. The unary operators build a
//! 256-entry table per run.

use super::common::{QInt, quantize_value};
use super::operand::{bytes_of, is_8bit, scales, zero_points};
use crate::ops::basic::broadcast::{Plan, broadcast_shape};
use crate::ops::basic::common::{Attrs, input, normalize_axis, optional, output, required};
use crate::ops::conv::geometry::Window;
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Which operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add,
    Mul,
    Sigmoid,
    LeakyRelu,
    GlobalAveragePool,
    AveragePool,
    Concat,
    Softmax,
}

/// One of this file's operators.
#[derive(Debug)]
pub(crate) struct QLinear {
    kind: Kind,
    op: &'static str,
    alpha: f32,
    channels_last: bool,
    axis: i64,
    window: Option<Window>,
    count_include_pad: bool,
    /// QLinearSoftmax's `opset`: below 13, softmax over the flattened
    /// axes from `axis` on.
    softmax_opset: i64,
}

/// The operator for `spec` if it is one of this file's.
pub(crate) fn lookup(spec: &NodeSpec<'_>) -> Option<Result<Box<dyn Operator>, KernelError>> {
    if spec.domain != "com.microsoft" {
        return None;
    }
    let (kind, op, allowed): (Kind, &'static str, &[&'static str]) = match spec.op_type {
        "QLinearAdd" => (Kind::Add, "QLinearAdd", &[]),
        "QLinearMul" => (Kind::Mul, "QLinearMul", &[]),
        "QLinearSigmoid" => (Kind::Sigmoid, "QLinearSigmoid", &[]),
        "QLinearLeakyRelu" => (Kind::LeakyRelu, "QLinearLeakyRelu", &["alpha"]),
        "QLinearGlobalAveragePool" => (
            Kind::GlobalAveragePool,
            "QLinearGlobalAveragePool",
            &["channels_last"],
        ),
        "QLinearAveragePool" => (
            Kind::AveragePool,
            "QLinearAveragePool",
            &[
                "auto_pad",
                "ceil_mode",
                "channels_last",
                "count_include_pad",
                "kernel_shape",
                "pads",
                "strides",
            ],
        ),
        "QLinearConcat" => (Kind::Concat, "QLinearConcat", &["axis"]),
        "QLinearSoftmax" => (Kind::Softmax, "QLinearSoftmax", &["axis", "opset"]),
        _ => return None,
    };
    Some(QLinear::new(spec, kind, op, allowed).map(|o| Box::new(o) as Box<dyn Operator>))
}

impl QLinear {
    fn new(
        spec: &NodeSpec<'_>,
        kind: Kind,
        op: &'static str,
        allowed: &[&'static str],
    ) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, op, allowed)?;
        let arity_ok = match kind {
            Kind::Add | Kind::Mul => (7..=8).contains(&spec.inputs),
            Kind::Sigmoid
            | Kind::LeakyRelu
            | Kind::GlobalAveragePool
            | Kind::AveragePool
            | Kind::Softmax => (4..=5).contains(&spec.inputs),
            Kind::Concat => spec.inputs >= 5 && (spec.inputs - 2).is_multiple_of(3),
        };
        if !arity_ok || spec.outputs != 1 {
            return Err(KernelError::Shape(format!(
                "{op}: {} inputs and {} outputs is not a valid arity",
                spec.inputs, spec.outputs
            )));
        }
        let window = if kind == Kind::AveragePool {
            let w = Window::parse(&attrs, true)?;
            w.required_kernel(op)?;
            Some(w)
        } else {
            None
        };
        Ok(Self {
            kind,
            op,
            alpha: attrs.float("alpha")?.unwrap_or(0.01),
            channels_last: attrs.int_or("channels_last", 0)? != 0,
            axis: attrs.int_or("axis", if kind == Kind::Softmax { -1 } else { 0 })?,
            window,
            count_include_pad: attrs.int_or("count_include_pad", 0)? != 0,
            softmax_opset: attrs.int_or("opset", 13)?,
        })
    }

    /// The output zero point's position (its type is the output's).
    fn zy_slot(&self, inputs: usize) -> usize {
        match self.kind {
            Kind::Add | Kind::Mul => 7,
            Kind::Concat => 1,
            _ => 4.min(inputs.saturating_sub(1)),
        }
    }

    fn out_shape(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<usize>, KernelError> {
        let op = self.op;
        let x = required(op, inputs, 0)?;
        match self.kind {
            Kind::Add | Kind::Mul => broadcast_shape(op, x.shape, required(op, inputs, 3)?.shape),
            Kind::Sigmoid | Kind::LeakyRelu => Ok(x.shape.to_vec()),
            Kind::Softmax => {
                normalize_axis(op, "axis", self.axis, x.shape.len())?;
                Ok(x.shape.to_vec())
            }
            Kind::GlobalAveragePool => {
                if x.shape.len() < 3 {
                    return Err(KernelError::Shape(format!(
                        "{op}: X {:?} is below rank 3",
                        x.shape
                    )));
                }
                let mut s = x.shape.to_vec();
                let spatial = if self.channels_last {
                    1..s.len() - 1
                } else {
                    2..s.len()
                };
                s[spatial].fill(1);
                Ok(s)
            }
            Kind::AveragePool => {
                if x.shape.len() < 3 {
                    return Err(KernelError::Shape(format!(
                        "{op}: X {:?} must have a batch, channel and spatial axes",
                        x.shape
                    )));
                }
                let r = x.shape.len();
                let spatial = if self.channels_last {
                    &x.shape[1..r - 1]
                } else {
                    &x.shape[2..]
                };
                let w = self.window.as_ref().expect("built with a window");
                let g = w.resolve(op, spatial, w.required_kernel(op)?)?;
                let out = &g.output[..g.rank];
                Ok(if self.channels_last {
                    [&[x.shape[0]], out, &[x.shape[r - 1]]].concat()
                } else {
                    [&x.shape[..2], out].concat()
                })
            }
            Kind::Concat => {
                let first = required(op, inputs, 2)?.shape;
                let axis = normalize_axis(op, "axis", self.axis, first.len())?;
                let mut out = first.to_vec();
                out[axis] = 0;
                for i in (2..inputs.len()).step_by(3) {
                    let s = required(op, inputs, i)?.shape;
                    let fits = s.len() == first.len()
                        && s.iter()
                            .zip(first)
                            .enumerate()
                            .all(|(d, (a, b))| d == axis || a == b);
                    if !fits {
                        return Err(KernelError::Shape(format!(
                            "{op}: input {s:?} does not concatenate with {first:?} on axis {axis}"
                        )));
                    }
                    out[axis] += s[axis];
                }
                Ok(out)
            }
        }
    }
}

/// Dequantization parameters of one operand: `(scale, zero point)`.
fn params(
    op: &'static str,
    inputs: &[Option<&Tensor>],
    scale: usize,
    zero: usize,
) -> Result<(f32, i32), KernelError> {
    let s = scales(op, input(op, inputs, scale)?)?[0];
    let z = zero_points(op, inputs.get(zero).copied().flatten())?[0];
    Ok((s, z))
}

/// An 8-bit tensor's values as i32.
fn values(op: &'static str, t: &Tensor) -> Result<Vec<i32>, KernelError> {
    let (b, signed) = bytes_of(op, t)?;
    Ok(b.iter()
        .map(|&v| if signed { v as i8 as i32 } else { v as i32 })
        .collect())
}

impl Operator for QLinear {
    fn name(&self) -> &'static str {
        self.op
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.op;
        let data_slots: Vec<usize> = match self.kind {
            Kind::Add | Kind::Mul => vec![0, 3],
            Kind::Concat => (2..inputs.len()).step_by(3).collect(),
            _ => vec![0],
        };
        for i in data_slots {
            let t = required(op, inputs, i)?.dtype;
            if !is_8bit(t) {
                return Err(KernelError::UnsupportedType { op, dtype: t });
            }
        }
        let dtype = optional(inputs, self.zy_slot(inputs.len())).map_or(
            required(op, inputs, if self.kind == Kind::Concat { 2 } else { 0 })?.dtype,
            |z| z.dtype,
        );
        if !is_8bit(dtype) {
            return Err(KernelError::UnsupportedType { op, dtype });
        }
        Ok(vec![OutputInfo {
            dtype,
            shape: self.out_shape(inputs)?,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let y = output(self.op, outputs, 0)?;
        match y.dtype() {
            ElementType::U8 => self.run::<u8>(inputs, y, par),
            ElementType::I8 => self.run::<i8>(inputs, y, par),
            dtype => Err(KernelError::UnsupportedType { op: self.op, dtype }),
        }
    }
}

impl QLinear {
    fn run<T: QInt>(
        &self,
        inputs: &[Option<&Tensor>],
        y: &mut Tensor,
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.op;
        let y_shape = y.shape().to_vec();
        let out = crate::ops::basic::common::typed_mut::<T>(op, y)?;
        match self.kind {
            Kind::Add | Kind::Mul => {
                let (sa, za) = params(op, inputs, 1, 2)?;
                let (sb, zb) = params(op, inputs, 4, 5)?;
                let (sc, zc) = params(op, inputs, 6, 7)?;
                let a = input(op, inputs, 0)?;
                let b = input(op, inputs, 3)?;
                let ((ab, a_signed), (bb, b_signed)) = (bytes_of(op, a)?, bytes_of(op, b)?);
                let plan = Plan::new(op, a.shape(), b.shape())?;
                let add = self.kind == Kind::Add;
                // On the bytes themselves, the closure inlined into the
                // plan's vector loop.
                plan.run_par(
                    op,
                    ab,
                    bb,
                    out,
                    par,
                    #[inline(always)]
                    move |a: u8, b: u8| {
                        let a = if a_signed { a as i8 as i32 } else { a as i32 };
                        let b = if b_signed { b as i8 as i32 } else { b as i32 };
                        let (fa, fb) = ((a - za) as f32 * sa, (b - zb) as f32 * sb);
                        let v = if add { fa + fb } else { fa * fb };
                        quantize_value::<T>(v / sc, zc)
                    },
                )
            }
            Kind::Sigmoid | Kind::LeakyRelu => {
                let (sx, zx) = params(op, inputs, 1, 2)?;
                let (sy, zy) = params(op, inputs, 3, 4)?;
                let x = input(op, inputs, 0)?;
                let (xb, signed) = bytes_of(op, x)?;
                let alpha = self.alpha;
                let sigmoid = self.kind == Kind::Sigmoid;
                let table: Vec<T> = (0..256u32)
                    .map(|b| {
                        let q = if signed {
                            b as u8 as i8 as i32
                        } else {
                            b as i32
                        };
                        let v = (q - zx) as f32 * sx;
                        let r = if sigmoid {
                            1.0 / (1.0 + (-v).exp())
                        } else if v >= 0.0 {
                            v
                        } else {
                            v * alpha
                        };
                        quantize_value::<T>(r / sy, zy)
                    })
                    .collect();
                for_each_chunk_mut(par, out, 64 * 1024, &|off, o| {
                    for (y, &b) in o.iter_mut().zip(&xb[off..]) {
                        *y = table[b as usize];
                    }
                });
                Ok(())
            }
            Kind::GlobalAveragePool => {
                let (sx, zx) = params(op, inputs, 1, 2)?;
                let (sy, zy) = params(op, inputs, 3, 4)?;
                let x = input(op, inputs, 0)?;
                let xv = values(op, x)?;
                let s = x.shape();
                let (n, c) = if self.channels_last {
                    (s[0], s[s.len() - 1])
                } else {
                    (s[0], s[1])
                };
                let area: usize = if self.channels_last {
                    s[1..s.len() - 1].iter().product()
                } else {
                    s[2..].iter().product()
                };
                let mult = sx / sy / area.max(1) as f32;
                for b in 0..n {
                    for ch in 0..c {
                        let sum: i64 = (0..area)
                            .map(|p| {
                                let i = if self.channels_last {
                                    (b * area + p) * c + ch
                                } else {
                                    (b * c + ch) * area + p
                                };
                                (xv[i] - zx) as i64
                            })
                            .sum();
                        out[b * c + ch] = quantize_value(sum as f32 * mult, zy);
                    }
                }
                Ok(())
            }
            Kind::AveragePool => {
                let (sx, zx) = params(op, inputs, 1, 2)?;
                let (sy, zy) = params(op, inputs, 3, 4)?;
                let x = input(op, inputs, 0)?;
                let xv = values(op, x)?;
                self.average_pool(x.shape(), &xv, zx, sx / sy, zy, out)
            }
            Kind::Softmax => {
                let (sx, zx) = params(op, inputs, 1, 2)?;
                let (sy, zy) = params(op, inputs, 3, 4)?;
                let xv = values(op, input(op, inputs, 0)?)?;
                let axis = normalize_axis(op, "axis", self.axis, y_shape.len())?;
                let (len, inner) = if self.softmax_opset < 13 {
                    (y_shape[axis..].iter().product::<usize>(), 1)
                } else {
                    (y_shape[axis], y_shape[axis + 1..].iter().product::<usize>())
                };
                let rows = xv.len() / (len * inner).max(1);
                let mut e = vec![0f32; len];
                for r in 0..rows {
                    for i in 0..inner {
                        let idx = |j: usize| (r * len + j) * inner + i;
                        let max = (0..len).map(|j| xv[idx(j)]).max().unwrap_or(0);
                        let mut sum = 0f32;
                        for (j, e) in e.iter_mut().enumerate() {
                            *e = ((xv[idx(j)] - max) as f32 * sx).exp();
                            sum += *e;
                        }
                        let _ = zx;
                        for (j, &e) in e.iter().enumerate() {
                            out[idx(j)] = quantize_value(e / sum / sy, zy);
                        }
                    }
                }
                Ok(())
            }
            Kind::Concat => {
                let (sy, zy) = params(op, inputs, 0, 1)?;
                let axis = normalize_axis(op, "axis", self.axis, y_shape.len())?;
                let outer: usize = y_shape[..axis].iter().product();
                let inner: usize = y_shape[axis + 1..].iter().product();
                let total = y_shape[axis] * inner;
                let mut at = 0;
                for i in (2..inputs.len()).step_by(3) {
                    let x = input(op, inputs, i)?;
                    let (sx, zx) = params(op, inputs, i + 1, i + 2)?;
                    let xv = values(op, x)?;
                    let width = x.shape()[axis] * inner;
                    for o in 0..outer {
                        for (j, &v) in xv[o * width..(o + 1) * width].iter().enumerate() {
                            let f = (v - zx) as f32 * sx;
                            out[o * total + at + j] = quantize_value(f / sy, zy);
                        }
                    }
                    at += width;
                }
                Ok(())
            }
        }
    }

    /// Averages over each window of the NCHW input (padding counted when
    /// `count_include_pad`), requantized by `mult = x_scale / y_scale`.
    fn average_pool<T: QInt>(
        &self,
        shape: &[usize],
        xv: &[i32],
        zx: i32,
        mult: f32,
        zy: i32,
        out: &mut [T],
    ) -> Result<(), KernelError> {
        let op = self.op;
        let w = self.window.as_ref().expect("built with a window");
        let r = shape.len();
        let (batch, channels, spatial) = if self.channels_last {
            (shape[0], shape[r - 1], &shape[1..r - 1])
        } else {
            (shape[0], shape[1], &shape[2..])
        };
        let g = w.resolve(op, spatial, w.required_kernel(op)?)?;
        let g3 = g.as_3d();
        let [id, ih, iw] = g3.input;
        let [od, oh, ow] = g3.output;
        let [kd, kh, kw] = g3.kernel;
        let planes = batch * channels;
        let (in_len, out_len) = (g.input_len(), g.output_len());
        // Element `pos` of plane `p` (image `p / C`, channel `p % C`).
        let at = |p: usize, pos: usize, len: usize| {
            if self.channels_last {
                ((p / channels) * len + pos) * channels + p % channels
            } else {
                p * len + pos
            }
        };
        for p in 0..planes {
            let mut o = 0;
            for z in 0..od {
                for yy in 0..oh {
                    for xx in 0..ow {
                        let (mut sum, mut count, mut padded) = (0i64, 0usize, 0usize);
                        for a in 0..kd {
                            let iz = g3.coord(0, z, a);
                            for b in 0..kh {
                                let iy = g3.coord(1, yy, b);
                                for c in 0..kw {
                                    let ix = g3.coord(2, xx, c);
                                    let inside = (0..id as isize).contains(&iz)
                                        && (0..ih as isize).contains(&iy)
                                        && (0..iw as isize).contains(&ix);
                                    // Taps in the explicit padding (not past
                                    // it, with ceil_mode) count when
                                    // count_include_pad.
                                    let in_pad = iz < (id + g3.pad_end[0]) as isize
                                        && iy < (ih + g3.pad_end[1]) as isize
                                        && ix < (iw + g3.pad_end[2]) as isize;
                                    if inside {
                                        let pos =
                                            (iz as usize * ih + iy as usize) * iw + ix as usize;
                                        sum += (xv[at(p, pos, in_len)] - zx) as i64;
                                        count += 1;
                                    } else if in_pad {
                                        padded += 1;
                                    }
                                }
                            }
                        }
                        let n = if self.count_include_pad {
                            count + padded
                        } else {
                            count
                        };
                        let avg = sum as f32 / n.max(1) as f32;
                        out[at(p, o, out_len)] = quantize_value(avg * mult, zy);
                        o += 1;
                    }
                }
            }
        }
        Ok(())
    }
}
