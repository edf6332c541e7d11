//! What the integer product does with each corrected row segment of `C`
//! (hot path): store it as int32, scale it to float, or requantize it to
//! 8 bits. Each sink writes element `(m, n)` at `m * row_stride + n *
//! col_stride` of its output, so a convolution can store its pixel-major
//! product channel-major.

use crate::ops::quant::common::{QInt, quantize_value};

/// Receives row `m`, columns `n0..n0 + vals.len()` of `C`. Tasks of one
/// product call `put` for disjoint `(m, n)` concurrently.
pub(crate) trait Sink: Sync {
    /// One row segment.
    fn put(&self, m: usize, n0: usize, vals: &[i32]);
}

/// An output buffer shared by the tasks of one product, which write
/// pairwise disjoint elements.
#[derive(Debug)]
pub(crate) struct Shared<T> {
    ptr: *mut T,
    len: usize,
    row_stride: usize,
    col_stride: usize,
}

// SAFETY: a `Shared` is written only through `put`, by tasks of one
// `qgemm::run` call that each cover distinct (row, column) pairs, which map
// to distinct elements (strides of a layout without overlap, checked
// against `len` on every write), while the `&mut [T]` it was made from is
// borrowed for the sink's whole life.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T: Copy> Shared<T> {
    /// `out`, element `(m, n)` at `m * row_stride + n * col_stride`.
    pub(crate) fn new(out: &mut [T], row_stride: usize, col_stride: usize) -> Self {
        Self {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            row_stride,
            col_stride,
        }
    }

    /// Writes `vals` as row `m`, columns `n0..`.
    #[inline(always)]
    fn write_row(&self, m: usize, n0: usize, vals: &[T]) {
        let Some(last) = vals.len().checked_sub(1) else {
            return;
        };
        let first = m * self.row_stride + n0 * self.col_stride;
        assert!(
            first + last * self.col_stride < self.len,
            "product row outside its output"
        );
        for (j, &v) in vals.iter().enumerate() {
            // SAFETY: every index up to the last one is inside the buffer
            // (checked above); the `Sync` contract above: no other task
            // writes or reads these elements meanwhile.
            unsafe { self.ptr.add(first + j * self.col_stride).write(v) };
        }
    }
}

/// Stores `C` as int32 (MatMulInteger, ConvInteger).
pub(crate) struct I32Sink(pub(crate) Shared<i32>);

impl Sink for I32Sink {
    #[inline]
    fn put(&self, m: usize, n0: usize, vals: &[i32]) {
        self.0.write_row(m, n0, vals);
    }
}

/// Per-column values of a run of columns: one for all, or a slice.
#[inline(always)]
fn columns(v: &[f32], n0: usize, len: usize) -> Result<f32, &[f32]> {
    if v.len() == 1 {
        Ok(v[0])
    } else {
        Err(&v[n0..n0 + len])
    }
}

/// Values per chunk of a put (the output stage's buffer).
const CHUNK: usize = 16;

/// An int32 addend of `C` broadcast over its rows and columns (QGemm's
/// `C`, QLinearConv's bias): element `(m, n)` at `m * row_stride + n *
/// col_stride`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BiasI32<'a> {
    pub(crate) data: &'a [i32],
    pub(crate) row_stride: usize,
    pub(crate) col_stride: usize,
}

impl BiasI32<'_> {
    #[inline(always)]
    fn add(&self, c: i32, m: usize, n: usize) -> i32 {
        c.wrapping_add(self.data[m * self.row_stride + n * self.col_stride])
    }
}

/// `y = (C + c_bias) * (scale_a * scale_b[n]) + bias[n]` in f32
/// (MatMulIntegerToFloat, DynamicQuantizeMatMul, QGemm with a float
/// output). `scales` holds the products `scale_a * scale_b[n]` (one, or
/// one per column).
pub(crate) struct F32Sink<'a> {
    pub(crate) out: Shared<f32>,
    pub(crate) scales: &'a [f32],
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) c_bias: Option<BiasI32<'a>>,
}

impl Sink for F32Sink<'_> {
    #[inline]
    fn put(&self, m: usize, n0: usize, vals: &[i32]) {
        for (c, vals) in vals.chunks(CHUNK).enumerate() {
            let n0 = n0 + c * CHUNK;
            let mut buf = [0f32; CHUNK];
            let scales = columns(self.scales, n0, vals.len());
            let bias = self.bias.map(|b| columns(b, n0, vals.len()));
            for (j, (y, &v)) in buf.iter_mut().zip(vals).enumerate() {
                let v = self.c_bias.map_or(v, |b| b.add(v, m, n0 + j));
                let s = scales.unwrap_or_else(|s| s[j]);
                *y = v as f32 * s;
                if let Some(b) = bias {
                    *y += b.unwrap_or_else(|b| b[j]);
                }
            }
            self.out.write_row(m, n0, &buf[..vals.len()]);
        }
    }
}

/// ONNX Runtime's requantization of one value: `(c as f32) * multiplier`
/// rounded half to even, plus the zero point, saturated.
#[inline(always)]
pub(crate) fn requantize<T: QInt>(c: i32, multiplier: f32, zero: i32) -> T {
    quantize_value(c as f32 * multiplier, zero)
}

/// `y = requantize(C + bias[n])` with `multiplier[n] = scale_a * scale_b[n]
/// / scale_y` (QLinearMatMul, QLinearConv, QGemm with a quantized output).
pub(crate) struct RequantSink<'a, T> {
    pub(crate) out: Shared<T>,
    pub(crate) multipliers: &'a [f32],
    pub(crate) bias: Option<BiasI32<'a>>,
    pub(crate) zero: i32,
}

impl<T: QInt> Sink for RequantSink<'_, T> {
    #[inline]
    fn put(&self, m: usize, n0: usize, vals: &[i32]) {
        for (c, vals) in vals.chunks(CHUNK).enumerate() {
            let n0 = n0 + c * CHUNK;
            let len = vals.len();
            let mut mult = [0f32; CHUNK];
            match columns(self.multipliers, n0, len) {
                Ok(v) => mult.fill(v),
                Err(s) => mult[..len].copy_from_slice(s),
            }
            let mut acc = [0i32; CHUNK];
            acc[..len].copy_from_slice(vals);
            if let Some(b) = self.bias {
                for (j, a) in acc[..len].iter_mut().enumerate() {
                    *a = b.add(*a, m, n0 + j);
                }
            }
            let mut buf = [T::from_i32(0); CHUNK];
            for ((y, &a), &k) in buf.iter_mut().zip(&acc).zip(&mult) {
                *y = requantize::<T>(a, k, self.zero);
            }
            self.out.write_row(m, n0, &buf[..len]);
        }
    }
}
