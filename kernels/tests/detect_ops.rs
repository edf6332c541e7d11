//! The detection post-processing operators against loops written here from
//! the ONNX definitions: NonZero, Compress, Unique and NonMaxSuppression,
//! whose output shapes follow input values (`ValueDependent` while those
//! values are unknown, the exact shapes once every input is known, as the
//! runtime infers at run time); TopK with a `k` known only at run time;
//! OneHot and RoiAlign through the registry after their move to the detect
//! family; typed refusals of bad inputs, and no panic on odd ones.

mod math_util;

use math_util::*;
use onnx_prepared_kernels::{
    ElementType as E, InputInfo, KernelError, OutputInfo, Sequential, Tensor, TensorData,
};

// ---------------------------------------------------------------- helpers

/// A tensor of `dtype` holding `v` (converted as `as` does).
fn tensor_of(dtype: E, shape: &[usize], v: &[f64]) -> Tensor {
    macro_rules! conv {
        ($($e:ident => $t:ty),*) => {
            match dtype {
                $(E::$e => TensorData::$e(v.iter().map(|&x| x as $t).collect()),)*
                E::F16 => TensorData::F16(v.iter().map(|&x| half::f16::from_f64(x)).collect()),
                E::Bool => TensorData::Bool(v.iter().map(|&x| x != 0.0).collect()),
                other => panic!("no test constructor for {other}"),
            }
        };
    }
    let data = conv!(F32 => f32, F64 => f64, I8 => i8, I32 => i32, I64 => i64, U8 => u8);
    Tensor::new(shape.to_vec(), data).unwrap()
}

/// The elements of a tensor as f64.
fn f64s(t: &Tensor) -> Vec<f64> {
    macro_rules! read {
        ($($e:ident => $get:ident),*) => {
            match t.dtype() {
                $(E::$e => t.$get().unwrap().iter().map(|&x| f64::from(x)).collect(),)*
                E::I64 => t.as_i64().unwrap().iter().map(|&x| x as f64).collect(),
                other => panic!("no test reader for {other}"),
            }
        };
    }
    read!(F32 => as_f32, F64 => as_f64, F16 => as_f16, I8 => as_i8, I32 => as_i32,
        U8 => as_u8, Bool => as_bool)
}

const FLOATS: [E; 3] = [E::F32, E::F64, E::F16];

