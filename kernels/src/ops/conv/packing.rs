//! Convolution weights as prepared objects (cold path: packing and
//! validation; the view is read on the hot path).
//!
//! One object holds what the output loop needs per output channel: the
//! weights, with a following BatchNormalization's scale folded into each
//! channel's row, and one addend per channel (the bias, shifted and scaled
//! by the normalization). The weights of a convolution that runs on the
//! GEMM micro-kernels are panels of the kernel family's `MR` rows per
//! group (`[group][row tile][C / group × taps][MR]`), so a micro-kernel
//! broadcasts `A` at constant offsets from one pointer instead of
//! computing `MR` row addresses every step; a depthwise convolution keeps
//! one row per channel (`[M][taps]`), what its kernel reads per plane. The
//! layout key names the kernel family (`isa`) and the panel height: the
//! convolution runs that family's kernels on the object.

use crate::ops::linalg::isa::Isa;
use crate::tensor::TensorData;
use crate::{KernelError, PackedWeight, ParallelFor, Prepack, Tensor, for_each_chunk_mut};

/// First header word.
const MAGIC: u64 = 0x636f_6e76_6633_3201;
/// The version of what the packing writes, part of the layout key.
const VERSION: u32 = 2;

/// The parameters of a BatchNormalization folded into a convolution, each
/// `[M]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchNorm<'a> {
    pub(crate) scale: &'a [f32],
    pub(crate) bias: &'a [f32],
    pub(crate) mean: &'a [f32],
    pub(crate) var: &'a [f32],
    pub(crate) epsilon: f32,
}

/// For output channel `m`: the factor and the addend that the bias and a
/// BatchNormalization apply to the raw product, `y = acc * mul + add`
/// (ONNX: `(acc + B - mean) / sqrt(var + epsilon) * scale + bias`).
#[inline]
pub(crate) fn channel_affine(
    bias: Option<&[f32]>,
    bn: Option<&BatchNorm<'_>>,
    m: usize,
) -> (f32, f32) {
    let b = bias.map_or(0.0, |b| b[m]);
    match bn {
        None => (1.0, b),
        Some(n) => {
            let s = n.scale[m] / (n.var[m] + n.epsilon).sqrt();
            (s, (b - n.mean[m]) * s + n.bias[m])
        }
    }
}

/// Packs Conv's `W` (and `B`, and a BatchNormalization's parameters).
#[derive(Debug)]
pub(crate) struct ConvPrepack {
    layout: String,
    isa: Isa,
    consumes: Vec<usize>,
    bias: bool,
    batch_norm: Option<f32>,
    group: usize,
    /// `A` panel height, 0 for rows (depthwise).
    panel: usize,
}

impl ConvPrepack {
    /// The packing for a convolution of `group` groups and weights of
    /// shape `w` run by `isa`'s kernels, with a bias input when `bias` and
    /// a normalization of this epsilon.
    pub(crate) fn new(
        isa: Isa,
        group: usize,
        w: &[usize],
        bias: bool,
        batch_norm: Option<f32>,
    ) -> Self {
        let depthwise = w.get(1) == Some(&1) && w.first() == Some(&group);
        let panel = if depthwise { 0 } else { isa.f32_mr() };
        let mut consumes = vec![1];
        if bias {
            consumes.push(2);
        }
        let mut layout = format!("conv-f32-v{VERSION}-{}-g{group}-", isa.name());
        layout.push_str(&if panel == 0 {
            "rows".to_owned()
        } else {
            format!("mr{panel}")
        });
        if bias {
            layout.push_str("-bias");
        }
        if let Some(eps) = batch_norm {
            consumes.extend(3..7);
            layout.push_str(&format!("-bn{:08x}", eps.to_bits()));
        }
        Self {
            layout,
            isa,
            consumes,
            bias,
            batch_norm,
            group,
            panel,
        }
    }

    fn header(&self, w: &[usize]) -> Vec<u64> {
        let mut h = vec![
            MAGIC,
            self.isa.code(),
            self.panel as u64,
            self.group as u64,
            w.len() as u64,
        ];
        h.extend(w.iter().map(|&d| d as u64));
        h
    }
}

/// Whether `packed` claims this layout (its header's first word).
pub(crate) fn is_conv_layout(packed: &PackedWeight) -> bool {
    packed
        .parts
        .first()
        .and_then(|p| p.as_u64())
        .and_then(|h| h.first())
        == Some(&MAGIC)
}

