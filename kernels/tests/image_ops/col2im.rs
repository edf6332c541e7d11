//! Col2Im against the scatter loop of the ONNX operator definition (f64),
//! and refusals of bad input.

use super::*;

/// Col2Im's attributes, `None` for the defaults.
#[derive(Clone, Default)]
struct Geometry {
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
}

impl Geometry {
    fn node(&self) -> Node {
        let mut n = Node::new("Col2Im", 18);
        for (name, v) in [
            ("dilations", &self.dilations),
            ("pads", &self.pads),
            ("strides", &self.strides),
        ] {
            if let Some(v) = v {
                n = n.ints(name, v);
            }
        }
        n
    }

    /// Blocks per axis for `image` and `block`.
    fn blocks(&self, image: &[usize], block: &[usize]) -> Vec<usize> {
        let m = image.len();
        (0..m)
            .map(|d| {
                let dil = self.dilations.as_ref().map_or(1, |v| v[d] as usize);
                let st = self.strides.as_ref().map_or(1, |v| v[d] as usize);
                let pad = self.pads.as_ref().map_or(0, |v| (v[d] + v[m + d]) as usize);
                (image[d] + pad - (dil * (block[d] - 1) + 1)) / st + 1
            })
            .collect()
    }

    /// The definition: every column element added at its image position.
    fn reference(
        &self,
        x: &[f32],
        n: usize,
        c: usize,
        image: &[usize],
        block: &[usize],
    ) -> Vec<f32> {
        let m = image.len();
        let blocks = self.blocks(image, block);
        let (kernel, cols, plane) = (numel(block), numel(&blocks), numel(image));
        let mut y = vec![0.0f64; n * c * plane];
        for b in 0..n {
            for ch in 0..c {
                for kk in 0..kernel {
                    let off = unravel(kk, block);
                    for col in 0..cols {
                        let at = unravel(col, &blocks);
                        let mut idx = Vec::new();
                        for d in 0..m {
                            let dil = self.dilations.as_ref().map_or(1, |v| v[d]);
                            let st = self.strides.as_ref().map_or(1, |v| v[d]);
                            let lo = self.pads.as_ref().map_or(0, |v| v[d]);
                            idx.push(at[d] as i64 * st - lo + off[d] as i64 * dil);
                        }
                        if idx
                            .iter()
                            .zip(image)
                            .all(|(&i, &len)| (0..len as i64).contains(&i))
                        {
                            let flat = idx.iter().zip(strides(image)).map(|(&i, s)| i as usize * s);
                            let p = flat.sum::<usize>();
                            let v = x[((b * c + ch) * kernel + kk) * cols + col];
                            y[(b * c + ch) * plane + p] += v as f64;
                        }
                    }
                }
            }
        }
        y.iter().map(|&v| v as f32).collect()
    }
}

fn i64s(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&d| d as i64).collect()
}

#[test]
fn col2im_matches_the_definition() {
    let mut rng = Rng(31);
    let g = |d: Option<&[i64]>, p: Option<&[i64]>, s: Option<&[i64]>| Geometry {
        dilations: d.map(<[i64]>::to_vec),
        pads: p.map(<[i64]>::to_vec),
        strides: s.map(<[i64]>::to_vec),
    };
    let cases: Vec<(Vec<usize>, Vec<usize>, Geometry)> = vec![
        (vec![5, 5], vec![2, 2], g(None, None, None)),
        (
            vec![5, 6],
            vec![2, 3],
            g(Some(&[2, 1]), Some(&[1, 0, 2, 1]), Some(&[2, 1])),
        ),
        (vec![7], vec![3], g(Some(&[2]), Some(&[1, 2]), Some(&[3]))),
        (
            vec![3, 4, 5],
            vec![2, 2, 3],
            g(None, Some(&[0, 1, 1, 1, 0, 1]), Some(&[1, 2, 2])),
        ),
        // Strides larger than the block: some image positions get nothing.
        (vec![6, 6], vec![1, 2], g(None, None, Some(&[3, 4]))),
    ];
    for (image, block, geo) in cases {
        let (n, c) = (2, 3);
        let blocks = geo.blocks(&image, &block);
        let shape = [n, c * numel(&block), numel(&blocks)];
        let x = rng.f32s(numel(&shape));
        let y = geo
            .node()
            .run1(&[
                var(f32t(&shape, &x)),
                ints(&i64s(&image)),
                ints(&i64s(&block)),
            ])
            .unwrap();
        let mut want_shape = vec![n, c];
        want_shape.extend_from_slice(&image);
        assert_eq!(y.shape(), want_shape.as_slice());
        assert_close(&f32s(&y), &geo.reference(&x, n, c, &image, &block), 1e-5);
        // f64 sums the same.
        let wide: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let y64 = geo
            .node()
            .run1(&[
                var(f64t(&shape, &wide)),
                ints(&i64s(&image)),
                ints(&i64s(&block)),
            ])
            .unwrap();
        let y64: Vec<f32> = y64.as_f64().unwrap().iter().map(|&v| v as f32).collect();
        assert_close(&y64, &f32s(&y), 1e-6);
    }
}

