//! DequantizeLinear (opsets 13, 19, 21, 23): `y = (x - x_zero_point) *
//! x_scale`, per tensor, per axis (`axis`) or blocked (`block_size`, 21+).
//!
//! `x` is int8, uint8, int16, uint16 or int32; INT4/UINT4 arrive unpacked
//! one value per byte as int8/uint8 and dequantize the same way. The scale
//! is f32, f16 or bf16 and decides the output type (`output_dtype`, 23+, may
//! only repeat it). Cold path: attributes and the quantization geometry;
//! hot path: one row loop per (outer, axis) position with the scale (per
//! axis) or a scale row (blocked) hoisted, computed in f32.

use half::{bf16, f16};

use super::common::{OutFloat, QElem, onnx_float_code, worth_parallel};
use crate::ops::basic::common::{
    Attrs, check_len, input, normalize_axis, numel, optional, output, required, typed, typed_mut,
};
use crate::par::{for_each_chunk_mut, rows_chunk};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const OP: &str = "DequantizeLinear";
/// Elements per task of a per-tensor dequantization.
const FLAT_CHUNK: usize = 16 * 1024;

/// DequantizeLinear.
#[derive(Debug)]
pub(crate) struct DequantizeLinear {
    axis: i64,
    /// 0: not blocked.
    block_size: usize,
    /// `output_dtype` (0 = the scale type).
    output_dtype: i64,
}

/// How scales map onto `x`, seen as `[outer, dim, inner]` around the axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One scale.
    Tensor,
    /// One scale per index of the axis.
    Axis,
    /// Scales `[outer, blocks, inner]`: index `j` of the axis uses block
    /// `j / block_size`.
    Blocked { block_size: usize, blocks: usize },
}

#[derive(Debug, Clone, Copy)]
struct Geometry {
    outer: usize,
    dim: usize,
    inner: usize,
    mode: Mode,
}