/// A packed convolution weight, read in place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvPacked<'a> {
    /// The kernel family it was packed for (present on this CPU).
    pub(crate) isa: Isa,
    /// The shape of the source `W`.
    pub(crate) w_shape: &'a [u64],
    /// The group count it was packed for.
    pub(crate) group: usize,
    /// `A` panel height (`isa`'s `MR`), or 0: one row per channel.
    pub(crate) panel: usize,
    /// `W` with the normalization folded, in panels or rows.
    pub(crate) weights: &'a [f32],
    /// One addend per output channel.
    pub(crate) addend: &'a [f32],
}

impl<'a> ConvPacked<'a> {
    /// The view of `packed`, its parts checked against each other.
    pub(crate) fn of(packed: &'a PackedWeight) -> Result<Self, KernelError> {
        let bad = |detail: &str| KernelError::Invalid {
            op: "Conv",
            detail: format!("packed weight `{}`: {detail}", packed.layout),
        };
        let [header, weights, addend] = &packed.parts[..] else {
            return Err(bad("not a convolution layout"));
        };
        let (Some(header), Some(weights), Some(addend)) =
            (header.as_u64(), weights.as_f32(), addend.as_f32())
        else {
            return Err(bad("not a convolution layout"));
        };
        let [magic, code, panel, group, rank, w_shape @ ..] = header else {
            return Err(bad("bad header"));
        };
        if *magic != MAGIC || *rank as usize != w_shape.len() || w_shape.len() < 3 {
            return Err(bad("bad header"));
        }
        let isa = Isa::from_code(*code)
            .ok_or_else(|| bad("this CPU lacks the instructions of this layout"))?;
        let (panel, group) = (*panel as usize, *group as usize);
        let maps = usize::try_from(w_shape[0]).ok();
        let len = weights_len(isa, panel, group, w_shape);
        if panel != 0 && panel != isa.f32_mr()
            || len != Some(weights.len())
            || maps != Some(addend.len())
        {
            return Err(bad("parts do not match the header's weight shape"));
        }
        Ok(Self {
            isa,
            w_shape,
            group,
            panel,
            weights,
            addend,
        })
    }

    /// The source `W`'s shape.
    pub(crate) fn w_shape(&self) -> Vec<usize> {
        self.w_shape.iter().map(|&d| d as usize).collect()
    }
}

/// Floats of the packed weights of `W` (`w_shape`) in `group` groups, in
/// panels of `panel` rows (or rows when 0); `None` when inconsistent.
fn weights_len(isa: Isa, panel: usize, group: usize, w_shape: &[u64]) -> Option<usize> {
    let dims: Vec<usize> = w_shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()?;
    let maps = *dims.first()?;
    let k = dims[1..]
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))?;
    if group == 0 || !maps.is_multiple_of(group) {
        return None;
    }
    if panel == 0 {
        return maps.checked_mul(k);
    }
    let mg = maps / group;
    mg.div_ceil(panel)
        .checked_mul(panel)?
        .checked_mul(k)?
        .checked_mul(group)
        .filter(|_| panel == isa.f32_mr())
}

fn f32_source<'t>(t: &'t Tensor, what: &str) -> Result<&'t [f32], KernelError> {
    t.as_f32().ok_or_else(|| KernelError::Invalid {
        op: "Conv",
        detail: format!("{what} must be f32 to be packed, not {}", t.dtype()),
    })
}

impl Prepack for ConvPrepack {
    fn layout(&self) -> &str {
        &self.layout
    }

    fn consumes(&self) -> &[usize] {
        &self.consumes
    }

