//! Col2Im (opset 18): sums the sliding blocks (columns) of
//! `X [N, C * prod(block_shape), L]` back into images
//! `[N, C, image_shape..]`, the inverse layout of im2col, with dilations,
//! pads and strides; `image_shape` and `block_shape` are constants.
//!
//! Hot path: a gather per output element (no scattered adds, so tasks own
//! their outputs). Per axis, a table lists for each image index the
//! (kernel index, block index) pairs that land on it, kernel ascending; the
//! element sums the products of those lists in kernel order (the order of
//! the operator's reference loop, which adds kernel by kernel).

use super::common::{Real, Widen};
use crate::ops::basic::common::{
    Attrs, MAX_RANK, check_inputs, checked_count, constant_ints, input, numel, output, required,
    typed, typed_mut,
};
use crate::ops::index::common::{by_rows, check_index_type, strides};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Col2Im.
#[derive(Debug)]
pub(crate) struct Col2Im {
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

/// The resolved geometry: per spatial axis the image size, kernel size,
/// dilation, leading pad, stride and block count.
#[derive(Debug, Clone, Default)]
struct Geometry {
    image: Vec<usize>,
    kernel: Vec<usize>,
    dilation: Vec<usize>,
    pad: Vec<usize>,
    stride: Vec<usize>,
    blocks: Vec<usize>,
}

impl Col2Im {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "Col2Im", &["dilations", "pads", "strides"])?;
        let positive = |name: &'static str| -> Result<Option<Vec<i64>>, KernelError> {
            let v = attrs.ints(name)?;
            if let Some(bad) = v.iter().flatten().find(|&&d| d < 1) {
                return Err(attrs.error(name, format!("{bad} must be >= 1")));
            }
            Ok(v)
        };
        let (dilations, strides) = (positive("dilations")?, positive("strides")?);
        let pads = attrs.ints("pads")?;
        if let Some(bad) = pads.iter().flatten().find(|&&p| p < 0) {
            return Err(attrs.error("pads", format!("{bad} must not be negative")));
        }
        Ok(Self {
            dilations,
            pads,
            strides,
        })
    }

    /// The geometry for X of shape `x` and the constant shapes, and the
    /// output shape.
    fn geometry(
        &self,
        x: &[usize],
        image: &[i64],
        block: &[i64],
    ) -> Result<(Geometry, Vec<usize>), KernelError> {
        let op = "Col2Im";
        let bad = |why: String| {
            KernelError::Shape(format!(
                "{op}: input {x:?}, image_shape {image:?}, block_shape {block:?}: {why}"
            ))
        };
        let m = image.len();
        if m == 0 || block.len() != m {
            return Err(bad(
                "image_shape and block_shape must have one value per spatial axis".into(),
            ));
        }
        if m + 2 > MAX_RANK {
            return Err(bad(format!("at most {} spatial axes", MAX_RANK - 2)));
        }
        let &[n, ck, l] = x else {
            return Err(bad(
                "the input must be 3-D [N, C * prod(block_shape), L]".into()
            ));
        };
        let attr_len = |what: &str, v: &Option<Vec<i64>>, want: usize| match v {
            Some(v) if v.len() != want => Err(bad(format!(
                "{what} has {} values where {want} were expected",
                v.len()
            ))),
            _ => Ok(()),
        };
        attr_len("dilations", &self.dilations, m)?;
        attr_len("strides", &self.strides, m)?;
        attr_len("pads", &self.pads, 2 * m)?;
        let size = |what: &str, v: i64, min: i64| {
            if v < min {
                Err(bad(format!("{what} value {v} must be >= {min}")))
            } else {
                usize::try_from(v).map_err(|_| bad(format!("{what} value {v} is too large")))
            }
        };
        let mut g = Geometry::default();
        for d in 0..m {
            let at =
                |v: &Option<Vec<i64>>, i: usize, default: i64| v.as_ref().map_or(default, |v| v[i]);
            let (img, k) = (
                size("image_shape", image[d], 0)?,
                size("block_shape", block[d], 1)?,
            );
            let dil = size("dilations", at(&self.dilations, d, 1), 1)?;
            let stride = size("strides", at(&self.strides, d, 1), 1)?;
            let lo = size("pads", at(&self.pads, d, 0), 0)?;
            let hi = size("pads", at(&self.pads, m + d, 0), 0)?;
            let too_large = || bad(format!("axis {d}: the extents overflow"));
            let span = (k - 1)
                .checked_mul(dil)
                .and_then(|s| s.checked_add(1))
                .ok_or_else(too_large)?;
            let room = img
                .checked_add(lo)
                .and_then(|s| s.checked_add(hi))
                .ok_or_else(too_large)?;
            if room < span {
                return Err(bad(format!(
                    "axis {d}: the padded image ({room}) is smaller than a dilated block ({span})"
                )));
            }
            g.blocks.push((room - span) / stride + 1);
            g.image.push(img);
            g.kernel.push(k);
            g.dilation.push(dil);
            g.pad.push(lo);
            g.stride.push(stride);
        }
        let kernel = checked_count(op, &g.kernel)?;
        if ck % kernel != 0 {
            return Err(bad(format!(
                "dimension 1 ({ck}) must be a multiple of prod(block_shape) = {kernel}"
            )));
        }
        let blocks = checked_count(op, &g.blocks)?;
        if l != blocks {
            return Err(bad(format!(
                "dimension 2 ({l}) must be the number of blocks {:?} = {blocks}",
                g.blocks
            )));
        }
        let mut out = vec![n, ck / kernel];
        out.extend_from_slice(&g.image);
        checked_count(op, &out)?;
        Ok((g, out))
    }
}

