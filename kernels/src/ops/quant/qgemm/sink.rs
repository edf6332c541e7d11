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

    /// Writes element `(m, n)`.
    #[inline(always)]
    fn write(&self, m: usize, n: usize, v: T) {
        let i = m * self.row_stride + n * self.col_stride;
        assert!(i < self.len, "product element outside its output");
        // SAFETY: `i` is inside the buffer (checked); the `Sync` contract
        // above: no other task writes or reads element `i` meanwhile.
        unsafe { self.ptr.add(i).write(v) };
    }
}

/// Stores `C` as int32 (MatMulInteger, ConvInteger).
pub(crate) struct I32Sink(pub(crate) Shared<i32>);

impl Sink for I32Sink {
    #[inline]
    fn put(&self, m: usize, n0: usize, vals: &[i32]) {
        for (j, &v) in vals.iter().enumerate() {
            self.0.write(m, n0 + j, v);
        }
    }
}

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
        for (j, &v) in vals.iter().enumerate() {
            let n = n0 + j;
            let s = self.scales[n % self.scales.len()];
            let v = self.c_bias.map_or(v, |b| b.add(v, m, n));
            let mut y = v as f32 * s;
            if let Some(b) = self.bias {
                y += b[n % b.len()];
            }
            self.out.write(m, n, y);
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
        for (j, &v) in vals.iter().enumerate() {
            let n = n0 + j;
            let c = self.bias.map_or(v, |b| b.add(v, m, n));
            let mult = self.multipliers[n % self.multipliers.len()];
            self.out.write(m, n, requantize::<T>(c, mult, self.zero));
        }
    }
}