/// Equal as values, NaN equal to NaN, -0.0 kept apart from 0.0.
fn assert_same(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits();
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

fn ints(t: &Tensor) -> Vec<i64> {
    t.as_i64().expect("int64 output").to_vec()
}

/// Shape inference alone.
fn infer(node: &Node, inputs: &[In]) -> Result<Vec<OutputInfo>, KernelError> {
    let infos: Vec<_> = inputs
        .iter()
        .map(|i| match i {
            In::Var(t) => Some(InputInfo::dynamic(t.dtype(), t.shape())),
            In::Const(t) => Some(InputInfo::known(t)),
            In::Absent => None,
        })
        .collect();
    node.build(inputs.len())?.infer_checked(&infos)
}

/// Infer with every input known, then execute (what the runtime does for
/// these operators at run time).
fn run_known(node: &Node, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>, KernelError> {
    let ins: Vec<In> = inputs
        .iter()
        .map(|t| t.map_or(In::Absent, |t| In::Const(t.clone())))
        .collect();
    node.run(&ins)
}

fn value_dependent(e: KernelError, op: &str) {
    match e {
        KernelError::ValueDependent { op: o } if o == op => {}
        other => panic!("expected ValueDependent for {op}, got {other:?}"),
    }
}

fn shape_error(e: KernelError) {
    assert!(matches!(e, KernelError::Shape(_)), "{e:?}");
}

fn type_error(e: KernelError) {
    assert!(matches!(e, KernelError::UnsupportedType { .. }), "{e:?}");
}

/// Random values with many zeros and repeats, NaN and -0.0 for floats.
fn values(rng: &mut Rng, n: usize, float: bool) -> Vec<f64> {
    (0..n)
        .map(|_| match rng.below(8) {
            0 | 1 => 0.0,
            2 if float => f64::NAN,
            3 if float => -0.0,
            k => k as f64 - 5.0,
        })
        .collect()
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(strides(shape)).map(|(i, s)| i * s).sum()
}

/// `axis` in `[0, rank)`.
fn positive(axis: Option<i64>, rank: usize) -> Option<usize> {
    axis.map(|a| if a < 0 { a + rank as i64 } else { a } as usize)
}

// ---------------------------------------------------------------- NonZero

/// Coordinates of the nonzero elements, by the definition (NaN != 0).
fn nonzero_ref(shape: &[usize], v: &[f64]) -> (Vec<usize>, Vec<i64>) {
    let rows = shape.len().max(1);
    let hits: Vec<usize> = (0..v.len()).filter(|&i| v[i] != 0.0).collect();
    let mut out = vec![0i64; rows * hits.len()];
    for (j, &i) in hits.iter().enumerate() {
        for (d, c) in unravel(i, shape).into_iter().enumerate() {
            out[d * hits.len() + j] = c as i64;
        }
    }
    (vec![rows, hits.len()], out)
}

#[test]
fn nonzero_matches_definition_for_every_type() {
    let mut rng = Rng(1);
    let mut types = FLOATS.to_vec();
    types.extend([E::I8, E::I32, E::I64, E::U8, E::Bool]);
    let shapes: [&[usize]; 7] = [&[], &[7], &[3, 4], &[2, 3, 4], &[2, 1, 3, 2], &[0], &[2, 0]];
    for (opset, dtype, shape) in [9, 13]
        .into_iter()
        .flat_map(|o| types.iter().map(move |&t| (o, t)))
        .flat_map(|(o, t)| shapes.map(|s| (o, t, s)))
    {
        let mut v = values(&mut rng, numel(shape), FLOATS.contains(&dtype));
        if dtype == E::U8 {
            v.iter_mut().for_each(|x| *x = x.abs());
        }
        let x = tensor_of(dtype, shape, &v);
        let node = Node::new("NonZero", opset);
        let (want_shape, want) = nonzero_ref(shape, &v);
        let info = infer(&node, &[In::Const(x.clone())]).unwrap();
        assert_eq!(info[0].shape, want_shape, "{dtype} {shape:?}");
        let out = run_known(&node, &[Some(&x)]).unwrap().remove(0);
        assert_eq!(ints(&out), want, "{dtype} {shape:?}");
        value_dependent(infer(&node, &[In::Var(x)]).unwrap_err(), "NonZero");
    }
}

// ---------------------------------------------------------------- Compress

/// Kept slices (or elements), condition entries past the axis ignored.
fn compress_ref(shape: &[usize], x: &[f64], c: &[bool], axis: Option<usize>) -> Vec<f64> {
    let Some(a) = axis else {
        return x.iter().zip(c).filter(|p| *p.1).map(|p| *p.0).collect();
    };
    let keep: Vec<usize> = (0..shape[a]).filter(|&j| c.get(j) == Some(&true)).collect();
    let (mut out_shape, mut out) = (shape.to_vec(), Vec::new());
    out_shape[a] = keep.len();
    for i in 0..numel(&out_shape) {
        let mut idx = unravel(i, &out_shape);
        idx[a] = keep[idx[a]];
        out.push(x[ravel(&idx, shape)]);
    }
    out
}

#[test]
fn compress_matches_definition() {
    let mut rng = Rng(2);
    for &shape in &[&[6][..], &[3, 4], &[2, 3, 4], &[2, 0, 3]] {
        let rank = shape.len() as i64;
        for axis in std::iter::once(None).chain((-rank..rank).map(Some)) {
            let a = positive(axis, shape.len());
            let n = a.map_or(numel(shape), |a| shape[a]);
            // Shorter, equal and longer conditions (extra entries ignored).
            for (len, dtype) in [n.saturating_sub(1), n, n + 2]
                .into_iter()
                .flat_map(|l| [E::F32, E::I64, E::Bool].map(|t| (l, t)))
            {
                let x = tensor_of(dtype, shape, &values(&mut rng, numel(shape), false));
                let c: Vec<bool> = (0..len).map(|_| rng.below(2) == 1).collect();
                let cond = bt(&[len], &c);
                let mut node = Node::new("Compress", 11);
                if let Some(ax) = axis {
                    node = node.int("axis", ax);
                }
                let want = compress_ref(shape, &f64s(&x), &c, a);
                let want_shape = a.map_or(vec![want.len()], |a| {
                    let mut s = shape.to_vec();
                    s[a] = c.iter().take(n).filter(|&&b| b).count();
                    s
                });
                // X's value is not needed: only the condition's.
                let info = infer(&node, &[In::Var(x.clone()), In::Const(cond.clone())]);
                assert_eq!(info.unwrap()[0].shape, want_shape);
                let out = run_known(&node, &[Some(&x), Some(&cond)]).unwrap();
                assert_eq!((out[0].shape(), out[0].dtype()), (&want_shape[..], dtype));
                assert_same(&f64s(&out[0]), &want, &format!("{shape:?} axis {axis:?}"));
                let err = infer(&node, &[In::Const(x), In::Var(cond)]).unwrap_err();
                value_dependent(err, "Compress");
            }
        }
    }
}

#[test]
fn compress_refuses_bad_inputs() {
    let x = f32t(&[2, 3], &[1.0; 6]);
    let node = Node::new("Compress", 11).int("axis", 1);
    let not_bool = i64t(&[3], &[1, 0, 1]);
    type_error(run_known(&node, &[Some(&x), Some(&not_bool)]).unwrap_err());
    let two_d = bt(&[1, 3], &[true, false, true]);
    shape_error(run_known(&node, &[Some(&x), Some(&two_d)]).unwrap_err());
    let cond = bt(&[3], &[true, false, true]);
    let far = Node::new("Compress", 11).int("axis", 2);
    shape_error(run_known(&far, &[Some(&x), Some(&cond)]).unwrap_err());
    let scalar = f32t(&[], &[1.0]);
    shape_error(run_known(&node, &[Some(&scalar), Some(&cond)]).unwrap_err());
    // A scalar without an axis reads as one element.
    let flat = Node::new("Compress", 9);
    let out = run_known(&flat, &[Some(&scalar), Some(&bt(&[1], &[true]))]).unwrap();
    assert_eq!(out[0].shape(), &[1]);
}

// ---------------------------------------------------------------- Unique

/// numpy's order: numbers ascending, NaN above all and equal to NaN,
/// slices lexicographic.
fn less(a: &[f64], b: &[f64]) -> bool {
    for (x, y) in a.iter().zip(b) {
        match (x.is_nan(), y.is_nan()) {
            (true, true) => continue,
            (true, false) => return false,
            (false, true) => return true,
            _ if x != y => return x < y,
            _ => {}
        }
    }
    false
}

/// `(first, inverse, counts)` of the items, by a linear scan in order of
/// occurrence; sorted by ranking each group against every other.
fn unique_ref(items: &[Vec<f64>], sorted: bool) -> [Vec<usize>; 3] {
    let same = |a: &[f64], b: &[f64]| !less(a, b) && !less(b, a);
    let (mut first, mut inverse, mut counts) = (Vec::new(), Vec::new(), Vec::<usize>::new());
    for (j, it) in items.iter().enumerate() {
        let g = first.iter().position(|&f: &usize| same(&items[f], it));
        let g = g.unwrap_or_else(|| {
            first.push(j);
            counts.push(0);
            first.len() - 1
        });
        counts[g] += 1;
        inverse.push(g);
    }
    let u = first.len();
    let ranked = |g: usize| {
        let below = |h: &usize| less(&items[first[*h]], &items[first[g]]);
        if sorted {
            (0..u).filter(below).count()
        } else {
            g
        }
    };
    let rank: Vec<usize> = (0..u).map(ranked).collect();
    let (mut f2, mut c2) = (vec![0; u], vec![0; u]);
    for g in 0..u {
        (f2[rank[g]], c2[rank[g]]) = (first[g], counts[g]);
    }
    inverse.iter_mut().for_each(|v| *v = rank[*v]);
    [f2, inverse, c2]
}

fn check_unique(x: &Tensor, axis: Option<i64>, sorted: Option<i64>, outputs: usize) {
    let (shape, xv) = (x.shape(), f64s(x));
    let mut node = Node::new("Unique", 11).outputs(outputs);
    if let Some(a) = axis {
        node = node.int("axis", a);
    }
    if let Some(s) = sorted {
        node = node.int("sorted", s);
    }
    // The items: the elements, or the slices along the axis.
    let a = positive(axis, shape.len());
    let (outer, n, inner) = match a {
        None => (1, xv.len(), 1),
        Some(a) => (numel(&shape[..a]), shape[a], numel(&shape[a + 1..])),
    };
    let at = |o: usize, j: usize, i: usize| xv[(o * n + j) * inner + i];
    let item = |j: usize| {
        (0..outer * inner)
            .map(|k| at(k / inner, j, k % inner))
            .collect()
    };
    let items: Vec<Vec<f64>> = (0..n).map(item).collect();
    let [first, inverse, counts] = unique_ref(&items, sorted != Some(0));
    let u = first.len();
    let y_shape = a.map_or(vec![u], |a| {
        let mut s = shape.to_vec();
        s[a] = u;
        s
    });
    let what = format!("{shape:?} axis {axis:?} sorted {sorted:?}");
    let info = infer(&node, &[In::Const(x.clone())]).unwrap();
    assert_eq!(info.len(), outputs);
    assert_eq!(info[0].shape, y_shape, "{what}");
    let out = run_known(&node, &[Some(x)]).unwrap();
    // Y: each group's first-occurrence item laid back in place.
    let mut want_y = vec![0.0; outer * u * inner];
    for (k, y) in want_y.iter_mut().enumerate() {
        let (o, g, i) = (k / (u * inner), k / inner % u, k % inner);
        *y = at(o, first[g], i);
    }
    assert_same(&f64s(&out[0]), &want_y, &what);
    let want = [first, inverse, counts].map(|v| v.iter().map(|&x| x as i64).collect::<Vec<_>>());
    for (k, o) in out.iter().enumerate().skip(1) {
        assert_eq!(ints(o), want[k - 1], "{what}: output {k}");
    }
    value_dependent(infer(&node, &[In::Var(x.clone())]).unwrap_err(), "Unique");
}

#[test]
fn unique_matches_numpy_order_and_first_occurrences() {
    let mut rng = Rng(3);
    for dtype in [E::F32, E::F64, E::F16, E::I64, E::I32, E::U8] {
        for &shape in &[&[9][..], &[4, 3], &[3, 2, 2], &[0]] {
            let float = FLOATS.contains(&dtype);
            let mut v: Vec<f64> = values(&mut rng, numel(shape), float);
            if !float {
                // Fewer distinct values so that slices repeat.
                v.iter_mut().for_each(|x| *x = x.abs().min(2.0));
            }
            let x = tensor_of(dtype, shape, &v);
            let rank = shape.len() as i64;
            for sorted in [None, Some(1), Some(0)] {
                for axis in std::iter::once(None).chain((-rank..rank).map(Some)) {
                    check_unique(&x, axis, sorted, 4);
                }
            }
            check_unique(&x, None, Some(0), 1);
            check_unique(&x, Some(0), None, 3);
        }
    }
}

#[test]
fn unique_worked_examples_of_the_operator_documentation() {
    // ONNX's `sorted = 0` example.
    let x = f32t(&[6], &[2.0, 1.0, 1.0, 3.0, 4.0, 3.0]);
    let node = Node::new("Unique", 11).int("sorted", 0).outputs(4);
    let out = run_known(&node, &[Some(&x)]).unwrap();
    assert_eq!(out[0].as_f32().unwrap(), &[2.0, 1.0, 3.0, 4.0]);
    let got: Vec<Vec<i64>> = out[1..].iter().map(ints).collect();
    assert_eq!(got[..2], [vec![0, 1, 3, 4], vec![0, 1, 1, 2, 3, 2]]);
    assert_eq!(got[2], [1, 2, 2, 1]);
    // The axis example: [[1, 0, 0], [1, 0, 0], [2, 3, 4]] along axis 0.
    let x = f32t(&[3, 3], &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 4.0]);
    let node = Node::new("Unique", 11).int("axis", 0).outputs(4);
    let out = run_known(&node, &[Some(&x)]).unwrap();
    assert_eq!(out[0].shape(), &[2, 3]);
    let got: Vec<Vec<i64>> = out[1..].iter().map(ints).collect();
    assert_eq!(got, [vec![0, 2], vec![0, 0, 1], vec![2, 1]]);
    // -0.0 and 0.0 are one value that keeps its first occurrence; NaNs are
    // one value, last.
    let x = f32t(&[5], &[f32::NAN, -0.0, 1.0, 0.0, f32::NAN]);
    let out = run_known(&Node::new("Unique", 11).outputs(4), &[Some(&x)]).unwrap();
    assert_same(&f64s(&out[0]), &[-0.0, 1.0, f64::NAN], "signed zero");
    assert_eq!(ints(&out[3]), [2, 1, 2]);
}

#[test]
fn unique_refuses_bad_attributes_and_output_counts() {
    let x = f32t(&[2, 2], &[1.0; 4]);
    let far = Node::new("Unique", 11).int("axis", 2);
    shape_error(run_known(&far, &[Some(&x)]).unwrap_err());
    let e = Node::new("Unique", 11).int("sorted", 2).build(1);
    assert_eq!(attribute_error(e.unwrap_err()), "sorted");
    shape_error(Node::new("Unique", 11).outputs(5).build(1).unwrap_err());
    shape_error(run_known(&Node::new("Unique", 11), &[None]).unwrap_err());
}

// ---------------------------------------------------------------- NonMaxSuppression

/// The ONNX reference's `suppress_by_iou`, transcribed (f32).
fn suppress_ref(b1: &[f32], b2: &[f32], center: bool, iou: f32) -> bool {
    let mm = |a: f32, b: f32| if a >= b { (b, a) } else { (a, b) };
    // [x_min, x_max, y_min, y_max] of each box.
    let ext = |b: &[f32]| -> [f32; 4] {
        if center {
            let (w, h) = (b[2] / 2.0, b[3] / 2.0);
            [b[0] - w, b[0] + w, b[1] - h, b[1] + h]
        } else {
            let ((x0, x1), (y0, y1)) = (mm(b[1], b[3]), mm(b[0], b[2]));
            [x0, x1, y0, y1]
        }
    };
    // Python's max and min: the first unless the second is beyond it.
    let mx = |a: f32, b: f32| if b > a { b } else { a };
    let mn = |a: f32, b: f32| if b < a { b } else { a };
    let (p, q) = (ext(b1), ext(b2));
    let (ix, ixm, iy, iym) = (
        mx(p[0], q[0]),
        mn(p[1], q[1]),
        mx(p[2], q[2]),
        mn(p[3], q[3]),
    );
    if ixm <= ix || iym <= iy {
        return false;
    }
    let inter = (ixm - ix) * (iym - iy);
    let (a1, a2) = ((p[1] - p[0]) * (p[3] - p[2]), (q[1] - q[0]) * (q[3] - q[2]));
    let union = a1 + a2 - inter;
    if inter <= 0.0 || a1 <= 0.0 || a2 <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > iou
}

/// `max_output_boxes_per_class`, `iou_threshold`, `score_threshold`
/// (absent when `None`).
type Limits = (Option<i64>, Option<f32>, Option<f32>);

/// The ONNX reference selection: candidates above the score threshold,
/// sorted by `BoxInfo.__lt__` (score, then the higher index lower) and
/// popped from the top.
fn nms_ref(boxes: &[f32], scores: &[f32], d: [usize; 3], center: bool, l: Limits) -> Vec<i64> {
    let [nb, nc, ns] = d;
    let (max, iou, score) = (l.0.unwrap_or(0), l.1.unwrap_or(0.0), l.2);
    let lt = |a: (f32, usize), b: (f32, usize)| a.0 < b.0 || (a.0 == b.0 && a.1 > b.1);
    let mut out = Vec::new();
    for (b, c) in (0..nb).flat_map(|b| (0..nc).map(move |c| (b, c))) {
        let mut cand: Vec<(f32, usize)> = Vec::new();
        for i in 0..ns {
            let s = scores[(b * nc + c) * ns + i];
            if score.is_none_or(|t| s > t) {
                // Insertion into ascending order.
                let at = cand.iter().position(|&e| lt((s, i), e));
                cand.insert(at.unwrap_or(cand.len()), (s, i));
            }
        }
        let mut kept: Vec<usize> = Vec::new();
        let bx = |k: usize| &boxes[(b * ns + k) * 4..][..4];
        while let Some((_, i)) = cand.pop() {
            if kept.len() as i64 >= max {
                break;
            }
            if kept
                .iter()
                .all(|&k| !suppress_ref(bx(i), bx(k), center, iou))
            {
                kept.push(i);
                out.extend([b as i64, c as i64, i as i64]);
            }
        }
    }
    out
}

fn nms_node(center: i64) -> Node {
    let node = Node::new("NonMaxSuppression", 11);
    match center {
        0 => node,
        c => node.int("center_point_box", c),
    }
}

/// Runs NMS with every input known, checks it against the reference and
/// returns the selection.
fn check_nms(boxes: &Tensor, scores: &Tensor, center: bool, l: Limits) -> Vec<i64> {
    let ss = scores.shape();
    let as_f32 = |t: &Tensor| f64s(t).iter().map(|&v| v as f32).collect::<Vec<_>>();
    let d = [ss[0], ss[1], ss[2]];
    let want = nms_ref(&as_f32(boxes), &as_f32(scores), d, center, l);
    let m = l.0.map(|m| i64t(&[1], &[m]));
    let (t, s) = (l.1.map(|v| f32t(&[1], &[v])), l.2.map(|v| f32t(&[], &[v])));
    let mut ins = vec![Some(boxes), Some(scores), m.as_ref()];
    ins.extend([t.as_ref(), s.as_ref()]);
    let out = run_known(&nms_node(center as i64), &ins).unwrap().remove(0);
    let what = format!("{:?} {ss:?} {l:?}", boxes.shape());
    assert_eq!(out.shape(), &[want.len() / 3, 3], "{what}");
    assert_eq!(ints(&out), want, "{what}");
    want
}

#[test]
fn nms_matches_the_reference_on_random_boxes_with_ties() {
    let mut rng = Rng(4);
    for case in 0..300 {
        let mut dim = |n: u64, least: usize| least + rng.below(n) as usize;
        // Some classes past the sort's small-slice cutoff.
        let many = if case % 10 == 0 { 48 } else { 9 };
        let (nb, nc, ns) = (dim(2, 1), dim(3, 1), dim(many, 0));
        // Coordinates on a grid of quarters: exact IoUs, repeated boxes;
        // few score levels: many ties, broken by the lower index.
        let mut grid =
            |n: usize, k: u64| -> Vec<f64> { (0..n).map(|_| rng.below(k) as f64 * 0.25).collect() };
        let (bv, sv) = (grid(nb * ns * 4, 12), grid(nb * nc * ns, 4));
        let dtype = if case % 5 == 4 { E::F16 } else { E::F32 };
        let boxes = tensor_of(dtype, &[nb, ns, 4], &bv);
        let scores = tensor_of(dtype, &[nb, nc, ns], &sv);
        let max = [None, Some(0), Some(1), Some(3), Some(100), Some(-2)][case % 6];
        let iou = [None, Some(0.0), Some(0.25), Some(0.5), Some(1.0)][(case / 6) % 5];
        let score = [None, Some(0.25), Some(-1.0)][(case / 30) % 3];
        check_nms(&boxes, &scores, case % 2 == 1, (max, iou, score));
    }
}

/// The ONNX backend tests' boxes (`[y1, x1, y2, x2]`), corners flipped or
/// not.
#[rustfmt::skip]
fn onnx_boxes(flipped: bool) -> Tensor {
    let b: [f32; 24] = if flipped {
        [1.0, 1.0, 0.0, 0.0, 0.0, 0.1, 1.0, 1.1, 0.0, 0.9, 1.0, -0.1,
         0.0, 10.0, 1.0, 11.0, 1.0, 10.1, 0.0, 11.1, 1.0, 101.0, 0.0, 100.0]
    } else {
        [0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9,
         0.0, 10.0, 1.0, 11.0, 0.0, 10.1, 1.0, 11.1, 0.0, 100.0, 1.0, 101.0]
    };
    f32t(&[1, 6, 4], &b)
}

fn onnx_scores() -> Tensor {
    f32t(&[1, 1, 6], &[0.9, 0.75, 0.6, 0.95, 0.5, 0.3])
}

#[test]
fn nms_onnx_backend_cases() {
    let s = onnx_scores();
    for b in [onnx_boxes(false), onnx_boxes(true)] {
        let sel = check_nms(&b, &s, false, (Some(3), Some(0.5), Some(0.0)));
        assert_eq!(sel, [0, 0, 3, 0, 0, 0, 0, 0, 5]);
        let sel = check_nms(&b, &s, false, (Some(2), Some(0.5), Some(0.0)));
        assert_eq!(sel, [0, 0, 3, 0, 0, 0]);
        let sel = check_nms(&b, &s, false, (Some(3), Some(0.5), Some(0.4)));
        assert_eq!(sel, [0, 0, 3, 0, 0, 0]);
    }
    // center_point_box = 1: the same boxes as centres and sizes.
    let c: Vec<f32> = [0.5, 0.6, 0.4, 10.5, 10.6, 100.5]
        .iter()
        .flat_map(|&y| [0.5, y, 1.0, 1.0])
        .collect();
    let b = f32t(&[1, 6, 4], &c);
    let sel = check_nms(&b, &s, true, (Some(3), Some(0.5), Some(0.0)));
    assert_eq!(sel, [0, 0, 3, 0, 0, 0, 0, 0, 5]);
    // Identical boxes and scores: the lowest index only.
    let same: Vec<f32> = (0..10).flat_map(|_| [0.0, 0.0, 1.0, 1.0]).collect();
    let (b, s) = (f32t(&[1, 10, 4], &same), f32t(&[1, 1, 10], &[0.9; 10]));
    let sel = check_nms(&b, &s, false, (Some(3), Some(0.5), None));
    assert_eq!(sel, [0, 0, 0]);
}

#[test]
fn nms_thresholds_are_strict() {
    // IoU of the two boxes is exactly 0.5: kept at 0.5, suppressed below.
    let b = f32t(&[1, 2, 4], &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 2.0]);
    let s = f32t(&[1, 1, 2], &[0.5, 0.7]);
    let sel = check_nms(&b, &s, false, (Some(5), Some(0.5), None));
    assert_eq!(sel, [0, 0, 1, 0, 0, 0]);
    let sel = check_nms(&b, &s, false, (Some(5), Some(0.49), None));
    assert_eq!(sel, [0, 0, 1]);
    // A score equal to the threshold is dropped.
    let sel = check_nms(&b, &s, false, (Some(5), Some(1.0), Some(0.5)));
    assert_eq!(sel, [0, 0, 1]);
    // Equal scores: the lower index first.
    let tie = f32t(&[1, 1, 2], &[0.7, 0.7]);
    assert_eq!(check_nms(&b, &tie, false, (Some(1), None, None)), [0, 0, 0]);
}

