//! ConvTranspose (f32): the gradient of Conv with respect to its input,
//! `Y[n, m, i * stride + k * dilation - pad] += X[n, c, i] * W[c, m, k]`
//! plus `B[m]`, for 1-D, 2-D and 3-D windows and groups; `output_padding`,
//! `output_shape` and `auto_pad` decide the output extent and padding as
//! the ONNX specification states.
//!
//! Per image and group, one GEMM computes every input position's
//! contributions `[positions][maps × taps]` from the transposed input and
//! the weight read in place; a scatter (col2im) adds them into the output.

use super::geometry::{AutoPad, Geometry, MAX_SPATIAL, Window};
use super::shape::check_types;
use crate::ops::basic::common::{
    Attrs, check_inputs, checked_count, input, optional, output, required, typed, typed_mut,
};
use crate::ops::linalg::isa::Isa;
use crate::ops::linalg::sgemm::{self, BSrc, Problem};
use crate::{
    CpuFeatures, ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight,
    ParallelFor, Tensor,
};

const OP: &str = "ConvTranspose";

/// A ConvTranspose node.
#[derive(Debug)]
pub(crate) struct ConvTranspose {
    window: Window,
    group: usize,
    output_padding: Option<Vec<usize>>,
    output_shape: Option<Vec<usize>>,
    isa: Isa,
}

/// The checked shapes of one transposed convolution: `geometry` runs over
/// the input positions (`output` = X's extents) into Y (`input` = Y's
/// extents), so that [`super::geometry::Geometry3::coord`] gives Y's
/// coordinate of input position `i`, tap `k`.
#[derive(Debug, Clone, Copy)]
struct Shape {
    batch: usize,
    channels: usize,
    maps: usize,
    group: usize,
    geometry: Geometry,
}

fn non_negative(attrs: &Attrs<'_>, name: &'static str) -> Result<Option<Vec<usize>>, KernelError> {
    let Some(v) = attrs.ints(name)? else {
        return Ok(None);
    };
    v.iter()
        .map(|&x| usize::try_from(x))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
        .map_err(|_| attrs.error(name, format!("{v:?}: values must be >= 0")))
}

impl ConvTranspose {
    pub(crate) fn new(spec: &NodeSpec<'_>, cpu: CpuFeatures) -> Result<Self, KernelError> {
        let attrs = Attrs::new(
            spec,
            OP,
            &[
                "auto_pad",
                "dilations",
                "group",
                "kernel_shape",
                "output_padding",
                "output_shape",
                "pads",
                "strides",
            ],
        )?;
        let group = attrs.int_or("group", 1)?;
        let group = usize::try_from(group)
            .ok()
            .filter(|&g| g > 0)
            .ok_or_else(|| attrs.error("group", format!("{group}: must be >= 1")))?;
        Ok(Self {
            window: Window::parse(&attrs, false)?,
            group,
            output_padding: non_negative(&attrs, "output_padding")?,
            output_shape: non_negative(&attrs, "output_shape")?,
            isa: Isa::select(cpu),
        })
    }

    fn shape(
        &self,
        x: &[usize],
        w: &[usize],
        bias: Option<&[usize]>,
    ) -> Result<Shape, KernelError> {
        let s = super::convolution::check_channels(OP, self.group, x, w, bias, true)?;
        if let Some(k) = &self.window.kernel
            && k.as_slice() != &w[2..]
        {
            return Err(KernelError::Shape(format!(
                "{OP}: kernel_shape {k:?} does not match W {w:?}"
            )));
        }
        let rank = x.len() - 2;
        if rank > MAX_SPATIAL {
            return Err(KernelError::Shape(format!(
                "{OP}: {rank} spatial axes; 1 to {MAX_SPATIAL} are supported"
            )));
        }
        let bad = |what: String| KernelError::Shape(format!("{OP}: {what}"));
        let out_shape = match &self.output_shape {
            Some(v) if v.len() == rank + 2 => Some(&v[2..]),
            Some(v) if v.len() == rank => Some(&v[..]),
            Some(v) => return Err(bad(format!("output_shape {v:?} for {rank} spatial axes"))),
            None => None,
        };
        let adj = match &self.output_padding {
            Some(v) if v.len() != rank => {
                return Err(bad(format!("output_padding {v:?} for {rank} spatial axes")));
            }
            v => v.clone().unwrap_or_else(|| vec![0; rank]),
        };
        // Stride, dilation and explicit pads as a convolution would read them.
        let base = self.window.resolve_attributes(OP, rank)?;
        let mut g = Geometry {
            rank,
            ..Geometry::default()
        };
        for i in 0..rank {
            let (n, k) = (x[i + 2], w[i + 2]);
            let (s, d) = (base.stride[i], base.dilation[i]);
            if adj[i] >= s.max(d) {
                return Err(bad(format!(
                    "output_padding {} on axis {i} must be smaller than the stride or dilation",
                    adj[i]
                )));
            }
            let full = n
                .saturating_sub(1)
                .checked_mul(s)
                .and_then(|v| v.checked_add(adj[i] + (k - 1).checked_mul(d)? + 1))
                .ok_or_else(|| bad("output extent overflows".into()))?;
            let target = match (out_shape, self.window.auto_pad) {
                (Some(o), _) => Some(o[i]),
                (None, AutoPad::SameUpper | AutoPad::SameLower) => Some(n.saturating_mul(s)),
                _ => None,
            };
            let (pb, out) = match target {
                Some(out) => {
                    let total = full as isize - out as isize;
                    let (small, large) = (total.div_euclid(2), total - total.div_euclid(2));
                    let pb = if self.window.auto_pad == AutoPad::SameUpper {
                        small
                    } else {
                        large
                    };
                    (pb, out)
                }
                None => {
                    let (pb, pe) = (base.pad_begin[i], base.pad_end[i]);
                    let out = full
                        .checked_sub(pb + pe)
                        .filter(|&o| o > 0)
                        .ok_or_else(|| {
                            bad(format!(
                                "axis {i}: pads {pb} + {pe} leave no output (extent {full})"
                            ))
                        })?;
                    (pb as isize, out)
                }
            };
            if pb < 0 {
                return Err(bad(format!(
                    "axis {i}: output extent {out} is larger than the transposed convolution gives ({full})"
                )));
            }
            g.input[i] = out;
            g.output[i] = n;
            g.kernel[i] = k;
            g.stride[i] = s;
            g.dilation[i] = d;
            g.pad_begin[i] = pb as usize;
        }
        checked_count(OP, &[s.0, s.2, g.input_len()])?;
        Ok(Shape {
            batch: s.0,
            channels: s.1,
            maps: s.2,
            group: self.group,
            geometry: g,
        })
    }
}

