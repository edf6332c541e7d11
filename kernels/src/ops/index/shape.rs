//! Shape and Size (read only the input's shape: folded at lowering through
//! `fold_shapes`, with `infer`/`execute` for completeness) and Flatten (a
//! copy under a 2-D shape).

use super::common::check_storable;
use crate::ops::basic::common::{
    Attrs, check_inputs, copy_data, input, output, overflow, product, required, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Shape (opset 15+: `start`/`end`, negative from the end, clamped).
#[derive(Debug)]
pub(crate) struct Shape {
    start: i64,
    end: Option<i64>,
}

impl Shape {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let allowed: &[&'static str] = if spec.opset >= 15 {
            &["start", "end"]
        } else {
            &[]
        };
        let attrs = Attrs::new(spec, "Shape", allowed)?;
        Ok(Self {
            start: attrs.int_or("start", 0)?,
            end: attrs.int("end")?,
        })
    }

    /// The selected range of dimensions for a rank.
    fn range(&self, rank: usize) -> std::ops::Range<usize> {
        let r = rank as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let start = clamp(self.start);
        let end = clamp(self.end.unwrap_or(r));
        start..end.max(start)
    }

    fn dims(&self, shape: &[usize]) -> Vec<i64> {
        shape[self.range(shape.len())]
            .iter()
            .map(|&d| d as i64)
            .collect()
    }
}

impl Operator for Shape {
    fn name(&self) -> &'static str {
        "Shape"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Shape", inputs, 1, 1)?;
        let x = required("Shape", inputs, 0)?;
        Ok(vec![OutputInfo {
            dtype: ElementType::I64,
            shape: vec![self.range(x.shape.len()).len()],
        }])
    }

    fn fold_shapes(
        &self,
        inputs: &[Option<InputInfo<'_>>],
    ) -> Option<Result<Vec<Tensor>, KernelError>> {
        Some((|| {
            let inputs = check_inputs("Shape", inputs, 1, 1)?;
            let x = required("Shape", inputs, 0)?;
            let dims = self.dims(x.shape);
            Ok(vec![Tensor::from_i64(vec![dims.len()], dims)?])
        })())
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Shape", inputs, 0)?;
        let range = self.range(x.shape().len());
        let y = typed_mut::<i64>("Shape", output("Shape", outputs, 0)?)?;
        if y.len() != range.len() {
            return Err(KernelError::Invalid {
                op: "Shape",
                detail: format!(
                    "output holds {} values for {} dimensions",
                    y.len(),
                    range.len()
                ),
            });
        }
        for (o, &d) in y.iter_mut().zip(&x.shape()[range]) {
            *o = d as i64;
        }
        Ok(())
    }
}

/// Size: the element count as an i64 scalar.
#[derive(Debug)]
pub(crate) struct Size;

impl Size {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        Attrs::new(spec, "Size", &[])?;
        Ok(Self)
    }
}

fn size_of(shape: &[usize]) -> Result<i64, KernelError> {
    product(shape)
        .and_then(|n| i64::try_from(n).ok())
        .ok_or_else(|| overflow("Size", format!("the element count of {shape:?}")))
}

impl Operator for Size {
    fn name(&self) -> &'static str {
        "Size"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Size", inputs, 1, 1)?;
        let x = required("Size", inputs, 0)?;
        size_of(x.shape)?;
        Ok(vec![OutputInfo {
            dtype: ElementType::I64,
            shape: vec![],
        }])
    }

    fn fold_shapes(
        &self,
        inputs: &[Option<InputInfo<'_>>],
    ) -> Option<Result<Vec<Tensor>, KernelError>> {
        Some((|| {
            let inputs = check_inputs("Size", inputs, 1, 1)?;
            let x = required("Size", inputs, 0)?;
            Ok(vec![Tensor::from_i64(vec![], vec![size_of(x.shape)?])?])
        })())
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Size", inputs, 0)?;
        let y = typed_mut::<i64>("Size", output("Size", outputs, 0)?)?;
        match y {
            [o] => {
                *o = x.len() as i64;
                Ok(())
            }
            _ => Err(KernelError::Invalid {
                op: "Size",
                detail: format!("output holds {} values, expected 1", y.len()),
            }),
        }
    }
}

/// Flatten: `[prod(dims[..axis]), prod(dims[axis..])]`.
#[derive(Debug)]
pub(crate) struct Flatten {
    axis: i64,
}

impl Flatten {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "Flatten", &["axis"])?;
        Ok(Self {
            axis: attrs.int_or("axis", 1)?,
        })
    }
}

impl Operator for Flatten {
    fn name(&self) -> &'static str {
        "Flatten"
    }

    fn passes_elements_through(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Flatten", inputs, 1, 1)?;
        let x = required("Flatten", inputs, 0)?;
        check_storable("Flatten", x.dtype)?;
        let r = x.shape.len() as i64;
        if self.axis < -r || self.axis > r {
            return Err(KernelError::Shape(format!(
                "Flatten: axis {} is out of range for rank {r} (allowed [-{r}, {r}])",
                self.axis
            )));
        }
        let axis = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        } as usize;
        let too_big = || overflow("Flatten", format!("the element count of {:?}", x.shape));
        let outer = product(&x.shape[..axis]).ok_or_else(too_big)?;
        let inner = product(&x.shape[axis..]).ok_or_else(too_big)?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: vec![outer, inner],
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Flatten", inputs, 0)?;
        let y = output("Flatten", outputs, 0)?;
        copy_data("Flatten", x, y, par)
    }
}
