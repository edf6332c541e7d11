//! Windowed pools over `[N, C, spatial...]` (1-D, 2-D, 3-D): MaxPool (with
//! its optional `Indices` output), AveragePool and LpPool. Padding and
//! `ceil_mode` follow [`Window`]; values are compared and summed in f64
//! (exact for every input type), planes split across threads.

use half::{bf16, f16};

use super::flat::Flat;
use super::geometry::{Geometry, Geometry3, Window};
use crate::CpuFeatures;
use crate::ops::basic::common::{Attrs, Elem, check_inputs, input, required, typed, typed_mut};
use crate::ops::linalg::isa::Isa;
use crate::vector::{self, Width};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Which reduction a window applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum PoolKind {
    /// The largest value (and its flat index, `storage_order` 1 = column-major).
    Max { column_major: bool },
    /// The mean; padding counts in the divisor when `include_pad`.
    Average { include_pad: bool },
    /// `(sum |x|^p)^(1/p)`.
    Lp { p: f64 },
}

/// A pooling node.
#[derive(Debug)]
pub(crate) struct Pool {
    kind: PoolKind,
    window: Window,
    op: &'static str,
    /// MaxPool's `Indices` output is wanted.
    indices: bool,
    /// The vector width of the f32 loops.
    width: Width,
}

impl Pool {
    pub(crate) fn new(
        spec: &NodeSpec<'_>,
        op: &'static str,
        cpu: CpuFeatures,
    ) -> Result<Self, KernelError> {
        let common = [
            "auto_pad",
            "ceil_mode",
            "dilations",
            "kernel_shape",
            "pads",
            "strides",
        ];
        let extra: &[&'static str] = match op {
            "MaxPool" => &["storage_order"],
            "AveragePool" => &["count_include_pad"],
            _ => &["p"],
        };
        let allowed: Vec<&'static str> = common.iter().chain(extra).copied().collect();
        let attrs = Attrs::new(spec, op, &allowed)?;
        let kind = match op {
            "MaxPool" => PoolKind::Max {
                column_major: match attrs.int_or("storage_order", 0)? {
                    0 => false,
                    1 => true,
                    v => return Err(attrs.error("storage_order", format!("{v}: must be 0 or 1"))),
                },
            },
            "AveragePool" => PoolKind::Average {
                include_pad: attrs.int_or("count_include_pad", 0)? != 0,
            },
            _ => {
                let p = attrs.int_or("p", 2)?;
                if p <= 0 {
                    return Err(attrs.error("p", format!("{p}: must be >= 1")));
                }
                PoolKind::Lp { p: p as f64 }
            }
        };
        let window = Window::parse(&attrs, true)?;
        window.required_kernel(op)?;
        let indices = spec.outputs > 1 && matches!(kind, PoolKind::Max { .. });
        if spec.outputs > 2 || (spec.outputs > 1 && !indices) {
            return Err(KernelError::Shape(format!(
                "{op}: {} outputs; it has {}",
                spec.outputs,
                if indices || op == "MaxPool" {
                    "Y and Indices"
                } else {
                    "one, Y"
                }
            )));
        }
        Ok(Self {
            kind,
            window,
            op,
            indices,
            width: Isa::select(cpu).width(),
        })
    }

    fn geometry(&self, x: &[usize]) -> Result<Geometry, KernelError> {
        if x.len() < 3 {
            return Err(KernelError::Shape(format!(
                "{}: X {x:?} must be [N, C, spatial...]",
                self.op
            )));
        }
        self.window
            .resolve(self.op, &x[2..], self.window.required_kernel(self.op)?)
    }
}

