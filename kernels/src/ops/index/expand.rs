//! Broadcasting copies: Expand (one operand), Where (three) and Tile
//! (repetition). Hot path: whole rows of the collapsed last dimension are
//! copied or filled, split across threads for large outputs.

use super::common::{Walk, by_rows, check_storable, strides};
use crate::ops::basic::broadcast::broadcast_shape;
use crate::ops::basic::common::{
    Attrs, Elem, MAX_RANK, check_inputs, check_len, check_rank, checked_count, constant_ints,
    input, output, overflow, product, required, typed, typed_mut,
};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

/// Reads a 1-D integer input of non-negative dimension values.
fn dims_value(op: &'static str, info: InputInfo<'_>, i: usize) -> Result<Vec<usize>, KernelError> {
    if info.dtype != ElementType::I64 {
        return Err(KernelError::UnsupportedType {
            op,
            dtype: info.dtype,
        });
    }
    let v = constant_ints(op, info, i)?;
    v.iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| KernelError::Shape(format!("{op}: negative value {d} in {v:?}")))
        })
        .collect()
}

/// Expand: bidirectional broadcast of the input to the `shape` operand.
#[derive(Debug)]
pub(crate) struct Expand;

impl Expand {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        Attrs::new(spec, "Expand", &[])?;
        Ok(Self)
    }
}

fn expand<T: Elem>(x: &Tensor, out: &mut Tensor, par: &dyn ParallelFor) -> Result<(), KernelError> {
    let walk = Walk::<1>::new("Expand", out.shape(), [x.shape()])?;
    let src = typed::<T>("Expand", x)?;
    let dst = typed_mut::<T>("Expand", out)?;
    check_len(
        "Expand",
        "input",
        src.len(),
        product(x.shape()).unwrap_or(0),
    )?;
    let inner = walk.inner();
    let contiguous = walk.inner_stride(0) == 1;
    by_rows(par, dst, inner, &|first, rows| {
        let count = rows.len() / inner;
        let mut chunks = rows.chunks_exact_mut(inner);
        walk.rows(first, count, |_, [o]| {
            if let Some(row) = chunks.next() {
                if contiguous {
                    row.copy_from_slice(&src[o..o + inner]);
                } else {
                    row.fill(src[o]);
                }
            }
        });
    });
    Ok(())
}

impl Operator for Expand {
    fn name(&self) -> &'static str {
        "Expand"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Expand", inputs, 2, 2)?;
        let x = required("Expand", inputs, 0)?;
        check_storable("Expand", x.dtype)?;
        let shape = dims_value("Expand", required("Expand", inputs, 1)?, 1)?;
        let out = broadcast_shape("Expand", x.shape, &shape)?;
        checked_count("Expand", &out)?;
        Walk::<1>::new("Expand", &out, [x.shape])?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: out,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Expand", inputs, 0)?;
        let out = output("Expand", outputs, 0)?;
        if out.is_empty() {
            return Ok(());
        }
        dispatch_any!(x.dtype(), T => expand::<T>(x, out, par),
            else Err(KernelError::UnsupportedType { op: "Expand", dtype: x.dtype() }))
    }
}

/// Where: `condition ? x : y` with three-way broadcasting, any data type.
#[derive(Debug)]
pub(crate) struct Where;

impl Where {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        Attrs::new(spec, "Where", &[])?;
        Ok(Self)
    }
}

fn select<T: Elem>(
    c: &Tensor,
    x: &Tensor,
    y: &Tensor,
    out: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let walk = Walk::<3>::new("Where", out.shape(), [c.shape(), x.shape(), y.shape()])?;
    let cv = typed::<bool>("Where", c)?;
    let xv = typed::<T>("Where", x)?;
    let yv = typed::<T>("Where", y)?;
    let dst = typed_mut::<T>("Where", out)?;
    let inner = walk.inner();
    let (sc, sx, sy) = (
        walk.inner_stride(0),
        walk.inner_stride(1),
        walk.inner_stride(2),
    );
    by_rows(par, dst, inner, &|first, rows| {
        let count = rows.len() / inner;
        let mut chunks = rows.chunks_exact_mut(inner);
        walk.rows(first, count, |_, [oc, ox, oy]| {
            let Some(row) = chunks.next() else { return };
            if sc == 1 && sx == 1 && sy == 1 {
                let (cs, xs, ys) = (
                    &cv[oc..oc + inner],
                    &xv[ox..ox + inner],
                    &yv[oy..oy + inner],
                );
                for (((o, &c), &a), &b) in row.iter_mut().zip(cs).zip(xs).zip(ys) {
                    *o = if c { a } else { b };
                }
            } else {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = if cv[oc + j * sc] {
                        xv[ox + j * sx]
                    } else {
                        yv[oy + j * sy]
                    };
                }
            }
        });
    });
    Ok(())
}

