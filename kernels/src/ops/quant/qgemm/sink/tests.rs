//! The vector output stages against the scalar ones.

use super::{BiasI32, F32Sink, QInt, RequantSink, Shared, Sink};

/// The vector row, and the same values handed over in two vectors,
/// equal the scalar row on sums that saturate at both ends, round at
/// ties and wrap with the bias, for every 8- and 16-bit type, whole
/// vectors and tails, one multiplier or one per row.
fn vector_row_is_the_scalar_row<T: QInt + PartialEq + std::fmt::Debug>(zero: i32) {
    if !std::arch::is_x86_feature_detected!("avx512bw")
        || !std::arch::is_x86_feature_detected!("avx512vl")
    {
        return;
    }
    let mut vals: Vec<i32> = vec![i32::MIN, i32::MAX, -1, 0, 1, 2, 3, 5, 7, 1 << 24];
    vals.extend((0..45).map(|i: i32| (i * 7919 - 150_000).wrapping_mul(13)));
    // The last row's products leave i32's range.
    let multipliers = [0.5f32, 0.003, f32::NAN, 3000.0];
    let bias = [i32::MAX - 2, -7, 40, 9];
    for by_row in [false, true] {
        for len in [1, 16, 17, 32, vals.len()] {
            for m in 0..4 {
                // 0: scalar, 1: a vector row, 2: two vectors, 3: rows m..4
                // scalar, 4: rows m..4 as pairs of vectors.
                let run = |how: u8| {
                    let mut out = vec![T::from_i32(0); 4 * 64];
                    let sink = RequantSink {
                        out: Shared::new(&mut out, 64, 1),
                        multipliers: if by_row {
                            &multipliers
                        } else {
                            &multipliers[1..2]
                        },
                        by_row,
                        bias: Some(BiasI32 {
                            data: &bias,
                            row_stride: 1,
                            col_stride: 0,
                        }),
                        zero,
                    };
                    match how {
                        0 => sink.put(m, 3, &vals[..len]),
                        // SAFETY: the CPU has AVX-512 BW and VL (checked
                        // above), which imply F.
                        1 => unsafe { sink.put_avx512(m, 3, &vals[..len]) },
                        // Rows m..4, the same values in each.
                        3 => (m..4).for_each(|r| sink.put(r, 3, &vals[..len])),
                        _ => {
                            use std::arch::x86_64::_mm512_loadu_si512;
                            let mut pair = [-1i32; 32];
                            pair[..len].copy_from_slice(&vals[..len]);
                            // SAFETY: as above; `pair` holds two vectors.
                            unsafe {
                                let v = [
                                    _mm512_loadu_si512(pair.as_ptr().cast()),
                                    _mm512_loadu_si512(pair.as_ptr().add(16).cast()),
                                ];
                                let rows = if how == 2 { 1 } else { 4 - m };
                                sink.put_pairs_avx512(m, 3, &vec![v; rows], len);
                            }
                        }
                    }
                    out
                };
                let want = run(0);
                assert_eq!(run(1), want, "by_row {by_row}, len {len}, row {m}");
                if len <= 32 {
                    assert_eq!(run(2), want, "pair: by_row {by_row}, len {len}, row {m}");
                    assert_eq!(
                        run(4),
                        run(3),
                        "pairs: by_row {by_row}, len {len}, rows {m}..4"
                    );
                }
            }
        }
    }
}

/// The float row: the vector code equals the scalar loop, with one
/// scale or one per column, with and without a bias (no bias keeps a
/// -0 product), whole vectors and tails.
#[test]
fn vector_float_rows_equal_the_scalar_ones() {
    if !std::arch::is_x86_feature_detected!("avx512bw")
        || !std::arch::is_x86_feature_detected!("avx512vl")
    {
        return;
    }
    let vals: Vec<i32> = (0..40)
        .map(|i: i32| (i - 20) * 1_000_003 % 977_777)
        .collect();
    let scales: Vec<f32> = (0..48).map(|i| (i as f32 - 3.0) * 0.013).collect();
    let bias: Vec<f32> = (0..48).map(|i| i as f32 * -0.25 + 1.5).collect();
    for one_scale in [false, true] {
        for with_bias in [false, true] {
            for len in [1, 16, 21, 40] {
                let run = |vector: bool| {
                    let mut out = vec![7.0f32; 2 * 48];
                    let sink = F32Sink {
                        out: Shared::new(&mut out, 48, 1),
                        scales: if one_scale { &scales[2..3] } else { &scales },
                        bias: with_bias.then_some(&bias[..]),
                        c_bias: None,
                    };
                    if vector {
                        // SAFETY: the CPU has AVX-512 BW and VL (checked
                        // above), which imply F.
                        unsafe { sink.put_avx512(1, 5, &vals[..len]) };
                    } else {
                        sink.put(1, 5, &vals[..len]);
                    }
                    out.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
                };
                assert_eq!(
                    run(true),
                    run(false),
                    "one scale {one_scale}, bias {with_bias}, len {len}"
                );
            }
        }
    }
}

