//! Unique (opset 11): the distinct elements of `X` (or distinct slices
//! along `axis`), sorted ascending or in order of first occurrence, with
//! the position of each one's first occurrence, the inverse map and the
//! counts. The count of distinct items is the output length, so shape
//! inference needs `X`'s value ([`KernelError::ValueDependent`] without
//! it); `infer` and `execute` share one grouping routine ([`groups`]).
//!
//! Order (as numpy's `np.unique`): numbers ascending, -0.0 equal to 0.0
//! (the item keeps the value of its first occurrence), every NaN equal to
//! every other NaN and above all numbers; slices compare
//! lexicographically in storage order of the other axes.

use std::cmp::Ordering;

use super::{check_outputs, counted};
use crate::ops::basic::common::{
    Attrs, check_inputs, check_len, input, normalize_axis, numel, optional, required, typed,
    typed_mut,
};
use crate::ops::normalize::common::flag;
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor,
};

const OP: &str = "Unique";

/// Unique.
#[derive(Debug)]
pub(crate) struct Unique {
    sorted: bool,
    axis: Option<i64>,
    /// Outputs the node names (Y, then indices, inverse_indices, counts).
    outputs: usize,
}

impl Unique {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, OP, &["axis", "sorted"])?;
        check_outputs(OP, spec, 1, 4)?;
        Ok(Self {
            sorted: flag(&attrs, "sorted", true)?,
            axis: attrs.int("axis")?,
            outputs: spec.outputs,
        })
    }

    /// `[outer, n, inner]` around the axis (`[1, elements, 1]` without
    /// one) and the axis.
    fn layout(&self, shape: &[usize]) -> Result<([usize; 3], Option<usize>), KernelError> {
        Ok(match self.axis {
            None => ([1, numel(shape), 1], None),
            Some(a) => {
                let a = normalize_axis(OP, "axis", a, shape.len())?;
                (
                    [numel(&shape[..a]), shape[a], numel(&shape[a + 1..])],
                    Some(a),
                )
            }
        })
    }
}

/// Whether `dtype` is one Unique compares (every type with a compute
/// representation).
fn supported(dtype: ElementType) -> bool {
    !matches!(dtype, ElementType::I4 | ElementType::U4)
}

/// The element order: `partial_cmp`, with NaN equal to NaN and above every
/// number (a total order on every element type).
#[inline]
#[allow(clippy::eq_op)] // `a != a`: NaN
fn order<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    a.partial_cmp(b).unwrap_or_else(|| match (a != a, b != b) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        _ => Ordering::Less,
    })
}

/// The distinct items, in output order.
#[derive(Debug, Default)]
struct Groups {
    /// Position (along the axis) of each item's first occurrence.
    first: Vec<usize>,
    /// Occurrences of each item.
    counts: Vec<usize>,
    /// For every position, the index of its item.
    inverse: Vec<usize>,
}

/// A vector of `n` values from `f`, refusing an allocation the system
/// does not grant.
fn try_collect(n: usize, f: impl FnMut(usize) -> usize) -> Result<Vec<usize>, KernelError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| KernelError::Allocation {
            op: OP,
            bytes: n.saturating_mul(size_of::<usize>()),
        })?;
    v.extend((0..n).map(f));
    Ok(v)
}

/// Groups the `n` items of `x` laid out `[outer, n, inner]` (item `j` is
/// `x[o, j, i]` for every `o`, `i`): a stable sort of the positions, equal
/// neighbours merged (so each group's first member is its first
/// occurrence), then, unless `sorted`, the groups put in order of first
/// occurrence. The one routine `infer` counts and `execute` writes.
fn groups<T: PartialOrd>(
    x: &[T],
    [outer, n, inner]: [usize; 3],
    sorted: bool,
) -> Result<Groups, KernelError> {
    // Empty items are all equal (and never indexed: outer or inner is 0).
    let empty = outer == 0 || inner == 0;
    let scalar = outer == 1 && inner == 1;
    let cmp = |&a: &usize, &b: &usize| -> Ordering {
        if empty {
            return Ordering::Equal;
        }
        if scalar {
            return order(&x[a], &x[b]);
        }
        for o in 0..outer {
            let row = &x[o * n * inner..][..n * inner];
            let (ra, rb) = (&row[a * inner..][..inner], &row[b * inner..][..inner]);
            for (va, vb) in ra.iter().zip(rb) {
                match order(va, vb) {
                    Ordering::Equal => {}
                    other => return other,
                }
            }
        }
        Ordering::Equal
    };
    let mut perm = try_collect(n, |j| j)?;
    perm.sort_by(cmp);
    let mut inverse = try_collect(n, |_| 0)?;
    let mut g = Groups::default();
    for (k, &j) in perm.iter().enumerate() {
        if k == 0 || cmp(&perm[k - 1], &j) != Ordering::Equal {
            g.first.push(j);
            g.counts.push(0);
        }
        let last = g.counts.len() - 1;
        g.counts[last] += 1;
        inverse[j] = last;
    }
    if !sorted {
        // Groups by first occurrence; `rank[old]` is each one's new index.
        let mut by_first = try_collect(g.first.len(), |i| i)?;
        by_first.sort_unstable_by_key(|&i| g.first[i]);
        let mut rank = try_collect(by_first.len(), |_| 0)?;
        for (new, &old) in by_first.iter().enumerate() {
            rank[old] = new;
        }
        g.first = by_first.iter().map(|&i| g.first[i]).collect();
        g.counts = by_first.iter().map(|&i| g.counts[i]).collect();
        for v in &mut inverse {
            *v = rank[*v];
        }
    }
    g.inverse = inverse;
    Ok(g)
}

