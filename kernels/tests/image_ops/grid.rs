//! GridSample and AffineGrid against loops written from the ONNX operator
//! definitions (f64), and refusals of bad input.

use super::*;

/// GridSample-20 of `x` at `grid` with attributes.
fn grid_sample(node: Node, x: Tensor, grid: Tensor) -> Vec<f32> {
    f32s(&node.run1(&[var(x), var(grid)]).unwrap())
}

/// The ONNX definition of GridSample, one output element at a time.
struct GridRef {
    mode: &'static str,
    padding: &'static str,
    align: bool,
}

impl GridRef {
    /// The reflection of `x` by the borders until it lies in `[lo, hi]`
    /// (on an axis of length 1 with align_corners, where ONNX's loop divides
    /// by zero, PyTorch's `lo`).
    fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
        let range = hi - lo;
        if range <= 0.0 {
            lo
        } else if x < lo {
            let dx = lo - x;
            let n = (dx / range).trunc();
            let r = dx - n * range;
            if n % 2.0 == 0.0 { lo + r } else { hi - r }
        } else if x > hi {
            let dx = x - hi;
            let n = (dx / range).trunc();
            let r = dx - n * range;
            if n % 2.0 == 0.0 { hi - r } else { lo + r }
        } else {
            x
        }
    }

    fn borders(&self, len: usize) -> (f64, f64) {
        if self.align {
            (0.0, len as f64 - 1.0)
        } else {
            (-0.5, len as f64 - 0.5)
        }
    }

    /// Element `i` of a 1-D array under the padding (`None`: zero).
    fn index(&self, i: i64, len: usize) -> Option<usize> {
        let (lo, hi) = self.borders(len);
        match self.padding {
            "zeros" => (0..len as i64).contains(&i).then_some(i as usize),
            "border" => Some(i.clamp(0, len as i64 - 1) as usize),
            _ => Some(Self::reflect(i as f64, lo, hi) as usize),
        }
    }

    /// 1-D interpolation of `v` at `x`.
    fn interp_1d(&self, v: &[f64], x: f64) -> f64 {
        let at = |i: i64| self.index(i, v.len()).map_or(0.0, |i| v[i]);
        let x0 = x.floor();
        let t = x - x0;
        let x0 = x0 as i64;
        if self.mode == "cubic" {
            let a = -0.75;
            let c = [
                ((a * (t + 1.0) - 5.0 * a) * (t + 1.0) + 8.0 * a) * (t + 1.0) - 4.0 * a,
                ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
                ((a + 2.0) * (1.0 - t) - (a + 3.0)) * (1.0 - t) * (1.0 - t) + 1.0,
                ((a * (2.0 - t) - 5.0 * a) * (2.0 - t) + 8.0 * a) * (2.0 - t) - 4.0 * a,
            ];
            (0..4).map(|k| c[k] * at(x0 - 1 + k as i64)).sum()
        } else {
            (1.0 - t) * at(x0) + t * at(x0 + 1)
        }
    }

    /// The value of the array `data` (dims `dims`) at unnormalized `x`
    /// (outermost axis first), recursively over the leading axis.
    fn value(&self, data: &[f64], dims: &[usize], x: &[f64]) -> f64 {
        let inner: usize = dims[1..].iter().product();
        if self.mode == "nearest" {
            return match self.index(x[0] as i64, dims[0]) {
                None => 0.0,
                Some(i) if dims.len() == 1 => data[i],
                Some(i) => self.value(&data[i * inner..][..inner], &dims[1..], &x[1..]),
            };
        }
        let line: Vec<f64> = if dims.len() == 1 {
            data.to_vec()
        } else {
            (0..dims[0])
                .map(|i| self.value(&data[i * inner..][..inner], &dims[1..], &x[1..]))
                .collect()
        };
        self.interp_1d(&line, x[0])
    }

    /// Y for X of shape `xs` and grid of shape `gs`.
    fn run(&self, x: &[f32], xs: &[usize], grid: &[f32], gs: &[usize]) -> Vec<f32> {
        let k = xs.len() - 2;
        let dims = &xs[2..];
        let plane: usize = dims.iter().product();
        let positions: usize = gs[1..=k].iter().product();
        let mut y = Vec::new();
        for n in 0..xs[0] {
            for c in 0..xs[1] {
                let base = (n * xs[1] + c) * plane;
                let data: Vec<f64> = x[base..base + plane].iter().map(|&v| v as f64).collect();
                for p in 0..positions {
                    let g = &grid[(n * positions + p) * k..][..k];
                    // Reversed: the grid lists x (the last axis) first.
                    let mut u: Vec<f64> = (0..k)
                        .map(|d| {
                            let (nv, len) = (g[k - 1 - d] as f64, dims[d] as f64);
                            if self.align {
                                (nv + 1.0) / 2.0 * (len - 1.0)
                            } else {
                                ((nv + 1.0) * len - 1.0) / 2.0
                            }
                        })
                        .collect();
                    for (d, v) in u.iter_mut().enumerate() {
                        if self.mode == "nearest" {
                            *v = v.round_ties_even();
                        }
                        let (lo, hi) = self.borders(dims[d]);
                        if *v < lo || *v > hi {
                            match self.padding {
                                "border" => *v = v.clamp(0.0, dims[d] as f64 - 1.0),
                                "reflection" => *v = Self::reflect(*v, lo, hi),
                                _ => {}
                            }
                        }
                    }
                    y.push(self.value(&data, dims, &u) as f32);
                }
            }
        }
        y
    }
}

