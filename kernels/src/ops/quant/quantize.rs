//! QuantizeLinear (opsets 10, 13, 19, 21, 23, and `com.microsoft`) and
//! DynamicQuantizeLinear (opset 11).
//!
//! QuantizeLinear: `y = saturate(round_half_even(x / y_scale) +
//! y_zero_point)`, per tensor, per axis or blocked (the geometry of
//! DequantizeLinear), to uint8, int8, uint16 or int16 (the zero point's
//! type, else `output_dtype`, else uint8), computed in f32 as ONNX Runtime
//! does (a division, not a multiplication by the reciprocal).
//!
//! DynamicQuantizeLinear: the range of `x` widened to include 0 gives
//! `scale = (max - min) / 255` (1 when the range is empty) and `zero_point
//! = round_half_even(clamp(-min / scale, 0, 255))`; `y` is then quantized
//! as above.

use half::{bf16, f16};

use super::common::{Geometry, OutFloat, QInt, ScaleAt, quantize_value, worth_parallel};
use crate::ops::basic::common::{
    Attrs, check_len, input, optional, output, required, typed, typed_mut,
};
use crate::par::for_each_chunk_mut;
use crate::vector::{self, Width};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const OP: &str = "QuantizeLinear";
const DYN: &str = "DynamicQuantizeLinear";

/// QuantizeLinear.
#[derive(Debug)]
pub(crate) struct QuantizeLinear {
    axis: i64,
    /// 0: not blocked.
    block_size: usize,
    /// The output type when there is no zero point.
    default_out: ElementType,
}

fn q_type_supported(t: ElementType) -> bool {
    matches!(
        t,
        ElementType::U8 | ElementType::I8 | ElementType::U16 | ElementType::I16
    )
}

impl QuantizeLinear {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = match (spec.domain, spec.opset) {
            ("com.microsoft", _) | (_, ..=18) => &["axis"],
            (_, 19..=20) => &["axis", "saturate"],
            (_, 21..=22) => &["axis", "saturate", "block_size", "output_dtype"],
            _ => &[
                "axis",
                "saturate",
                "block_size",
                "output_dtype",
                "precision",
            ],
        };
        let attrs = Attrs::new(spec, OP, allowed)?;
        if !(2..=3).contains(&spec.inputs) || spec.outputs != 1 {
            return Err(KernelError::Shape(format!(
                "{OP}: takes 2 or 3 inputs and 1 output, got {} and {}",
                spec.inputs, spec.outputs
            )));
        }
        let block_size = attrs.int_or("block_size", 0)?;
        let block_size = usize::try_from(block_size)
            .map_err(|_| attrs.error("block_size", format!("must be >= 0, got {block_size}")))?;
        // `saturate` only matters for float8 outputs, which are refused.
        let default_out = match attrs.int_or("output_dtype", 0)? {
            0 | 2 => ElementType::U8,
            3 => ElementType::I8,
            4 => ElementType::U16,
            5 => ElementType::I16,
            v => {
                return Err(attrs.error(
                    "output_dtype",
                    format!("{v} is not supported (uint8, int8, uint16 or int16 only)"),
                ));
            }
        };
        if let Some(p) = attrs.int("precision")?
            && p != 0
            && p != 1
        {
            return Err(attrs.error("precision", format!("{p} is not supported (float only)")));
        }
        Ok(Self {
            axis: attrs.int_or("axis", 1)?,
            block_size,
            default_out,
        })
    }

    fn execute_typed<X: OutFloat, Q: QInt>(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x_t = input(OP, inputs, 0)?;
        let s_t = input(OP, inputs, 1)?;
        let z_t = inputs.get(2).copied().flatten();
        let g = Geometry::of(
            OP,
            self.axis,
            self.block_size,
            x_t.shape(),
            s_t.shape(),
            z_t.map(|z| z.shape()),
        )?;
        let x = typed::<X>(OP, x_t)?;
        let scale = float_values(s_t)?;
        let zp = z_t.map(|z| typed::<Q>(OP, z)).transpose()?;
        let y = typed_mut::<Q>(OP, output(OP, outputs, 0)?)?;
        check_len(OP, "y", y.len(), x.len())?;
        // Compiled for the widest vectors (the same operations lane by
        // lane): a 224x224 RGB image, 40 -> 9 us.
        let width = Width::detect();
        g.for_each_row(y, par, &|off, at, yr| {
            let xr = &x[off..off + yr.len()];
            match at {
                ScaleAt::One(j) => {
                    let z = zp.map_or(0, |z| z[j].to_i32());
                    let s = scale.get(j);
                    vector::run(
                        width,
                        #[inline(always)]
                        || {
                            for (y, &x) in yr.iter_mut().zip(xr) {
                                *y = quantize_value(x.to_f32() / s, z);
                            }
                        },
                    );
                }
                ScaleAt::Row(at) => {
                    for (i, (y, &x)) in yr.iter_mut().zip(xr).enumerate() {
                        let z = zp.map_or(0, |z| z[at + i].to_i32());
                        *y = quantize_value(x.to_f32() / scale.get(at + i), z);
                    }
                }
            }
        });
        Ok(())
    }

    fn execute_x<X: OutFloat>(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        match output(OP, outputs, 0)?.dtype() {
            ElementType::U8 => self.execute_typed::<X, u8>(inputs, outputs, par),
            ElementType::I8 => self.execute_typed::<X, i8>(inputs, outputs, par),
            ElementType::U16 => self.execute_typed::<X, u16>(inputs, outputs, par),
            ElementType::I16 => self.execute_typed::<X, i16>(inputs, outputs, par),
            dtype => Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
    }
}

