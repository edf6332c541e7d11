//! Max and Min (variadic, NumPy broadcasting), Mod (`fmod` 0 and 1) and
//! Clip (bounds as attributes before opset 11, optional inputs after).

use super::num::{Num, is_num};
use crate::ops::basic::broadcast::{Plan, broadcast_shape};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_len, input, optional, output, required, typed, typed_mut,
};
use crate::par::{PARALLEL_MIN_ELEMENTS, rows_chunk};
use crate::vector::{self, Width};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Max or Min of one or more tensors.
#[derive(Debug)]
pub(crate) struct Extremum {
    max: bool,
}

impl Extremum {
    pub(crate) fn new(spec: &NodeSpec<'_>, max: bool) -> Result<Self, KernelError> {
        let op = if max { "Max" } else { "Min" };
        let allowed: &[&'static str] = if spec.opset < 6 {
            &["consumed_inputs"]
        } else {
            &[]
        };
        Attrs::new(spec, op, allowed)?;
        Ok(Self { max })
    }

    fn op(&self) -> &'static str {
        if self.max { "Max" } else { "Min" }
    }
}

/// The broadcast shape of every tensor in `shapes`.
fn broadcast_all<'a>(
    op: &str,
    mut shapes: impl Iterator<Item = &'a [usize]>,
) -> Result<Vec<usize>, KernelError> {
    let mut out = shapes.next().map(<[usize]>::to_vec).unwrap_or_default();
    for s in shapes {
        out = broadcast_shape(op, &out, s)?;
    }
    Ok(out)
}

fn extremum_typed<T: Num>(
    op: &'static str,
    max: bool,
    inputs: &[&Tensor],
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let f = if max { T::max_nan } else { T::min_nan };
    let out_shape = out.shape().to_vec();
    let y = typed_mut::<T>(op, out)?;
    let rest = if inputs.len() >= 2
        && broadcast_shape(op, inputs[0].shape(), inputs[1].shape())? == out_shape
    {
        let plan = Plan::new(op, inputs[0].shape(), inputs[1].shape())?;
        let (a, b) = (typed::<T>(op, inputs[0])?, typed::<T>(op, inputs[1])?);
        plan.run_par(op, a, b, y, par, f)?;
        &inputs[2..]
    } else {
        // The first input, broadcast to the output shape.
        let plan = Plan::new(op, &out_shape, inputs[0].shape())?;
        plan.run_in_place(op, y, typed::<T>(op, inputs[0])?, |_, v| v)?;
        &inputs[1..]
    };
    for t in rest {
        let plan = Plan::new(op, &out_shape, t.shape())?;
        plan.run_in_place(op, y, typed::<T>(op, t)?, f)?;
    }
    Ok(())
}

impl Operator for Extremum {
    fn name(&self) -> &'static str {
        self.op()
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let op = self.op();
        let inputs = check_inputs(op, inputs, 1, usize::MAX)?;
        let infos = (0..inputs.len())
            .map(|i| required(op, inputs, i))
            .collect::<Result<Vec<_>, _>>()?;
        let dtype = infos[0].dtype;
        if let Some(other) = infos.iter().find(|i| i.dtype != dtype) {
            return Err(KernelError::Shape(format!(
                "{op}: operand types differ ({dtype} and {})",
                other.dtype
            )));
        }
        if !is_num(dtype) {
            return Err(KernelError::UnsupportedType { op, dtype });
        }
        let shape = broadcast_all(op, infos.iter().map(|i| i.shape))?;
        for i in &infos {
            Plan::new(op, &shape, i.shape)?;
        }
        Ok(vec![OutputInfo { dtype, shape }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.op();
        if inputs.is_empty() {
            return Err(KernelError::Invalid {
                op,
                detail: "no inputs".into(),
            });
        }
        // At most a handful of operands: a small fixed array, no allocation.
        if inputs.len() > 8 {
            return self.execute_many(inputs, outputs, par);
        }
        let mut refs = [input(op, inputs, 0)?; 8];
        for (i, r) in refs.iter_mut().enumerate().take(inputs.len()).skip(1) {
            *r = input(op, inputs, i)?;
        }
        let out = output(op, outputs, 0)?;
        self.run(&refs[..inputs.len()], out, par)
    }
}

impl Extremum {
    fn execute_many(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.op();
        let refs = (0..inputs.len())
            .map(|i| input(op, inputs, i))
            .collect::<Result<Vec<_>, _>>()?;
        let out = output(op, outputs, 0)?;
        self.run(&refs, out, par)
    }

