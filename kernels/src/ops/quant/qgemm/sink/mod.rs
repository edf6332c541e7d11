//! What the integer product does with each corrected row segment of `C`
//! (hot path): store it as int32, scale it to float, or requantize it to
//! 8 bits. Each sink writes element `(m, n)` at `m * row_stride + n *
//! col_stride` of its output, so a convolution can store its pixel-major
//! product channel-major.

#[cfg(target_arch = "x86_64")]
mod lanes;

use crate::ops::quant::common::{QInt, quantize_value};

/// Receives row `m`, columns `n0..n0 + vals.len()` of `C`. Tasks of one
/// product call `put` for disjoint `(m, n)` concurrently.
pub(crate) trait Sink: Sync {
    /// One row segment.
    fn put(&self, m: usize, n0: usize, vals: &[i32]);

    /// [`Self::put`], from a kernel compiled for AVX-512: the same values,
    /// by a sink's own vector code where it has one.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn put_avx512(&self, m: usize, n0: usize, vals: &[i32]) {
        self.put(m, n0, vals);
    }

    /// [`Self::put_avx512`] of the first `n` (at most 32) values of two
    /// vectors per row, rows `m0..m0 + vals.len()`, from a kernel that
    /// holds them in registers: a sink with a vector output stage takes
    /// them as they are (its checks made once for the rows), others
    /// through memory.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn put_pairs_avx512(&self, m0: usize, n0: usize, vals: &[[Vec16; 2]], n: usize) {
        // SAFETY: the caller's guarantee.
        unsafe { put_pairs_through_memory(self, m0, n0, vals, n) };
    }

    /// Rows `m0..m0 + rows` (at most 16), columns `n0..n0 + n` (at most
    /// 16) from a kernel that holds them as columns: lane `l` of
    /// `cols[j]` is row `m0 + l`, column `n0 + j` (a depthwise
    /// convolution's pixel vectors of sixteen channels). A sink with an
    /// output stage in lanes takes them as they are; others get the rows
    /// transposed, through [`Self::put_avx512`].
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn put_lanes_avx512(
        &self,
        m0: usize,
        rows: usize,
        n0: usize,
        cols: &[Vec16; 16],
        n: usize,
    ) {
        // SAFETY: the caller's guarantee.
        unsafe { lanes::put_rows(self, m0, rows, n0, cols, n) };
    }
}

/// Sixteen i32 lanes.
#[cfg(target_arch = "x86_64")]
pub(crate) type Vec16 = std::arch::x86_64::__m512i;

/// [`Sink::put_pairs_avx512`] by [`Sink::put_avx512`], row by row, on
/// the values stored to the stack.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn put_pairs_through_memory<S: Sink + ?Sized>(
    sink: &S,
    m0: usize,
    n0: usize,
    vals: &[[Vec16; 2]],
    n: usize,
) {
    use std::arch::x86_64::_mm512_storeu_si512;
    let mut buf = [0i32; 32];
    for (r, v) in vals.iter().enumerate() {
        // SAFETY: two vectors of sixteen i32 fill `buf`; the CPU has
        // AVX-512 F (the caller).
        unsafe {
            _mm512_storeu_si512(buf.as_mut_ptr().cast(), v[0]);
            _mm512_storeu_si512(buf.as_mut_ptr().add(16).cast(), v[1]);
            sink.put_avx512(m0 + r, n0, &buf[..n.min(32)]);
        }
    }
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
    pub(crate) fn write_row(&self, m: usize, n0: usize, vals: &[T]) {
        let Some(last) = vals.len().checked_sub(1) else {
            return;
        };
        let first = m * self.row_stride + n0 * self.col_stride;
        assert!(
            first + last * self.col_stride < self.len,
            "product row outside its output"
        );
        if self.col_stride == 1 {
            // SAFETY: `first .. first + vals.len()` is inside the buffer
            // (checked above) and not shared with `vals` (a local); the
            // `Sync` contract above: no other task touches these elements.
            unsafe {
                std::ptr::copy_nonoverlapping(vals.as_ptr(), self.ptr.add(first), vals.len())
            };
            return;
        }
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
    #[inline(always)]
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
    /// Adds row `m`, columns `n0..n0 + acc.len()` to `acc`.
    #[inline(always)]
    fn add_row(&self, acc: &mut [i32], m: usize, n0: usize) {
        let first = m * self.row_stride + n0 * self.col_stride;
        match self.col_stride {
            0 => {
                let b = self.data[first];
                acc.iter_mut().for_each(|a| *a = a.wrapping_add(b));
            }
            1 => {
                let b = &self.data[first..first + acc.len()];
                acc.iter_mut()
                    .zip(b)
                    .for_each(|(a, &b)| *a = a.wrapping_add(b));
            }
            s => {
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = a.wrapping_add(self.data[first + j * s]);
                }
            }
        }
    }
}