/// Scales of any float type, read as f32.
enum Floats<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    Bf16(&'a [bf16]),
}

impl Floats<'_> {
    #[inline(always)]
    fn get(&self, i: usize) -> f32 {
        match self {
            Self::F32(v) => v[i],
            Self::F16(v) => v[i].to_f32(),
            Self::Bf16(v) => v[i].to_f32(),
        }
    }
}

fn float_values(t: &Tensor) -> Result<Floats<'_>, KernelError> {
    Ok(match t.dtype() {
        ElementType::F32 => Floats::F32(typed(OP, t)?),
        ElementType::F16 => Floats::F16(typed(OP, t)?),
        ElementType::BF16 => Floats::Bf16(typed(OP, t)?),
        dtype => return Err(KernelError::UnsupportedType { op: OP, dtype }),
    })
}

/// An i32 input quantizes through f32 as ONNX Runtime does.
impl OutFloat for i32 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as i32
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
}

impl Operator for QuantizeLinear {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let x = required(OP, inputs, 0)?;
        let scale = required(OP, inputs, 1)?;
        let zp = optional(inputs, 2);
        if !matches!(
            x.dtype,
            ElementType::F32 | ElementType::F16 | ElementType::BF16 | ElementType::I32
        ) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: x.dtype,
            });
        }
        if !matches!(
            scale.dtype,
            ElementType::F32 | ElementType::F16 | ElementType::BF16
        ) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: scale.dtype,
            });
        }
        let dtype = zp.map_or(self.default_out, |z| z.dtype);
        if !q_type_supported(dtype) {
            return Err(KernelError::UnsupportedType { op: OP, dtype });
        }
        Geometry::of(
            OP,
            self.axis,
            self.block_size,
            x.shape,
            scale.shape,
            zp.map(|z| z.shape),
        )?;
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
        match input(OP, inputs, 0)?.dtype() {
            ElementType::F32 => self.execute_x::<f32>(inputs, outputs, par),
            ElementType::F16 => self.execute_x::<f16>(inputs, outputs, par),
            ElementType::BF16 => self.execute_x::<bf16>(inputs, outputs, par),
            ElementType::I32 => self.execute_x::<i32>(inputs, outputs, par),
            dtype => Err(KernelError::UnsupportedType { op: OP, dtype }),
        }
    }
}

