//! RoiAlign (opsets 10 and 16): bilinear samples of each region of
//! interest pooled (average or ONNX Runtime's weighted maximum) into an
//! `output_height × output_width` grid per channel. Hot path: output
//! planes `[roi, channel]` are split across threads; each task keeps the
//! sample positions and weights of its current region (shared by every
//! channel) in one buffer it reuses.

use crate::ops::basic::common::{
    Attrs, Ints, check_inputs, check_len, input, output, required, typed, typed_mut,
};
use crate::ops::normalize::common::{Float, FloatView, dispatch_float, is_float};
use crate::par::rows_chunk;
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

const OP: &str = "RoiAlign";

/// The most bilinear samples one region may take per channel (a bound on
/// the adaptive grid of a huge or malformed region).
const MAX_SAMPLES: usize = 1 << 24;

/// RoiAlign.
#[derive(Debug)]
pub(crate) struct RoiAlign {
    /// `half_pixel` (opset 16 default): coordinates shifted by -0.5.
    half_pixel: bool,
    /// `mode = "max"`.
    max: bool,
    out_h: usize,
    out_w: usize,
    sampling_ratio: usize,
    spatial_scale: f64,
}

impl RoiAlign {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let mut allowed = vec![
            "mode",
            "output_height",
            "output_width",
            "sampling_ratio",
            "spatial_scale",
        ];
        if spec.opset >= 16 {
            allowed.push("coordinate_transformation_mode");
        }
        let attrs = Attrs::new(spec, OP, &allowed)?;
        let default_mode = if spec.opset >= 16 {
            "half_pixel"
        } else {
            "output_half_pixel"
        };
        let half_pixel = match attrs.string("coordinate_transformation_mode")?.as_deref() {
            None => default_mode == "half_pixel",
            Some("half_pixel") => true,
            Some("output_half_pixel") => false,
            Some(m) => {
                return Err(attrs.error(
                    "coordinate_transformation_mode",
                    format!("`{m}` is not half_pixel or output_half_pixel"),
                ));
            }
        };
        let max = match attrs.string("mode")?.as_deref() {
            None | Some("avg") => false,
            Some("max") => true,
            Some(m) => return Err(attrs.error("mode", format!("`{m}` is not avg or max"))),
        };
        let positive = |name: &'static str| -> Result<usize, KernelError> {
            match attrs.int_or(name, 1)? {
                v if v >= 1 => Ok(v as usize),
                v => Err(attrs.error(name, format!("{v} must be >= 1"))),
            }
        };
        let sampling_ratio = match attrs.int_or("sampling_ratio", 0)? {
            v if v >= 0 => v as usize,
            v => return Err(attrs.error("sampling_ratio", format!("{v} must be >= 0"))),
        };
        let spatial_scale = attrs.float("spatial_scale")?.unwrap_or(1.0);
        if !spatial_scale.is_finite() {
            return Err(attrs.error("spatial_scale", format!("{spatial_scale} is not finite")));
        }
        Ok(Self {
            half_pixel,
            max,
            out_h: positive("output_height")?,
            out_w: positive("output_width")?,
            sampling_ratio,
            spatial_scale: f64::from(spatial_scale),
        })
    }
}

/// One region's sampling geometry.
#[derive(Debug, Clone, Copy)]
struct Region {
    start: (f64, f64),
    bin: (f64, f64),
    grid: (usize, usize),
}

impl RoiAlign {
    /// The geometry of region `[x1, y1, x2, y2]`.
    fn region(&self, r: [f64; 4]) -> Region {
        let offset = if self.half_pixel { 0.5 } else { 0.0 };
        let s = self.spatial_scale;
        let (x1, y1) = (r[0] * s - offset, r[1] * s - offset);
        let (mut w, mut h) = (r[2] * s - offset - x1, r[3] * s - offset - y1);
        if !self.half_pixel {
            // Malformed regions are forced to 1 × 1.
            w = w.max(1.0);
            h = h.max(1.0);
        }
        let (bin_h, bin_w) = (h / self.out_h as f64, w / self.out_w as f64);
        let grid = |size: f64| -> usize {
            if self.sampling_ratio > 0 {
                self.sampling_ratio
            } else if size.is_finite() && size > 0.0 {
                size.ceil().min(MAX_SAMPLES as f64) as usize
            } else {
                0
            }
        };
        Region {
            start: (y1, x1),
            bin: (bin_h, bin_w),
            grid: (grid(bin_h), grid(bin_w)),
        }
    }
}

