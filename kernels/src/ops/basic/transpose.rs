//! Transpose (hot path). The permutation is first collapsed: size-1 axes are
//! dropped and axes that stay adjacent and in order are merged, so the
//! attention layouts become either contiguous runs (`[1,T,8,64]` ->
//! `[1,8,T,64]` copies 64-element runs) or a batch of 2-D transposes
//! (`[1,8,T,64]` -> `[1,8,64,T]`, done in cache blocks). Large outputs are
//! split across the caller's threads by output rows (or by 2-D blocks).

use super::common::{
    Attrs, Elem, MAX_RANK, check_inputs, check_len, check_rank, input, output, required, typed,
    typed_mut,
};
use crate::par::{for_len, rows_chunk};
use crate::{
    ElementType, InputInfo, KernelError, NodeSpec, Operator, OutputInfo, PackedWeight, ParallelFor,
    Tensor, for_each_chunk_mut,
};

/// Transpose.
#[derive(Debug)]
pub(crate) struct Transpose {
    /// `None`: reverse the axes.
    perm: Option<Vec<usize>>,
}

impl Transpose {
    pub(crate) fn new(spec: &NodeSpec<'_>) -> Result<Self, KernelError> {
        let attrs = Attrs::new(spec, "Transpose", &["perm"])?;
        let perm = match attrs.ints("perm")? {
            None => None,
            Some(p) => {
                let mut seen = vec![false; p.len()];
                let mut out = Vec::with_capacity(p.len());
                for &v in &p {
                    let ok = v >= 0 && (v as usize) < p.len() && !seen[v as usize];
                    if !ok {
                        return Err(attrs.error("perm", format!("{p:?} is not a permutation")));
                    }
                    seen[v as usize] = true;
                    out.push(v as usize);
                }
                Some(out)
            }
        };
        Ok(Self { perm })
    }

    /// The permutation for `rank`, as a fixed array.
    fn perm(&self, rank: usize) -> Result<[usize; MAX_RANK], KernelError> {
        check_rank("Transpose", rank)?;
        let mut p = [0usize; MAX_RANK];
        match &self.perm {
            Some(perm) => {
                if perm.len() != rank {
                    return Err(KernelError::Shape(format!(
                        "Transpose: perm {perm:?} does not match input rank {rank}"
                    )));
                }
                p[..rank].copy_from_slice(perm);
            }
            None => {
                for (i, v) in p[..rank].iter_mut().enumerate() {
                    *v = rank - 1 - i;
                }
            }
        }
        Ok(p)
    }
}

/// A collapsed transpose: `dims` are the input dimensions, output dimension
/// `j` is input dimension `perm[j]`.
#[derive(Debug, Clone, Copy)]
struct Collapsed {
    rank: usize,
    dims: [usize; MAX_RANK],
    perm: [usize; MAX_RANK],
}

fn collapse(shape: &[usize], perm: &[usize]) -> Collapsed {
    let r = shape.len();
    // Drop size-1 input axes.
    let mut new_id = [usize::MAX; MAX_RANK];
    let mut kept = [0usize; MAX_RANK];
    let mut k = 0;
    for d in 0..r {
        if shape[d] != 1 {
            new_id[d] = k;
            kept[k] = shape[d];
            k += 1;
        }
    }
    let mut q = [0usize; MAX_RANK];
    let mut m = 0;
    for &pd in &perm[..r] {
        if shape[pd] != 1 {
            q[m] = new_id[pd];
            m += 1;
        }
    }
    // Group runs of consecutive input axes, in output order.
    let mut g_start = [0usize; MAX_RANK];
    let mut g_len = [0usize; MAX_RANK];
    let mut g = 0;
    for i in 0..m {
        if i > 0 && q[i] == q[i - 1] + 1 {
            g_len[g - 1] += 1;
        } else {
            g_start[g] = q[i];
            g_len[g] = 1;
            g += 1;
        }
    }
    // Input order of the groups: the rank of each group's start.
    let mut out = Collapsed {
        rank: g,
        dims: [1; MAX_RANK],
        perm: [0; MAX_RANK],
    };
    for j in 0..g {
        let pos = (0..g).filter(|&o| g_start[o] < g_start[j]).count();
        out.perm[j] = pos;
        out.dims[pos] = kept[g_start[j]..g_start[j] + g_len[j]]
            .iter()
            .fold(1usize, |n, &d| n.saturating_mul(d));
    }
    out
}

/// Source rows handled together by [`transpose_2d`].
const ROWS: usize = 8;