    fn run(
        &self,
        inputs: &[&Tensor],
        out: &mut Tensor,
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let op = self.op();
        let dtype = inputs[0].dtype();
        dispatch_num!(dtype, T => extremum_typed::<T>(op, self.max, inputs, out, par),
            else Err(KernelError::UnsupportedType { op, dtype }))
    }
}

/// Mod: integer or float remainder with `fmod` = 0 (the sign of the
/// divisor, like Python's `%`) or 1 (the sign of the dividend, like C's
/// `fmod`). An integer remainder by zero is 0.
#[derive(Debug)]
pub(crate) struct Mod {
    fmod: bool,
}

impl Mod {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "Mod", &["fmod"])?;
        let fmod = match attrs.int_or("fmod", 0)? {
            0 => false,
            1 => true,
            v => return Err(attrs.error("fmod", format!("must be 0 or 1, got {v}"))),
        };
        Ok(Self { fmod })
    }
}

/// The remainder of a numeric type.
trait Rem: Num {
    /// Truncated remainder (`fmod`).
    fn fmod(a: Self, b: Self) -> Self;
    /// Floored remainder (sign of the divisor).
    fn floor_mod(a: Self, b: Self) -> Self;
}

macro_rules! impl_rem_signed {
    ($($t:ty),*) => {$(
        impl Rem for $t {
            #[inline(always)]
            fn fmod(a: Self, b: Self) -> Self {
                if b == 0 { 0 } else { a.wrapping_rem(b) }
            }
            #[inline(always)]
            fn floor_mod(a: Self, b: Self) -> Self {
                let r = Self::fmod(a, b);
                if r != 0 && ((r < 0) != (b < 0)) { r.wrapping_add(b) } else { r }
            }
        }
    )*};
}

macro_rules! impl_rem_unsigned {
    ($($t:ty),*) => {$(
        impl Rem for $t {
            #[inline(always)]
            fn fmod(a: Self, b: Self) -> Self {
                a.checked_rem(b).unwrap_or(0)
            }
            #[inline(always)]
            fn floor_mod(a: Self, b: Self) -> Self {
                Self::fmod(a, b)
            }
        }
    )*};
}

impl_rem_signed!(i8, i16, i32, i64);
impl_rem_unsigned!(u8, u16, u32, u64);

/// NumPy's float `mod`: the remainder with the sign of the divisor (a zero
/// remainder takes the divisor's sign too).
#[inline(always)]
fn float_floor_mod(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r != 0.0 {
        if (b < 0.0) != (r < 0.0) { r + b } else { r }
    } else {
        0.0f64.copysign(b)
    }
}

macro_rules! impl_rem_float {
    ($($t:ident),*) => {$(
        impl Rem for $t {
            #[inline(always)]
            fn fmod(a: Self, b: Self) -> Self { a % b }
            #[inline(always)]
            fn floor_mod(a: Self, b: Self) -> Self {
                let r = a % b;
                if r != 0.0 {
                    if (b < 0.0) != (r < 0.0) { r + b } else { r }
                } else {
                    (0.0 as $t).copysign(b)
                }
            }
        }
    )*};
}

impl_rem_float!(f32, f64);

macro_rules! impl_rem_half {
    ($($t:ident),*) => {$(
        impl Rem for half::$t {
            #[inline(always)]
            fn fmod(a: Self, b: Self) -> Self {
                Self::from_f32(a.to_f32() % b.to_f32())
            }
            #[inline(always)]
            fn floor_mod(a: Self, b: Self) -> Self {
                Self::from_f64(float_floor_mod(a.to_f64(), b.to_f64()))
            }
        }
    )*};
}

impl_rem_half!(f16, bf16);

fn mod_typed<T: Rem>(
    fmod: bool,
    plan: &Plan,
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let (a, b, out) = (
        typed::<T>("Mod", a)?,
        typed::<T>("Mod", b)?,
        typed_mut::<T>("Mod", out)?,
    );
    if fmod {
        plan.run_par("Mod", a, b, out, par, T::fmod)
    } else {
        plan.run_par("Mod", a, b, out, par, T::floor_mod)
    }
}