#[test]
fn nms_shapes_follow_values_only_when_they_must() {
    let (b, s) = (onnx_boxes(false), onnx_scores());
    let (m, t) = (i64t(&[1], &[3]), f32t(&[1], &[0.5]));
    let node = nms_node(0);
    let all = |bx: In, mx: In| [bx, In::Const(s.clone()), mx, In::Const(t.clone())];
    // Unknown boxes, or an unknown limit: evaluated at run time.
    let e = infer(&node, &all(In::Var(b.clone()), In::Const(m.clone())));
    value_dependent(e.unwrap_err(), "NonMaxSuppression");
    let e = infer(&node, &all(In::Const(b.clone()), In::Var(m.clone())));
    value_dependent(e.unwrap_err(), "NonMaxSuppression");
    // Known: the exact count.
    let info = infer(&node, &all(In::Const(b.clone()), In::Const(m))).unwrap();
    assert_eq!((&info[0].shape[..], info[0].dtype), (&[3, 3][..], E::I64));
    // No limit, a limit of 0, or no boxes: nothing, whatever the values.
    let none = [In::Var(b.clone()), In::Var(s.clone())];
    assert_eq!(infer(&node, &none).unwrap()[0].shape, [0, 3]);
    let zero = all(In::Var(b.clone()), In::Const(i64t(&[], &[0])));
    assert_eq!(infer(&node, &zero).unwrap()[0].shape, [0, 3]);
    let (nb, ns) = (f32t(&[1, 0, 4], &[]), f32t(&[1, 1, 0], &[]));
    let empty = [In::Var(nb), In::Var(ns), In::Var(i64t(&[1], &[3]))];
    assert_eq!(infer(&node, &empty).unwrap()[0].shape, [0, 3]);
    let out = run_known(&node, &[Some(&b), Some(&s)]).unwrap();
    assert_eq!(out[0].shape(), &[0, 3]);
}

