//! Conv: `Y[n, m] = B[m] + sum over c in m's group and taps of
//! W[m, c, k] * X[n, c, o * stride + k * dilation - pad]`, for 1-D, 2-D and
//! 3-D windows, grouped and depthwise.
//!
//! f32 runs on the GEMM micro-kernels: a pointwise convolution (1×1, stride
//! 1, no padding) multiplies the weights by the input read in place; any
//! other window gathers a tile of output columns at a time into packed
//! panels (`im2col`, never the whole image) that the tile's product reads;
//! a depthwise convolution (one input and one output channel per group)
//! runs its own direct kernel. f64, f16 and bf16 run the scalar reference
//! loops (f64 accumulation), which are also the oracle of the f32 paths.

use super::direct;
use super::epilogue::{self, ConvFusion};
use super::geometry::Window;
use super::im2col;
use super::packing::{BatchNorm, ConvPacked, ConvPrepack, channel_affine};
use super::shape::{ConvShape, check_types};
use crate::ops::basic::common::{
    Attrs, check_inputs, checked_count, input, optional, output, required, typed, typed_mut,
};
use crate::ops::linalg::isa::Isa;
use crate::ops::linalg::sgemm::{self, BSrc, OutPtr, Problem};
use crate::vector::{self, Width};
use crate::{
    CpuFeatures, DataMut, DataRef, ElementType, InputInfo, KernelError, NodeSpec, Operator,
    OutputInfo, PackedWeight, ParallelFor, Prepack, Tensor, for_each_chunk_mut,
};

const OP: &str = "Conv";

/// The most im2col tiles gathered at once (one per running task); what
/// [`Operator::scratch_bytes`] charges.
const MAX_TASKS: usize = 8;
/// The widest `B` panel of any kernel family.
const NR_MAX: usize = 32;

/// A Conv node: its window attributes and group count, and what follows
/// it inside the same operator when resolution fused a chain.
#[derive(Debug)]
pub(crate) struct Conv {
    window: Window,
    group: usize,
    /// The kernel family of unpacked weights (packed ones name theirs).
    isa: Isa,
    fusion: ConvFusion,
}

impl Conv {
    pub(crate) fn new(
        spec: &NodeSpec<'_>,
        cpu: CpuFeatures,
        fusion: ConvFusion,
    ) -> Result<Self, KernelError> {
        let attrs = Attrs::new(
            spec,
            OP,
            &[
                "auto_pad",
                "dilations",
                "group",
                "kernel_shape",
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
            isa: Isa::select(cpu),
            fusion,
        })
    }

    fn shape(
        &self,
        x: &[usize],
        w: &[usize],
        bias: Option<&[usize]>,
    ) -> Result<ConvShape, KernelError> {
        conv_shape(OP, &self.window, self.group, x, w, bias)
    }
}

/// Checks `X`, `W` (and `B`) of a convolution and resolves its window.
pub(crate) fn conv_shape(
    op: &'static str,
    window: &Window,
    group: usize,
    x: &[usize],
    w: &[usize],
    bias: Option<&[usize]>,
) -> Result<ConvShape, KernelError> {
    let (batch, channels, maps) = check_channels(op, group, x, w, bias, false)?;
    if let Some(k) = &window.kernel
        && k.as_slice() != &w[2..]
    {
        return Err(KernelError::Shape(format!(
            "{op}: kernel_shape {k:?} does not match W {w:?}"
        )));
    }
    Ok(ConvShape {
        batch,
        channels,
        maps,
        group,
        geometry: window.resolve(op, &x[2..], &w[2..])?,
    })
}