/// Random X of shape `xs` and a grid for it (values in [-1.3, 1.3]).
fn random_case(rng: &mut Rng, xs: &[usize], out: &[usize]) -> (Tensor, Tensor, Vec<usize>) {
    let k = xs.len() - 2;
    let mut gs = vec![xs[0]];
    gs.extend_from_slice(out);
    gs.push(k);
    let x = f32t(xs, &rng.f32s(numel(xs)));
    let g: Vec<f32> = rng.f32s(numel(&gs)).iter().map(|v| v * 1.3).collect();
    (x, f32t(&gs, &g), gs)
}

#[test]
fn grid_sample_matches_the_definition_in_every_mode() {
    let mut rng = Rng(11);
    let cases: [(&[usize], &[usize]); 3] = [
        (&[2, 3, 4, 5], &[3, 4]),
        (&[1, 2, 3, 4, 5], &[2, 3, 2]),
        (&[1, 1, 1, 3], &[2, 5]),
    ];
    for (xs, out) in cases {
        let (x, grid, gs) = random_case(&mut rng, xs, out);
        for mode in ["linear", "nearest", "cubic"] {
            for padding in ["zeros", "border", "reflection"] {
                for align in [false, true] {
                    let node = Node::new("GridSample", 20)
                        .string("mode", mode)
                        .string("padding_mode", padding)
                        .int("align_corners", align as i64);
                    let r = GridRef {
                        mode,
                        padding,
                        align,
                    };
                    let want = r.run(&f32s(&x), xs, &f32s(&grid), &gs);
                    let y = node.run1(&[var(x.clone()), var(grid.clone())]).unwrap();
                    let mut shape = xs[..2].to_vec();
                    shape.extend_from_slice(out);
                    assert_eq!(y.shape(), shape.as_slice());
                    assert_close(&f32s(&y), &want, 1e-5);
                }
            }
        }
    }
}

#[test]
fn grid_sample_16_names_and_other_float_types() {
    let mut rng = Rng(5);
    let xs = [1, 2, 3, 4];
    let (x, grid, gs) = random_case(&mut rng, &xs, &[2, 3]);
    for (old, mode) in [
        ("bilinear", "linear"),
        ("bicubic", "cubic"),
        ("nearest", "nearest"),
    ] {
        let r = GridRef {
            mode,
            padding: "border",
            align: false,
        };
        let want = r.run(&f32s(&x), &xs, &f32s(&grid), &gs);
        let node = Node::new("GridSample", 16)
            .string("mode", old)
            .string("padding_mode", "border");
        assert_close(&grid_sample(node, x.clone(), grid.clone()), &want, 1e-5);
        // f64 X and grid; f16 X with an f32 grid.
        let node = Node::new("GridSample", 22)
            .string("mode", mode)
            .string("padding_mode", "border");
        let wide = |t: &Tensor| {
            let v: Vec<f64> = f32s(t).iter().map(|&v| v as f64).collect();
            f64t(t.shape(), &v)
        };
        let y = node.run1(&[var(wide(&x)), var(wide(&grid))]).unwrap();
        let y: Vec<f32> = y.as_f64().unwrap().iter().map(|&v| v as f32).collect();
        assert_close(&y, &want, 1e-6);
        let y = node
            .run1(&[var(f16t(&xs, &f32s(&x))), var(grid.clone())])
            .unwrap();
        let y: Vec<f32> = y.as_f16().unwrap().iter().map(|v| v.to_f32()).collect();
        assert_close(&y, &want, 1e-2);
    }
}