#[test]
fn nms_refuses_bad_inputs() {
    let node = nms_node(0);
    let (b, s, m) = (onnx_boxes(false), onnx_scores(), i64t(&[1], &[3]));
    let run = |ins: &[Option<&Tensor>]| run_known(&node, ins).unwrap_err();
    for (bx, sc) in [
        (f32t(&[6, 4], &[0.0; 24]), s.clone()),
        (f32t(&[1, 8, 3], &[0.0; 24]), s.clone()),
        (b.clone(), f32t(&[1, 6], &[0.0; 6])),
        (b.clone(), f32t(&[2, 1, 6], &[0.0; 12])),
        (b.clone(), f32t(&[1, 1, 5], &[0.0; 5])),
    ] {
        shape_error(run(&[Some(&bx), Some(&sc), Some(&m)]));
    }
    type_error(run(&[Some(&b), Some(&i32t(&[1, 1, 6], &[1; 6]))]));
    let (b64, s64) = (f64t(&[1, 1, 4], &[0.0; 4]), f64t(&[1, 1, 1], &[1.0]));
    type_error(run(&[Some(&b64), Some(&s64)]));
    type_error(run(&[Some(&b), Some(&s), Some(&f32t(&[1], &[3.0]))]));
    shape_error(run(&[Some(&b), Some(&s), Some(&i64t(&[2], &[3, 3]))]));
    for bad in [1.5, -0.1, f32::NAN] {
        let t = f32t(&[1], &[bad]);
        let e = run(&[Some(&b), Some(&s), Some(&m), Some(&t)]);
        assert!(matches!(e, KernelError::Invalid { .. }), "{e:?}");
    }
    let e = nms_node(2).build(2).unwrap_err();
    assert_eq!(attribute_error(e), "center_point_box");
}