impl Operator for Pool {
    fn name(&self) -> &'static str {
        self.op
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.op;
        let inputs = check_inputs(op, inputs, 1, 1)?;
        let x = required(op, inputs, 0)?;
        use ElementType as E;
        let ok = match self.kind {
            PoolKind::Max { .. } => matches!(x.dtype, E::F32 | E::F64 | E::F16 | E::I8 | E::U8),
            _ => matches!(x.dtype, E::F32 | E::F64 | E::F16 | E::BF16),
        };
        if !ok {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        let g = self.geometry(x.shape)?;
        let mut shape = x.shape[..2].to_vec();
        shape.extend_from_slice(&g.output[..g.rank]);
        let mut outs = vec![OutputInfo {
            dtype: x.dtype,
            shape: shape.clone(),
        }];
        if self.indices {
            outs.push(OutputInfo {
                dtype: E::I64,
                shape,
            });
        }
        Ok(outs)
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.op;
        let x = input(op, inputs, 0)?;
        let g = self.geometry(x.shape())?;
        let planes = x.shape()[0] * x.shape()[1];
        let (y, rest) = outputs.split_first_mut().ok_or(KernelError::Invalid {
            op,
            detail: "no output".into(),
        })?;
        if y.len() != planes * g.output_len() || x.len() != planes * g.input_len() {
            return Err(KernelError::Invalid {
                op,
                detail: format!("X {:?} and an output of {} elements", x.shape(), y.len()),
            });
        }
        let indices = match rest.first_mut() {
            Some(t) if self.indices => {
                let v = typed_mut::<i64>(op, t)?;
                if v.len() != y.len() {
                    return Err(KernelError::Invalid {
                        op,
                        detail: "Indices and Y differ in size".into(),
                    });
                }
                Some(v)
            }
            _ => None,
        };
        let run = Run {
            width: self.width,
            kind: self.kind,
            g: g.as_3d(),
            pin: g.input_len(),
            pout: g.output_len(),
        };
        use ElementType as E;
        match x.dtype() {
            E::F32 if indices.is_none() && run.flat(typed(op, x)?, typed_mut(op, y)?, par) => {}
            E::F32 => run.all(
                typed::<f32>(op, x)?,
                typed_mut(op, y)?,
                indices,
                par,
                |v| v.into(),
                |v| v as f32,
            ),
            E::F64 => run.all(
                typed::<f64>(op, x)?,
                typed_mut(op, y)?,
                indices,
                par,
                |v| v,
                |v| v,
            ),
            E::F16 => run.all(
                typed::<f16>(op, x)?,
                typed_mut(op, y)?,
                indices,
                par,
                f16::to_f64,
                f16::from_f64,
            ),
            E::BF16 => run.all(
                typed::<bf16>(op, x)?,
                typed_mut(op, y)?,
                indices,
                par,
                bf16::to_f64,
                bf16::from_f64,
            ),
            E::I8
                if indices.is_none()
                    && run.flat_max(typed(op, x)?, typed_mut(op, y)?, i8::MIN, par) => {}
            E::U8
                if indices.is_none()
                    && run.flat_max(typed(op, x)?, typed_mut(op, y)?, 0u8, par) => {}
            E::I8 => run.all(
                typed::<i8>(op, x)?,
                typed_mut(op, y)?,
                indices,
                par,
                |v| v.into(),
                |v| v as i8,
            ),
            E::U8 => run.all(
                typed::<u8>(op, x)?,
                typed_mut(op, y)?,
                indices,
                par,
                |v| v.into(),
                |v| v as u8,
            ),
            dtype => return Err(KernelError::UnsupportedType { op, dtype }),
        }
        Ok(())
    }
}

/// One execution's geometry.
struct Run {
    width: Width,
    kind: PoolKind,
    g: Geometry3,
    pin: usize,
    pout: usize,
}

impl Run {
    /// Every plane, split across `par` (indices, when asked, computed too).
    fn all<T: Elem>(
        &self,
        x: &[T],
        y: &mut [T],
        indices: Option<&mut [i64]>,
        par: &dyn ParallelFor,
        to: impl Fn(T) -> f64 + Sync,
        from: impl Fn(f64) -> T + Sync,
    ) {
        let pout = self.pout.max(1);
        let planes = y.len() / pout;
        let chunk = planes.div_ceil((par.threads() * 4).max(1)).max(1) * pout;
        let par = crate::par::for_len(par, x.len());
        for_each_chunk_mut(par, y, chunk, &|first, ys| {
            for (i, out) in ys.chunks_exact_mut(pout).enumerate() {
                let plane = first / pout + i;
                let xs = &x[plane * self.pin..][..self.pin];
                self.plane(xs, out, &to, &from);
            }
        });
        if let Some(indices) = indices {
            // Indices are rare (argmax exports): a second sequential pass.
            for (plane, idx) in indices.chunks_exact_mut(pout).enumerate() {
                let xs = &x[plane * self.pin..][..self.pin];
                let base = (plane * self.pin) as i64;
                self.plane_indices(xs, idx, base, &to);
            }
        }
    }