impl DequantizeLinear {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = match spec.opset {
            ..=20 => &["axis"],
            21..=22 => &["axis", "block_size"],
            _ => &["axis", "block_size", "output_dtype"],
        };
        let attrs = Attrs::new(spec, OP, allowed)?;
        if !(2..=3).contains(&spec.inputs) || spec.outputs != 1 {
            return Err(KernelError::Shape(format!(
                "{OP}: takes 2 or 3 inputs and 1 output, got {} and {}",
                spec.inputs, spec.outputs
            )));
        }
        let axis = attrs.int_or("axis", 1)?;
        let block_size = attrs.int_or("block_size", 0)?;
        let block_size = usize::try_from(block_size)
            .map_err(|_| attrs.error("block_size", format!("must be >= 0, got {block_size}")))?;
        let output_dtype = attrs.int_or("output_dtype", 0)?;
        if !matches!(output_dtype, 0 | 1 | 10 | 16) {
            return Err(attrs.error(
                "output_dtype",
                format!("{output_dtype} is not supported (float, float16 or bfloat16 only)"),
            ));
        }
        Ok(Self {
            axis,
            block_size,
            output_dtype,
        })
    }

    /// The scale layout for these shapes.
    fn geometry(
        &self,
        x: &[usize],
        scale: &[usize],
        zp: Option<&[usize]>,
    ) -> Result<Geometry, KernelError> {
        if let Some(z) = zp {
            let scalars = numel(z) == 1 && numel(scale) == 1 && z.len() <= 1 && scale.len() <= 1;
            if z != scale && !scalars {
                return Err(KernelError::Shape(format!(
                    "{OP}: x_zero_point shape {z:?} differs from x_scale shape {scale:?}"
                )));
            }
        }
        let n = numel(x);
        if self.block_size == 0 {
            if scale.len() <= 1 && numel(scale) == 1 {
                return Ok(Geometry {
                    outer: 1,
                    dim: 1,
                    inner: n,
                    mode: Mode::Tensor,
                });
            }
            if scale.len() != 1 {
                return Err(KernelError::Shape(format!(
                    "{OP}: x_scale {scale:?} must be a scalar or 1-D without block_size"
                )));
            }
            let a = normalize_axis(OP, "axis", self.axis, x.len())?;
            if scale[0] != x[a] {
                return Err(KernelError::Shape(format!(
                    "{OP}: per-axis x_scale has {} values, axis {a} of x {x:?} has {}",
                    scale[0], x[a]
                )));
            }
            return Ok(Geometry {
                outer: numel(&x[..a]),
                dim: x[a],
                inner: numel(&x[a + 1..]),
                mode: Mode::Axis,
            });
        }
        if scale.len() != x.len() || x.is_empty() {
            return Err(KernelError::Shape(format!(
                "{OP}: blocked x_scale {scale:?} must have the rank of x {x:?}"
            )));
        }
        let a = normalize_axis(OP, "axis", self.axis, x.len())?;
        let bs = self.block_size;
        let blocks = x[a].div_ceil(bs);
        let ok = x
            .iter()
            .zip(scale)
            .enumerate()
            .all(|(i, (&d, &s))| if i == a { s == blocks } else { s == d });
        if !ok {
            return Err(KernelError::Shape(format!(
                "{OP}: blocked x_scale {scale:?} does not fit x {x:?} with axis {a} and block_size {bs} (axis {a} needs {blocks} blocks)"
            )));
        }
        Ok(Geometry {
            outer: numel(&x[..a]),
            dim: x[a],
            inner: numel(&x[a + 1..]),
            mode: Mode::Blocked {
                block_size: bs,
                blocks,
            },
        })
    }

    fn out_type(&self, scale: ElementType) -> Result<ElementType, KernelError> {
        if !matches!(
            scale,
            ElementType::F32 | ElementType::F16 | ElementType::BF16
        ) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: scale,
            });
        }
        if self.output_dtype != 0 && onnx_float_code(scale) != Some(self.output_dtype) {
            return Err(KernelError::Attribute {
                op: OP,
                name: "output_dtype",
                detail: format!(
                    "{} differs from the x_scale type {scale}: a conversion is not supported",
                    self.output_dtype
                ),
            });
        }
        Ok(scale)
    }
}

fn x_type_supported(t: ElementType) -> bool {
    use ElementType as E;
    matches!(t, E::I8 | E::U8 | E::I16 | E::U16 | E::I32)
}

/// `y = (x - z) * s` over one row with one scale.
#[inline]
fn row_const<Q: QElem, O: OutFloat>(x: &[Q], z: Q, s: f32, y: &mut [O]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = O::from_f32(x.diff(z) * s);
    }
}

/// `y = (x - z) * s` elementwise over one row.
#[inline]
fn row_blocked<Q: QElem, O: OutFloat>(x: &[Q], z: Option<&[Q]>, s: &[O], y: &mut [O]) {
    match z {
        Some(z) => {
            for (((y, &x), &z), &s) in y.iter_mut().zip(x).zip(z).zip(s) {
                *y = O::from_f32(x.diff(z) * s.to_f32());
            }
        }
        None => {
            for ((y, &x), &s) in y.iter_mut().zip(x).zip(s) {
                *y = O::from_f32(x.diff(Q::ZERO) * s.to_f32());
            }
        }
    }
}