impl Operator for Mod {
    fn name(&self) -> &'static str {
        "Mod"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Mod", inputs, 2, 2)?;
        let (a, b) = (required("Mod", inputs, 0)?, required("Mod", inputs, 1)?);
        if a.dtype != b.dtype {
            return Err(KernelError::Shape(format!(
                "Mod: operand types differ ({} and {})",
                a.dtype, b.dtype
            )));
        }
        if !is_num(a.dtype) {
            return Err(KernelError::UnsupportedType {
                op: "Mod",
                dtype: a.dtype,
            });
        }
        let shape = broadcast_shape("Mod", a.shape, b.shape)?;
        Plan::new("Mod", a.shape, b.shape)?;
        Ok(vec![OutputInfo {
            dtype: a.dtype,
            shape,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        use ElementType as E;
        let (a, b) = (input("Mod", inputs, 0)?, input("Mod", inputs, 1)?);
        let out = output("Mod", outputs, 0)?;
        let plan = Plan::new("Mod", a.shape(), b.shape())?;
        let f = self.fmod;
        match a.dtype() {
            E::F32 => mod_typed::<f32>(f, &plan, a, b, out, par),
            E::F64 => mod_typed::<f64>(f, &plan, a, b, out, par),
            E::F16 => mod_typed::<half::f16>(f, &plan, a, b, out, par),
            E::BF16 => mod_typed::<half::bf16>(f, &plan, a, b, out, par),
            E::I8 => mod_typed::<i8>(f, &plan, a, b, out, par),
            E::I16 => mod_typed::<i16>(f, &plan, a, b, out, par),
            E::I32 => mod_typed::<i32>(f, &plan, a, b, out, par),
            E::I64 => mod_typed::<i64>(f, &plan, a, b, out, par),
            E::U8 => mod_typed::<u8>(f, &plan, a, b, out, par),
            E::U16 => mod_typed::<u16>(f, &plan, a, b, out, par),
            E::U32 => mod_typed::<u32>(f, &plan, a, b, out, par),
            E::U64 => mod_typed::<u64>(f, &plan, a, b, out, par),
            dtype => Err(KernelError::UnsupportedType { op: "Mod", dtype }),
        }
    }
}

/// Clip: `min(max(x, lo), hi)` (so `hi` wins when `lo > hi`, as the spec
/// says); NaN inputs stay NaN.
#[derive(Debug)]
pub(crate) struct Clip {
    /// Bounds from the attributes (opset < 11).
    attr_bounds: Option<(f32, f32)>,
}

impl Clip {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        if spec.opset < 11 {
            let allowed: &[&'static str] = if spec.opset < 6 {
                &["min", "max", "consumed_inputs"]
            } else {
                &["min", "max"]
            };
            let attrs = Attrs::new(spec, "Clip", allowed)?;
            let lo = attrs.float("min")?.unwrap_or(f32::NEG_INFINITY);
            let hi = attrs.float("max")?.unwrap_or(f32::INFINITY);
            return Ok(Self {
                attr_bounds: Some((lo, hi)),
            });
        }
        Attrs::new(spec, "Clip", &[])?;
        Ok(Self { attr_bounds: None })
    }
}

/// The scalar bound at input `i`, if given.
fn bound<T: Num>(inputs: &[Option<&Tensor>], i: usize) -> Result<Option<T>, KernelError> {
    match inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(t) => {
            let v = typed::<T>("Clip", t)?;
            match v {
                [v] => Ok(Some(*v)),
                _ => Err(KernelError::Invalid {
                    op: "Clip",
                    detail: format!("input {i} must be a scalar, got shape {:?}", t.shape()),
                }),
            }
        }
    }
}

fn clip_typed<T: Num>(
    attr_bounds: Option<(f32, f32)>,
    inputs: &[Option<&Tensor>],
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let x = typed::<T>("Clip", input("Clip", inputs, 0)?)?;
    let (lo, hi) = match attr_bounds {
        Some((lo, hi)) => (T::from_f64(lo as f64), T::from_f64(hi as f64)),
        None => (
            bound::<T>(inputs, 1)?.unwrap_or(T::LOWEST),
            bound::<T>(inputs, 2)?.unwrap_or(T::HIGHEST),
        ),
    };
    let y = typed_mut::<T>("Clip", out)?;
    check_len("Clip", "output", y.len(), x.len())?;
    let chunk = if y.len() < PARALLEL_MIN_ELEMENTS {
        y.len()
    } else {
        rows_chunk(par, y.len(), 1).max(4096)
    };
    let width = Width::detect();
    for_each_chunk_mut(par, y, chunk, &|offset, out| {
        vector::run(
            width,
            #[inline(always)]
            || {
                for (o, &v) in out.iter_mut().zip(&x[offset..]) {
                    // NaN stays NaN: both comparisons are false.
                    let v = if v < lo { lo } else { v };
                    *o = if v > hi { hi } else { v };
                }
            },
        )
    });
    Ok(())
}

impl Operator for Clip {
    fn name(&self) -> &'static str {
        "Clip"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let max = if self.attr_bounds.is_some() { 1 } else { 3 };
        let inputs = check_inputs("Clip", inputs, 1, max)?;
        let x = required("Clip", inputs, 0)?;
        if !is_num(x.dtype) {
            return Err(KernelError::UnsupportedType {
                op: "Clip",
                dtype: x.dtype,
            });
        }
        for i in 1..inputs.len() {
            if let Some(b) = optional(inputs, i) {
                if b.dtype != x.dtype {
                    return Err(KernelError::Shape(format!(
                        "Clip: bound {i} is {} where the input is {}",
                        b.dtype, x.dtype
                    )));
                }
                if crate::element_count(b.shape) != Some(1) {
                    return Err(KernelError::Shape(format!(
                        "Clip: bound {i} must be a scalar, got shape {:?}",
                        b.shape
                    )));
                }
            }
        }
        Ok(vec![OutputInfo {
            dtype: x.dtype,
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
        let x = input("Clip", inputs, 0)?;
        let out = output("Clip", outputs, 0)?;
        let b = self.attr_bounds;
        dispatch_num!(x.dtype(), T => clip_typed::<T>(b, inputs, out, par),
            else Err(KernelError::UnsupportedType { op: "Clip", dtype: x.dtype() }))
    }
}
