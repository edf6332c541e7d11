//! QLinearConv and ConvInteger on the integer product (cold path: inputs,
//! shapes, the prepack offer; hot path: `execute`).
//!
//! Each image is viewed channels-last, as ONNX Runtime's kernels do: the
//! product's rows are output pixels, its columns a group's output
//! channels, and its reduction runs over the kernel taps with the group's
//! input channels innermost (`k = tap * C/group + c`), so that pairs of
//! consecutive `k` are those ONNX Runtime's AVX2 kernel saturates. Taps
//! outside the input read the input's zero point. The product is stored
//! channel-major (NCHW) by the output stage. Depthwise convolutions
//! (one input and one output channel per group) run a direct exact loop.

use super::common::QInt;
use super::conv_loops::{im2col, to_channels_last};
use super::depthwise::Depthwise;
#[cfg(target_arch = "x86_64")]
use super::depthwise_blocked;
use super::operand::{bytes_of, check_columns, is_8bit, scales, zero_points};
use super::planar::{self, PackedW};
use super::qconv_pack::{ConvPrepack, group_view, pack_group, packed_w_shape, planar_view};
use super::qgemm::sink::{BiasI32, I32Sink, RequantSink, Shared, Sink};
use super::qgemm::{self, AOperand, Arith, PackedB, QIsa, ZeroA};
use crate::ops::basic::common::{Attrs, input, optional, output, required, typed, typed_mut};
use crate::ops::conv::convolution::conv_shape;
use crate::ops::conv::geometry::Window;
use crate::ops::conv::shape::ConvShape;
use crate::{
    CpuFeatures, ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight,
    ParallelFor, Prepack, Tensor,
};

/// Input positions.
#[derive(Debug, Clone, Copy)]
struct Slots {
    x: usize,
    sx: Option<usize>,
    zx: usize,
    w: usize,
    sw: Option<usize>,
    zw: usize,
    sy: Option<usize>,
    zy: Option<usize>,
    bias: Option<usize>,
}

/// QLinearConv or ConvInteger.
#[derive(Debug)]
pub(crate) struct QConv {
    op: &'static str,
    slots: Slots,
    window: Window,
    group: usize,
    isa: QIsa,
    /// ConvInteger: exact sums (ONNX Runtime's ConvInteger never saturates
    /// pairs, unlike its QLinearConv).
    exact: bool,
}

/// The operator for `spec` if it is one of this file's.
pub(crate) fn lookup(
    spec: &NodeSpec<'_>,
    cpu: CpuFeatures,
) -> Option<Result<Box<dyn Operator>, KernelError>> {
    let (op, slots, arity) = match (spec.domain, spec.op_type) {
        ("", "QLinearConv") => (
            "QLinearConv",
            Slots {
                x: 0,
                sx: Some(1),
                zx: 2,
                w: 3,
                sw: Some(4),
                zw: 5,
                sy: Some(6),
                zy: Some(7),
                bias: Some(8),
            },
            8..=9,
        ),
        ("", "ConvInteger") => (
            "ConvInteger",
            Slots {
                x: 0,
                sx: None,
                zx: 2,
                w: 1,
                sw: None,
                zw: 3,
                sy: None,
                zy: None,
                bias: None,
            },
            2..=4,
        ),
        _ => return None,
    };
    Some(QConv::new(spec, op, slots, arity, cpu).map(|o| Box::new(o) as Box<dyn Operator>))
}

impl QConv {
    fn new(
        spec: &NodeSpec<'_>,
        op: &'static str,
        slots: Slots,
        arity: std::ops::RangeInclusive<usize>,
        cpu: CpuFeatures,
    ) -> Result<Self, KernelError> {
        let attrs = Attrs::new(
            spec,
            op,
            &[
                "auto_pad",
                "dilations",
                "group",
                "kernel_shape",
                "pads",
                "strides",
            ],
        )?;
        if !arity.contains(&spec.inputs) || spec.outputs != 1 {
            return Err(KernelError::Shape(format!(
                "{op}: takes {arity:?} inputs and 1 output, got {} and {}",
                spec.inputs, spec.outputs
            )));
        }
        let group = attrs.int_or("group", 1)?;
        let group = usize::try_from(group)
            .ok()
            .filter(|&g| g > 0)
            .ok_or_else(|| attrs.error("group", format!("{group}: must be >= 1")))?;
        Ok(Self {
            op,
            slots,
            window: Window::parse(&attrs, false)?,
            group,
            isa: QIsa::select(cpu),
            exact: op == "ConvInteger",
        })
    }