/// Checks the ranks and channel counts of `X`, `W` (and `B`) of a
/// convolution (`transposed`: `W` is `[C, M / group, k...]`, else
/// `[M, C / group, k...]`): `(N, C, M)`.
pub(crate) fn check_channels(
    op: &'static str,
    group: usize,
    x: &[usize],
    w: &[usize],
    bias: Option<&[usize]>,
    transposed: bool,
) -> Result<(usize, usize, usize), KernelError> {
    let bad = |what: String| KernelError::Shape(format!("{op}: {what}"));
    if x.len() < 3 || w.len() != x.len() {
        return Err(bad(format!(
            "X {x:?} must be [N, C, spatial...] and W {w:?} of the same rank"
        )));
    }
    let channels = x[1];
    let (maps, w_channels) = if transposed {
        (w[1].saturating_mul(group), w[0])
    } else {
        (w[0], w[1].saturating_mul(group))
    };
    if !channels.is_multiple_of(group) || !maps.is_multiple_of(group) || w_channels != channels {
        return Err(bad(format!(
            "X {x:?} and W {w:?} do not agree for group {group} (input channels must be \
             divisible by the group count and match W)"
        )));
    }
    if let Some(b) = bias
        && b != [maps]
    {
        return Err(bad(format!("B {b:?} must be [{maps}]")));
    }
    if w[2..].contains(&0) {
        return Err(bad(format!("W {w:?} has an empty kernel axis")));
    }
    checked_count(op, x)?;
    checked_count(op, w)?;
    Ok((x[0], channels, maps))
}

impl Conv {
    /// The checks a fused operator adds to Conv's: f32 throughout, the
    /// normalization's parameters of `[M]`, the residual of the output's
    /// shape.
    fn check_fused(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        out: &[usize],
    ) -> Result<(), KernelError> {
        let op = "FusedConv";
        let f32_of = |info: InputInfo<'_>| {
            if info.dtype == ElementType::F32 {
                Ok(())
            } else {
                Err(KernelError::UnsupportedType {
                    op,
                    dtype: info.dtype,
                })
            }
        };
        f32_of(required(op, inputs, 0)?)?;
        if self.fusion.batch_norm.is_some() {
            for i in 3..7 {
                let p = required(op, inputs, i)?;
                f32_of(p)?;
                if p.shape != [out[1]] {
                    return Err(KernelError::Shape(format!(
                        "{op}: normalization parameter {:?} must be [{}]",
                        p.shape, out[1]
                    )));
                }
            }
        }
        if let Some(i) = self.fusion.residual_input() {
            let r = required(op, inputs, i)?;
            f32_of(r)?;
            if r.shape != out {
                return Err(KernelError::Shape(format!(
                    "{op}: the residual addend {:?} must have the output's shape {out:?}",
                    r.shape
                )));
            }
        }
        Ok(())
    }
}