#[test]
fn grid_sample_identity_grid_reproduces_the_input() {
    let (h, w) = (2usize, 3usize);
    let x = iota(&[1, 2, h, w]);
    let mut g = Vec::new();
    for i in 0..h {
        for j in 0..w {
            g.push(-1.0 + 2.0 * j as f32 / (w - 1) as f32);
            g.push(-1.0 + 2.0 * i as f32 / (h - 1) as f32);
        }
    }
    let grid = f32t(&[1, h, w, 2], &g);
    for mode in ["linear", "nearest", "cubic"] {
        let node = Node::new("GridSample", 20)
            .string("mode", mode)
            .int("align_corners", 1);
        let y = grid_sample(node, x.clone(), grid.clone());
        assert_close(&y, &f32s(&x), 1e-5);
    }
}

#[test]
fn grid_sample_padding_modes_at_the_left_edge() {
    // align_corners = 0: x = -1 denormalizes to -0.5, halfway between the
    // outside index -1 and index 0 (value 4).
    let x = f32t(&[1, 1, 1, 2], &[4.0, 8.0]);
    let grid = f32t(&[1, 1, 1, 2], &[-1.0, 0.0]);
    let run = |pad: &str| {
        grid_sample(
            Node::new("GridSample", 16).string("padding_mode", pad),
            x.clone(),
            grid.clone(),
        )
    };
    assert_eq!(run("zeros"), [2.0]);
    assert_eq!(run("border"), [4.0]);
    assert_eq!(run("reflection"), [4.0]);
    // Far outside, reflection folds back: x = 2 denormalizes to 2.5, one
    // past the right border 1.5, reflected to 0.5: halfway between 4 and 8.
    let far = f32t(&[1, 1, 1, 2], &[2.0, 0.0]);
    let y = grid_sample(
        Node::new("GridSample", 16).string("padding_mode", "reflection"),
        x.clone(),
        far,
    );
    assert_eq!(y, [6.0]);
    // Non-finite and huge coordinates give values, not panics.
    let odd = f32t(
        &[1, 1, 3, 2],
        &[f32::NAN, 0.0, 1e30, -1e30, f32::INFINITY, 0.0],
    );
    for mode in ["linear", "nearest", "cubic"] {
        for pad in ["zeros", "border", "reflection"] {
            let node = Node::new("GridSample", 20)
                .string("mode", mode)
                .string("padding_mode", pad);
            assert_eq!(grid_sample(node, x.clone(), odd.clone()).len(), 3);
        }
    }
}

#[test]
fn grid_sample_in_parallel_matches_sequential() {
    let mut rng = Rng(9);
    // Few planes (split by positions) and many planes (split by planes).
    for (xs, out) in [([1, 1, 40, 50], [200, 200]), ([4, 8, 20, 20], [40, 40])] {
        let (x, grid, _) = random_case(&mut rng, &xs, &out);
        for mode in ["linear", "nearest", "cubic"] {
            let node = Node::new("GridSample", 20).string("mode", mode);
            let a = run_par(&node, &[&x, &grid], &Sequential);
            let b = run_par(&node, &[&x, &grid], &Reversed);
            assert_eq!(f32s(&a), f32s(&b), "{mode}");
        }
    }
}

#[test]
fn grid_sample_refuses_bad_shapes_and_modes() {
    let shape_err = |node: Node, x: Tensor, g: Tensor| {
        let r = node.run1(&[var(x), var(g)]);
        assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    };
    let node = Node::new("GridSample", 20);
    shape_err(node.clone(), iota(&[1, 1, 2, 2]), iota(&[2, 1, 1, 2]));
    shape_err(node.clone(), iota(&[1, 1, 2, 2]), iota(&[1, 1, 1, 3]));
    shape_err(node.clone(), iota(&[1, 1, 0, 2]), iota(&[1, 1, 1, 2]));
    shape_err(node.clone(), iota(&[1, 2]), iota(&[1, 1]));
    shape_err(
        Node::new("GridSample", 16),
        iota(&[1, 1, 2, 2, 2]),
        iota(&[1, 1, 1, 1, 3]),
    );
    let r = node.run1(&[var(i64t(&[1, 1, 1, 1], &[1])), var(iota(&[1, 1, 1, 2]))]);
    assert!(
        matches!(r, Err(KernelError::UnsupportedType { .. })),
        "{r:?}"
    );
    let attr = |n: Node| attribute_error(n.build(2).unwrap_err());
    assert_eq!(
        attr(Node::new("GridSample", 16).string("mode", "linear")),
        "mode"
    );
    assert_eq!(
        attr(Node::new("GridSample", 20).string("mode", "bicubic")),
        "mode"
    );
    assert_eq!(
        attr(Node::new("GridSample", 20).string("padding_mode", "wrap")),
        "padding_mode"
    );
}