    /// The arithmetic of this operator for these operand signs.
    fn arith(&self, isa: QIsa, a_signed: bool, b_signed: bool) -> Arith {
        if self.exact {
            Arith::Exact
        } else {
            isa.arith(a_signed, b_signed)
        }
    }

    fn shape(
        &self,
        x: &[usize],
        w: &[usize],
        bias: Option<&[usize]>,
    ) -> Result<ConvShape, KernelError> {
        conv_shape(self.op, &self.window, self.group, x, w, bias)
    }
}

fn opt<'a>(inputs: &[Option<&'a Tensor>], i: Option<usize>) -> Option<&'a Tensor> {
    i.and_then(|i| inputs.get(i).copied().flatten())
}

impl Operator for QConv {
    fn name(&self) -> &'static str {
        self.op
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.op;
        let s = self.slots;
        let x = required(op, inputs, s.x)?;
        let w = required(op, inputs, s.w)?;
        for t in [x.dtype, w.dtype] {
            if !is_8bit(t) {
                return Err(KernelError::UnsupportedType { op, dtype: t });
            }
        }
        let bias = s.bias.and_then(|i| optional(inputs, i));
        if let Some(b) = bias
            && b.dtype != ElementType::I32
        {
            return Err(KernelError::UnsupportedType { op, dtype: b.dtype });
        }
        let shape = self.shape(x.shape, w.shape, bias.map(|b| b.shape))?;
        let dtype = match s.zy {
            Some(i) => required(op, inputs, i)?.dtype,
            None => ElementType::I32,
        };
        if dtype != ElementType::I32 && !is_8bit(dtype) {
            return Err(KernelError::UnsupportedType { op, dtype });
        }
        if let Some(sw) = s.sw.and_then(|i| optional(inputs, i)) {
            let count = crate::element_count(sw.shape).unwrap_or(0);
            check_columns(op, "w_scale", count, shape.maps)?;
        }
        let mut out = vec![shape.batch, shape.maps];
        out.extend_from_slice(&shape.geometry.output[..shape.geometry.rank]);
        Ok(vec![OutputInfo { dtype, shape: out }])
    }

    fn prepack(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        cpu: CpuFeatures,
    ) -> Option<Box<dyn Prepack>> {
        let s = self.slots;
        let x = optional(inputs, s.x)?;
        let w = optional(inputs, s.w)?;
        let zw = optional(inputs, s.zw);
        let shape = self.shape(x.shape, w.shape, None).ok()?;
        let packable = w.constant && zw.is_none_or(|z| z.constant) && !shape.depthwise();
        packable.then(|| {
            let isa = QIsa::select(cpu);
            let a_signed = x.dtype == ElementType::I8;
            let b_signed = w.dtype == ElementType::I8;
            let planar = planar::applies(isa, b_signed, &shape);
            let layout = if planar {
                format!(
                    "qconv-planar-v{}-{}-g{}",
                    planar::VERSION,
                    isa.name(),
                    self.group
                )
            } else {
                format!(
                    "qconv-v{}-{}-{:?}-a{}-b{}-g{}",
                    qgemm::VERSION,
                    isa.name(),
                    self.arith(isa, a_signed, b_signed),
                    a_signed as u8,
                    b_signed as u8,
                    self.group
                )
            };
            Box::new(ConvPrepack {
                op: self.op,
                layout,
                consumes: std::iter::once(s.w).chain(zw.map(|_| s.zw)).collect(),
                isa,
                arith: self.arith(isa, a_signed, b_signed),
                group: self.group,
                planar,
            }) as Box<dyn Prepack>
        })
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let (Some(x), Some(w)) = (
            optional(inputs, self.slots.x),
            optional(inputs, self.slots.w),
        ) else {
            return 0;
        };
        match self.shape(x.shape, w.shape, None) {
            Ok(s) if !s.depthwise() => {
                let g = &s.geometry;
                s.channels * g.input_len() + g.output_len() * s.k()
            }
            _ => 0,
        }
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.op;
        let s = self.slots;
        let x = input(op, inputs, s.x)?;
        let bias = opt(inputs, s.bias)
            .map(|b| typed::<i32>(op, b))
            .transpose()?;
        let zx = zero_points(op, opt(inputs, Some(s.zx)))?;
        if zx.len() != 1 {
            return Err(KernelError::Shape(format!(
                "{op}: x_zero_point must be a scalar, got {} values",
                zx.len()
            )));
        }
        let weight = match packed {
            Some(p) => Weight::Packed(p),
            None => Weight::Tensor {
                w: input(op, inputs, s.w)?,
                zero: zero_points(op, opt(inputs, Some(s.zw)))?,
            },
        };
        let w_shape = match &weight {
            Weight::Tensor { w, .. } => w.shape().to_vec(),
            Weight::Packed(p) => packed_w_shape(op, p)?,
        };
        let y = output(op, outputs, 0)?;
        let bias_shape = bias.map(|b| [b.len()]);
        let shape = self.shape(x.shape(), &w_shape, bias_shape.as_ref().map(|b| &b[..]))?;
        let multipliers = match (s.sx, s.sw, s.sy) {
            (Some(sx), Some(sw), Some(sy)) => {
                let sx = scales(op, input(op, inputs, sx)?)?[0];
                let sw = scales(op, input(op, inputs, sw)?)?;
                let sy = scales(op, input(op, inputs, sy)?)?[0];
                check_columns(op, "w_scale", sw.len(), shape.maps)?;
                sw.iter().map(|&w| sx * w / sy).collect()
            }
            _ => Vec::new(),
        };
        let zy = zero_points(op, opt(inputs, s.zy))?[0];
        let run = Run {
            op,
            shape,
            x,
            zx: zx[0],
            weight,
            bias,
            isa: self.isa,
            exact: self.exact,
            par,
        };
        let planar = match &run.weight {
            Weight::Packed(p) => p.layout.starts_with("qconv-planar"),
            Weight::Tensor { w, .. } => {
                planar::applies(self.isa, w.dtype() == ElementType::I8, &run.shape)
            }
        };
        if planar {
            return match y.dtype() {
                ElementType::I32 => run.planar(typed_mut::<i32>(op, y)?, &|out, _| I32Sink(out)),
                ElementType::U8 => {
                    run.planar_requantized::<u8>(typed_mut(op, y)?, &multipliers, zy)
                }
                ElementType::I8 => {
                    run.planar_requantized::<i8>(typed_mut(op, y)?, &multipliers, zy)
                }
                dtype => Err(KernelError::UnsupportedType { op, dtype }),
            };
        }
        match y.dtype() {
            ElementType::I32 => run.all(typed_mut::<i32>(op, y)?, &|out, _| I32Sink(out)),
            ElementType::U8 => run.requantized::<u8>(typed_mut(op, y)?, &multipliers, zy),
            ElementType::I8 => run.requantized::<i8>(typed_mut(op, y)?, &multipliers, zy),
            dtype => Err(KernelError::UnsupportedType { op, dtype }),
        }
    }
}