// ---------------------------------------------------------------- moved operators

#[test]
fn topk_takes_k_known_at_run_time() {
    let mut rng = Rng(5);
    let v: Vec<f32> = (0..12).map(|_| rng.below(5) as f32).collect();
    let (x, k) = (f32t(&[2, 6], &v), i64t(&[1], &[4]));
    let node = Node::new("TopK", 11).outputs(2);
    let e = infer(&node, &[In::Var(x.clone()), In::Var(k.clone())]).unwrap_err();
    assert!(matches!(e, KernelError::NeedsConstant { .. }), "{e:?}");
    let out = run_known(&node, &[Some(&x), Some(&k)]).unwrap();
    assert_eq!(out[0].shape(), &[2, 4]);
    for r in 0..2 {
        // Largest first, ties to the lower index (a stable sort).
        let row = &v[r * 6..][..6];
        let mut order: Vec<usize> = (0..6).collect();
        order.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap());
        let want: Vec<i64> = order[..4].iter().map(|&i| i as i64).collect();
        assert_eq!(&ints(&out[1])[r * 4..][..4], want.as_slice());
        let vals: Vec<f32> = order[..4].iter().map(|&i| row[i]).collect();
        assert_eq!(&out[0].as_f32().unwrap()[r * 4..][..4], vals.as_slice());
    }
}

