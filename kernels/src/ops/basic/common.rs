//! Shared pieces of the basic operators: attribute parsing (cold path),
//! input checks (cold path) and typed tensor access (hot path).

use crate::par::{for_len, rows_chunk};
use crate::{
    Attributes, DataMut, DataRef, ElementType, InputInfo, KernelError, NodeSpec, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// The highest rank the strided kernels (broadcasting, Transpose, Slice)
/// handle; they keep strides in fixed arrays of this length so `execute`
/// does not allocate. Shapes are collapsed first (size-1 dimensions dropped,
/// mergeable neighbours merged), so only genuinely high-rank layouts fail,
/// with [`KernelError::Shape`].
pub(crate) const MAX_RANK: usize = 8;

/// A Rust element type that has a [`TensorData`] variant.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    /// The element type.
    const DTYPE: ElementType;
    /// The elements, if `data` holds this type.
    fn slice(data: DataRef<'_>) -> Option<&[Self]>;
    /// The elements, mutable, if `data` holds this type.
    fn slice_mut(data: DataMut<'_>) -> Option<&mut [Self]>;
}

macro_rules! impl_elem {
    ($($t:ty => $v:ident;)*) => {
        $(
            impl Elem for $t {
                const DTYPE: ElementType = ElementType::$v;
                #[inline]
                fn slice(data: DataRef<'_>) -> Option<&[Self]> {
                    match data {
                        DataRef::$v(v) => Some(v),
                        _ => None,
                    }
                }
                #[inline]
                fn slice_mut(data: DataMut<'_>) -> Option<&mut [Self]> {
                    match data {
                        DataMut::$v(v) => Some(v),
                        _ => None,
                    }
                }
            }
        )*
    };
}

impl_elem! {
    f32 => F32;
    f64 => F64;
    half::f16 => F16;
    half::bf16 => BF16;
    i8 => I8;
    i16 => I16;
    i32 => I32;
    i64 => I64;
    u8 => U8;
    u16 => U16;
    u32 => U32;
    u64 => U64;
    bool => Bool;
}

/// The elements of input `t` as `T` (execute-time check).
#[inline]
pub(crate) fn typed<'a, T: Elem>(op: &'static str, t: &'a Tensor) -> Result<&'a [T], KernelError> {
    T::slice(t.data()).ok_or_else(|| KernelError::Invalid {
        op,
        detail: format!("input holds {} where {} was inferred", t.dtype(), T::DTYPE),
    })
}

/// The elements of output `t` as `T` (execute-time check).
#[inline]
pub(crate) fn typed_mut<'a, T: Elem>(
    op: &'static str,
    t: &'a mut Tensor,
) -> Result<&'a mut [T], KernelError> {
    let dtype = t.dtype();
    T::slice_mut(t.view_mut()).ok_or_else(|| KernelError::Invalid {
        op,
        detail: format!("output holds {dtype} where {} was inferred", T::DTYPE),
    })
}

/// Input `i` at execute time.
#[inline]
pub(crate) fn input<'a>(
    op: &'static str,
    inputs: &[Option<&'a Tensor>],
    i: usize,
) -> Result<&'a Tensor, KernelError> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| KernelError::Invalid {
            op,
            detail: format!("input {i} is missing"),
        })
}

/// Output `i` at execute time.
#[inline]
pub(crate) fn output<'a>(
    op: &'static str,
    outputs: &'a mut [Tensor],
    i: usize,
) -> Result<&'a mut Tensor, KernelError> {
    let n = outputs.len();
    outputs.get_mut(i).ok_or_else(|| KernelError::Invalid {
        op,
        detail: format!("output {i} is missing ({n} given)"),
    })
}

/// Checks an output's element count against what the inputs imply.
#[inline]
pub(crate) fn check_len(
    op: &'static str,
    what: &str,
    got: usize,
    want: usize,
) -> Result<(), KernelError> {
    if got == want {
        Ok(())
    } else {
        Err(KernelError::Invalid {
            op,
            detail: format!("{what} holds {got} elements where {want} were expected"),
        })
    }
}

