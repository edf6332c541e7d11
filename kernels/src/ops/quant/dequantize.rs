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

use super::common::{Geometry, OutFloat, QElem, ScaleAt, onnx_float_code};
use crate::ops::basic::common::{
    Attrs, check_len, input, optional, output, required, typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const OP: &str = "DequantizeLinear";

/// DequantizeLinear.
#[derive(Debug)]
pub(crate) struct DequantizeLinear {
    axis: i64,
    /// 0: not blocked.
    block_size: usize,
    /// `output_dtype` (0 = the scale type).
    output_dtype: i64,
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
        Geometry::of(OP, self.axis, self.block_size, x, scale, zp)
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
    g.for_each_row(y, par, &|off, at, yr| {
        let xr = &x[off..off + yr.len()];
        match at {
            ScaleAt::One(j) => {
                let z = zp.map_or(Q::ZERO, |z| z[j]);
                row_const(xr, z, scale[j].to_f32(), yr);
            }
            ScaleAt::Row(at) => {
                let zr = zp.map(|z| &z[at..at + yr.len()]);
                row_blocked(xr, zr, &scale[at..at + yr.len()], yr);
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