impl Operator for Conv {
    fn name(&self) -> &'static str {
        if self.fusion.is_empty() {
            OP
        } else {
            "FusedConv"
        }
    }

    fn describe(&self) -> String {
        let f = &self.fusion;
        let mut s = String::from(OP);
        if f.batch_norm.is_some() {
            s.push_str("+BatchNormalization");
        }
        if f.residual {
            s.push_str("+Add");
        }
        if f.activation != epilogue::ConvActivation::Identity {
            s.push('+');
            s.push_str(f.activation.name());
        }
        s
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = if self.fusion.is_empty() {
            check_inputs(OP, inputs, 2, 3)?
        } else {
            let n = self.fusion.inputs();
            check_inputs("FusedConv", inputs, n, n)?
        };
        let (x, w) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        let bias = optional(inputs, 2);
        use ElementType as E;
        check_types(OP, x, w, bias, &[E::F32, E::F64, E::F16, E::BF16])?;
        let s = self.shape(x.shape, w.shape, bias.map(|b| b.shape))?;
        let mut shape = vec![s.batch, s.maps];
        shape.extend_from_slice(&s.geometry.output[..s.geometry.rank]);
        if !self.fusion.is_empty() {
            self.check_fused(inputs, &shape)?;
        }
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape,
        }])
    }

    fn prepack(
        &self,
        inputs: &[Option<InputInfo<'_>>],
        cpu: CpuFeatures,
    ) -> Option<Box<dyn Prepack>> {
        let f32_constant = |i: usize| {
            inputs
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|t| t.constant && t.dtype == ElementType::F32)
        };
        let bias = optional(inputs, 2).is_some();
        let bn = self.fusion.batch_norm.is_some();
        if optional(inputs, 0)?.dtype != ElementType::F32
            || !f32_constant(1)
            || bias && !f32_constant(2)
            || bn && !(3..7).all(f32_constant)
        {
            return None;
        }
        Some(Box::new(ConvPrepack::new(
            Isa::select(cpu),
            self.group,
            optional(inputs, 1)?.shape,
            bias,
            self.fusion.batch_norm,
        )))
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        let (Some(Some(x)), Some(Some(w))) = (inputs.first(), inputs.get(1)) else {
            return 0;
        };
        match self.shape(x.shape, w.shape, None) {
            Ok(s) if x.dtype == ElementType::F32 && s.depthwise() => {
                // One scratch per task, at most one task per plane.
                direct::depthwise_scratch(&s).max(1) * s.batch * s.maps * 4
            }
            Ok(s) if x.dtype == ElementType::F32 && !s.pointwise() => {
                s.k() * s.tile(NR_MAX) * 4 * MAX_TASKS
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
        let x = input(OP, inputs, 0)?;
        let y = output(OP, outputs, 0)?;
        if let Some(packed) = packed {
            let p = ConvPacked::of(packed)?;
            let s = self.shape(x.shape(), &p.w_shape(), None)?;
            if p.group != self.group || (p.panel == 0) != s.depthwise() {
                return Err(KernelError::Invalid {
                    op: OP,
                    detail: format!("packed weight `{}` is not for this node", packed.layout),
                });
            }
            let f = F32Conv {
                isa: p.isa,
                s,
                a_panels: p.panel != 0,
                w: p.weights,
                channel: Channel::Packed(p.addend),
                residual: self.residual(inputs)?,
            };
            return f.run(self, typed::<f32>(OP, x)?, y, par);
        }
        let w = input(OP, inputs, 1)?;
        let bias = inputs.get(2).copied().flatten();
        let s = self.shape(x.shape(), w.shape(), bias.map(|b| b.shape()))?;
        if x.dtype() != ElementType::F32 {
            if !self.fusion.is_empty() {
                return Err(KernelError::UnsupportedType {
                    op: "FusedConv",
                    dtype: x.dtype(),
                });
            }
            check_len(&s, y)?;
            return reference_any(&s, x, w, bias, y);
        }
        let bn = match self.fusion.batch_norm {
            Some(epsilon) => {
                let p = |i| typed::<f32>(OP, input(OP, inputs, i)?);
                Some(BatchNorm {
                    scale: p(3)?,
                    bias: p(4)?,
                    mean: p(5)?,
                    var: p(6)?,
                    epsilon,
                })
            }
            None => None,
        };
        let f = F32Conv {
            isa: self.isa,
            s,
            a_panels: false,
            w: typed::<f32>(OP, w)?,
            channel: Channel::Params {
                bias: bias.map(|b| typed::<f32>(OP, b)).transpose()?,
                bn,
            },
            residual: self.residual(inputs)?,
        };
        f.run(self, typed::<f32>(OP, x)?, y, par)
    }
}

impl Conv {
    fn residual<'t>(
        &self,
        inputs: &[Option<&'t Tensor>],
    ) -> Result<Option<&'t [f32]>, KernelError> {
        self.fusion
            .residual_input()
            .map(|i| typed::<f32>(OP, input(OP, inputs, i)?))
            .transpose()
    }
}

/// Checks that `y` holds the output of `s`.
fn check_len(s: &ConvShape, y: &Tensor) -> Result<(), KernelError> {
    if y.len() != s.batch * s.maps * s.geometry.output_len() {
        return Err(KernelError::Invalid {
            op: OP,
            detail: format!("output of {} elements for {s:?}", y.len()),
        });
    }
    Ok(())
}

/// Where each output channel's factor and addend come from.
#[derive(Debug, Clone, Copy)]
enum Channel<'a> {
    /// A packed object's addends (the factors are folded into its weights).
    Packed(&'a [f32]),
    /// The operator's bias and normalization inputs.
    Params {
        bias: Option<&'a [f32]>,
        bn: Option<BatchNorm<'a>>,
    },
}

impl Channel<'_> {
    #[inline]
    fn affine(&self, m: usize) -> (f32, f32) {
        match self {
            Self::Packed(a) => (1.0, a[m]),
            Self::Params { bias, bn } => channel_affine(*bias, bn.as_ref(), m),
        }
    }

    fn len_ok(&self, maps: usize) -> bool {
        match self {
            Self::Packed(a) => a.len() == maps,
            Self::Params { bias, bn } => {
                bias.is_none_or(|b| b.len() == maps)
                    && bn.is_none_or(|n| {
                        [n.scale, n.bias, n.mean, n.var]
                            .iter()
                            .all(|v| v.len() == maps)
                    })
            }
        }
    }
}