/// `dst[c][r] = src[r][c]` for a `rows x cols` matrix: eight source rows are
/// read in step (sequential streams) and each destination row receives eight
/// contiguous elements.
fn transpose_2d<T: Copy>(src: &[T], dst: &mut [T], rows: usize, cols: usize) {
    let mut r0 = 0;
    while r0 + ROWS <= rows {
        let block: [&[T]; ROWS] =
            std::array::from_fn(|k| &src[(r0 + k) * cols..(r0 + k + 1) * cols]);
        for (c, out) in dst.chunks_exact_mut(rows).enumerate() {
            let out: &mut [T; ROWS] = (&mut out[r0..r0 + ROWS]).try_into().expect("ROWS elements");
            for (o, row) in out.iter_mut().zip(&block) {
                *o = row[c];
            }
        }
        r0 += ROWS;
    }
    for r in r0..rows {
        let row = &src[r * cols..(r + 1) * cols];
        for (c, &v) in row.iter().enumerate() {
            dst[c * rows + r] = v;
        }
    }
}

fn transpose<T: Elem>(
    c: &Collapsed,
    x: &Tensor,
    y: &mut Tensor,
    par: &dyn ParallelFor,
) -> Result<(), KernelError> {
    let src = typed::<T>("Transpose", x)?;
    let dst = typed_mut::<T>("Transpose", y)?;
    check_len("Transpose", "output", dst.len(), src.len())?;
    let g = c.rank;
    if g <= 1 || src.is_empty() {
        dst.copy_from_slice(src);
        return Ok(());
    }
    let par = for_len(par, dst.len());
    let mut in_strides = [0usize; MAX_RANK];
    let mut s = 1;
    for d in (0..g).rev() {
        in_strides[d] = s;
        s *= c.dims[d];
    }
    // Output dimension j walks input stride in_strides[perm[j]].
    let mut out_dims = [0usize; MAX_RANK];
    let mut strides = [0usize; MAX_RANK];
    for j in 0..g {
        out_dims[j] = c.dims[c.perm[j]];
        strides[j] = in_strides[c.perm[j]];
    }
    let batch_2d =
        c.perm[g - 1] == g - 2 && c.perm[g - 2] == g - 1 && (0..g - 2).all(|j| c.perm[j] == j);
    if batch_2d {
        let (rows, cols) = (c.dims[g - 2], c.dims[g - 1]);
        let block = rows * cols;
        let chunk = rows_chunk(par, dst.len() / block, block);
        for_each_chunk_mut(par, dst, chunk, &|offset, part: &mut [T]| {
            let src = &src[offset..offset + part.len()];
            for (s, d) in src.chunks_exact(block).zip(part.chunks_exact_mut(block)) {
                transpose_2d(s, d, rows, cols);
            }
        });
        return Ok(());
    }
    let last = g - 1;
    let inner = out_dims[last];
    let inner_stride = strides[last];
    let chunk = rows_chunk(par, dst.len() / inner, inner);
    for_each_chunk_mut(par, dst, chunk, &|offset, part: &mut [T]| {
        // The odometer over the outer output dimensions at this part's
        // first row.
        let mut idx = [0usize; MAX_RANK];
        let mut off = 0usize;
        let mut rest = offset / inner;
        for d in (0..last).rev() {
            idx[d] = rest % out_dims[d];
            rest /= out_dims[d];
            off += idx[d] * strides[d];
        }
        for chunk in part.chunks_exact_mut(inner) {
            if inner_stride == 1 {
                chunk.copy_from_slice(&src[off..off + inner]);
            } else {
                for (k, o) in chunk.iter_mut().enumerate() {
                    *o = src[off + k * inner_stride];
                }
            }
            let mut d = last;
            while d > 0 {
                d -= 1;
                idx[d] += 1;
                off += strides[d];
                if idx[d] < out_dims[d] {
                    break;
                }
                off -= strides[d] * out_dims[d];
                idx[d] = 0;
            }
        }
    });
    Ok(())
}

impl Operator for Transpose {
    fn name(&self) -> &'static str {
        "Transpose"
    }

    fn infer(&self, inputs: &[Option<InputInfo<'_>>]) -> Result<Vec<OutputInfo>, KernelError> {
        let inputs = check_inputs("Transpose", inputs, 1, 1)?;
        let x = required("Transpose", inputs, 0)?;
        if matches!(x.dtype, ElementType::I4 | ElementType::U4) {
            return Err(KernelError::UnsupportedType {
                op: "Transpose",
                dtype: x.dtype,
            });
        }
        let rank = x.shape.len();
        let p = self.perm(rank)?;
        let shape = p[..rank].iter().map(|&d| x.shape[d]).collect();
        Ok(vec![OutputInfo {
            dtype: x.dtype,
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
        let x = input("Transpose", inputs, 0)?;
        let y = output("Transpose", outputs, 0)?;
        let rank = x.shape().len();
        let p = self.perm(rank)?;
        let c = collapse(x.shape(), &p[..rank]);
        dispatch_any!(x.dtype(), T => transpose::<T>(&c, x, y, par),
            else Err(KernelError::UnsupportedType { op: "Transpose", dtype: x.dtype() }))
    }
}