/// The output channels a sink stores: `count` from `first` on, as the
/// rows of the product (`rows`: the channel-major and depthwise
/// convolutions) or as its columns (the pixel-major product).
#[derive(Debug, Clone, Copy)]
struct Channels {
    first: usize,
    count: usize,
    rows: bool,
}

impl Channels {
    /// The channels' values of a per-channel `v` (one value stays one).
    fn of<'v, V>(&self, v: &'v [V]) -> &'v [V] {
        if v.len() == 1 {
            v
        } else {
            &v[self.first..self.first + self.count]
        }
    }
}

/// The requantizing sink of channels `ch` over `out`: one multiplier per
/// channel (or one for all), the int32 `bias` (one per channel) added
/// first.
fn requant_sink<'a, T>(
    out: Shared<T>,
    ch: Channels,
    multipliers: &'a [f32],
    bias: Option<&'a [i32]>,
    zero: i32,
) -> RequantSink<'a, T> {
    RequantSink {
        out,
        multipliers: ch.of(multipliers),
        by_row: ch.rows,
        bias: bias.map(|b| BiasI32 {
            data: ch.of(b),
            row_stride: usize::from(ch.rows),
            col_stride: usize::from(!ch.rows),
        }),
        zero,
    }
}

/// The weight: packed per group, or the tensor with its zero points.
enum Weight<'a> {
    Packed(&'a PackedWeight),
    Tensor { w: &'a Tensor, zero: Vec<i32> },
}

/// One execution's operands.
struct Run<'a> {
    op: &'static str,
    shape: ConvShape,
    x: &'a Tensor,
    zx: i32,
    weight: Weight<'a>,
    bias: Option<&'a [i32]>,
    isa: QIsa,
    exact: bool,
    par: &'a dyn ParallelFor,
}