/// DynamicQuantizeLinear.
#[derive(Debug)]
pub(crate) struct DynamicQuantizeLinear;

impl DynamicQuantizeLinear {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        Attrs::new(spec, DYN, &[])?;
        if spec.inputs != 1 || spec.outputs != 3 {
            return Err(KernelError::Shape(format!(
                "{DYN}: takes 1 input and 3 outputs, got {} and {}",
                spec.inputs, spec.outputs
            )));
        }
        Ok(Self)
    }
}

/// ONNX Runtime's uint8 quantization parameters for values in `[min, max]`
/// (widened to include 0): `(scale, zero_point)`.
pub(crate) fn dynamic_params(min: f32, max: f32) -> (f32, u8) {
    let (min, max) = (min.min(0.0), max.max(0.0));
    let scale = if max == min { 1.0 } else { (max - min) / 255.0 };
    let zp = (0.0 - min / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zp as u8)
}

/// The smallest and largest non-NaN value of `x` (0 for none), split
/// across `par` for a large `x`.
pub(crate) fn min_max(x: &[f32], par: &dyn ParallelFor) -> (f32, f32) {
    // Compiled for the widest vectors (the order of a NaN-ignoring min or
    // max does not change its value).
    let width = Width::detect();
    let fold = |x: &[f32]| {
        vector::run(
            width,
            #[inline(always)]
            || {
                x.iter()
                    .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                        (lo.min(v), hi.max(v))
                    })
            },
        )
    };
    let (lo, hi) = if worth_parallel(par, x.len()) {
        let parts = par.threads() * 2;
        let mut found = vec![(f32::INFINITY, f32::NEG_INFINITY); parts];
        for_each_chunk_mut(par, &mut found, 1, &|i, slot| {
            slot[0] = fold(&x[crate::par::chunk(x.len(), parts, 64, i)]);
        });
        found
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &(l, h)| {
                (lo.min(l), hi.max(h))
            })
    } else {
        fold(x)
    };
    if lo > hi { (0.0, 0.0) } else { (lo, hi) }
}

/// `y = quantize(x)` with one scale and zero point, split across `par`.
pub(crate) fn quantize_u8(x: &[f32], scale: f32, zp: u8, y: &mut [u8], par: &dyn ParallelFor) {
    let chunk = if worth_parallel(par, y.len()) {
        16 * 1024
    } else {
        y.len().max(1)
    };
    let width = Width::detect();
    for_each_chunk_mut(par, y, chunk, &|off, out| {
        vector::run(
            width,
            #[inline(always)]
            || {
                for (y, &x) in out.iter_mut().zip(&x[off..]) {
                    *y = quantize_value(x / scale, zp as i32);
                }
            },
        )
    });
}

impl Operator for DynamicQuantizeLinear {
    fn name(&self) -> &'static str {
        DYN
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let x = required(DYN, inputs, 0)?;
        if x.dtype != ElementType::F32 {
            return Err(KernelError::UnsupportedType {
                op: DYN,
                dtype: x.dtype,
            });
        }
        Ok(vec![
            OutputInfo {
                dtype: ElementType::U8,
                shape: x.shape.to_vec(),
            },
            OutputInfo {
                dtype: ElementType::F32,
                shape: vec![],
            },
            OutputInfo {
                dtype: ElementType::U8,
                shape: vec![],
            },
        ])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = typed::<f32>(DYN, input(DYN, inputs, 0)?)?;
        let (lo, hi) = min_max(x, par);
        let (scale, zp) = dynamic_params(lo, hi);
        {
            let y = typed_mut::<u8>(DYN, output(DYN, outputs, 0)?)?;
            check_len(DYN, "y", y.len(), x.len())?;
            quantize_u8(x, scale, zp, y, par);
        }
        typed_mut::<f32>(DYN, output(DYN, outputs, 1)?)?[0] = scale;
        typed_mut::<u8>(DYN, output(DYN, outputs, 2)?)?[0] = zp;
        Ok(())
    }
}
