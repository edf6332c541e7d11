//! Convolution weights as prepared objects (cold path: packing and
//! validation; the view is read on the hot path).
//!
//! One object holds what the output loop needs per output channel: the
//! weights, with a following BatchNormalization's scale folded into each
//! channel's row, and one addend per channel (the bias, shifted and scaled
//! by the normalization). Rows stay `[M][C / group × taps]`: the GEMM
//! micro-kernels broadcast `A` from memory one element at a time, so a row
//! is already the order they read, and the depthwise kernel reads one row
//! per plane. The layout key names the kernel family (`isa`) the object
//! was made for: the convolution runs that family's kernels on it.

use crate::ops::linalg::isa::Isa;
use crate::tensor::TensorData;
use crate::{KernelError, PackedWeight, ParallelFor, Prepack, Tensor};

/// First header word.
const MAGIC: u64 = 0x636f_6e76_6633_3201;
/// The version of what the packing writes, part of the layout key.
const VERSION: u32 = 1;

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
}

impl ConvPrepack {
    /// The packing for a convolution run by `isa`'s kernels, with a bias
    /// input when `bias` and a normalization of this epsilon.
    pub(crate) fn new(isa: Isa, bias: bool, batch_norm: Option<f32>) -> Self {
        let mut consumes = vec![1];
        if bias {
            consumes.push(2);
        }
        let mut layout = format!("conv-f32-v{VERSION}-{}", isa.name());
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
        }
    }

    fn header(&self, w: &[usize]) -> Vec<u64> {
        let mut h = vec![MAGIC, self.isa.code(), w.len() as u64];
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
    /// `W` with the normalization folded, row-major.
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
        let [magic, code, rank, w_shape @ ..] = header else {
            return Err(bad("bad header"));
        };
        if *magic != MAGIC || *rank as usize != w_shape.len() || w_shape.len() < 3 {
            return Err(bad("bad header"));
        }
        let isa = Isa::from_code(*code)
            .ok_or_else(|| bad("this CPU lacks the instructions of this layout"))?;
        let len = w_shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
        if len != Some(weights.len()) || addend.len() as u64 != w_shape[0] {
            return Err(bad("parts do not match the header's weight shape"));
        }
        Ok(Self {
            isa,
            w_shape,
            weights,
            addend,
        })
    }

    /// The source `W`'s shape.
    pub(crate) fn w_shape(&self) -> Vec<usize> {
        self.w_shape.iter().map(|&d| d as usize).collect()
    }
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
        _par: &dyn ParallelFor,
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
        let row = if maps == 0 { 0 } else { wv.len() / maps };
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
        let mut weights = crate::scratch::filled("Conv", wv.len(), 0.0f32)?;
        let mut addend = crate::scratch::filled("Conv", maps, 0.0f32)?;
        for m in 0..maps {
            let (mul, add) = channel_affine(bias, bn.as_ref(), m);
            addend[m] = add;
            let (src, dst) = (&wv[m * row..][..row], &mut weights[m * row..][..row]);
            for (o, &v) in dst.iter_mut().zip(src) {
                *o = v * mul;
            }
        }
        Ok(PackedWeight {
            layout: self.layout.clone(),
            parts: vec![
                TensorData::U64(self.header(w.shape())).into(),
                TensorData::F32(weights).into(),
                TensorData::F32(addend).into(),
            ],
        })
    }

    fn packed_bytes(&self, shapes: &[&[usize]]) -> Option<usize> {
        let w = shapes.first()?;
        let len = w.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
        (3 + w.len())
            .checked_mul(8)?
            .checked_add(len.checked_mul(4)?)?
            .checked_add(w.first()?.checked_mul(4)?)
    }

    fn validate(&self, packed: &PackedWeight, shapes: &[&[usize]]) -> Result<(), KernelError> {
        crate::validate_common(&self.layout, self.packed_bytes(shapes), packed)?;
        let view = ConvPacked::of(packed)?;
        let want = shapes.first().copied().unwrap_or(&[]);
        if view.isa != self.isa || view.w_shape() != want {
            return Err(KernelError::Invalid {
                op: "Conv",
                detail: format!(
                    "packed weight `{}`: packed for W {:?} on {}, not {want:?} on {}",
                    packed.layout,
                    view.w_shape(),
                    view.isa.name(),
                    self.isa.name()
                ),
            });
        }
        Ok(())
    }
}