fn run<Q: QElem, O: OutFloat>(
    g: Geometry,
    x: &[Q],
    scale: &[O],
    zp: Option<&[Q]>,
    y: &mut [O],
    par: &dyn ParallelFor,
) {
    let parallel = worth_parallel(par, y.len());
    if g.mode == Mode::Tensor {
        let (s, z) = (scale[0].to_f32(), zp.map_or(Q::ZERO, |z| z[0]));
        let chunk = if parallel { FLAT_CHUNK } else { y.len() };
        for_each_chunk_mut(par, y, chunk, &|off, out| {
            row_const(&x[off..off + out.len()], z, s, out);
        });
        return;
    }
    let rows = g.outer * g.dim;
    let inner = g.inner;
    let chunk = if parallel {
        rows_chunk(par, rows, inner)
    } else {
        y.len()
    };
    for_each_chunk_mut(par, y, chunk, &|off, out| {
        for (i, yr) in out.chunks_exact_mut(inner).enumerate() {
            let r = off / inner + i;
            let xr = &x[r * inner..][..inner];
            let (o, j) = (r / g.dim, r % g.dim);
            match g.mode {
                Mode::Axis => {
                    let z = zp.map_or(Q::ZERO, |z| z[j]);
                    row_const(xr, z, scale[j].to_f32(), yr);
                }
                Mode::Blocked { block_size, blocks } => {
                    let at = (o * blocks + j / block_size) * inner;
                    let zr = zp.map(|z| &z[at..at + inner]);
                    row_blocked(xr, zr, &scale[at..at + inner], yr);
                }
                Mode::Tensor => {
                    let z = zp.map_or(Q::ZERO, |z| z[0]);
                    row_const(xr, z, scale[0].to_f32(), yr);
                }
            }
        }
    });
}

impl DequantizeLinear {
    fn execute_typed<Q: QElem, O: OutFloat>(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x_t = input(OP, inputs, 0)?;
        let s_t = input(OP, inputs, 1)?;
        let z_t = inputs.get(2).copied().flatten();
        let g = self.geometry(x_t.shape(), s_t.shape(), z_t.map(|z| z.shape()))?;
        let x = typed::<Q>(OP, x_t)?;
        let scale = typed::<O>(OP, s_t)?;
        let zp = z_t.map(|z| typed::<Q>(OP, z)).transpose()?;
        let y = typed_mut::<O>(OP, output(OP, outputs, 0)?)?;
        check_len(OP, "y", y.len(), x.len())?;
        if !y.is_empty() {
            run(g, x, scale, zp, y, par);
        }
        Ok(())
    }

    fn execute_x<O: OutFloat>(
        &self,
        x: ElementType,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        match x {
            ElementType::I8 => self.execute_typed::<i8, O>(inputs, outputs, par),
            ElementType::U8 => self.execute_typed::<u8, O>(inputs, outputs, par),
            ElementType::I16 => self.execute_typed::<i16, O>(inputs, outputs, par),
            ElementType::U16 => self.execute_typed::<u16, O>(inputs, outputs, par),
            ElementType::I32 => self.execute_typed::<i32, O>(inputs, outputs, par),
            dtype => Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
    }
}

impl Operator for DequantizeLinear {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        if !(2..=3).contains(&inputs.len()) {
            return Err(KernelError::Shape(format!(
                "{OP}: expected 2 or 3 inputs, got {}",
                inputs.len()
            )));
        }
        let x = required(OP, inputs, 0)?;
        let scale = required(OP, inputs, 1)?;
        let zp = optional(inputs, 2);
        if !x_type_supported(x.dtype) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: x.dtype,
            });
        }
        if let Some(z) = zp
            && z.dtype != x.dtype
        {
            return Err(KernelError::Shape(format!(
                "{OP}: x_zero_point type {} differs from x type {}",
                z.dtype, x.dtype
            )));
        }
        let dtype = self.out_type(scale.dtype)?;
        self.geometry(x.shape, scale.shape, zp.map(|z| z.shape))?;
        Ok(vec![OutputInfo {
            dtype,
            shape: x.shape.to_vec(),
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input(OP, inputs, 0)?.dtype();
        match input(OP, inputs, 1)?.dtype() {
            ElementType::F32 => self.execute_x::<f32>(x, inputs, outputs, par),
            ElementType::F16 => self.execute_x::<f16>(x, inputs, outputs, par),
            ElementType::BF16 => self.execute_x::<bf16>(x, inputs, outputs, par),
            dtype => Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
    }
}