/// One f32 convolution on the fast paths, its operands checked.
struct F32Conv<'a> {
    isa: Isa,
    s: ConvShape,
    /// `w` is in `A` panels of `isa` per group (else row-major).
    a_panels: bool,
    w: &'a [f32],
    channel: Channel<'a>,
    residual: Option<&'a [f32]>,
}

impl F32Conv<'_> {
    fn run(
        &self,
        conv: &Conv,
        x: &[f32],
        y: &mut Tensor,
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let s = &self.s;
        check_len(s, y)?;
        let y = typed_mut::<f32>(OP, y)?;
        let (pin, pout) = (s.geometry.input_len(), s.geometry.output_len());
        if !self.channel.len_ok(s.maps)
            || x.len() != s.batch * s.channels * pin
            || self.w.len() != self.weights_len()
            || self.residual.is_some_and(|r| r.len() != y.len())
        {
            return Err(KernelError::Invalid {
                op: OP,
                detail: "X, W, B or the residual does not hold the inferred element count".into(),
            });
        }
        if y.is_empty() {
            return Ok(());
        }
        let act = conv.fusion.activation;
        let width = self.isa.width();
        if s.depthwise() {
            let finish = |plane: usize, out: &mut [f32]| {
                let (mul, add) = self.channel.affine(plane % s.maps);
                let r = self.residual.map(|r| &r[plane * pout..][..pout]);
                vector::run(
                    width,
                    #[inline(always)]
                    || epilogue::finish(act, out, mul, add, r),
                );
            };
            return direct::depthwise(s, width, x, self.w, y, &finish, par);
        }
        self.tiled(act, width, x, y, par)
    }

    /// Floats of the weights in their layout.
    fn weights_len(&self) -> usize {
        let s = &self.s;
        if self.a_panels {
            s.group * sgemm::packed_a_len(self.isa, s.mg(), s.k())
        } else {
            s.maps * s.k()
        }
    }

    /// The GEMM paths: tasks of consecutive `(image, group, column tile)`
    /// items. Each item computes its tile's product, then finishes it
    /// (factor, addend, residual, activation) while the tile is in cache:
    /// a pointwise convolution reads the input in place, any other gathers
    /// its tile into the task's own panels (im2col).
    fn tiled(
        &self,
        act: epilogue::ConvActivation,
        width: Width,
        x: &[f32],
        y: &mut [f32],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let (s, isa, w) = (&self.s, self.isa, self.w);
        let nr = isa.f32_nr();
        let (cg, mg, k) = (s.cg(), s.mg(), s.k());
        let (pin, pout) = (s.geometry.input_len(), s.geometry.output_len());
        let tile = s.tile(nr);
        let tiles = pout.div_ceil(tile);
        let items = s.batch * s.group * tiles;
        let macs = items.saturating_mul(mg * k * tile);
        let want = (par.threads() * 2).clamp(1, MAX_TASKS);
        // Too few column tiles for the threads (late, small planes): each
        // tile's rows are split too, in whole micro-tiles (each part
        // gathers the tile's panels itself).
        let row_tiles = mg.div_ceil(isa.f32_mr());
        let splits = if items >= want {
            1
        } else {
            want.div_ceil(items).min(row_tiles).max(1)
        };
        let units = items * splits;
        let tasks = if macs < sgemm::PARALLEL_MIN_MACS {
            1
        } else {
            units.min(want)
        };
        let out = OutPtr::new(y);
        let g3 = s.geometry.as_3d();
        let pointwise = s.pointwise();
        let slot = if pointwise { 1 } else { k * tile };
        let mut scratch = crate::scratch::filled(OP, tasks * slot, 0.0f32)?;
        for_each_chunk_mut(par, &mut scratch, slot, &|first, panels| {
            let t = first / slot;
            for unit in crate::par::chunk(units, tasks, 1, t) {
                let (item, part) = (unit / splits, unit % splits);
                let (ng, ti) = (item / tiles, item % tiles);
                let (n, g) = (ng / s.group, ng % s.group);
                let parts = crate::par::chunk(row_tiles, splits, 1, part);
                let mr = isa.f32_mr();
                let rows = (parts.start * mr).min(mg)..(parts.end * mr).min(mg);
                if rows.is_empty() {
                    continue;
                }
                let col0 = ti * tile;
                let cols = tile.min(pout - col0);
                let xg = &x[(n * s.channels + g * cg) * pin..][..cg * pin];
                let b = if pointwise {
                    BSrc::Rows {
                        data: &xg[col0..],
                        ldb: pin,
                    }
                } else {
                    im2col::gather(&g3, cg, xg, col0, cols, nr, panels);
                    BSrc::Packed(panels)
                };
                let yo = (n * s.maps + g * mg + rows.start) * pout + col0;
                let offsets = move |_| (0, 0, yo);
                // Rows start at a multiple of MR: in panels as in rows,
                // row r's data begins at r * k.
                let a = if self.a_panels {
                    &w[g * sgemm::packed_a_len(isa, mg, k) + rows.start * k..]
                } else {
                    &w[(g * mg + rows.start) * k..]
                };
                let prob = Problem {
                    m: rows.len(),
                    n: cols,
                    k,
                    a,
                    lda: k,
                    a_panels: self.a_panels,
                    b,
                    ldc: pout,
                    alpha: 1.0,
                    accumulate: false,
                    batches: 1,
                    offsets: &offsets,
                };
                // SAFETY: this task alone writes rows `rows` x columns
                // `col0..col0 + cols` of this image's group planes (units
                // are split between tasks without overlap) and `y` stays
                // borrowed until `for_each_chunk_mut` returns.
                unsafe { sgemm::run_on_caller(isa, &prob, out) };
                vector::run(
                    width,
                    #[inline(always)]
                    || {
                        for r in 0..rows.len() {
                            let at = yo + r * pout;
                            // SAFETY: row `r` of this task's part, inside
                            // `y` (`at + cols <= y.len()`), written by this
                            // task alone (as above).
                            let row =
                                unsafe { std::slice::from_raw_parts_mut(out.ptr().add(at), cols) };
                            let (mul, add) = self.channel.affine(g * mg + rows.start + r);
                            let res = self.residual.map(|v| &v[at..][..cols]);
                            epilogue::finish(act, row, mul, add, res);
                        }
                    },
                );
            }
        });
        Ok(())
    }
}