    fn prepare(
        &self,
        sources: &[&Tensor],
        par: &dyn ParallelFor,
    ) -> Result<PackedWeight, KernelError> {
        if sources.len() != self.consumes.len() {
            return Err(KernelError::Invalid {
                op: "Conv",
                detail: format!(
                    "packing takes {} sources, got {}",
                    self.consumes.len(),
                    sources.len()
                ),
            });
        }
        let w = sources[0];
        let wv = f32_source(w, "W")?;
        let maps = *w.shape().first().unwrap_or(&0);
        let row = wv.len().checked_div(maps).unwrap_or(0);
        let bias = if self.bias {
            Some(f32_source(sources[1], "B")?)
        } else {
            None
        };
        let params: Vec<&[f32]> = sources[1 + usize::from(self.bias)..]
            .iter()
            .map(|t| f32_source(t, "a BatchNormalization parameter"))
            .collect::<Result<_, _>>()?;
        let bn = match (self.batch_norm, &params[..]) {
            (Some(epsilon), &[scale, b, mean, var]) => Some(BatchNorm {
                scale,
                bias: b,
                mean,
                var,
                epsilon,
            }),
            (None, []) => None,
            _ => return Err(KernelError::Shape("Conv: bad normalization sources".into())),
        };
        let short = |v: &[f32]| v.len() != maps;
        if w.shape().len() < 3
            || bias.is_some_and(short)
            || bn.is_some_and(|n| [n.scale, n.bias, n.mean, n.var].into_iter().any(short))
        {
            return Err(KernelError::Shape(format!(
                "Conv: W {:?} with bias or normalization parameters not of [{maps}]",
                w.shape()
            )));
        }
        let dims: Vec<u64> = w.shape().iter().map(|&d| d as u64).collect();
        let len = weights_len(self.isa, self.panel, self.group, &dims).ok_or_else(|| {
            KernelError::Shape(format!(
                "Conv: W {:?} does not split into {} groups",
                w.shape(),
                self.group
            ))
        })?;
        let mut addend = crate::scratch::filled("Conv", maps, 0.0f32)?;
        let mut muls = crate::scratch::filled("Conv", maps, 0.0f32)?;
        for m in 0..maps {
            (muls[m], addend[m]) = channel_affine(bias, bn.as_ref(), m);
        }
        let (panel, mg) = (self.panel, maps / self.group);
        let weights = crate::packed::zeroed_part("Conv", len, |out: &mut [f32]| {
            if panel == 0 || row == 0 {
                // One row per channel, a few rows per task.
                let rows = (4096 / row.max(1)).max(1);
                for_each_chunk_mut(par, out, rows * row.max(1), &|first, dst| {
                    for (j, d) in dst.chunks_exact_mut(row.max(1)).enumerate() {
                        let m = first / row.max(1) + j;
                        for (o, &v) in d.iter_mut().zip(&wv[m * row..][..row]) {
                            *o = v * muls[m];
                        }
                    }
                });
                return;
            }
            // One panel per task: `panel` rows of the group interleaved,
            // each source row read in order.
            let tiles = mg.div_ceil(panel);
            for_each_chunk_mut(par, out, row * panel, &|first, dst| {
                let index = first / (row * panel);
                let (g, t) = (index / tiles, index % tiles);
                let height = panel.min(mg - t * panel);
                let m0 = g * mg + t * panel;
                let src = &wv[m0 * row..][..height * row];
                for (p, d) in dst.chunks_exact_mut(panel).enumerate() {
                    for (i, o) in d[..height].iter_mut().enumerate() {
                        *o = src[i * row + p] * muls[m0 + i];
                    }
                }
            });
        })?;
        Ok(PackedWeight {
            layout: self.layout.clone(),
            parts: vec![
                TensorData::U64(self.header(w.shape())).into(),
                weights,
                TensorData::F32(addend).into(),
            ],
        })
    }

    fn packed_bytes(&self, shapes: &[&[usize]]) -> Option<usize> {
        let w = shapes.first()?;
        let dims: Vec<u64> = w.iter().map(|&d| d as u64).collect();
        let len = weights_len(self.isa, self.panel, self.group, &dims)?;
        (5 + w.len())
            .checked_mul(8)?
            .checked_add(len.checked_mul(4)?)?
            .checked_add(w.first()?.checked_mul(4)?)
    }

    fn validate(&self, packed: &PackedWeight, shapes: &[&[usize]]) -> Result<(), KernelError> {
        crate::validate_common(&self.layout, self.packed_bytes(shapes), packed)?;
        let view = ConvPacked::of(packed)?;
        let want = shapes.first().copied().unwrap_or(&[]);
        if view.isa != self.isa
            || view.w_shape() != want
            || (view.group, view.panel) != (self.group, self.panel)
        {
            return Err(KernelError::Invalid {
                op: "Conv",
                detail: format!(
                    "packed weight `{}`: packed for W {:?} in {} groups on {}, not {want:?} in {} \
                     on {}",
                    packed.layout,
                    view.w_shape(),
                    view.group,
                    view.isa.name(),
                    self.group,
                    self.isa.name()
                ),
            });
        }
        Ok(())
    }
}