impl Operator for ConvTranspose {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 2, 3)?;
        let (x, w) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        let bias = optional(inputs, 2);
        check_types(OP, x, w, bias, &[ElementType::F32])?;
        let s = self.shape(x.shape, w.shape, bias.map(|b| b.shape))?;
        let mut shape = vec![s.batch, s.maps];
        shape.extend_from_slice(&s.geometry.input[..s.geometry.rank]);
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape,
        }])
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let (Some(Some(x)), Some(Some(w))) = (inputs.first(), inputs.get(1)) else {
            return 0;
        };
        self.shape(x.shape, w.shape, None).map_or(0, |s| {
            let pin = s.geometry.output_len();
            let (cg, mg) = (s.channels / s.group, s.maps / s.group);
            pin.saturating_mul(cg + mg * s.geometry.kernel_len())
                .saturating_mul(4)
        })
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let (x, w) = (input(OP, inputs, 0)?, input(OP, inputs, 1)?);
        let bias = inputs.get(2).copied().flatten();
        let s = self.shape(x.shape(), w.shape(), bias.map(|b| b.shape()))?;
        let y = typed_mut::<f32>(OP, output(OP, outputs, 0)?)?;
        let (x, w) = (typed::<f32>(OP, x)?, typed::<f32>(OP, w)?);
        let bias = bias.map(|b| typed::<f32>(OP, b)).transpose()?;
        let g = &s.geometry;
        let (pin, pout, taps) = (g.output_len(), g.input_len(), g.kernel_len());
        let (cg, mg) = (s.channels / s.group, s.maps / s.group);
        if y.len() != s.batch * s.maps * pout || x.len() != s.batch * s.channels * pin {
            return Err(KernelError::Invalid {
                op: OP,
                detail: format!("X or Y does not hold the inferred element count for {s:?}"),
            });
        }
        for (plane, out) in y.chunks_mut(pout.max(1)).enumerate() {
            out.fill(bias.map_or(0.0, |b| b[plane % s.maps]));
        }
        let cols = mg * taps;
        let mut xt = crate::scratch::filled(OP, pin * cg, 0.0f32)?;
        let mut contrib = crate::scratch::filled(OP, pin * cols, 0.0f32)?;
        let g3 = g.as_3d();
        let offsets = |_| (0, 0, 0);
        for n in 0..s.batch {
            for grp in 0..s.group {
                let xg = &x[(n * s.channels + grp * cg) * pin..][..cg * pin];
                for (c, src) in xg.chunks_exact(pin).enumerate() {
                    for (p, &v) in src.iter().enumerate() {
                        xt[p * cg + c] = v;
                    }
                }
                let prob = Problem {
                    m: pin,
                    n: cols,
                    k: cg,
                    a: &xt,
                    lda: cg,
                    a_panels: false,
                    b: BSrc::Rows {
                        data: &w[grp * cg * cols..],
                        ldb: cols,
                    },
                    ldc: cols,
                    alpha: 1.0,
                    accumulate: false,
                    batches: 1,
                    offsets: &offsets,
                };
                sgemm::run(self.isa, &prob, &mut contrib, par);
                let yg = &mut y[(n * s.maps + grp * mg) * pout..][..mg * pout];
                scatter(&g3, &contrib, mg, taps, yg);
            }
        }
        Ok(())
    }
}

/// Adds each input position's contributions `contrib[p][m * taps + t]` into
/// `y[m]` at the position tap `t` of `p` reaches (when inside Y).
fn scatter(
    g: &super::geometry::Geometry3,
    contrib: &[f32],
    maps: usize,
    taps: usize,
    y: &mut [f32],
) {
    let [_, oh, ow] = g.output;
    let [yd, yh, yw] = g.input;
    let [_, kh, kw] = g.kernel;
    let plane = yd * yh * yw;
    for (p, row) in contrib.chunks_exact(maps * taps).enumerate() {
        let o = [p / (oh * ow), p / ow % oh, p % ow];
        for t in 0..taps {
            let k = [t / (kh * kw), t / kw % kh, t % kw];
            let z = g.coord(0, o[0], k[0]) as usize;
            let yy = g.coord(1, o[1], k[1]) as usize;
            let xx = g.coord(2, o[2], k[2]) as usize;
            if z < yd && yy < yh && xx < yw {
                let at = (z * yh + yy) * yw + xx;
                for m in 0..maps {
                    y[m * plane + at] += row[m * taps + t];
                }
            }
        }
    }
}