/// The scalar reference for f64, f16 and bf16 (f64 accumulation).
fn reference_any(
    s: &ConvShape,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    y: &mut Tensor,
) -> Result<(), KernelError> {
    use half::{bf16, f16};
    fn run<T: Copy>(
        s: &ConvShape,
        x: &[T],
        w: &[T],
        b: Option<&[T]>,
        y: &mut [T],
        to: fn(T) -> f64,
        from: fn(f64) -> T,
    ) {
        direct::reference(
            s,
            &|i| to(x[i]),
            &|i| to(w[i]),
            &|m| b.map_or(0.0, |b| to(b[m])),
            &mut |i, v| y[i] = from(v),
        );
    }
    let b = bias.map(Tensor::data);
    match (x.data(), w.data(), y.view_mut()) {
        (DataRef::F64(xv), DataRef::F64(wv), DataMut::F64(yv)) => {
            let b = b.map(|b| if let DataRef::F64(v) = b { v } else { &[][..] });
            run(s, xv, wv, b, yv, |v| v, |v| v);
        }
        (DataRef::F16(xv), DataRef::F16(wv), DataMut::F16(yv)) => {
            let b = b.map(|b| if let DataRef::F16(v) = b { v } else { &[][..] });
            run(s, xv, wv, b, yv, f16::to_f64, f16::from_f64);
        }
        (DataRef::BF16(xv), DataRef::BF16(wv), DataMut::BF16(yv)) => {
            let b = b.map(|b| if let DataRef::BF16(v) = b { v } else { &[][..] });
            run(s, xv, wv, b, yv, bf16::to_f64, bf16::from_f64);
        }
        _ => {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: x.dtype(),
            });
        }
    }
    Ok(())
}
