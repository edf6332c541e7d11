//! Sixteen rows held in lanes (hot path): a kernel whose vectors are
//! columns (pixels) of sixteen rows (channels) hands them over as they
//! are. The byte requantizer stages them in lanes, one multiplier and bias
//! per lane, and turns the bytes around; any other sink gets the rows
//! transposed.

use std::arch::x86_64::*;

use super::{QInt, RequantSink, RowStage, Sink, Vec16};

/// `__mmask16` of the first `n` (at most 16) lanes.
#[inline(always)]
fn first(n: usize) -> __mmask16 {
    if n >= 16 { !0 } else { (1u16 << n) - 1 }
}

/// [`Sink::put_lanes_avx512`] by [`Sink::put_avx512`]: the columns
/// transposed into rows, each stored to the stack and put.
///
/// # Safety
/// The CPU has AVX-512 F, BW and VL.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
pub(super) unsafe fn put_rows<S: Sink + ?Sized>(
    sink: &S,
    m0: usize,
    rows: usize,
    n0: usize,
    cols: &[Vec16; 16],
    n: usize,
) {
    let n = n.min(16);
    if n == 0 {
        return;
    }
    let mut m = *cols;
    transpose(&mut m);
    let mut buf = [0i32; 16];
    for (l, v) in m.iter().enumerate().take(rows.min(16)) {
        // SAFETY: `buf` holds one vector; the CPU has the features (this
        // function's contract).
        unsafe {
            _mm512_storeu_si512(buf.as_mut_ptr().cast(), *v);
            sink.put_avx512(m0 + l, n0, &buf[..n]);
        }
    }
}