impl Run<'_> {
    fn requantized<T: QInt>(
        &self,
        y: &mut [T],
        multipliers: &[f32],
        zero: i32,
    ) -> Result<(), KernelError> {
        self.all(y, &|out, ch| {
            requant_sink(out, ch, multipliers, self.bias, zero)
        })
    }

    /// [`Self::planar`] requantizing each output channel with its
    /// multiplier (the bias is added before, by the convolution).
    fn planar_requantized<T: QInt>(
        &self,
        y: &mut [T],
        multipliers: &[f32],
        zero: i32,
    ) -> Result<(), KernelError> {
        self.planar(y, &|out, ch| requant_sink(out, ch, multipliers, None, zero))
    }

    /// Every image and group on the channel-major convolution, each
    /// group's output channels stored by the sink `make(out, channels)`
    /// builds (rows: the group's output channels; columns: pixels).
    fn planar<T: Copy + Send, S: Sink>(
        &self,
        y: &mut [T],
        make: &dyn Fn(Shared<T>, Channels) -> S,
    ) -> Result<(), KernelError> {
        let op = self.op;
        let s = self.shape;
        let g3 = s.geometry.as_3d();
        let (pixels, in_len) = (s.geometry.output_len(), s.geometry.input_len());
        let (xb, x_signed) = bytes_of(op, self.x)?;
        let (cg, mg) = (s.cg(), s.mg());
        let taps = s.k() / cg;
        let packs = match &self.weight {
            Weight::Packed(_) => Vec::new(),
            Weight::Tensor { w, zero } => {
                let (wb, _) = bytes_of(op, w)?;
                (0..s.group)
                    .map(|g| planar::pack(op, w.shape(), s.group, wb, zero, g))
                    .collect::<Result<_, _>>()?
            }
        };
        for b in 0..s.batch {
            for g in 0..s.group {
                let w =
                    match &self.weight {
                        Weight::Packed(p) => planar_view(op, p, g)?,
                        Weight::Tensor { .. } => PackedW::view(&packs[g].0, &packs[g].1)
                            .ok_or_else(|| KernelError::Invalid {
                                op,
                                detail: "packing W failed".into(),
                            })?,
                    };
                if !w.fits(cg, taps, mg) {
                    return Err(KernelError::Invalid {
                        op,
                        detail: format!(
                            "packed weight: group {g} is not {mg} filters of {cg} channels and {taps} taps"
                        ),
                    });
                }
                let img = planar::Image {
                    planes: &xb[(b * s.channels + g * cg) * in_len..][..cg * in_len],
                    signed: x_signed,
                    zero: self.zx,
                };
                let out = &mut y[(b * s.maps + g * mg) * pixels..][..mg * pixels];
                let ch = Channels {
                    first: g * mg,
                    count: mg,
                    rows: true,
                };
                let sink = make(Shared::new(out, pixels, 1), ch);
                let bias = self.bias.map(|b| &b[g * mg..(g + 1) * mg]);
                planar::run(op, &g3, img, &w, bias, &sink, self.par)?;
            }
        }
        Ok(())
    }

    /// Every image and group, each group's product stored by the sink
    /// `make(out, channels)` builds over its output channels (a depthwise
    /// convolution: one sink per image, its channels the rows).
    fn all<T: Copy + Send, S: Sink>(
        &self,
        y: &mut [T],
        make: &dyn Fn(Shared<T>, Channels) -> S,
    ) -> Result<(), KernelError> {
        let op = self.op;
        let s = self.shape;
        let g3 = s.geometry;
        let (pixels, in_len) = (g3.output_len(), g3.input_len());
        let (xb, a_signed) = bytes_of(op, self.x)?;
        let (mg, k) = (s.mg(), s.k());
        if s.depthwise() {
            let Weight::Tensor { w, zero } = &self.weight else {
                return Err(KernelError::Invalid {
                    op,
                    detail: "a depthwise weight is never packed".into(),
                });
            };
            let (wb, w_signed) = bytes_of(op, w)?;
            // One sink per image, its channels the rows.
            let every = Channels {
                first: 0,
                count: s.maps,
                rows: true,
            };
            let sinks: Vec<S> = y
                .chunks_mut(s.maps * pixels)
                .take(s.batch)
                .map(|out| make(Shared::new(out, pixels, 1), every))
                .collect();
            let dw = Depthwise {
                s: &s,
                x: xb,
                x_signed: a_signed,
                zx: self.zx,
                w: wb,
                w_signed,
                zw: zero,
            };
            #[cfg(target_arch = "x86_64")]
            if matches!(self.isa, QIsa::Avx512Vnni | QIsa::Amx) && depthwise_blocked::applies(&dw) {
                // SAFETY: the VNNI and AMX families are selected only on a
                // CPU with AVX-512 F, BW, DQ, VL and VNNI; `applies` holds.
                unsafe { depthwise_blocked::run_all(&dw, &sinks, self.par) };
                return Ok(());
            }
            dw.run(&sinks, self.isa, self.par);
            return Ok(());
        }
        let mut nhwc = crate::scratch::with_capacity(op, s.channels * in_len)?;
        // A pointwise convolution's product reads the channels-last image
        // itself.
        let pointwise = s.pointwise();
        let mut cols = crate::scratch::with_capacity(op, if pointwise { 0 } else { pixels * k })?;
        let pad = if a_signed {
            self.zx as i8 as u8
        } else {
            self.zx as u8
        };
        for b in 0..s.batch {
            let img = &xb[b * s.channels * in_len..][..s.channels * in_len];
            to_channels_last(img, s.channels, in_len, &mut nhwc, self.par);
            for g in 0..s.group {
                let (data, lda) = if pointwise {
                    (&nhwc[g * s.cg()..], s.channels)
                } else {
                    im2col(&s, &nhwc, g, pad, &mut cols, self.par);
                    (&cols[..], k)
                };
                let a = AOperand {
                    data,
                    signed: a_signed,
                    m: pixels,
                    lda,
                    zero: ZeroA::Scalar(self.zx),
                };
                let out = &mut y[(b * s.maps + g * mg) * pixels..][..mg * pixels];
                let ch = Channels {
                    first: g * mg,
                    count: mg,
                    rows: false,
                };
                let sink = make(Shared::new(out, 1, pixels), ch);
                match &self.weight {
                    Weight::Packed(p) => {
                        let pb = group_view(op, p, g)?;
                        qgemm::run(&a, &pb, &sink, self.par);
                    }
                    Weight::Tensor { w, zero } => {
                        let (wb, w_signed) = bytes_of(op, w)?;
                        let arith = if self.exact {
                            Arith::Exact
                        } else {
                            self.isa.arith(a_signed, w_signed)
                        };
                        let (meta, data) = pack_group(
                            w.shape(),
                            s.group,
                            wb,
                            w_signed,
                            zero,
                            g,
                            self.isa,
                            arith,
                            self.par,
                        )?;
                        let pb =
                            PackedB::view(&meta, &data).ok_or_else(|| KernelError::Invalid {
                                op,
                                detail: "packing W failed".into(),
                            })?;
                        qgemm::run(&a, &pb, &sink, self.par);
                    }
                }
            }
        }
        Ok(())
    }
}