#[test]
fn col2im_in_parallel_matches_sequential() {
    let mut rng = Rng(4);
    let (image, block) = ([60usize, 70], [3usize, 3]);
    let geo = Geometry {
        pads: Some(vec![1, 1, 1, 1]),
        ..Geometry::default()
    };
    let shape = [2, 4 * 9, numel(&geo.blocks(&image, &block))];
    let x = f32t(&shape, &rng.f32s(numel(&shape)));
    let (im, bl) = (i64t(&[2], &i64s(&image)), i64t(&[2], &i64s(&block)));
    let a = run_par(&geo.node(), &[&x, &im, &bl], &Sequential);
    let b = run_par(&geo.node(), &[&x, &im, &bl], &Reversed);
    assert_eq!(a.shape(), &[2, 4, 60, 70]);
    assert_eq!(f32s(&a), f32s(&b));
}

#[test]
fn col2im_refuses_bad_input() {
    let node = Node::new("Col2Im", 18);
    let x = || iota(&[1, 4, 16]);
    let needs = |r: Result<Tensor, KernelError>, i: usize| {
        let e = r.unwrap_err();
        assert!(
            matches!(e, KernelError::NeedsConstant { input, .. } if input == i),
            "{e:?}"
        );
    };
    needs(
        node.run1(&[var(x()), var(i64t(&[2], &[5, 5])), ints(&[2, 2])]),
        1,
    );
    needs(
        node.run1(&[var(x()), ints(&[5, 5]), var(i64t(&[2], &[2, 2]))]),
        2,
    );
    assert!(node.run1(&[var(x()), ints(&[5, 5]), ints(&[2, 2])]).is_ok());
    let shape_err = |r: Result<Tensor, KernelError>| {
        assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    };
    // L is not the block count; C * K not a multiple of K; ranks.
    shape_err(node.run1(&[var(x()), ints(&[5, 6]), ints(&[2, 2])]));
    shape_err(node.run1(&[var(iota(&[1, 3, 16])), ints(&[5, 5]), ints(&[2, 2])]));
    shape_err(node.run1(&[var(iota(&[4, 16])), ints(&[5, 5]), ints(&[2, 2])]));
    shape_err(node.run1(&[var(x()), ints(&[5, 5]), ints(&[2])]));
    shape_err(node.run1(&[var(x()), ints(&[]), ints(&[])]));
    // A block larger than the padded image; non-positive block; bad lengths.
    shape_err(node.run1(&[var(iota(&[1, 1, 1])), ints(&[2]), ints(&[3])]));
    shape_err(node.run1(&[var(x()), ints(&[5, 5]), ints(&[2, 0])]));
    shape_err(node.run1(&[var(x()), ints(&[5, -5]), ints(&[2, 2])]));
    let with = |name: &str, v: &[i64]| node.clone().ints(name, v);
    shape_err(with("pads", &[0, 0]).run1(&[var(x()), ints(&[5, 5]), ints(&[2, 2])]));
    shape_err(with("strides", &[1]).run1(&[var(x()), ints(&[5, 5]), ints(&[2, 2])]));
    // Huge sizes overflow as typed errors.
    let r = node.run1(&[var(iota(&[1, 1, 1])), ints(&[i64::MAX]), ints(&[i64::MAX])]);
    assert!(r.is_err(), "{r:?}");
    let attr = |n: Node| attribute_error(n.build(3).unwrap_err());
    assert_eq!(attr(with("strides", &[1, 0])), "strides");
    assert_eq!(attr(with("dilations", &[-1, 1])), "dilations");
    assert_eq!(attr(with("pads", &[0, 0, -1, 0])), "pads");
    assert_eq!(attr(node.clone().int("axis", 1)), "(unknown)");
}
