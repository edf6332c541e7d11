//! Constant: the value is decoded from the attribute at construction (cold
//! path); `infer` reports its type and shape and `execute` copies it.

use super::common::{Attrs, check_inputs, copy_data, output};
use crate::{
    InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor, Tensor,
};

/// Constant.
#[derive(Debug)]
pub(crate) struct Constant {
    value: Tensor,
}

impl Constant {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = match spec.opset {
            ..9 => &["value"],
            9..12 => &["value", "sparse_value"],
            _ => &[
                "value",
                "sparse_value",
                "value_float",
                "value_floats",
                "value_int",
                "value_ints",
                "value_string",
                "value_strings",
            ],
        };
        let attrs = Attrs::new(spec, "Constant", allowed)?;
        let present: Vec<&'static str> = allowed.iter().copied().filter(|n| attrs.has(n)).collect();
        let name = match present.as_slice() {
            [one] => *one,
            [] => {
                return Err(attrs.error(
                    "value",
                    "exactly one value attribute is required, none given",
                ));
            }
            [first, ..] => {
                return Err(attrs.error(
                    first,
                    format!("exactly one value attribute is allowed, got {present:?}"),
                ));
            }
        };
        let value = match name {
            "value" => attrs
                .tensor("value")?
                .ok_or_else(|| attrs.error("value", "missing"))?,
            "value_float" => {
                let v = attrs
                    .float("value_float")?
                    .ok_or_else(|| attrs.error("value_float", "missing"))?;
                Tensor::from_f32(vec![], vec![v])?
            }
            "value_floats" => {
                let v = attrs
                    .floats("value_floats")?
                    .ok_or_else(|| attrs.error("value_floats", "missing"))?;
                Tensor::from_f32(vec![v.len()], v)?
            }
            "value_int" => {
                let v = attrs
                    .int("value_int")?
                    .ok_or_else(|| attrs.error("value_int", "missing"))?;
                Tensor::from_i64(vec![], vec![v])?
            }
            "value_ints" => {
                let v = attrs
                    .ints("value_ints")?
                    .ok_or_else(|| attrs.error("value_ints", "missing"))?;
                Tensor::from_i64(vec![v.len()], v)?
            }
            "sparse_value" => {
                return Err(attrs.error("sparse_value", "sparse tensors are not supported"));
            }
            "value_string" => {
                return Err(attrs.error("value_string", "string tensors are not supported"));
            }
            _ => return Err(attrs.error("value_strings", "string tensors are not supported")),
        };
        Ok(Self { value })
    }
}

impl Operator for Constant {
    fn name(&self) -> &'static str {
        "Constant"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        check_inputs("Constant", inputs, 0, 0)?;
        Ok(vec![OutputInfo {
            dtype: self.value.dtype(),
            shape: self.value.shape().to_vec(),
        }])
    }

    fn execute(
        &self,
        _inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let y = output("Constant", outputs, 0)?;
        copy_data("Constant", &self.value, y, par)
    }
}