/// [`groups`] of a tensor of any supported type.
fn groups_of(x: &Tensor, layout: [usize; 3], sorted: bool) -> Result<Groups, KernelError> {
    dispatch_any!(x.dtype(), T => groups(typed::<T>(OP, x)?, layout, sorted),
        else Err(KernelError::UnsupportedType { op: OP, dtype: x.dtype() }))
}

/// Writes `values` as int64 into output `i`, when the node has it.
fn write_ints(
    outputs: &mut [Tensor],
    i: usize,
    what: &str,
    values: &[usize],
) -> Result<(), KernelError> {
    let Some(out) = outputs.get_mut(i) else {
        return Ok(());
    };
    let ys = typed_mut::<i64>(OP, out)?;
    check_len(OP, what, ys.len(), values.len())?;
    for (y, &v) in ys.iter_mut().zip(values) {
        *y = v as i64;
    }
    Ok(())
}

impl Operator for Unique {
    fn name(&self) -> &'static str {
        OP
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs(OP, inputs, 1, 1)?;
        let x = required(OP, inputs, 0)?;
        if !supported(x.dtype) {
            return Err(KernelError::UnsupportedType {
                op: OP,
                dtype: x.dtype,
            });
        }
        let (layout, axis) = self.layout(x.shape)?;
        let u = groups_of(counted(OP, x)?, layout, self.sorted)?.first.len();
        let y = match axis {
            None => vec![u],
            Some(a) => {
                let mut s = x.shape.to_vec();
                s[a] = u;
                s
            }
        };
        let ints = |shape: Vec<usize>| OutputInfo {
            dtype: ElementType::I64,
            shape,
        };
        let mut outs = vec![
            OutputInfo {
                dtype: x.dtype,
                shape: y,
            },
            ints(vec![u]),
            ints(vec![layout[1]]),
            ints(vec![u]),
        ];
        outs.truncate(self.outputs);
        Ok(outs)
    }

    fn scratch_bytes(&self, inputs: &[Option<InputInfo<'_>>]) -> usize {
        // The permutation, the inverse map and the groups.
        optional(inputs, 0).map_or(0, |x| {
            let n = self.layout(x.shape).map_or(0, |(l, _)| l[1]);
            n.saturating_mul(4 * size_of::<usize>())
        })
    }

    fn execute(
        &self,
        inputs: &[Option<&Tensor>],
        _packed: Option<&PackedWeight>,
        outputs: &mut [Tensor],
        _par: &dyn ParallelFor,
    ) -> Result<(), KernelError> {
        let x = input(OP, inputs, 0)?;
        let (layout @ [outer, n, inner], _) = self.layout(x.shape())?;
        let g = groups_of(x, layout, self.sorted)?;
        let u = g.first.len();
        let Some(y) = outputs.first_mut() else {
            return Err(KernelError::Invalid {
                op: OP,
                detail: "output Y is missing".into(),
            });
        };
        check_len(OP, "Y", y.len(), numel(&[outer, u, inner]))?;
        if !y.is_empty() {
            dispatch_any!(x.dtype(), T => {
                let (xs, ys) = (typed::<T>(OP, x)?, typed_mut::<T>(OP, y)?);
                let mut blocks = ys.chunks_exact_mut(inner);
                for row in xs.chunks_exact(n * inner) {
                    for &j in &g.first {
                        if let Some(b) = blocks.next() {
                            b.copy_from_slice(&row[j * inner..][..inner]);
                        }
                    }
                }
                Ok(())
            }, else Err(KernelError::UnsupportedType { op: OP, dtype: x.dtype() }))?;
        }
        write_ints(outputs, 1, "indices", &g.first)?;
        write_ints(outputs, 2, "inverse_indices", &g.inverse)?;
        write_ints(outputs, 3, "counts", &g.counts)?;
        Ok(())
    }
}