/// Copies `src` into `dst` (same element type and length), for the
/// operators that only change the shape; large copies split across `par`.
pub(crate) fn copy_data(
    op: &'static str,
    src: &Tensor,
    dst: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    check_len(op, "output", dst.len(), src.len())?;
    dispatch_any!(src.dtype(), T => {
        let s = typed::<T>(op, src)?;
        let d = typed_mut::<T>(op, dst)?;
        let par = for_len(par, d.len());
        if par.threads() <= 1 {
            d.copy_from_slice(s);
        } else {
            let chunk = rows_chunk(par, d.len(), 1);
            for_each_chunk_mut(par, d, chunk, &|offset, part: &mut [T]| {
                part.copy_from_slice(&s[offset..offset + part.len()]);
            });
        }
        Ok(())
    }, else Err(KernelError::UnsupportedType { op, dtype: src.dtype() }))
}

/// Checks the number of inputs given to `infer` and returns them.
pub(crate) fn check_inputs<'a, 'b>(
    op: &'static str,
    inputs: &'a [Option<InputInfo<'b>>],
    min: usize,
    max: usize,
) -> Result<&'a [Option<InputInfo<'b>>], KernelError> {
    if inputs.len() < min || inputs.len() > max {
        let want = if min == max {
            format!("{min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(KernelError::Shape(format!(
            "{op}: expected {want} inputs, got {}",
            inputs.len()
        )));
    }
    Ok(inputs)
}

/// A required input at infer time.
pub(crate) fn required<'b>(
    op: &'static str,
    inputs: &[Option<InputInfo<'b>>],
    i: usize,
) -> Result<InputInfo<'b>, KernelError> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| KernelError::Shape(format!("{op}: input {i} is required")))
}

/// An optional input at infer time (`None` when absent or omitted).
pub(crate) fn optional<'b>(inputs: &[Option<InputInfo<'b>>], i: usize) -> Option<InputInfo<'b>> {
    inputs.get(i).copied().flatten()
}

/// The value of a shape-deciding input as i64 values, or `NeedsConstant`.
pub(crate) fn constant_ints(
    op: &'static str,
    info: InputInfo<'_>,
    i: usize,
) -> Result<Vec<i64>, KernelError> {
    let value = info
        .value
        .ok_or(KernelError::NeedsConstant { op, input: i })?;
    if value.shape().len() > 1 {
        return Err(KernelError::Shape(format!(
            "{op}: input {i} must be a 1-D tensor, got shape {:?}",
            value.shape()
        )));
    }
    value
        .to_i64_vec()
        .ok_or_else(|| KernelError::UnsupportedType {
            op,
            dtype: value.dtype(),
        })
}

/// Normalizes an axis in `[-rank, rank)` (or `[-rank-1, rank]` style ranges
/// by passing the bound as `rank`).
pub(crate) fn normalize_axis(
    op: &'static str,
    what: &str,
    axis: i64,
    rank: usize,
) -> Result<usize, KernelError> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(KernelError::Shape(format!(
            "{op}: {what} {axis} is out of range for rank {rank}"
        )));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// Checks that a rank fits the fixed stride arrays.
pub(crate) fn check_rank(op: &'static str, rank: usize) -> Result<(), KernelError> {
    if rank > MAX_RANK {
        return Err(KernelError::Shape(format!(
            "{op}: rank {rank} exceeds the supported maximum of {MAX_RANK}"
        )));
    }
    Ok(())
}

/// Product of dimensions (`None` on overflow).
pub(crate) fn product(dims: &[usize]) -> Option<usize> {
    crate::element_count(dims)
}

/// [`KernelError::Overflow`]: `what`, computed from the model's numbers,
/// does not fit in `usize`.
pub(crate) fn overflow(op: &'static str, what: impl Into<String>) -> KernelError {
    KernelError::Overflow {
        op,
        what: what.into(),
    }
}

/// The element count of `dims`, or [`KernelError::Overflow`] naming them.
pub(crate) fn checked_count(op: &'static str, dims: &[usize]) -> Result<usize, KernelError> {
    product(dims).ok_or_else(|| overflow(op, format!("the element count of {dims:?}")))
}

/// Product of dimensions of (part of) a valid tensor's shape: 0 when any is
/// 0, saturating at `usize::MAX` otherwise. A valid empty tensor may have a
/// run of dims whose product overflows (`[0, 2^40, 2^40]`); such a run is
/// never multiplied into an index, because the tensor has no elements.
#[inline]
pub(crate) fn numel(dims: &[usize]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .unwrap_or(usize::MAX)
}