/// One bilinear sample: four positions in the plane and their weights.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    pos: [usize; 4],
    w: [f64; 4],
}

/// The samples of every output cell of `reg` (cell-major, then grid rows
/// and columns) into `out`.
fn samples(
    reg: &Region,
    (out_h, out_w): (usize, usize),
    (h, w): (usize, usize),
    out: &mut Vec<Sample>,
) {
    out.clear();
    let (gh, gw) = reg.grid;
    for ph in 0..out_h {
        for pw in 0..out_w {
            for iy in 0..gh {
                let yy =
                    reg.start.0 + ph as f64 * reg.bin.0 + (iy as f64 + 0.5) * reg.bin.0 / gh as f64;
                for ix in 0..gw {
                    let xx = reg.start.1
                        + pw as f64 * reg.bin.1
                        + (ix as f64 + 0.5) * reg.bin.1 / gw as f64;
                    out.push(bilinear(yy, xx, h, w));
                }
            }
        }
    }
}

/// The bilinear sample at `(y, x)` of an `h × w` plane (zero weights
/// outside `[-1, h] × [-1, w]`).
fn bilinear(y: f64, x: f64, h: usize, w: usize) -> Sample {
    if !(-1.0..=h as f64).contains(&y) || !(-1.0..=w as f64).contains(&x) {
        return Sample::default();
    }
    let axis = |v: f64, n: usize| -> (usize, usize, f64) {
        let v = v.max(0.0);
        let low = v as usize;
        if low >= n - 1 {
            (n - 1, n - 1, 0.0)
        } else {
            (low, low + 1, v - low as f64)
        }
    };
    let (y0, y1, ly) = axis(y, h);
    let (x0, x1, lx) = axis(x, w);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Sample {
        pos: [y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1],
        w: [hy * hx, hy * lx, ly * hx, ly * lx],
    }
}

/// The inputs of one run, checked.
struct Run<'a, T> {
    x: &'a [T],
    rois: FloatView<'a>,
    batch: Ints<'a>,
    channels: usize,
    hw: (usize, usize),
}

impl RoiAlign {
    fn run<T: Float + Send + Sync>(&self, p: &Run<'_, T>, y: &mut [T], par: &dyn ParallelFor) {
        let cells = self.out_h * self.out_w;
        let planes = y.len() / cells;
        let chunk = rows_chunk(par, planes, cells);
        let (h, w) = p.hw;
        for_each_chunk_mut(par, y, chunk, &|offset, part: &mut [T]| {
            let mut buf: Vec<Sample> = Vec::new();
            let mut current = usize::MAX;
            for (i, yp) in part.chunks_exact_mut(cells).enumerate() {
                let plane = offset / cells + i;
                let (r, c) = (plane / p.channels, plane % p.channels);
                let reg = self.region(std::array::from_fn(|k| p.rois.get(r * 4 + k)));
                if r != current {
                    samples(&reg, (self.out_h, self.out_w), (h, w), &mut buf);
                    current = r;
                }
                let b = p.batch.get(r) as usize;
                let xp = &p.x[(b * p.channels + c) * h * w..][..h * w];
                let per_cell = reg.grid.0 * reg.grid.1;
                let count = per_cell.max(1) as f64;
                for (o, cell) in yp.iter_mut().zip(buf.chunks(per_cell.max(1))) {
                    let val = |s: &Sample, k: usize| s.w[k] * xp[s.pos[k]].to_f64();
                    let v = if self.max {
                        cell.iter()
                            .map(|s| val(s, 0).max(val(s, 1)).max(val(s, 2)).max(val(s, 3)))
                            .reduce(f64::max)
                            .unwrap_or(0.0)
                    } else {
                        cell.iter()
                            .map(|s| val(s, 0) + val(s, 1) + val(s, 2) + val(s, 3))
                            .sum::<f64>()
                            / count
                    };
                    *o = T::from_f64(v);
                }
                if per_cell == 0 {
                    yp.fill(T::from_f64(0.0));
                }
            }
        });
    }

