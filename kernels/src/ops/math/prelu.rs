//! PRelu: `x < 0 ? x·slope : x`, the slope broadcast unidirectionally to
//! X's shape through the shared broadcasting plan (hot path: one type
//! dispatch, then the plan's contiguous row kernels).

use super::num::{Num, is_num};
use crate::ops::basic::broadcast::{Plan, unidirectional};
use crate::ops::basic::common::{Attrs, check_inputs, input, output, required, typed, typed_mut};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
};

const OP: &str = "PRelu";

/// PRelu.
#[derive(Debug)]
pub(crate) struct PRelu;

impl PRelu {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = if spec.opset < 6 {
            &["consumed_inputs"]
        } else {
            &[]
        };
        Attrs::new(spec, OP, allowed)?;
        Ok(Self)
    }
}

/// Checks that `slope` broadcasts to `x` without changing X's shape.
fn check_slope(x: &[usize], slope: &[usize]) -> Result<(), KernelError> {
    if unidirectional(slope, x) {
        Ok(())
    } else {
        Err(KernelError::Shape(format!(
            "{OP}: slope shape {slope:?} does not broadcast unidirectionally to X shape {x:?} \
             (each slope dimension, aligned from the right, must equal X's or be 1)"
        )))
    }
}

fn prelu<T: Num + Send + Sync>(
    plan: &Plan,
    x: &Tensor,
    slope: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let (xs, ss, ys) = (
        typed::<T>(OP, x)?,
        typed::<T>(OP, slope)?,
        typed_mut::<T>(OP, y)?,
    );
    plan.run_par(
        OP,
        xs,
        ss,
        ys,
        par,
        |v: T, s: T| {
            if v < T::ZERO { v.mul(s) } else { v }
        },
    )
}

impl Operator for PRelu {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 2, 2)?;
        let (x, slope) = (required(OP, inputs, 0)?, required(OP, inputs, 1)?);
        if x.dtype != slope.dtype {
            return Err(KernelError::Shape(format!(
                "{OP}: slope type {} differs from X type {}",
                slope.dtype, x.dtype
            )));
        }
        if !is_num(x.dtype) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: x.dtype,
            });
        }
        check_slope(x.shape, slope.shape)?;
        Plan::new(OP, x.shape, slope.shape)?;
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
        let (x, slope) = (input(OP, inputs, 0)?, input(OP, inputs, 1)?);
        check_slope(x.shape(), slope.shape())?;
        let plan = Plan::new(OP, x.shape(), slope.shape())?;
        let y = output(OP, outputs, 0)?;
        dispatch_num!(x.dtype(), T => prelu::<T>(&plan, x, slope, y, par),
            else Err(KernelError::UnsupportedType { op: OP, dtype: x.dtype() }))
    }
}
