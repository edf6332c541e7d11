//! Operators whose output shape is an input's value: ConstantOfShape (a
//! fill) and Range (an arithmetic progression). Both need the
//! shape-deciding inputs as constants at inference.

use half::{bf16, f16};

use super::common::check_index_type;
use crate::ops::basic::common::{
    Attrs, Elem, check_inputs, checked_count, constant_ints, input, output, overflow, required,
    typed, typed_mut,
};
use crate::{
    DataMut, DataRef, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight,
    ParallelFor, Tensor,
};

/// ConstantOfShape: a tensor of the input's shape filled with `value`
/// (default f32 0).
#[derive(Debug)]
pub(crate) struct ConstantOfShape {
    value: Tensor,
}

impl ConstantOfShape {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "ConstantOfShape", &["value"])?;
        let value = match attrs.tensor("value")? {
            Some(t) => {
                if t.len() != 1 {
                    return Err(attrs.error(
                        "value",
                        format!("must hold exactly one element, got shape {:?}", t.shape()),
                    ));
                }
                t
            }
            None => Tensor::from_f32(vec![1], vec![0.0])?,
        };
        Ok(Self { value })
    }
}

fn fill<T: Elem>(value: &Tensor, out: &mut Tensor) -> Result<(), KernelError> {
    let v = typed::<T>("ConstantOfShape", value)?[0];
    typed_mut::<T>("ConstantOfShape", out)?.fill(v);
    Ok(())
}

impl Operator for ConstantOfShape {
    fn name(&self) -> &'static str {
        "ConstantOfShape"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("ConstantOfShape", inputs, 1, 1)?;
        let shape = required("ConstantOfShape", inputs, 0)?;
        check_index_type("ConstantOfShape", shape.dtype)?;
        let dims = constant_ints("ConstantOfShape", shape, 0)?;
        let mut out = Vec::with_capacity(dims.len());
        for &d in &dims {
            if d < 0 {
                return Err(KernelError::Shape(format!(
                    "ConstantOfShape: negative dimension in shape {dims:?}"
                )));
            }
            out.push(usize::try_from(d).map_err(|_| {
                KernelError::Shape(format!("ConstantOfShape: dimension {d} is too large"))
            })?);
        }
        checked_count("ConstantOfShape", &out)?;
        Ok(vec![OutputInfo {
            dtype: self.value.dtype(),
            shape: out,
        }])
    }

    fn execute(
        &self,
        _inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let out = output("ConstantOfShape", outputs, 0)?;
        let dtype = self.value.dtype();
        dispatch_any!(dtype, T => fill::<T>(&self.value, out),
            else Err(KernelError::UnsupportedType { op: "ConstantOfShape", dtype }))
    }
}

/// Range: `start + i * delta` for `i` in `0..max(ceil((limit - start) / delta), 0)`.
#[derive(Debug)]
pub(crate) struct Range;

impl Range {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        Attrs::new(spec, "Range", &[])?;
        Ok(Self)
    }
}

/// A scalar operand of Range, integer or float.
#[derive(Debug, Clone, Copy)]
enum Scalar {
    Int(i64),
    Float(f64),
}

fn scalar(t: &Tensor, i: usize) -> Result<Scalar, KernelError> {
    if t.len() != 1 {
        return Err(KernelError::Shape(format!(
            "Range: input {i} must be a scalar, got shape {:?}",
            t.shape()
        )));
    }
    Ok(match t.data() {
        DataRef::I64(v) => Scalar::Int(v[0]),
        DataRef::I32(v) => Scalar::Int(v[0] as i64),
        DataRef::I16(v) => Scalar::Int(v[0] as i64),
        DataRef::I8(v) => Scalar::Int(v[0] as i64),
        DataRef::F32(v) => Scalar::Float(v[0] as f64),
        DataRef::F64(v) => Scalar::Float(v[0]),
        DataRef::F16(v) => Scalar::Float(v[0].to_f64()),
        DataRef::BF16(v) => Scalar::Float(v[0].to_f64()),
        _ => {
            return Err(KernelError::UnsupportedType {
                op: "Range",
                dtype: t.dtype(),
            });
        }
    })
}

