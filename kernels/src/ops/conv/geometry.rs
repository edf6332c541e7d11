//! Window geometry shared by convolution and pooling (cold path): the
//! `kernel_shape`, `strides`, `dilations`, `pads`, `auto_pad` and
//! `ceil_mode` attributes, and the output extent and padding they give for
//! one input shape.

use crate::KernelError;
use crate::ops::basic::common::Attrs;

/// The most spatial axes the kernels handle (1-D, 2-D and 3-D windows).
pub(crate) const MAX_SPATIAL: usize = 3;

/// How padding is decided (`auto_pad`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AutoPad {
    /// Explicit `pads`.
    NotSet,
    /// Output `ceil(in / stride)`, the odd padding element at the end.
    SameUpper,
    /// Output `ceil(in / stride)`, the odd padding element at the start.
    SameLower,
    /// No padding.
    Valid,
}

/// A window's attributes as the node states them; the kernel extent may come
/// from the weight's shape (Conv) instead of `kernel_shape`.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) kernel: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    pub(crate) auto_pad: AutoPad,
    pub(crate) ceil_mode: bool,
}

/// A window resolved for one input shape: per spatial axis, the input and
/// output extents, kernel extent, stride, dilation and padding at the start
/// (`pad_end` only decides the output extent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Geometry {
    pub(crate) rank: usize,
    pub(crate) input: [usize; MAX_SPATIAL],
    pub(crate) output: [usize; MAX_SPATIAL],
    pub(crate) kernel: [usize; MAX_SPATIAL],
    pub(crate) stride: [usize; MAX_SPATIAL],
    pub(crate) dilation: [usize; MAX_SPATIAL],
    pub(crate) pad_begin: [usize; MAX_SPATIAL],
    pub(crate) pad_end: [usize; MAX_SPATIAL],
}