#[test]
fn vector_requantization_equals_the_scalar_one() {
    vector_row_is_the_scalar_row::<u8>(131);
    vector_row_is_the_scalar_row::<i8>(-3);
    vector_row_is_the_scalar_row::<u16>(30_000);
    vector_row_is_the_scalar_row::<i16>(12);
}

/// Sixteen rows handed over in lanes (columns as vectors) store what
/// the scalar rows store: the 8-bit output stage in lanes, and the
/// transposed fallback for 16-bit outputs and int32; every count of
/// rows and columns up to sixteen, per-row and single multipliers,
/// a bias per row, one for all, or none.
fn lanes_are_the_scalar_rows<T: QInt + PartialEq + std::fmt::Debug>(zero: i32) {
    use std::arch::x86_64::_mm512_loadu_si512;
    if !std::arch::is_x86_feature_detected!("avx512bw")
        || !std::arch::is_x86_feature_detected!("avx512vl")
    {
        return;
    }
    // Sums that saturate at both ends, round at ties and wrap with the
    // bias: value (row r, column j) at [j][r].
    let sums: Vec<[i32; 16]> = (0..16i32)
        .map(|j| {
            std::array::from_fn(|r| match (r as i32 + 3 * j) % 23 {
                0 => i32::MAX,
                1 => i32::MIN,
                2 => 5,
                k => (k * 7919 - 90_000 + j * 31).wrapping_mul(11 + r as i32),
            })
        })
        .collect();
    // Row 9's multiplier is NaN and row 11's takes sums past i32's range.
    let mut multipliers: Vec<f32> = (0..19).map(|i| 0.0007 + i as f32 * 0.0031).collect();
    (multipliers[9], multipliers[11]) = (f32::NAN, 5000.0);
    let bias: Vec<i32> = (0..19).map(|i| i * 977 - 9000).collect();
    let (width, m0, n0) = (40, 2, 5);
    for (rows, n) in [(16, 16), (16, 3), (5, 16), (1, 1), (13, 9)] {
        for (one_mult, bias_rows) in [(false, Some(1)), (true, Some(0)), (false, None)] {
            let run = |lanes: bool| {
                let mut out = vec![T::from_i32(0); 19 * width];
                let sink = RequantSink {
                    out: Shared::new(&mut out, width, 1),
                    multipliers: if one_mult {
                        &multipliers[4..5]
                    } else {
                        &multipliers
                    },
                    by_row: true,
                    bias: bias_rows.map(|row_stride| BiasI32 {
                        data: &bias,
                        row_stride,
                        col_stride: 0,
                    }),
                    zero,
                };
                if lanes {
                    // SAFETY: the CPU has AVX-512 BW and VL (checked
                    // above), which imply F; each column holds sixteen
                    // i32.
                    unsafe {
                        let cols =
                            std::array::from_fn(|j| _mm512_loadu_si512(sums[j].as_ptr().cast()));
                        sink.put_lanes_avx512(m0, rows, n0, &cols, n);
                    }
                } else {
                    for r in 0..rows {
                        let row: Vec<i32> = sums[..n].iter().map(|col| col[r]).collect();
                        sink.put(m0 + r, n0, &row);
                    }
                }
                out
            };
            assert_eq!(
                run(true),
                run(false),
                "rows {rows}, columns {n}, one multiplier {one_mult}, bias {bias_rows:?}"
            );
        }
    }
}

#[test]
fn lanes_requantize_as_the_scalar_rows() {
    lanes_are_the_scalar_rows::<u8>(131);
    lanes_are_the_scalar_rows::<i8>(-3);
    lanes_are_the_scalar_rows::<u16>(30_000);
    lanes_are_the_scalar_rows::<i16>(12);
}