/// The ONNX definition of AffineGrid: theta applied to the homogeneous
/// base coordinates `(x, y[, z], 1)` of `dims` (`[D,] H, W`).
fn affine_ref(theta: &[f32], n: usize, dims: &[usize], align: bool) -> Vec<f32> {
    let k = dims.len();
    let base = |i: usize, len: usize| {
        if align {
            if len == 1 {
                -1.0
            } else {
                -1.0 + 2.0 * i as f64 / (len - 1) as f64
            }
        } else {
            -1.0 + (2.0 * i as f64 + 1.0) / len as f64
        }
    };
    let mut y = Vec::new();
    for b in 0..n {
        let t = &theta[b * k * (k + 1)..][..k * (k + 1)];
        for p in 0..numel(dims) {
            let idx = unravel(p, dims);
            // Homogeneous: x is the last axis, then y, then z.
            let mut h: Vec<f64> = (0..k)
                .map(|c| base(idx[k - 1 - c], dims[k - 1 - c]))
                .collect();
            h.push(1.0);
            for r in 0..k {
                let v: f64 = (0..=k).map(|c| t[r * (k + 1) + c] as f64 * h[c]).sum();
                y.push(v as f32);
            }
        }
    }
    y
}

#[test]
fn affine_grid_matches_the_definition() {
    let mut rng = Rng(21);
    for dims in [&[3usize, 4][..], &[2, 3, 4], &[1, 5]] {
        let (n, k) = (2usize, dims.len());
        let theta = rng.f32s(n * k * (k + 1));
        let mut size = vec![n as i64, 3];
        size.extend(dims.iter().map(|&d| d as i64));
        for align in [false, true] {
            let y = Node::new("AffineGrid", 20)
                .int("align_corners", align as i64)
                .run1(&[var(f32t(&[n, k, k + 1], &theta)), ints(&size)])
                .unwrap();
            let mut shape = vec![n];
            shape.extend_from_slice(dims);
            shape.push(k);
            assert_eq!(y.shape(), shape.as_slice());
            assert_close(&f32s(&y), &affine_ref(&theta, n, dims, align), 1e-6);
        }
    }
    // The identity theta and align_corners = 1 give GridSample's identity.
    let y = Node::new("AffineGrid", 20)
        .int("align_corners", 1)
        .run1(&[
            var(f32t(&[1, 2, 3], &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0])),
            ints(&[1, 1, 2, 3]),
        ])
        .unwrap();
    assert_eq!(
        f32s(&y),
        [
            -1.0, -1.0, 0.0, -1.0, 1.0, -1.0, -1.0, 1.0, 0.0, 1.0, 1.0, 1.0
        ]
    );
}

#[test]
fn affine_grid_refuses_bad_input() {
    let node = Node::new("AffineGrid", 20);
    let theta = || f32t(&[1, 2, 3], &[0.0; 6]);
    let e = node
        .run1(&[var(theta()), var(i64t(&[4], &[1, 1, 2, 2]))])
        .unwrap_err();
    assert!(
        matches!(e, KernelError::NeedsConstant { input: 1, .. }),
        "{e:?}"
    );
    let shape_err = |r: Result<Tensor, KernelError>| {
        assert!(matches!(r, Err(KernelError::Shape(_))), "{r:?}");
    };
    shape_err(node.run1(&[var(theta()), ints(&[1, 1, 2])]));
    shape_err(node.run1(&[var(theta()), ints(&[1, 1, 2, 2, 2])]));
    shape_err(node.run1(&[var(theta()), ints(&[2, 1, 2, 2])]));
    shape_err(node.run1(&[var(theta()), ints(&[1, 1, -2, 2])]));
    shape_err(node.run1(&[var(f32t(&[1, 3, 3], &[0.0; 9])), ints(&[1, 1, 2, 2])]));
    let r = node.run1(&[var(i64t(&[1, 2, 3], &[0; 6])), ints(&[1, 1, 2, 2])]);
    assert!(
        matches!(r, Err(KernelError::UnsupportedType { .. })),
        "{r:?}"
    );
    assert_eq!(
        attribute_error(
            Node::new("AffineGrid", 20)
                .int("align_corners", 2)
                .build(2)
                .unwrap_err()
        ),
        "align_corners"
    );
}
