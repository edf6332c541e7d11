//! ONNX and com.microsoft RotaryEmbedding against an f64 rotation.

mod attention_util;
#[path = "basic_util/mod.rs"]
mod basic_util;

use attention_util::{assert_close64, caches, f64s, rotate};
use basic_util::{In, Node, Rng, f32t, i64t, var};
use onnx_prepared_kernels::KernelError;

/// Reference over `[B, S, H, D]` rows (`bnsh` = stored `[B, H, S, D]`);
/// `pos(b, s)` picks the cache row.
#[allow(clippy::too_many_arguments)]
fn reference(
    x: &[f32],
    dims: [usize; 4],
    bnsh: bool,
    cos: &[f32],
    sin: &[f32],
    rot: usize,
    interleaved: bool,
    pos: &dyn Fn(usize, usize) -> usize,
) -> Vec<f64> {
    let [b, s, h, d] = dims;
    let (cos, sin) = (f64s(cos), f64s(sin));
    let x = f64s(x);
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let o = if bnsh {
                    ((bi * h + hi) * s + si) * d
                } else {
                    ((bi * s + si) * h + hi) * d
                };
                let r = rotate(&x[o..o + d], &cos, &sin, rot / 2, pos(bi, si), interleaved);
                out[o..o + d].copy_from_slice(&r);
            }
        }
    }
    out
}

fn rope(opset: i64) -> Node {
    Node::new("RotaryEmbedding", opset)
}

#[test]
fn onnx_4d_with_position_ids() {
    let mut rng = Rng(1);
    let (b, h, s, d) = (2, 3, 4, 8);
    let x = rng.f32s(b * h * s * d);
    let pos: Vec<i64> = (0..b * s).map(|_| rng.below(20) as i64).collect();
    for interleaved in [0, 1] {
        for rot in [0usize, 4] {
            let r = if rot == 0 { d } else { rot };
            let (cos, sin) = caches(20, r / 2);
            let mut node = rope(23).int("interleaved", interleaved);
            if rot > 0 {
                node = node.int("rotary_embedding_dim", rot as i64);
            }
            let y = node
                .run1(&[
                    var(f32t(&[b, h, s, d], &x)),
                    var(f32t(&[20, r / 2], &cos)),
                    var(f32t(&[20, r / 2], &sin)),
                    var(i64t(&[b, s], &pos)),
                ])
                .unwrap();
            let want = reference(
                &x,
                [b, s, h, d],
                true,
                &cos,
                &sin,
                r,
                interleaved == 1,
                &|bi, si| pos[bi * s + si] as usize,
            );
            assert_close64(y.as_f32().unwrap(), &want, 1e-6);
        }
    }
}

#[test]
fn onnx_3d_with_num_heads_and_3d_caches_without_positions() {
    let mut rng = Rng(2);
    let (b, s, h, d) = (2, 3, 2, 6);
    let x = rng.f32s(b * s * h * d);
    let (cos, sin) = caches(b * s, d / 2);
    let y = rope(23)
        .int("num_heads", 2)
        .run1(&[
            var(f32t(&[b, s, h * d], &x)),
            var(f32t(&[b, s, d / 2], &cos)),
            var(f32t(&[b, s, d / 2], &sin)),
        ])
        .unwrap();
    let want = reference(&x, [b, s, h, d], false, &cos, &sin, d, false, &|bi, si| {
        bi * s + si
    });
    assert_close64(y.as_f32().unwrap(), &want, 1e-6);
}

#[test]
fn microsoft_positions_and_offset() {
    let mut rng = Rng(3);
    let (b, s, h, d) = (2, 3, 2, 8);
    let x = rng.f32s(b * s * h * d);
    let (cos, sin) = caches(16, d / 2);
    let ms = |node: Node| node.domain("com.microsoft");
    // [B, S] position ids, 3-D input (head size from the caches).
    let pos: Vec<i64> = vec![0, 1, 2, 5, 6, 7];
    let y = ms(rope(1).int("interleaved", 1))
        .run1(&[
            var(f32t(&[b, s, h * d], &x)),
            var(i64t(&[b, s], &pos)),
            var(f32t(&[16, d / 2], &cos)),
            var(f32t(&[16, d / 2], &sin)),
        ])
        .unwrap();
    let want = reference(&x, [b, s, h, d], false, &cos, &sin, d, true, &|bi, si| {
        pos[bi * s + si] as usize
    });
    assert_close64(y.as_f32().unwrap(), &want, 1e-6);
    // A single offset, 4-D input, partial rotation.
    let y = ms(rope(1).int("num_heads", 2).int("rotary_embedding_dim", 4))
        .run1(&[
            var(f32t(&[b, h, s, d], &x)),
            var(i64t(&[1], &[4])),
            var(f32t(&[16, 2], &cos[..32])),
            var(f32t(&[16, 2], &sin[..32])),
        ])
        .unwrap();
    let want = reference(
        &x,
        [b, s, h, d],
        true,
        &cos[..32],
        &sin[..32],
        4,
        false,
        &|_, si| 4 + si,
    );
    assert_close64(y.as_f32().unwrap(), &want, 1e-6);
}

#[test]
fn errors() {
    let x = f32t(&[1, 1, 2, 4], &[0.0; 8]);
    let c = f32t(&[3, 2], &[0.0; 6]);
    // A position past the caches.
    let r = rope(23).run(&[
        var(x.clone()),
        var(c.clone()),
        var(c.clone()),
        var(i64t(&[1, 2], &[0, 3])),
    ]);
    assert!(matches!(r, Err(KernelError::Invalid { .. })), "{r:?}");
    let r = rope(23).run(&[
        var(x.clone()),
        var(c.clone()),
        var(c.clone()),
        var(i64t(&[1, 2], &[-1, 0])),
    ]);
    assert!(matches!(r, Err(KernelError::Invalid { .. })), "{r:?}");
    // 3-D input without num_heads (ONNX).
    let x3 = f32t(&[1, 2, 4], &[0.0; 8]);
    assert!(
        rope(23)
            .run(&[
                var(x3),
                var(c.clone()),
                var(c.clone()),
                var(i64t(&[1, 2], &[0, 1]))
            ])
            .is_err()
    );
    // Cache width disagreeing with the rotary dimension.
    let wide = f32t(&[3, 3], &[0.0; 9]);
    assert!(
        rope(23)
            .run(&[
                var(x.clone()),
                var(wide.clone()),
                var(wide),
                var(i64t(&[1, 2], &[0, 1]))
            ])
            .is_err()
    );
    // Odd rotary dimension, packed batching, opset 22, unknown attribute.
    assert!(matches!(
        rope(23).int("rotary_embedding_dim", 3).build(4),
        Err(KernelError::Attribute { .. })
    ));
    assert!(matches!(
        rope(1)
            .domain("com.microsoft")
            .int("is_packed_batching", 1)
            .build(4),
        Err(KernelError::Attribute { .. })
    ));
    assert!(matches!(
        rope(22).build(4),
        Err(KernelError::UnsupportedOp { .. })
    ));
    assert!(matches!(
        rope(23).int("scale", 1).build(4),
        Err(KernelError::Attribute { .. })
    ));
    let _ = In::Absent;
}