/// Integer values read from a constant tensor at execute time without
/// copying (i32 or i64), or from an attribute.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ints<'a> {
    /// i32 values.
    I32(&'a [i32]),
    /// i64 values.
    I64(&'a [i64]),
}

impl<'a> Ints<'a> {
    /// A view of an integer tensor's elements.
    pub(crate) fn of(op: &'static str, t: &'a Tensor) -> Result<Self, KernelError> {
        match t.data() {
            DataRef::I32(v) => Ok(Self::I32(v)),
            DataRef::I64(v) => Ok(Self::I64(v)),
            _ => Err(KernelError::UnsupportedType {
                op,
                dtype: t.dtype(),
            }),
        }
    }

    /// Number of values.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::I32(v) => v.len(),
            Self::I64(v) => v.len(),
        }
    }

    /// Value `i` (caller checks `i < len`).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> i64 {
        match self {
            Self::I32(v) => v[i] as i64,
            Self::I64(v) => v[i],
        }
    }
}

/// Attribute access for the operators: unknown names are rejected; the
/// typed reads go through [`Attributes`], which refuses a present attribute
/// of the wrong type rather than returning a silent default.
pub(crate) struct Attrs<'a> {
    op: &'static str,
    attrs: &'a dyn Attributes,
    names: Vec<String>,
}

impl std::fmt::Debug for Attrs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attrs")
            .field("op", &self.op)
            .field("names", &self.names)
            .finish()
    }
}

impl<'a> Attrs<'a> {
    /// Reads the node's attribute names; any name outside `allowed` is an
    /// error.
    pub(crate) fn new(
        spec: &NodeSpec<'a>,
        op: &'static str,
        allowed: &[&'static str],
    ) -> Result<Self, KernelError> {
        let names = spec.attributes.names();
        for n in &names {
            if !allowed.contains(&n.as_str()) {
                return Err(KernelError::Attribute {
                    op,
                    name: "(unknown)",
                    detail: format!(
                        "`{n}` is not a supported attribute of {op} at opset {} (supported: {allowed:?})",
                        spec.opset
                    ),
                });
            }
        }
        // `consumed_inputs` (opset < 6) was an in-place hint no operator
        // reads; its declared type (INTS) is still checked.
        if names.iter().any(|n| n == "consumed_inputs") {
            spec.attributes.ints("consumed_inputs")?;
        }
        Ok(Self {
            op,
            attrs: spec.attributes,
            names,
        })
    }

    /// Whether the attribute is present.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// An attribute error for `name`.
    pub(crate) fn error(&self, name: &'static str, detail: impl Into<String>) -> KernelError {
        KernelError::Attribute {
            op: self.op,
            name,
            detail: detail.into(),
        }
    }

    /// An `INT` attribute (a present attribute of another type is an
    /// error of the reader, [`Attributes`]).
    pub(crate) fn int(&self, name: &'static str) -> Result<Option<i64>, KernelError> {
        self.attrs.int(name)
    }

    /// An `INT` attribute with a default.
    pub(crate) fn int_or(&self, name: &'static str, default: i64) -> Result<i64, KernelError> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    /// A `FLOAT` attribute.
    pub(crate) fn float(&self, name: &'static str) -> Result<Option<f32>, KernelError> {
        self.attrs.float(name)
    }

    /// An `INTS` attribute.
    pub(crate) fn ints(&self, name: &'static str) -> Result<Option<Vec<i64>>, KernelError> {
        self.attrs.ints(name)
    }

    /// A `FLOATS` attribute.
    pub(crate) fn floats(&self, name: &'static str) -> Result<Option<Vec<f32>>, KernelError> {
        self.attrs.floats(name)
    }

    /// A `STRING` attribute.
    pub(crate) fn string(&self, name: &'static str) -> Result<Option<String>, KernelError> {
        self.attrs.string(name)
    }

    /// A `TENSOR` attribute, decoded.
    pub(crate) fn tensor(&self, name: &'static str) -> Result<Option<Tensor>, KernelError> {
        self.attrs.tensor(name)
    }

    /// `stash_type` of the normalization operators: only 1 (float) is
    /// supported.
    pub(crate) fn stash_type(&self) -> Result<(), KernelError> {
        match self.int("stash_type")? {
            None | Some(1) => Ok(()),
            Some(v) => Err(self.error(
                "stash_type",
                format!("{v} is not supported (only 1 = float)"),
            )),
        }
    }
}