/// `m` transposed as a sixteen by sixteen matrix of i32 (row `r` = vector
/// `r`): two rounds of unpacks within 128-bit lanes, two of lane
/// shuffles.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(m: &mut [Vec16; 16]) {
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        let (a, b) = (m[2 * i], m[2 * i + 1]);
        t[2 * i] = _mm512_unpacklo_epi32(a, b);
        t[2 * i + 1] = _mm512_unpackhi_epi32(a, b);
    }
    // Per group of four rows, u[k]'s 128-bit lane j holds column 4 j + k.
    let mut u = [_mm512_setzero_si512(); 16];
    for g in 0..4 {
        let t = &t[4 * g..4 * g + 4];
        u[4 * g] = _mm512_unpacklo_epi64(t[0], t[2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[0], t[2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[1], t[3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[1], t[3]);
    }
    for k in 0..4 {
        let [g0, g1, g2, g3] = [0, 1, 2, 3].map(|g| u[4 * g + k]);
        let (v01, w01) = (
            _mm512_shuffle_i32x4::<0x88>(g0, g1),
            _mm512_shuffle_i32x4::<0xDD>(g0, g1),
        );
        let (v23, w23) = (
            _mm512_shuffle_i32x4::<0x88>(g2, g3),
            _mm512_shuffle_i32x4::<0xDD>(g2, g3),
        );
        m[k] = _mm512_shuffle_i32x4::<0x88>(v01, v23);
        m[8 + k] = _mm512_shuffle_i32x4::<0xDD>(v01, v23);
        m[4 + k] = _mm512_shuffle_i32x4::<0x88>(w01, w23);
        m[12 + k] = _mm512_shuffle_i32x4::<0xDD>(w01, w23);
    }
}

impl<T: QInt> RequantSink<'_, T> {
    /// [`Sink::put_lanes_avx512`] by the output stage in lanes, for 8-bit
    /// rows stored contiguously with one multiplier each (or one for all)
    /// and a bias per row; `false`, writing nothing, otherwise.
    ///
    /// Each column is requantized as it is ([`RowStage::apply`] with the
    /// lanes' multipliers and biases), four columns are packed into one
    /// vector of bytes (lane `l`: rows `4 l .. 4 l + 4` of the four
    /// columns), and a byte shuffle and two rounds of unpacks turn them
    /// into rows of sixteen bytes.
    ///
    /// # Safety
    /// The CPU has AVX-512 F, BW and VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    pub(super) unsafe fn lanes_avx512(
        &self,
        m0: usize,
        rows: usize,
        n0: usize,
        cols: &[Vec16; 16],
        n: usize,
    ) -> bool {
        let one_mult = self.multipliers.len() == 1;
        let row_bias = self.bias.is_none_or(|b| b.col_stride == 0);
        if std::mem::size_of::<T>() != 1
            || self.out.col_stride != 1
            || !(one_mult || self.by_row)
            || !row_bias
        {
            return false;
        }
        let (rows, n) = (rows.min(16), n.min(16));
        if rows == 0 || n == 0 {
            return true;
        }
        let stride = self.out.row_stride;
        assert!(
            (m0 + rows - 1) * stride + n0 + n - 1 < self.out.len
                && (one_mult || self.multipliers.len() >= m0 + rows),
            "product rows outside their output"
        );
        let mult = if one_mult {
            _mm512_set1_ps(self.multipliers[0])
        } else {
            // SAFETY: the mask reads multipliers m0 .. m0 + rows (the
            // assertion).
            unsafe { _mm512_maskz_loadu_ps(first(rows), self.multipliers.as_ptr().add(m0)) }
        };
        let bias = match self.bias {
            None => _mm512_setzero_si512(),
            Some(b) if b.row_stride == 1 => {
                assert!(b.data.len() >= m0 + rows, "fewer biases than rows");
                // SAFETY: the mask reads biases m0 .. m0 + rows (the
                // assertion).
                unsafe { _mm512_maskz_loadu_epi32(first(rows), b.data.as_ptr().add(m0).cast()) }
            }
            Some(b) => {
                let mut bias = [0i32; 16];
                for (l, v) in bias.iter_mut().enumerate().take(rows) {
                    *v = b.data[(m0 + l) * b.row_stride];
                }
                // SAFETY: `bias` holds one vector.
                unsafe { _mm512_loadu_si512(bias.as_ptr().cast()) }
            }
        };
        let st = RowStage {
            mult,
            bias,
            lo: _mm512_set1_ps((T::MIN - self.zero) as f32),
            hi: _mm512_set1_ps((T::MAX - self.zero) as f32),
            zero: _mm512_set1_epi32(self.zero),
        };
        // Per 128-bit lane: byte 4 i + e (column i, row e of the lane's
        // four) to byte 4 e + i.
        let bytes_t = _mm512_broadcast_i32x4(_mm_setr_epi8(
            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
        ));
        let mut p = [_mm512_setzero_si512(); 4];
        for (k, p) in p.iter_mut().enumerate().take(n.div_ceil(4)) {
            // Signed values lie in the type's range and the packs only
            // narrow; unsigned ones saturate in them.
            let q = [0, 1, 2, 3].map(|i| {
                if T::MIN < 0 {
                    st.apply(cols[4 * k + i])
                } else {
                    st.apply_unsigned(cols[4 * k + i])
                }
            });
            let b = if T::MIN < 0 {
                _mm512_packs_epi16(
                    _mm512_packs_epi32(q[0], q[1]),
                    _mm512_packs_epi32(q[2], q[3]),
                )
            } else {
                _mm512_packus_epi16(
                    _mm512_packus_epi32(q[0], q[1]),
                    _mm512_packus_epi32(q[2], q[3]),
                )
            };
            // Lane l, word e: row 4 l + e of columns 4 k .. 4 k + 4.
            *p = _mm512_shuffle_epi8(b, bytes_t);
        }
        let (lo01, hi01) = (
            _mm512_unpacklo_epi32(p[0], p[1]),
            _mm512_unpackhi_epi32(p[0], p[1]),
        );
        let (lo23, hi23) = (
            _mm512_unpacklo_epi32(p[2], p[3]),
            _mm512_unpackhi_epi32(p[2], p[3]),
        );
        // Lane l of out[e]: row 4 l + e, its sixteen columns.
        let out = [
            _mm512_unpacklo_epi64(lo01, lo23),
            _mm512_unpackhi_epi64(lo01, lo23),
            _mm512_unpacklo_epi64(hi01, hi23),
            _mm512_unpackhi_epi64(hi01, hi23),
        ];
        let row = |r: usize| {
            let v = out[r % 4];
            match r / 4 {
                0 => _mm512_castsi512_si128(v),
                1 => _mm512_extracti32x4_epi32::<1>(v),
                2 => _mm512_extracti32x4_epi32::<2>(v),
                _ => _mm512_extracti32x4_epi32::<3>(v),
            }
        };
        let base = self.out.ptr.wrapping_add(m0 * stride + n0).cast::<u8>();
        if rows == 16 && n == 16 {
            // A whole tile: sixteen plain stores, unrolled.
            for r in 0..16 {
                // SAFETY: as below, with n = 16.
                unsafe { _mm_storeu_si128(base.add(r * stride).cast(), row(r)) };
            }
            return true;
        }
        for r in 0..rows {
            // SAFETY: elements (m0 + r) * stride + n0 .. + n lie inside the
            // output (the assertion), which only this task writes (the
            // `Sync` contract of `Shared`); T is one byte; the mask writes
            // no more.
            unsafe { _mm_mask_storeu_epi8(base.add(r * stride).cast(), first(n), row(r)) };
        }
        true
    }
}