/// Copies a run of per-column values (one for all, or one per column)
/// into a chunk.
#[inline(always)]
fn fill_columns(dst: &mut [f32; CHUNK], v: &[f32], n0: usize, len: usize) {
    match columns(v, n0, len) {
        Ok(v) => dst.fill(v),
        Err(s) => dst[..len].copy_from_slice(s),
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
    #[inline(always)]
    fn put(&self, m: usize, n0: usize, vals: &[i32]) {
        for (c, vals) in vals.chunks(CHUNK).enumerate() {
            let n0 = n0 + c * CHUNK;
            let len = vals.len();
            let mut acc = [0i32; CHUNK];
            acc[..len].copy_from_slice(vals);
            if let Some(b) = self.c_bias {
                b.add_row(&mut acc[..len], m, n0);
            }
            let (mut scale, mut bias) = ([0f32; CHUNK], [0f32; CHUNK]);
            fill_columns(&mut scale, self.scales, n0, len);
            if let Some(b) = self.bias {
                fill_columns(&mut bias, b, n0, len);
            }
            let mut buf = [0f32; CHUNK];
            for j in 0..CHUNK {
                buf[j] = acc[j] as f32 * scale[j];
            }
            // Without a bias nothing is added (adding 0 would turn -0 into
            // +0).
            if self.bias.is_some() {
                for j in 0..CHUNK {
                    buf[j] += bias[j];
                }
            }
            self.out.write_row(m, n0, &buf[..len]);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn put_avx512(&self, m: usize, n0: usize, vals: &[i32]) {
        // SAFETY: the CPU has AVX-512 F, BW and VL (this function's
        // contract).
        if !unsafe { self.row_avx512(m, n0, vals) } {
            self.put(m, n0, vals);
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl F32Sink<'_> {
    /// [`Sink::put`] sixteen values per vector, when the row is stored
    /// contiguously without an int32 addend; `false`, writing nothing,
    /// otherwise. The same f32 operations as the scalar loop: the sum
    /// converted, times the column's scale, plus the column's bias.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn row_avx512(&self, m: usize, n0: usize, vals: &[i32]) -> bool {
        use std::arch::x86_64::*;
        if self.c_bias.is_some() || self.out.col_stride != 1 {
            return false;
        }
        let Some(last) = vals.len().checked_sub(1) else {
            return true;
        };
        let first = m * self.out.row_stride + n0;
        assert!(
            first + last < self.out.len,
            "product row outside its output"
        );
        let one_scale = self.scales.len() == 1;
        assert!(
            (one_scale || self.scales.len() > n0 + last)
                && self
                    .bias
                    .is_none_or(|b| b.len() == 1 || b.len() > n0 + last),
            "fewer scales or biases than columns"
        );
        // Per-column values from column n0 + j on (one value broadcast).
        let column = |v: &[f32], j: usize, mask: __mmask16| {
            if v.len() == 1 {
                _mm512_set1_ps(v[0])
            } else {
                // SAFETY: the mask reads columns n0 + j .. n0 + j + 16
                // (at most n0 + last) of `v` (the assertion).
                unsafe { _mm512_maskz_loadu_ps(mask, v.as_ptr().add(n0 + j)) }
            }
        };
        let mut j = 0;
        while j < vals.len() {
            let n = (vals.len() - j).min(16);
            let mask: __mmask16 = if n == 16 { !0 } else { (1u16 << n) - 1 };
            // SAFETY: the mask reads values j .. j + n of `vals`.
            let c = unsafe { _mm512_maskz_loadu_epi32(mask, vals.as_ptr().add(j).cast()) };
            let mut y = _mm512_mul_ps(_mm512_cvtepi32_ps(c), column(self.scales, j, mask));
            if let Some(b) = self.bias {
                y = _mm512_add_ps(y, column(b, j, mask));
            }
            // SAFETY: elements first + j .. first + j + n lie inside the
            // output (the assertion), which only this task writes (the
            // `Sync` contract of `Shared`); the mask writes no more.
            unsafe { _mm512_mask_storeu_ps(self.out.ptr.add(first + j), mask, y) };
            j += n;
        }
        true
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
/// With `by_row` the multipliers are per row of `C` instead (a product
/// whose rows are output channels).
pub(crate) struct RequantSink<'a, T> {
    pub(crate) out: Shared<T>,
    pub(crate) multipliers: &'a [f32],
    pub(crate) by_row: bool,
    pub(crate) bias: Option<BiasI32<'a>>,
    pub(crate) zero: i32,
}

impl<T: QInt> RequantSink<'_, T> {
    /// Columns `n0..n0 + len` of row `m` (`vals` holds them); inlined with
    /// `len = CHUNK` for whole chunks, so that every loop has a fixed
    /// length.
    #[inline(always)]
    fn chunk(&self, m: usize, n0: usize, vals: &[i32], len: usize) {
        let mut mult = [0f32; CHUNK];
        if self.by_row {
            let one = self.multipliers.len() == 1;
            mult.fill(self.multipliers[if one { 0 } else { m }]);
        } else {
            fill_columns(&mut mult, self.multipliers, n0, len);
        }
        let mut acc = [0i32; CHUNK];
        acc[..len].copy_from_slice(&vals[..len]);
        if let Some(b) = self.bias {
            b.add_row(&mut acc[..len], m, n0);
        }
        let mut buf = [T::from_i32(0); CHUNK];
        for j in 0..CHUNK {
            buf[j] = requantize::<T>(acc[j], mult[j], self.zero);
        }
        self.out.write_row(m, n0, &buf[..len]);
    }
}

impl<T: QInt> Sink for RequantSink<'_, T> {
    #[inline(always)]
    fn put(&self, m: usize, n0: usize, vals: &[i32]) {
        let mut c = 0;
        while c + CHUNK <= vals.len() {
            self.chunk(m, n0 + c, &vals[c..c + CHUNK], CHUNK);
            c += CHUNK;
        }
        if c < vals.len() {
            self.chunk(m, n0 + c, &vals[c..], vals.len() - c);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn put_avx512(&self, m: usize, n0: usize, vals: &[i32]) {
        // SAFETY: the CPU has AVX-512 F, BW and VL (this function's
        // contract).
        if !unsafe { self.row_avx512(m, n0, vals) } {
            self.put(m, n0, vals);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn put_pairs_avx512(&self, m0: usize, n0: usize, vals: &[[Vec16; 2]], n: usize) {
        // SAFETY: the CPU has AVX-512 F, BW and VL (this function's
        // contract).
        if !unsafe { self.pairs_avx512(m0, n0, vals, n) } {
            // SAFETY: as above.
            unsafe { put_pairs_through_memory(self, m0, n0, vals, n) };
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn put_lanes_avx512(
        &self,
        m0: usize,
        rows: usize,
        n0: usize,
        cols: &[Vec16; 16],
        n: usize,
    ) {
        // SAFETY: the CPU has AVX-512 F, BW and VL (this function's
        // contract).
        if !unsafe { self.lanes_avx512(m0, rows, n0, cols, n) } {
            // SAFETY: as above.
            unsafe { lanes::put_rows(self, m0, rows, n0, cols, n) };
        }
    }
}

/// The constants of [`RequantSink`]'s vector output stage: for one row
/// (every lane alike), or for sixteen rows, one per lane.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct RowStage {
    mult: std::arch::x86_64::__m512,
    bias: Vec16,
    lo: std::arch::x86_64::__m512,
    hi: std::arch::x86_64::__m512,
    zero: Vec16,
}

#[cfg(target_arch = "x86_64")]
impl RowStage {
    /// The requantized values of `c`, lane by lane, within the output
    /// type's range. Each step is the scalar [`requantize`]'s: the sum plus
    /// the bias (wrapping), converted to f32, multiplied, clamped (`max`
    /// first, which turns NaN into the lower bound), rounded half to even,
    /// plus the zero point.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn apply(&self, c: Vec16) -> Vec16 {
        self.bounded::<true>(c)
    }

    /// [`Self::apply`] for an unsigned output type, bounded above only:
    /// a pack with unsigned saturation finishes it. The values above the
    /// type's maximum come out as the maximum; those below its minimum
    /// (NaN included) come out negative, which the pack turns into the
    /// minimum, zero: the same values as [`Self::apply`]'s after the pack.
    ///
    /// `hi` is `min`'s first operand, so a NaN stays NaN and converts to
    /// `i32::MIN` (as does anything under -2^31); the zero point, a value
    /// of the unsigned type, adds to it without wrapping. Rounding is
    /// monotonic and the bounds are integers, so clamping after it is
    /// clamping before it.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn apply_unsigned(&self, c: Vec16) -> Vec16 {
        self.bounded::<false>(c)
    }

    /// [`Self::apply`] (`BELOW`) or [`Self::apply_unsigned`].
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn bounded<const BELOW: bool>(&self, c: Vec16) -> Vec16 {
        use std::arch::x86_64::*;
        let v = _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_add_epi32(c, self.bias)),
            self.mult,
        );
        let v = if BELOW {
            _mm512_min_ps(_mm512_max_ps(v, self.lo), self.hi)
        } else {
            _mm512_min_ps(self.hi, v)
        };
        // Rounded half to even by the instruction itself: for the clamped
        // values (|v| < 2^17) the same as the scalar addition; past i32's
        // range (bounded above only) the instruction gives i32::MIN.
        let r = _mm512_cvt_roundps_epi32::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        _mm512_add_epi32(r, self.zero)
    }

    /// Two vectors requantized and narrowed to `T` with saturating packs,
    /// in order in the low 32 elements: 32 bytes for an 8-bit `T`, all 64
    /// for a 16-bit one.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW; `T` is 8 or 16 bits wide.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn narrow_pair<T: QInt>(&self, v: &[Vec16; 2]) -> Vec16 {
        use std::arch::x86_64::*;
        let unsigned = T::MIN == 0;
        let [a, b] = v.map(|c| {
            if unsigned {
                self.apply_unsigned(c)
            } else {
                self.apply(c)
            }
        });
        // Per 128-bit lane `l`: a's values 4 l .. 4 l + 4, then b's.
        let w = if unsigned {
            _mm512_packus_epi32(a, b)
        } else {
            _mm512_packs_epi32(a, b)
        };
        if std::mem::size_of::<T>() == 2 {
            return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), w);
        }
        // Per lane: dword 0 a's four bytes, dword 1 b's.
        let x = if unsigned {
            _mm512_packus_epi16(w, w)
        } else {
            _mm512_packs_epi16(w, w)
        };
        _mm512_permutexvar_epi32(
            _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0),
            x,
        )
    }
}