/// Per axis, for each image index `i`, the `(kernel index, block index)`
/// pairs with `block * stride - pad + kernel * dilation = i`, kernel
/// ascending: `starts[i]..starts[i + 1]` in `pairs`.
#[derive(Debug, Default)]
struct Landing {
    starts: Vec<usize>,
    pairs: Vec<(usize, usize)>,
}

impl Landing {
    fn new(g: &Geometry, d: usize) -> Self {
        let mut t = Landing::default();
        for i in 0..g.image[d] {
            t.starts.push(t.pairs.len());
            let i = i + g.pad[d];
            for k in 0..g.kernel[d] {
                let Some(at) = i.checked_sub(k * g.dilation[d]) else {
                    break;
                };
                if at % g.stride[d] == 0 && at / g.stride[d] < g.blocks[d] {
                    t.pairs.push((k, at / g.stride[d]));
                }
            }
        }
        t.starts.push(t.pairs.len());
        t
    }

    #[inline]
    fn at(&self, i: usize) -> &[(usize, usize)] {
        &self.pairs[self.starts[i]..self.starts[i + 1]]
    }
}

/// The gather of `x` (`[N, C * K, L]`) into `y` (`[N, C, image..]`).
fn gather<T: Widen>(g: &Geometry, x: &[T], y: &mut [T], par: &dyn ParallelFor) {
    let m = g.image.len();
    let tables: Vec<Landing> = (0..m).map(|d| Landing::new(g, d)).collect();
    let (kst, bst) = (strides(&g.kernel), strides(&g.blocks));
    let (kernel, blocks) = (numel(&g.kernel), numel(&g.blocks));
    let (row, plane) = (g.image[m - 1], numel(&g.image));
    by_rows(par, y, row, &|first, rows| {
        // (kernel offset, block offset) of the product pairs so far.
        let mut cur: Vec<(usize, usize)> = Vec::new();
        let mut next: Vec<(usize, usize)> = Vec::new();
        let mut idx = [0usize; MAX_RANK];
        for (r, dst) in rows.chunks_exact_mut(row).enumerate() {
            let r = first + r;
            let (nc, mut rest) = ((r * row) / plane, (r * row) % plane / row);
            for d in (0..m - 1).rev() {
                idx[d] = rest % g.image[d];
                rest /= g.image[d];
            }
            let src = &x[nc * kernel * blocks..][..kernel * blocks];
            for (j, v) in dst.iter_mut().enumerate() {
                idx[m - 1] = j;
                cur.clear();
                cur.push((0, 0));
                for (d, t) in tables.iter().enumerate() {
                    next.clear();
                    for &(ko, bo) in &cur {
                        for &(k, b) in t.at(idx[d]) {
                            next.push((ko + k * kst[d], bo + b * bst[d]));
                        }
                    }
                    std::mem::swap(&mut cur, &mut next);
                }
                let mut acc = T::Acc::ZERO;
                for &(k, b) in &cur {
                    acc = acc + src[k * blocks + b].load();
                }
                *v = T::store(acc);
            }
        }
    });
}

impl Operator for Col2Im {
    fn name(&self) -> &'static str {
        "Col2Im"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = "Col2Im";
        let inputs = check_inputs(op, inputs, 3, 3)?;
        let x = required(op, inputs, 0)?;
        if !matches!(
            x.dtype,
            ElementType::F32 | ElementType::F64 | ElementType::F16 | ElementType::BF16
        ) {
            return Err(KernelError::UnsupportedType { op, dtype: x.dtype });
        }
        let (image, block) = (required(op, inputs, 1)?, required(op, inputs, 2)?);
        check_index_type(op, image.dtype)?;
        check_index_type(op, block.dtype)?;
        let image = constant_ints(op, image, 1)?;
        let block = constant_ints(op, block, 2)?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: self.geometry(x.shape, &image, &block)?.1,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = "Col2Im";
        let x = input(op, inputs, 0)?;
        let ints = |i: usize| {
            let t = input(op, inputs, i)?;
            t.to_i64_vec().ok_or(KernelError::UnsupportedType {
                op,
                dtype: t.dtype(),
            })
        };
        let (g, want) = self.geometry(x.shape(), &ints(1)?, &ints(2)?)?;
        let y = output(op, outputs, 0)?;
        if y.shape() != want.as_slice() {
            return Err(KernelError::Invalid {
                op,
                detail: format!("output shape {:?} where {want:?} was computed", y.shape()),
            });
        }
        if y.is_empty() {
            return Ok(());
        }
        dispatch_types!(x.dtype(), [F32 => f32, F64 => f64, F16 => ::half::f16, BF16 => ::half::bf16], T => {
            gather::<T>(&g, typed::<T>(op, x)?, typed_mut::<T>(op, y)?, par);
            Ok(())
        }, else Err(KernelError::UnsupportedType { op, dtype: x.dtype() }))
    }
}