    /// 8-bit MaxPool of 1-D and 2-D windows on [`Flat`] phases, in vector
    /// loops, the padding `least` (the type's least value, which no input
    /// loses to); `false` (nothing written) for other pools and windows.
    fn flat_max<T: Elem + Ord + Default>(
        &self,
        x: &[T],
        y: &mut [T],
        least: T,
        par: &dyn ParallelFor,
    ) -> bool {
        let (Some(f), PoolKind::Max { .. }) = (Flat::of(&self.g), self.kind) else {
            return false;
        };
        let g = &self.g;
        let [_, kh, kw] = g.kernel;
        self.flat_planes(
            f,
            (x, least),
            y,
            par,
            #[inline(always)]
            |xs, out, phases, acc| {
                f.copy(g, xs, phases);
                acc.fill(least);
                for b in 0..kh {
                    for e in 0..kw {
                        for (o, &v) in acc.iter_mut().zip(f.tap(g, b, e, phases)) {
                            *o = (*o).max(v);
                        }
                    }
                }
                for (row, src) in out.chunks_exact_mut(f.ow).zip(f.rows(acc)) {
                    row.copy_from_slice(src);
                }
            },
        );
        true
    }

    /// `plane(xs, out, phases, acc)` for every plane `xs` of `x` and its
    /// output `out` in `y`, with scratch for `f`'s phases (padded with
    /// `fill` once per task: `plane` copies only the image into them) and
    /// rows, the planes split across `par`; compiled for the widest vectors
    /// (`plane` an `#[inline(always)]` closure).
    fn flat_planes<T: Elem + Default>(
        &self,
        f: Flat,
        (x, fill): (&[T], T),
        y: &mut [T],
        par: &dyn ParallelFor,
        plane: impl Fn(&[T], &mut [T], &mut [T], &mut [T]) + Sync,
    ) {
        let pout = self.pout.max(1);
        let planes = y.len() / pout;
        let chunk = planes.div_ceil((par.threads() * 4).max(1)).max(1) * pout;
        let par = crate::par::for_len(par, x.len());
        let width = self.width;
        for_each_chunk_mut(par, y, chunk, &|first, ys| {
            let mut scratch = vec![T::default(); f.scratch_len()];
            f.pad(&self.g, fill, &mut scratch[..f.phases_len()]);
            for (i, out) in ys.chunks_exact_mut(pout).enumerate() {
                let p = first / pout + i;
                let xs = &x[p * self.pin..][..self.pin];
                let (phases, acc) = scratch.split_at_mut(f.phases_len());
                vector::run(
                    width,
                    #[inline(always)]
                    || plane(xs, out, phases, acc),
                )
            }
        });
    }

    /// f32 MaxPool and AveragePool of 1-D and 2-D windows on [`Flat`]
    /// phases, in f32 vector loops; `false` (nothing written) for other
    /// pools and windows.
    fn flat(&self, x: &[f32], y: &mut [f32], par: &dyn ParallelFor) -> bool {
        let (Some(f), PoolKind::Max { .. } | PoolKind::Average { .. }) =
            (Flat::of(&self.g), self.kind)
        else {
            return false;
        };
        let g = &self.g;
        // Taps of each output row and column the average divides by.
        let counts = |a: usize, include_pad: bool| -> Vec<f32> {
            (0..g.output[a])
                .map(|o| {
                    (0..g.kernel[a])
                        .filter(|&k| {
                            let at = o * g.stride[a] + k * g.dilation[a];
                            if include_pad {
                                at < g.pad[a] + g.input[a] + g.pad_end[a]
                            } else {
                                at >= g.pad[a] && at < g.pad[a] + g.input[a]
                            }
                        })
                        .count()
                        .max(1) as f32
                })
                .collect()
        };
        let divisors = match self.kind {
            PoolKind::Average { include_pad } => {
                Some((counts(1, include_pad), counts(2, include_pad)))
            }
            _ => None,
        };
        let [_, kh, kw] = g.kernel;
        let fill = if divisors.is_none() {
            f32::NEG_INFINITY
        } else {
            0.0
        };
        self.flat_planes(
            f,
            (x, fill),
            y,
            par,
            #[inline(always)]
            |xs, out, phases, acc| match &divisors {
                None => {
                    f.copy(g, xs, phases);
                    acc.fill(f32::NEG_INFINITY);
                    for b in 0..kh {
                        for e in 0..kw {
                            for (o, &v) in acc.iter_mut().zip(f.tap(g, b, e, phases)) {
                                // NaN wins and stays.
                                #[allow(clippy::eq_op)]
                                let take = v > *o || v != v;
                                *o = if take { v } else { *o };
                            }
                        }
                    }
                    for (row, src) in out.chunks_exact_mut(f.ow).zip(f.rows(acc)) {
                        row.copy_from_slice(src);
                    }
                }
                Some((dh, dw)) => {
                    f.copy(g, xs, phases);
                    acc.fill(0.0);
                    for b in 0..kh {
                        for e in 0..kw {
                            for (o, &v) in acc.iter_mut().zip(f.tap(g, b, e, phases)) {
                                *o += v;
                            }
                        }
                    }
                    for ((row, src), &h) in out.chunks_exact_mut(f.ow).zip(f.rows(acc)).zip(dh) {
                        for ((o, &v), &w) in row.iter_mut().zip(src).zip(dw) {
                            *o = v / (h * w);
                        }
                    }
                }
            },
        );
        true
    }