impl Operator for Where {
    fn name(&self) -> &'static str {
        "Where"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Where", inputs, 3, 3)?;
        let c = required("Where", inputs, 0)?;
        let x = required("Where", inputs, 1)?;
        let y = required("Where", inputs, 2)?;
        if c.dtype != ElementType::Bool {
            return Err(KernelError::UnsupportedType {
                op: "Where",
                dtype: c.dtype,
            });
        }
        check_storable("Where", x.dtype)?;
        if x.dtype != y.dtype {
            return Err(KernelError::Shape(format!(
                "Where: X is {} but Y is {}",
                x.dtype, y.dtype
            )));
        }
        let xy = broadcast_shape("Where", x.shape, y.shape)?;
        let out = broadcast_shape("Where", c.shape, &xy)?;
        checked_count("Where", &out)?;
        Walk::<3>::new("Where", &out, [c.shape, x.shape, y.shape])?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: out,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let c = input("Where", inputs, 0)?;
        let x = input("Where", inputs, 1)?;
        let y = input("Where", inputs, 2)?;
        let out = output("Where", outputs, 0)?;
        if out.is_empty() {
            return Ok(());
        }
        dispatch_any!(x.dtype(), T => select::<T>(c, x, y, out, par),
            else Err(KernelError::UnsupportedType { op: "Where", dtype: x.dtype() }))
    }
}

/// Tile: the input repeated `repeats[d]` times along each axis.
#[derive(Debug)]
pub(crate) struct Tile;

impl Tile {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        Attrs::new(spec, "Tile", &[])?;
        Ok(Self)
    }
}

fn tile<T: Elem>(x: &Tensor, out: &mut Tensor, par: &dyn ParallelFor) -> Result<(), KernelError> {
    let xs = x.shape();
    let rank = xs.len();
    check_rank("Tile", rank)?;
    let os: [usize; MAX_RANK] = {
        let mut a = [1usize; MAX_RANK];
        if out.shape().len() != rank {
            return Err(KernelError::Invalid {
                op: "Tile",
                detail: format!("output rank {} for input rank {rank}", out.shape().len()),
            });
        }
        a[..rank].copy_from_slice(out.shape());
        a
    };
    let src = typed::<T>("Tile", x)?;
    let dst = typed_mut::<T>("Tile", out)?;
    if rank == 0 {
        dst.copy_from_slice(src);
        return Ok(());
    }
    if src.is_empty() {
        return Ok(());
    }
    if (0..rank).any(|d| !os[d].is_multiple_of(xs[d])) {
        return Err(KernelError::Invalid {
            op: "Tile",
            detail: format!("output {:?} is not a tiling of {xs:?}", &os[..rank]),
        });
    }
    let in_st = strides(xs);
    let last = rank - 1;
    let row_in = xs[last];
    let inner = os[last];
    by_rows(par, dst, inner, &|first, rows| {
        // Odometer over the outer output dimensions from `first`.
        let mut idx = [0usize; MAX_RANK];
        let mut rest = first;
        for d in (0..last).rev() {
            idx[d] = rest % os[d];
            rest /= os[d];
        }
        for row in rows.chunks_exact_mut(inner) {
            let base: usize = (0..last).map(|d| (idx[d] % xs[d]) * in_st[d]).sum();
            let s = &src[base..base + row_in];
            for piece in row.chunks_exact_mut(row_in) {
                piece.copy_from_slice(s);
            }
            let mut d = last;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                if idx[d] < os[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    });
    Ok(())
}

impl Operator for Tile {
    fn name(&self) -> &'static str {
        "Tile"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Tile", inputs, 2, 2)?;
        let x = required("Tile", inputs, 0)?;
        check_storable("Tile", x.dtype)?;
        check_rank("Tile", x.shape.len())?;
        let reps = dims_value("Tile", required("Tile", inputs, 1)?, 1)?;
        if reps.len() != x.shape.len() {
            return Err(KernelError::Shape(format!(
                "Tile: {} repeats for input rank {} ({:?})",
                reps.len(),
                x.shape.len(),
                x.shape
            )));
        }
        let out = x
            .shape
            .iter()
            .zip(&reps)
            .map(|(&d, &r)| d.checked_mul(r))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| overflow("Tile", format!("{:?} tiled {reps:?}", x.shape)))?;
        checked_count("Tile", &out)?;
        Ok(vec![OutputInfo {
            dtype: x.dtype,
            shape: out,
        }])
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input("Tile", inputs, 0)?;
        let out = output("Tile", outputs, 0)?;
        if out.is_empty() {
            return Ok(());
        }
        dispatch_any!(x.dtype(), T => tile::<T>(x, out, par),
            else Err(KernelError::UnsupportedType { op: "Tile", dtype: x.dtype() }))
    }
}