fn positive(attrs: &Attrs<'_>, name: &'static str) -> Result<Option<Vec<usize>>, KernelError> {
    let Some(values) = attrs.ints(name)? else {
        return Ok(None);
    };
    values
        .iter()
        .map(|&v| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| attrs.error(name, format!("{values:?}: every value must be >= 1")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

impl Window {
    /// Reads the window attributes (`ceil_mode` only where `pooling`).
    pub(crate) fn parse(attrs: &Attrs<'_>, pooling: bool) -> Result<Self, KernelError> {
        let auto_pad = match attrs.string("auto_pad")?.as_deref() {
            None | Some("NOTSET") => AutoPad::NotSet,
            Some("SAME_UPPER") => AutoPad::SameUpper,
            Some("SAME_LOWER") => AutoPad::SameLower,
            Some("VALID") => AutoPad::Valid,
            Some(other) => {
                return Err(attrs.error(
                    "auto_pad",
                    format!("`{other}`: expected NOTSET, SAME_UPPER, SAME_LOWER or VALID"),
                ));
            }
        };
        let pads = match attrs.ints("pads")? {
            None => None,
            Some(p) => Some(
                p.iter()
                    .map(|&v| usize::try_from(v))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| attrs.error("pads", format!("{p:?}: pads must be >= 0")))?,
            ),
        };
        let ceil_mode = pooling && attrs.int_or("ceil_mode", 0)? != 0;
        Ok(Self {
            kernel: positive(attrs, "kernel_shape")?,
            strides: positive(attrs, "strides")?,
            dilations: positive(attrs, "dilations")?,
            pads,
            auto_pad,
            ceil_mode,
        })
    }

    /// The geometry over `input` spatial extents with `kernel` (from the
    /// attribute or the weight).
    pub(crate) fn resolve(
        &self,
        op: &'static str,
        input: &[usize],
        kernel: &[usize],
    ) -> Result<Geometry, KernelError> {
        let rank = input.len();
        let bad = |what: String| KernelError::Shape(format!("{op}: {what}"));
        if rank == 0 || rank > MAX_SPATIAL {
            return Err(bad(format!(
                "{rank} spatial axes; 1 to {MAX_SPATIAL} are supported"
            )));
        }
        if kernel.len() != rank {
            return Err(bad(format!("kernel {kernel:?} for {rank} spatial axes")));
        }
        let mut g = self.resolve_attributes(op, rank)?;
        for i in 0..rank {
            let (k, n) = (kernel[i], input[i]);
            let (s, d) = (g.stride[i], g.dilation[i]);
            let span = (k - 1)
                .checked_mul(d)
                .and_then(|v| v.checked_add(1))
                .ok_or_else(|| bad(format!("kernel {k} dilated by {d} overflows")))?;
            let (pb, pe, out) = match self.auto_pad {
                AutoPad::NotSet | AutoPad::Valid => {
                    let (pb, pe) = (g.pad_begin[i], g.pad_end[i]);
                    let padded = n
                        .checked_add(pb)
                        .and_then(|v| v.checked_add(pe))
                        .ok_or_else(|| bad("padded extent overflows".into()))?;
                    if padded < span {
                        return Err(bad(format!(
                            "axis {i}: the window ({span} with dilation) is larger than the padded input ({padded})"
                        )));
                    }
                    let out = if self.ceil_mode {
                        let mut out = (padded - span).div_ceil(s) + 1;
                        // A last window starting in the end padding is dropped.
                        if (out - 1) * s >= n + pb {
                            out -= 1;
                        }
                        out
                    } else {
                        (padded - span) / s + 1
                    };
                    (pb, pe, out)
                }
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let out = n.div_ceil(s);
                    let need = (out.saturating_sub(1) * s + span).saturating_sub(n);
                    let small = need / 2;
                    if self.auto_pad == AutoPad::SameUpper {
                        (small, need - small, out)
                    } else {
                        (need - small, small, out)
                    }
                }
            };
            g.input[i] = n;
            g.output[i] = out;
            g.kernel[i] = k;
            g.pad_begin[i] = pb;
            g.pad_end[i] = pe;
        }
        Ok(g)
    }

    /// Strides, dilations and explicit pads for `rank` spatial axes, as
    /// stated (`auto_pad` not applied; extents left 0).
    pub(crate) fn resolve_attributes(
        &self,
        op: &'static str,
        rank: usize,
    ) -> Result<Geometry, KernelError> {
        let bad = |name: &str, n: usize| {
            KernelError::Shape(format!(
                "{op}: `{name}` has {n} values for {rank} spatial axes"
            ))
        };
        let mut g = Geometry {
            rank,
            ..Geometry::default()
        };
        for (name, v, n) in [
            ("strides", &self.strides, rank),
            ("dilations", &self.dilations, rank),
            ("pads", &self.pads, 2 * rank),
        ] {
            if let Some(v) = v
                && v.len() != n
            {
                return Err(bad(name, v.len()));
            }
        }
        for i in 0..rank {
            g.stride[i] = self.strides.as_ref().map_or(1, |v| v[i]);
            g.dilation[i] = self.dilations.as_ref().map_or(1, |v| v[i]);
            if self.auto_pad == AutoPad::NotSet
                && let Some(p) = &self.pads
            {
                g.pad_begin[i] = p[i];
                g.pad_end[i] = p[i + rank];
            }
        }
        Ok(g)
    }

    /// The attribute `kernel_shape`, required (pools).
    pub(crate) fn required_kernel(&self, op: &'static str) -> Result<&[usize], KernelError> {
        self.kernel.as_deref().ok_or(KernelError::Attribute {
            op,
            name: "kernel_shape",
            detail: "is required".into(),
        })
    }
}

impl Geometry {
    /// Output positions per channel.
    pub(crate) fn output_len(&self) -> usize {
        self.output[..self.rank].iter().product()
    }

    /// Input positions per channel.
    pub(crate) fn input_len(&self) -> usize {
        self.input[..self.rank].iter().product()
    }

    /// Kernel taps per channel.
    pub(crate) fn kernel_len(&self) -> usize {
        self.kernel[..self.rank].iter().product()
    }

    /// The extents padded to three axes with leading 1s, so that loops over
    /// `(d, h, w)` serve every rank: `(input, output, kernel, stride,
    /// dilation, pad_begin)` each as `[d, h, w]`.
    pub(crate) fn as_3d(&self) -> Geometry3 {
        let lift = |v: &[usize; MAX_SPATIAL], fill: usize| {
            let mut out = [fill; 3];
            out[3 - self.rank..].copy_from_slice(&v[..self.rank]);
            out
        };
        Geometry3 {
            input: lift(&self.input, 1),
            output: lift(&self.output, 1),
            kernel: lift(&self.kernel, 1),
            stride: lift(&self.stride, 1),
            dilation: lift(&self.dilation, 1),
            pad: lift(&self.pad_begin, 0),
            pad_end: lift(&self.pad_end, 0),
        }
    }
}

/// [`Geometry`] over exactly three axes `[d, h, w]` (leading axes of extent 1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry3 {
    pub(crate) input: [usize; 3],
    pub(crate) output: [usize; 3],
    pub(crate) kernel: [usize; 3],
    pub(crate) stride: [usize; 3],
    pub(crate) dilation: [usize; 3],
    pub(crate) pad: [usize; 3],
    pub(crate) pad_end: [usize; 3],
}

impl Geometry3 {
    /// The input coordinate of output `o`, tap `k` on axis `a` (may be
    /// outside `0..input[a]`).
    #[inline]
    pub(crate) fn coord(&self, a: usize, o: usize, k: usize) -> isize {
        (o * self.stride[a] + k * self.dilation[a]) as isize - self.pad[a] as isize
    }
}

/// Output positions `lo..hi` (inside `0..out`) of an output row whose
/// input column `o * stride + off` lies inside `0..len`.
#[inline(always)]
pub(crate) fn valid_range(out: usize, stride: usize, off: isize, len: usize) -> (usize, usize) {
    let lo = if off < 0 {
        ((-off) as usize).div_ceil(stride).min(out)
    } else {
        0
    };
    let last = len as isize - 1 - off;
    let hi = if last < 0 {
        0
    } else {
        (last as usize / stride + 1).min(out)
    };
    (lo, hi.max(lo))
}