    /// Checks every region's batch index and sample count.
    fn check_regions(
        &self,
        rois: FloatView<'_>,
        batch: Ints<'_>,
        n: usize,
    ) -> Result<(), KernelError> {
        for r in 0..batch.len() {
            let b = batch.get(r);
            if b < 0 || b as u64 >= n as u64 {
                return Err(KernelError::Invalid {
                    op: OP,
                    detail: format!(
                        "batch_indices[{r}] = {b} is outside [0, {n}) (the batch of X)"
                    ),
                });
            }
            let reg = self.region(std::array::from_fn(|k| rois.get(r * 4 + k)));
            let per_cell = reg.grid.0.saturating_mul(reg.grid.1);
            if per_cell.saturating_mul(self.out_h * self.out_w) > MAX_SAMPLES {
                return Err(KernelError::Invalid {
                    op: OP,
                    detail: format!(
                        "region {r} needs {per_cell} samples per output cell; more than {MAX_SAMPLES} \
                         in all (set sampling_ratio, or check the rois' scale)"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// `(N, C, H, W, R)` from the input shapes, checked.
fn shapes(x: &[usize], rois: &[usize], batch: &[usize]) -> Result<[usize; 5], KernelError> {
    let &[n, c, h, w] = x else {
        return Err(KernelError::Shape(format!(
            "{OP}: X {x:?} must be 4-D [N, C, H, W]"
        )));
    };
    if rois.len() != 2 || rois[1] != 4 {
        return Err(KernelError::Shape(format!(
            "{OP}: rois {rois:?} must be [num_rois, 4] (x1, y1, x2, y2)"
        )));
    }
    if batch != [rois[0]] {
        return Err(KernelError::Shape(format!(
            "{OP}: batch_indices {batch:?} must be [{}], one per region",
            rois[0]
        )));
    }
    if (h == 0 || w == 0) && rois[0] > 0 && c > 0 {
        return Err(KernelError::Shape(format!(
            "{OP}: X {x:?} has an empty spatial plane to sample"
        )));
    }
    Ok([n, c, h, w, rois[0]])
}

impl Operator for RoiAlign {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 3, 3)?;
        let (x, rois, batch) = (
            required(OP, inputs, 0)?,
            required(OP, inputs, 1)?,
            required(OP, inputs, 2)?,
        );
        if !is_float(x.dtype) || rois.dtype != x.dtype {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: if is_float(x.dtype) {
                    rois.dtype
                } else {
                    x.dtype
                },
            });
        }
        if !matches!(batch.dtype, ElementType::I64 | ElementType::I32) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: batch.dtype,
            });
        }
        let [_, c, _, _, r] = shapes(x.shape, rois.shape, batch.shape)?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: vec![r, c, self.out_h, self.out_w],
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let (x, rois_t, batch_t) = (
            input(OP, inputs, 0)?,
            input(OP, inputs, 1)?,
            input(OP, inputs, 2)?,
        );
        let [n, channels, h, w, r] = shapes(x.shape(), rois_t.shape(), batch_t.shape())?;
        let rois = FloatView::of(OP, rois_t)?;
        let batch = Ints::of(OP, batch_t)?;
        check_len(OP, "rois", rois.len(), r * 4)?;
        self.check_regions(rois, batch, n)?;
        let y = output(OP, outputs, 0)?;
        dispatch_float!(x.dtype(), T => {
            let (xs, ys) = (typed::<T>(OP, x)?, typed_mut::<T>(OP, y)?);
            check_len(OP, "X", xs.len(), n * channels * h * w)?;
            check_len(OP, "Y", ys.len(), r * channels * self.out_h * self.out_w)?;
            if ys.is_empty() {
                return Ok(());
            }
            let run = Run { x: xs, rois, batch, channels, hw: (h, w) };
            self.run(&run, ys, par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op: OP, dtype: x.dtype() }))
    }
}