#[cfg(target_arch = "x86_64")]
impl<T: QInt> RequantSink<'_, T> {
    /// Whether the rows have a vector output stage: one multiplier and one
    /// bias per row, stored contiguously as 8- or 16-bit values (a
    /// convolution's channel rows).
    fn vector_rows(&self) -> bool {
        let bytes = std::mem::size_of::<T>();
        let one_mult = self.by_row || self.multipliers.len() == 1;
        let one_bias = self.bias.is_none_or(|b| b.col_stride == 0);
        one_mult && one_bias && self.out.col_stride == 1 && matches!(bytes, 1 | 2)
    }

    /// Row `m`'s output stage, where [`Self::vector_rows`] holds.
    ///
    /// # Safety
    /// The CPU has AVX-512 F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn stage(&self, m: usize) -> RowStage {
        use std::arch::x86_64::*;
        let mult = self.multipliers[if self.multipliers.len() == 1 { 0 } else { m }];
        let bias = self.bias.map_or(0, |b| b.data[m * b.row_stride]);
        RowStage {
            mult: _mm512_set1_ps(mult),
            bias: _mm512_set1_epi32(bias),
            lo: _mm512_set1_ps((T::MIN - self.zero) as f32),
            hi: _mm512_set1_ps((T::MAX - self.zero) as f32),
            zero: _mm512_set1_epi32(self.zero),
        }
    }

    /// Row `m`'s output stage and the index of its first element, where
    /// [`Self::vector_rows`] holds and columns `n0..=n0 + last` lie inside
    /// the output; `None` otherwise.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn row_stage(&self, m: usize, n0: usize, last: usize) -> Option<(RowStage, usize)> {
        if !self.vector_rows() {
            return None;
        }
        let first = m * self.out.row_stride + n0;
        assert!(
            first + last < self.out.len,
            "product row outside its output"
        );
        Some((self.stage(m), first))
    }

    /// Requantizes the first `n` (at most 16) lanes of `c` and stores them
    /// at element `at` of the output ([`RowStage::apply`]).
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL; elements `at .. at + n` lie inside
    /// the output and only this task writes them (the `Sync` contract of
    /// `Shared`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn store16(&self, st: &RowStage, c: Vec16, at: usize, n: usize) {
        use std::arch::x86_64::*;
        let mask: __mmask16 = if n >= 16 { !0 } else { (1u16 << n) - 1 };
        let q = st.apply(c);
        // SAFETY: the caller's guarantee; the mask writes no more than `n`
        // elements. The narrowing is done in registers: a narrowing store
        // to memory is microcoded on some cores.
        unsafe {
            let dst = self.out.ptr.add(at);
            if std::mem::size_of::<T>() == 1 {
                let b = _mm512_cvtepi32_epi8(q);
                if n >= 16 {
                    _mm_storeu_si128(dst.cast(), b);
                } else {
                    _mm_mask_storeu_epi8(dst.cast(), mask, b);
                }
            } else {
                let h = _mm512_cvtepi32_epi16(q);
                if n >= 16 {
                    _mm256_storeu_si256(dst.cast(), h);
                } else {
                    _mm256_mask_storeu_epi16(dst.cast(), mask, h);
                }
            }
        }
    }

    /// [`Sink::put_pairs_avx512`] by the vector output stage, when
    /// [`Self::vector_rows`] holds; `false`, writing nothing, otherwise.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn pairs_avx512(&self, m0: usize, n0: usize, vals: &[[Vec16; 2]], n: usize) -> bool {
        use std::arch::x86_64::*;
        let n = n.min(32);
        if !self.vector_rows() {
            return false;
        }
        if n == 0 || vals.is_empty() {
            return true;
        }
        let stride = self.out.row_stride;
        assert!(
            (m0 + vals.len() - 1) * stride + n0 + n - 1 < self.out.len,
            "product rows outside their output"
        );
        let mask: __mmask32 = if n >= 32 { !0 } else { (1u32 << n) - 1 };
        for (r, v) in vals.iter().enumerate() {
            let (st, first) = (self.stage(m0 + r), (m0 + r) * stride + n0);
            let x = st.narrow_pair::<T>(v);
            // The rows are planes apart, dozens in flight: more streams
            // than the hardware prefetcher follows, so each row's line two
            // lines ahead is fetched here (16 to 96 channels at 112x112 in
            // mobilenet_v2: 0.17-0.21 -> 0.135-0.145 ms).
            _mm_prefetch::<_MM_HINT_T0>(
                self.out
                    .ptr
                    .wrapping_add(first + 128 / std::mem::size_of::<T>())
                    .cast(),
            );
            // SAFETY: elements first .. first + n lie inside the output
            // (the assertion), which only this task writes (the `Sync`
            // contract of `Shared`); the mask writes no more; T is 8 or
            // 16 bits wide (`vector_rows`).
            unsafe {
                let dst = self.out.ptr.add(first);
                match (std::mem::size_of::<T>(), n >= 32) {
                    (1, true) => _mm256_storeu_si256(dst.cast(), _mm512_castsi512_si256(x)),
                    (1, false) => {
                        _mm256_mask_storeu_epi8(dst.cast(), mask, _mm512_castsi512_si256(x))
                    }
                    (_, true) => _mm512_storeu_si512(dst.cast(), x),
                    _ => _mm512_mask_storeu_epi16(dst.cast(), mask, x),
                }
            }
        }
        true
    }

    /// [`Sink::put`] sixteen values per vector, when [`Self::row_stage`]
    /// has a vector output stage for row `m`; `false`, writing nothing,
    /// otherwise.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn row_avx512(&self, m: usize, n0: usize, vals: &[i32]) -> bool {
        use std::arch::x86_64::*;
        let Some(last) = vals.len().checked_sub(1) else {
            return true;
        };
        // SAFETY: the CPU has the features (this function's contract).
        let Some((st, first)) = (unsafe { self.row_stage(m, n0, last) }) else {
            return false;
        };
        let mut j = 0;
        while j < vals.len() {
            let n = (vals.len() - j).min(16);
            let mask: __mmask16 = if n == 16 { !0 } else { (1u16 << n) - 1 };
            // SAFETY: the mask reads values j .. j + n of `vals`; elements
            // first + j .. first + j + n lie inside the output (row_stage's
            // assertion), which only this task writes.
            unsafe {
                let c = _mm512_maskz_loadu_epi32(mask, vals.as_ptr().add(j).cast());
                self.store16(&st, c, first + j, n);
            }
            j += n;
        }
        true
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests;