/// The element count of the progression.
fn count(start: Scalar, limit: Scalar, delta: Scalar) -> Result<usize, KernelError> {
    let n = match (start, limit, delta) {
        (Scalar::Int(s), Scalar::Int(l), Scalar::Int(d)) => {
            if d == 0 {
                return Err(KernelError::Invalid {
                    op: "Range",
                    detail: "delta is 0".into(),
                });
            }
            let (diff, d) = (l as i128 - s as i128, d as i128);
            // ceil(diff / d) with the sign of d.
            let q = diff / d;
            let q = if diff % d != 0 && ((diff < 0) == (d < 0)) {
                q + 1
            } else {
                q
            };
            q.max(0) as f64
        }
        (Scalar::Float(s), Scalar::Float(l), Scalar::Float(d)) => {
            if d == 0.0 || !d.is_finite() || !s.is_finite() || !l.is_finite() {
                return Err(KernelError::Invalid {
                    op: "Range",
                    detail: format!("start {s}, limit {l}, delta {d} give no finite range"),
                });
            }
            ((l - s) / d).ceil().max(0.0)
        }
        _ => {
            return Err(KernelError::Shape(
                "Range: start, limit and delta must have the same type".into(),
            ));
        }
    };
    if n > (1u64 << 48) as f64 {
        return Err(overflow(
            "Range",
            format!("the element count {n} (over the 2^48 ceiling)"),
        ));
    }
    Ok(n as usize)
}

impl Operator for Range {
    fn name(&self) -> &'static str {
        "Range"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Range", inputs, 3, 3)?;
        let mut vals = [Scalar::Int(0); 3];
        let dtype = required("Range", inputs, 0)?.dtype;
        for (i, v) in vals.iter_mut().enumerate() {
            let info = required("Range", inputs, i)?;
            if info.dtype != dtype {
                return Err(KernelError::Shape(format!(
                    "Range: input {i} is {} where input 0 is {dtype}",
                    info.dtype
                )));
            }
            let t = info.value.ok_or(KernelError::NeedsConstant {
                op: "Range",
                input: i,
            })?;
            *v = scalar(t, i)?;
        }
        let n = count(vals[0], vals[1], vals[2])?;
        Ok(vec![OutputInfo {
            dtype,
            shape: vec![n],
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let s = scalar(input("Range", inputs, 0)?, 0)?;
        let l = scalar(input("Range", inputs, 1)?, 1)?;
        let d = scalar(input("Range", inputs, 2)?, 2)?;
        let n = count(s, l, d)?;
        let out = output("Range", outputs, 0)?;
        if out.len() != n {
            return Err(KernelError::Invalid {
                op: "Range",
                detail: format!("output holds {} elements, the range has {n}", out.len()),
            });
        }
        let out_dtype = out.dtype();
        match (s, d) {
            (Scalar::Int(s), Scalar::Int(d)) => {
                let at = |i: usize| s.wrapping_add((i as i64).wrapping_mul(d));
                match out.view_mut() {
                    DataMut::I64(v) => v.iter_mut().enumerate().for_each(|(i, o)| *o = at(i)),
                    DataMut::I32(v) => v
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, o)| *o = at(i) as i32),
                    DataMut::I16(v) => v
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, o)| *o = at(i) as i16),
                    DataMut::I8(v) => v.iter_mut().enumerate().for_each(|(i, o)| *o = at(i) as i8),
                    _ => {
                        return Err(KernelError::UnsupportedType {
                            op: "Range",
                            dtype: out_dtype,
                        });
                    }
                }
            }
            (Scalar::Float(s), Scalar::Float(d)) => {
                let at = |i: usize| s + i as f64 * d;
                match out.view_mut() {
                    DataMut::F32(v) => v
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, o)| *o = at(i) as f32),
                    DataMut::F64(v) => v.iter_mut().enumerate().for_each(|(i, o)| *o = at(i)),
                    DataMut::F16(v) => v
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, o)| *o = f16::from_f64(at(i))),
                    DataMut::BF16(v) => v
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, o)| *o = bf16::from_f64(at(i))),
                    _ => {
                        return Err(KernelError::UnsupportedType {
                            op: "Range",
                            dtype: out_dtype,
                        });
                    }
                }
            }
            _ => {
                return Err(KernelError::Shape(
                    "Range: start and delta must have the same type".into(),
                ));
            }
        }
        Ok(())
    }
}