    /// The taps of output position `q` that lie inside the input, as flat
    /// positions, and how many taps the divisor counts with padding.
    #[inline]
    fn window(&self, q: usize, mut visit: impl FnMut(usize, [usize; 3])) -> usize {
        let g = &self.g;
        let [_, oh, ow] = g.output;
        let o = [q / (oh * ow), q / ow % oh, q % ow];
        let mut padded = 1;
        let mut ranges = [(0usize, 0usize); 3];
        for a in 0..3 {
            // Taps inside the padded extent count with `count_include_pad`.
            let extent = g.pad[a] + g.input[a] + g.pad_end[a];
            let mut n = 0;
            for k in 0..g.kernel[a] {
                if o[a] * g.stride[a] + k * g.dilation[a] < extent {
                    n += 1;
                }
            }
            padded *= n;
            ranges[a] = (0, g.kernel[a]);
        }
        let [id, ih, iw] = g.input;
        for a in ranges[0].0..ranges[0].1 {
            let z = g.coord(0, o[0], a) as usize;
            if z >= id {
                continue;
            }
            for b in ranges[1].0..ranges[1].1 {
                let yy = g.coord(1, o[1], b) as usize;
                if yy >= ih {
                    continue;
                }
                for e in ranges[2].0..ranges[2].1 {
                    let xx = g.coord(2, o[2], e) as usize;
                    if xx < iw {
                        visit((z * ih + yy) * iw + xx, [z, yy, xx]);
                    }
                }
            }
        }
        padded
    }

    fn plane<T: Copy>(
        &self,
        x: &[T],
        y: &mut [T],
        to: &impl Fn(T) -> f64,
        from: &impl Fn(f64) -> T,
    ) {
        for (q, out) in y.iter_mut().enumerate() {
            let v = match self.kind {
                PoolKind::Max { .. } => {
                    let mut best = f64::NEG_INFINITY;
                    self.window(q, |i, _| {
                        let v = to(x[i]);
                        if v > best || v.is_nan() {
                            best = v;
                        }
                    });
                    best
                }
                PoolKind::Average { include_pad } => {
                    let (mut sum, mut n) = (0.0, 0usize);
                    let padded = self.window(q, |i, _| {
                        sum += to(x[i]);
                        n += 1;
                    });
                    sum / if include_pad { padded } else { n }.max(1) as f64
                }
                PoolKind::Lp { p } => {
                    let mut sum = 0.0;
                    self.window(q, |i, _| sum += to(x[i]).abs().powf(p));
                    sum.powf(1.0 / p)
                }
            };
            *out = from(v);
        }
    }

    /// MaxPool's `Indices` of one plane: the flat index in the whole input
    /// of each window's first largest value.
    fn plane_indices<T: Copy>(&self, x: &[T], idx: &mut [i64], base: i64, to: &impl Fn(T) -> f64) {
        let column_major = matches!(self.kind, PoolKind::Max { column_major: true });
        let [id, ih, _] = self.g.input;
        for (q, out) in idx.iter_mut().enumerate() {
            let (mut best, mut at) = (f64::NEG_INFINITY, None);
            self.window(q, |i, c| {
                let v = to(x[i]);
                if at.is_none() || v > best {
                    best = v;
                    at = Some(if column_major {
                        c[0] + id * (c[1] + ih * c[2])
                    } else {
                        i
                    });
                }
            });
            *out = base + at.unwrap_or(0) as i64;
        }
    }
}