#[test]
fn onehot_and_roialign_resolve_in_the_detect_family() {
    let (idx, depth) = (i64t(&[3], &[0, 2, -1]), i64t(&[], &[3]));
    let on_off = f32t(&[2], &[0.0, 1.0]);
    let ins = [Some(&idx), Some(&depth), Some(&on_off)];
    let out = run_known(&Node::new("OneHot", 11), &ins).unwrap().remove(0);
    assert_eq!(out.shape(), &[3, 3]);
    assert_eq!(out.as_f32().unwrap(), &[1., 0., 0., 0., 0., 1., 0., 0., 1.]);
    let x = f32t(&[1, 1, 4, 4], &[2.0; 16]);
    let rois = f32t(&[1, 4], &[0.0, 0.0, 3.0, 3.0]);
    let node = Node::new("RoiAlign", 16).int("output_height", 2);
    let node = node.int("output_width", 2);
    let out = run_known(&node, &[Some(&x), Some(&rois), Some(&i64t(&[1], &[0]))]).unwrap();
    assert_eq!(out[0].shape(), &[1, 1, 2, 2]);
    assert_close(out[0].as_f32().unwrap(), &[2.0; 4], 1e-6);
}

// ---------------------------------------------------------------- no panics

/// Every operator on empty, huge-but-empty and scalar inputs, and with
/// outputs of the wrong shape: a result or an error, never a panic.
#[test]
fn odd_inputs_and_wrong_outputs_are_errors_not_panics() {
    let huge = Tensor::zeros(E::F32, vec![1 << 40, 3, 0]).unwrap();
    let cond = bt(&[3], &[true, false, true]);
    let (scalar, empty) = (f32t(&[], &[1.0]), f32t(&[0], &[]));
    let unique = |axis: i64| Node::new("Unique", 11).int("axis", axis).outputs(4);
    let compress = |axis: i64| Node::new("Compress", 11).int("axis", axis);
    let cases: Vec<(Node, Vec<Option<&Tensor>>)> = vec![
        (Node::new("NonZero", 13), vec![Some(&huge)]),
        (Node::new("NonZero", 13), vec![Some(&empty)]),
        (compress(1), vec![Some(&huge), Some(&cond)]),
        (Node::new("Compress", 11), vec![Some(&scalar), Some(&cond)]),
        (unique(1), vec![Some(&huge)]),
        (unique(0), vec![Some(&huge)]),
        (Node::new("Unique", 11).outputs(4), vec![Some(&scalar)]),
        (nms_node(1), vec![Some(&huge), Some(&huge)]),
    ];
    for (node, ins) in &cases {
        let _ = run_known(node, ins);
    }
    // Execute with outputs that disagree with the inputs.
    let x = f32t(&[2, 2], &[1.0, 0.0, 2.0, 3.0]);
    let (b, s, m) = (onnx_boxes(false), onnx_scores(), i64t(&[1], &[3]));
    let runs: Vec<(Node, Vec<Option<&Tensor>>, E)> = vec![
        (Node::new("NonZero", 13), vec![Some(&x)], E::I64),
        (compress(0), vec![Some(&x), Some(&cond)], E::F32),
        (Node::new("Unique", 11).outputs(4), vec![Some(&x)], E::F32),
        (nms_node(0), vec![Some(&b), Some(&s), Some(&m)], E::I64),
    ];
    for (node, ins, dtype) in &runs {
        let op = node.build(ins.len()).unwrap();
        let known: Vec<_> = ins.iter().map(|t| t.map(InputInfo::known)).collect();
        let want = op.infer(&known).unwrap().remove(0).shape;
        let shapes: [&[usize]; 6] = [&[0], &[1], &[2, 1], &[5, 3], &[1, 3], &[2, 0]];
        for shape in shapes {
            let mut outs: Vec<Tensor> = (0..node.outputs)
                .map(|k| Tensor::zeros(if k == 0 { *dtype } else { E::I64 }, shape.to_vec()))
                .collect::<Result<_, _>>()
                .unwrap();
            if op.execute(ins, None, &mut outs, &Sequential).is_ok() {
                // Only the right element count succeeds.
                assert_eq!(numel(&want), numel(shape), "{}", node.op_type);
            }
        }
        assert!(op.execute(ins, None, &mut [], &Sequential).is_err());
        let missing = vec![None; ins.len()];
        let mut outs = vec![Tensor::zeros(*dtype, vec![0]).unwrap()];
        assert!(op.execute(&missing, None, &mut outs, &Sequential).is_err());
    }
}
