#!/usr/bin/env python3
"""What ONNX Runtime's CPU EP computes in its quantized operators, measured.

Prints the findings of README.md "ONNX Runtime's integer arithmetic on
x86-64" on the machine it runs on (they depend on the instruction set MLAS
picks: AVX2 without VNNI here): which uint8 x int8 products saturate to
int16 in pairs, which k pairs, and the rounding of requantization,
QuantizeLinear, DynamicQuantizeLinear and the com.microsoft element-wise
operators. Every case is a one-node model run by an InferenceSession with
default options; the expectations are computed here with numpy.

    target/venv/bin/python tools/quant-models/ort_integer_arithmetic.py
"""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

F = np.float32


def run(node, feeds: dict, inits: dict = {}, nout: int = 1):  # noqa: B006 - read only
    infos = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    outs = [f"y{i}" for i in range(nout)]
    node.output[:] = outs
    graph = helper.make_graph([node], "g", infos, [helper.make_empty_tensor_value_info(o) for o in outs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    res = sess.run(None, feeds)
    return res if nout > 1 else res[0]


def node(op, inputs, domain="", **attrs):
    return helper.make_node(op, inputs, ["y0"], domain=domain, **attrs)


def f32(v):
    return np.array(v, F)


def qparams(a_t, b_t, ys=1.0, yz=0, y_t=np.uint8, bs=1.0):
    return {"as": f32(1), "az": np.array(0, a_t), "bs": np.asarray(bs, F), "bz": np.zeros(np.shape(bs), b_t),
            "ys": f32(ys), "yz": np.array(yz, y_t)}


def saturation():
    print("== uint8 x int8 pair saturation (A all a, B all b, K = 64)")
    k = 64
    for a_t, b_t, av, bv in [(np.uint8, np.int8, 255, 127), (np.uint8, np.int8, 255, -128), (np.uint8, np.uint8, 255, 255),
                             (np.int8, np.int8, -128, -128), (np.int8, np.int8, 127, 127), (np.int8, np.uint8, -128, 255)]:
        a, b = np.full((3, k), av, a_t), np.full((k, 5), bv, b_t)
        y = run(node("MatMulInteger", ["A", "B"]), {"A": a}, {"B": b})
        pairs = int(np.clip(2 * av * bv, -32768, 32767)) * (k // 2)
        print(f"  MatMulInteger {a_t.__name__} {av} x {b_t.__name__} {bv}: ORT {np.unique(y).tolist()}, exact {av * bv * k}, "
              f"pairs saturated to int16 {pairs}")
    a, b = np.full((2, k), 255, np.uint8), np.full((k, 3), 127, np.int8)
    exact, sat = 255 * 127 * k, 32767 * (k // 2)
    q = qparams(np.uint8, np.int8, ys=exact / 200)
    print(f"  requantized with y_scale = exact/200 (exact -> 200, saturated -> {sat / (exact / 200):.1f}):")
    print("    QLinearMatMul", np.unique(run(node("QLinearMatMul", ["A", "as", "az", "B", "bs", "bz", "ys", "yz"]), {"A": a}, {"B": b, **q})).tolist())
    print("    com.microsoft.QGemm (uint8 out)", np.unique(run(node("QGemm", ["A", "as", "az", "B", "bs", "bz", "", "ys", "yz"], "com.microsoft"), {"A": a}, {"B": b, **q})).tolist())
    x, w = np.full((1, k, 3, 3), 255, np.uint8), np.full((4, k, 1, 1), 127, np.int8)
    print("    QLinearConv 1x1, C = 64", np.unique(run(node("QLinearConv", ["x", "as", "az", "w", "bs", "bz", "ys", "yz"]), {"x": x}, {"w": w, **q})).tolist())
    print("    ConvInteger 1x1, C = 64 (int32 out)", np.unique(run(node("ConvInteger", ["x", "w"]), {"x": x}, {"w": w})).tolist(), "exact", exact)
    q = qparams(np.uint8, np.int8)
    print("    com.microsoft.MatMulIntegerToFloat", np.unique(run(node("MatMulIntegerToFloat", ["A", "B", "as", "bs", "az", "bz"], "com.microsoft"), {"A": a}, {"B": b, **q})).tolist())
    print("    com.microsoft.QGemm (float out)", np.unique(run(node("QGemm", ["A", "as", "az", "B", "bs", "bz"], "com.microsoft"), {"A": a}, {"B": b, **q})).tolist())
    for bv in (127, -128):
        y = run(node("DynamicQuantizeMatMul", ["A", "B", "bs"], "com.microsoft"), {"A": np.ones((2, k), F)}, {"B": np.full((k, 3), bv, np.int8), "bs": f32(1)})
        print(f"    com.microsoft.DynamicQuantizeMatMul A = 1.0 (q 255, scale 1/255), B = {bv}: {np.unique(y).tolist()}, "
              f"exact {bv * k:.1f}, saturated {int(np.clip(2 * 255 * bv, -32768, 32767)) * (k // 2) / 255:.4f}")

    print("== which k are paired (A = 255, B = 127 at the listed k, 0 elsewhere, K = 16)")
    a = np.full((1, 16), 255, np.uint8)
    for ks in [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (7, 8), (8, 9), (0, 1, 2, 3)]:
        b = np.zeros((16, 1), np.int8)
        b[list(ks)] = 127
        print(f"  k = {ks}: ORT {int(run(node('MatMulInteger', ['A', 'B']), {'A': a}, {'B': b})[0, 0])}, exact {255 * 127 * len(ks)}")
    bad = []
    for k in [1, 2, 3, 5, 7, 33, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1024]:
        y = int(run(node("MatMulInteger", ["A", "B"]), {"A": np.full((3, k), 255, np.uint8)}, {"B": np.full((k, 5), 127, np.int8)})[0, 0])
        if y != 32767 * (k // 2) + 32385 * (k % 2):
            bad.append(k)
    print(f"  K in 1..1024 (18 sizes): ORT == 32767 * (K // 2) + 255 * 127 * (K % 2) {'for all' if not bad else 'except ' + str(bad)}")
    a, b = np.full((1, 64), 255, np.uint8), np.full((64, 1), 127, np.int8)
    y = run(node("MatMulInteger", ["A", "B", "za"]), {"A": a}, {"B": b, "za": np.array(255, np.uint8)})
    print(f"  a_zero_point = 255 (every real A is 0): ORT {int(y[0, 0])}, exact 0; 32767 * 32 - 255 * 127 * 64 = {32767 * 32 - 255 * 127 * 64}")


def conv_pairs():
    print("== QLinearConv: which products are paired (x = 255 and w = 127 at two positions of one window)")

    def probe(c, k, group=1, mult=4, wz=0):
        cg = c // group
        pos = list(itertools.product(range(k), range(k), range(cg)))  # (kh, kw, c) order
        sat = []
        for p, q in itertools.combinations(range(len(pos)), 2):
            x = np.zeros((1, c, k, k), np.uint8)
            w = np.full((mult * group, cg, k, k), wz, np.int8)
            for i in (p, q):
                kh, kw, ch = pos[i]
                x[0, ch, kh, kw] = 255
                w[0, ch, kh, kw] = 127
            prm = qparams(np.uint8, np.int8, ys=255 * (127 - wz) * 2 / 200)
            prm["bz"] = np.array(wz, np.int8)
            y = run(node("QLinearConv", ["x", "as", "az", "w", "bs", "bz", "ys", "yz"], group=group), {"x": x}, {"w": w, **prm})
            if int(y[0, 0, 0, 0]) != 200:
                sat.append((p, q))
        ok = all(q == p + 1 and p % 2 == 0 for p, q in sat) and len(sat) == len(pos) // 2
        return f"C={c} k={k}x{k} group={group} M={mult * group} w_zp={wz}: {len(sat)} of {len(pos) * (len(pos) - 1) // 2} pairs saturate, " \
               f"{'exactly the (2j, 2j+1) of the (kh, kw, c) index' if ok else sat}"

    for args in [(3, 3), (5, 3), (4, 2), (8, 1, 1, 4, 5), (6, 3, 2), (9, 3, 9)]:
        print("  " + probe(*args))
    rng = np.random.default_rng(0)
    print("== QLinearConv: depthwise with channel multiplier 1 is exact (x in 128..255, |w| in 90..127)")
    for c, m, group in [(12, 12, 12), (1, 1, 1), (12, 24, 12), (12, 12, 6)]:
        x = rng.integers(128, 256, (1, c, 11, 13)).astype(np.uint8)
        w = (rng.integers(90, 128, (m, c // group, 3, 3)) * rng.choice([-1, 1], (m, c // group, 3, 3))).astype(np.int8)
        acc = conv_int(x, w, group)
        sy = float(np.abs(acc).max() / 120)
        y = run(node("QLinearConv", ["x", "as", "az", "w", "bs", "bz", "ys", "yz"], group=group, pads=[1, 1, 1, 1]), {"x": x},
                {"w": w, **qparams(np.uint8, np.int8, ys=sy, yz=128)}).astype(np.int64)
        exact = np.clip(np.rint(acc / np.float64(F(sy))) + 128, 0, 255)
        print(f"  C={c} M={m} group={group}: {int((y != exact).sum())} of {y.size} outputs differ from the exact convolution, "
              f"max by {int(np.abs(y - exact).max())}")


def conv_int(x, w, group):
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    m, cg, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    y = np.zeros((1, m, oh, ow), np.int64)
    mg = m // group
    for g in range(group):
        for i in range(kh):
            for j in range(kw):
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", x[:, g * cg:(g + 1) * cg, i:i + oh, j:j + ow],
                                                       w[g * mg:(g + 1) * mg, :, i, j].astype(np.int64))
    return y


def rne(v):
    return np.rint(v)


def away(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def requantization():
    print("== requantization: y = sat(round(acc * scale) + zp); outputs where candidate formulas differ")
    a = np.arange(256).astype(np.uint8)
    b = np.arange(-128, 128).astype(np.int8)
    acc = a.astype(np.int64)[:, None] * b.astype(np.int64)[None, :]
    rng = np.random.default_rng(2)
    tally, disc, runs = {}, {}, 0
    while runs < 40:
        sa, sb = F(rng.uniform(0.001, 0.05)), F(rng.uniform(0.001, 0.05))
        sy = F(rng.uniform(0.5, 4) * sa * sb * 100)
        forms = {
            "RNE(f32(acc) * f32(f32(a_s*b_s)/y_s))": rne(acc.astype(F) * F(F(sa * sb) / sy)),
            "RNE(f32(acc) * f32(a_s * f32(b_s/y_s)))": rne(acc.astype(F) * F(sa * F(sb / sy))),
            "RNE(f32(f32(acc*a_s)*b_s) / y_s)": rne(F(F(acc.astype(F) * sa) * sb) / sy),
            "RNE(exact f64)": rne(acc * np.float64(sa) * np.float64(sb) / np.float64(sy)),
            "half away from zero": away(acc.astype(F) * F(F(sa * sb) / sy)),
        }
        forms = {k: np.clip(v + 128, 0, 255) for k, v in forms.items()}
        vals = np.stack(list(forms.values()))
        d = np.any(vals != vals[0], axis=0)
        if not d.any():
            continue
        runs += 1
        q = qparams(np.uint8, np.int8, ys=sy, yz=128)
        q["as"], q["bs"] = f32(sa), f32(sb)
        got = {
            "QLinearMatMul": run(node("QLinearMatMul", ["A", "as", "az", "B", "bs", "bz", "ys", "yz"]), {"A": a.reshape(256, 1)}, {"B": b.reshape(1, 256), **q}),
            "QGemm": run(node("QGemm", ["A", "as", "az", "B", "bs", "bz", "", "ys", "yz"], "com.microsoft"), {"A": a.reshape(256, 1)}, {"B": b.reshape(1, 256), **q}),
            "QLinearConv": run(node("QLinearConv", ["x", "as", "az", "w", "bs", "bz", "ys", "yz"]), {"x": a.reshape(1, 1, 1, 256)}, {"w": b.reshape(256, 1, 1, 1), **q})[0, :, 0, :].T,
        }
        q["bs"], q["bz"] = np.full(256, sb, F), np.zeros(256, np.int8)
        got["QLinearConv per-channel"] = run(node("QLinearConv", ["x", "as", "az", "w", "bs", "bz", "ys", "yz"]), {"x": a.reshape(1, 1, 1, 256)}, {"w": b.reshape(256, 1, 1, 1), **q})[0, :, 0, :].T
        for op, y in got.items():
            disc[op] = disc.get(op, 0) + int(d.sum())
            t = tally.setdefault(op, {})
            for k, v in forms.items():
                t[k] = t.get(k, 0) + int(((v != y) & d).sum())
    for op, t in tally.items():
        print(f"  {op}: {disc[op]} discriminating outputs; mismatches: " + ", ".join(f"{k} {v}" for k, v in t.items()))
    y = run(node("QLinearMatMul", ["A", "as", "az", "B", "bs", "bz", "ys", "yz"]), {"A": np.arange(12, dtype=np.uint8).reshape(-1, 1)},
            {"B": np.ones((1, 1), np.int8), **qparams(np.uint8, np.int8, ys=2.0)})
    print(f"  ties: acc 0..11 times 0.5 -> {y.ravel().tolist()} (round half to even)")

    print("== float outputs (MatMulIntegerToFloat, QGemm without y_scale): 30 scale pairs x 65536 outputs")
    for op in ("MatMulIntegerToFloat", "QGemm"):
        t = {"f32(acc) * f32(a_s*b_s)": 0, "f32(f32(acc)*a_s) * b_s": 0}
        for _ in range(30):
            sa, sb = F(rng.uniform(0.001, 0.05)), F(rng.uniform(0.001, 0.05))
            q = {k: v for k, v in qparams(np.uint8, np.int8).items() if k in ("as", "az", "bs", "bz")}
            q["as"], q["bs"] = f32(sa), f32(sb)
            ins = ["A", "B", "as", "bs", "az", "bz"] if op == "MatMulIntegerToFloat" else ["A", "as", "az", "B", "bs", "bz"]
            y = run(node(op, ins, "com.microsoft"), {"A": a.reshape(256, 1)}, {"B": b.reshape(1, 256), **q})
            t["f32(acc) * f32(a_s*b_s)"] += int((acc.astype(F) * F(sa * sb) != y).sum())
            t["f32(f32(acc)*a_s) * b_s"] += int((F(acc.astype(F) * sa) * sb != y).sum())
        print(f"  {op} mismatches: " + ", ".join(f"{k} {v}" for k, v in t.items()))


def quantize_linear():
    print("== QuantizeLinear: near-tie inputs, u8/s8/u16/s16, ai.onnx and com.microsoft")
    rng = np.random.default_rng(3)
    t = {"sat(RNE(f32(x/s)) + zp)": 0, "sat(RNE(x * f32(1/s)) + zp)": 0, "sat(RNE(f32(x/s) + zp))": 0, "half away from zero": 0}
    nd = 0
    for dt, lo, hi in [(np.uint8, 0, 255), (np.int8, -128, 127), (np.uint16, 0, 65535), (np.int16, -32768, 32767)]:
        for domain in ("", "com.microsoft"):
            for _ in range(30):
                s = F(rng.uniform(1e-3, 1))
                zp = int(rng.integers(lo, hi + 1)) if dt in (np.uint8, np.int8) else int(rng.integers(lo // 4, hi // 4))
                q = (rng.integers(-200, 200, 4000) + rng.choice([0.5, -0.5, 0.25, 0.49999997, 0.50000006], 4000)).astype(F)
                x = (q * s).astype(F)
                x = np.nextafter(x, x + rng.choice([-1, 0, 1], 4000)).astype(F)
                y = run(node("QuantizeLinear", ["x", "s", "z"], domain), {"x": x}, {"s": f32(s), "z": np.array(zp, dt)}).astype(np.int64)
                forms = {
                    "sat(RNE(f32(x/s)) + zp)": np.clip(rne(x / s) + zp, lo, hi),
                    "sat(RNE(x * f32(1/s)) + zp)": np.clip(rne(x * F(F(1) / s)) + zp, lo, hi),
                    "sat(RNE(f32(x/s) + zp))": np.clip(rne(F(x / s) + F(zp)), lo, hi),
                    "half away from zero": np.clip(away(x / s) + zp, lo, hi),
                }
                vals = np.stack(list(forms.values()))
                d = np.any(vals != vals[0], axis=0)
                nd += int(d.sum())
                for k, v in forms.items():
                    t[k] += int(((v != y) & d).sum())
    print(f"  {nd} discriminating elements; mismatches: " + ", ".join(f"{k} {v}" for k, v in t.items()))


def dq_spec(x):
    mn, mx = min(F(0), x.min()), max(F(0), x.max())
    s = F(F(mx - mn) / F(255))
    zp = np.clip(rne(F(F(0) - F(mn / s))), 0, 255)
    return np.clip(rne(F(x / s)) + zp, 0, 255).astype(np.uint8), s, np.uint8(zp)


def dynamic_quantize():
    print("== DynamicQuantizeLinear against the ONNX formula (f32 arithmetic)")
    rng = np.random.default_rng(4)
    bad = 0
    for t in range(400):
        shape = (int(rng.integers(1, 40)), int(rng.integers(1, 70)))
        kind = t % 5
        if kind == 0:
            x = (rng.standard_normal(shape) * rng.uniform(0.01, 10)).astype(F)
        elif kind == 1:
            x = np.abs(rng.standard_normal(shape)).astype(F)
        elif kind == 2:
            x = -np.abs(rng.standard_normal(shape)).astype(F)
        elif kind == 3:
            x = ((rng.integers(-100, 100, shape) + 0.5) * F(rng.uniform(0.01, 0.1))).astype(F)
        else:
            x = rng.uniform(-1, 3, shape).astype(F)
        y, s, z = run(node("DynamicQuantizeLinear", ["x"]), {"x": x}, nout=3)
        ey, es, ez = dq_spec(x)
        bad += not (np.array_equal(y, ey) and es == s and ez == z)
    print(f"  400 random arrays: {bad} differ from scale = (max(0, max x) - min(0, min x)) / 255, zp = sat(RNE(0 - min/scale)), "
          "y = sat(RNE(x / scale) + zp)")
    x = np.array([-2.5, 252.5, 0.0], F) * F(0.25)
    y, s, z = run(node("DynamicQuantizeLinear", ["x"]), {"x": x}, nout=3)
    print(f"  x = {x.tolist()} (-min/scale = 2.5): scale {float(s)}, zero point {int(z)}, y {y.tolist()}")
    y, s, z = run(node("DynamicQuantizeLinear", ["x"]), {"x": np.zeros(3, F)}, nout=3)
    print(f"  x all zeros: scale {float(s)}, zero point {int(z)}, y {y.tolist()}")

    print("== DynamicQuantizeMatMul = DynamicQuantizeLinear(A), saturating u8 x s8 pairs, f32(acc) * f32(a_s*b_s) + bias")
    t = {"saturating pairs": 0, "exact accumulator": 0}
    worst = 0.0
    for i in range(30):
        m, k, n = int(rng.integers(1, 9)), int(rng.integers(1, 80)), int(rng.integers(1, 40))
        a = (rng.standard_normal((m, k)) * rng.uniform(0.1, 5)).astype(F)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
        bs, bz = rng.uniform(0.001, 0.05, n).astype(F), rng.integers(-128, 128, n).astype(np.int8)
        bias = rng.standard_normal(n).astype(F)
        y = run(node("DynamicQuantizeMatMul", ["A", "B", "bs", "bz", "bias"], "com.microsoft"), {"A": a}, {"B": b, "bs": bs, "bz": bz, "bias": bias})
        aq, sa, za = dq_spec(a)
        p = aq.astype(np.int64)[:, :, None] * b.astype(np.int64)[None]
        if k % 2:
            p = np.concatenate([p, np.zeros((m, 1, n), np.int64)], 1)
        sat = np.clip(p[:, 0::2] + p[:, 1::2], -32768, 32767).sum(1)
        corr = -int(za) * b.astype(np.int64).sum(0)[None] - bz.astype(np.int64) * aq.astype(np.int64).sum(1)[:, None] + k * int(za) * bz.astype(np.int64)
        for label, raw in (("saturating pairs", sat), ("exact accumulator", aq.astype(np.int64) @ b.astype(np.int64))):
            v = (raw + corr).astype(F) * F(sa * bs) + bias
            t[label] += int((v != y).sum())
            if label == "exact accumulator":
                worst = max(worst, float(np.abs(v - y).max() / np.abs(y).max()))
    print(f"  30 random cases, full-range int8 B: elements not bit-equal: {t}; the exact accumulator is off by up to {worst:.2f} * max|y|")


def elementwise():
    print("== com.microsoft element-wise operators against RNE of the exact (f64) value")
    rng = np.random.default_rng(6)
    for dt, lo, hi in [(np.uint8, 0, 255), (np.int8, -128, 127)]:
        av = np.arange(lo, hi + 1).astype(dt)
        a2, b2 = np.repeat(av[:, None], 256, 1), np.repeat(av[None, :], 256, 0)
        stats = {}
        for _ in range(25):
            sa, sb, sc = (F(v) for v in rng.uniform(0.005, 0.1, 3))
            za, zb, zc = (int(v) for v in rng.integers(lo, hi + 1, 3))
            p = {"as": f32(sa), "az": np.array(za, dt), "bs": f32(sb), "bz": np.array(zb, dt), "cs": f32(sc), "cz": np.array(zc, dt)}
            da, db = (a2.astype(np.float64) - za) * sa, (b2.astype(np.float64) - zb) * sb
            y = run(node("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], "com.microsoft"), {"a": a2, "b": b2}, p).astype(np.int64)
            exact = np.clip(rne((da + db) / sc) + zc, lo, hi)
            ra, rb = F(sa / sc), F(sb / sc)
            fixed = F(F(zc) - F(np.float64(ra) * F(za) + np.float64(F(rb * F(zb)))))
            inner = F(b2.astype(np.float64) * rb + np.float64(fixed))
            mlas = np.clip(rne(F(a2.astype(np.float64) * ra + np.float64(inner))), lo, hi)
            s = stats.setdefault("QLinearAdd", [0, 0, 0])
            s[0] += int((y != exact).sum())
            s[1] = max(s[1], int(np.abs(y - exact).max()))
            s[2] += int((y != mlas).sum())
            p["cs"] = f32(F(sc * F(0.01)))
            y = run(node("QLinearMul", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], "com.microsoft"), {"a": a2, "b": b2}, p).astype(np.int64)
            exact = np.clip(rne(da * db / np.float64(p["cs"])) + zc, lo, hi)
            s = stats.setdefault("QLinearMul", [0, 0, 0])
            s[0] += int((y != exact).sum())
            s[1] = max(s[1], int(np.abs(y - exact).max()))
        n = 25 * 65536
        add = stats["QLinearAdd"]
        print(f"  {dt.__name__} QLinearAdd: {add[0]} of {n} differ from RNE(exact), by at most {add[1]}; "
              f"{add[2]} differ from the AVX2 kernel's formula (rA = a_s/c_s, rB = b_s/c_s, fixed = c_zp - fma(rA, a_zp, rB*b_zp), "
              "y = RNE(fma(a, rA, fma(b, rB, fixed))))")
        mul = stats["QLinearMul"]
        print(f"  {dt.__name__} QLinearMul: {mul[0]} of {n} differ from RNE(exact), by at most {mul[1]}")
        for op, attrs, f in [("QLinearSigmoid", {}, lambda v: 1 / (1 + np.exp(-v))), ("QLinearLeakyRelu", {"alpha": 0.1}, lambda v: np.where(v >= 0, v, v * float(F(0.1))))]:
            diffs = 0
            for _ in range(20):
                xs, xz = F(rng.uniform(0.01, 0.1)), int(rng.integers(lo, hi + 1))
                ys, yz = (F(1 / 256), lo) if op == "QLinearSigmoid" else (F(rng.uniform(0.01, 0.1)), int(rng.integers(lo, hi + 1)))
                y = run(node(op, ["x", "xs", "xz", "ys", "yz"], "com.microsoft", **attrs), {"x": av},
                        {"xs": f32(xs), "xz": np.array(xz, dt), "ys": f32(ys), "yz": np.array(yz, dt)}).astype(np.int64)
                diffs += int((y != np.clip(rne(f((av.astype(np.float64) - xz) * xs) / ys) + yz, lo, hi)).sum())
            print(f"  {dt.__name__} {op}: {diffs} of {20 * 256} table entries differ from RNE(exact)")
        pools(rng, dt, lo, hi)


def pools(rng, dt, lo, hi):
    """QLinearGlobalAveragePool, QLinearAveragePool and QLinearConcat on
    random data (no near-ties targeted)."""
    counts = {"QLinearGlobalAveragePool": [0, 0], "QLinearAveragePool": [0, 0], "QLinearConcat": [0, 0]}
    for _ in range(20):
        x = rng.integers(lo, hi + 1, (2, 5, 7, 9)).astype(dt)
        xs, xz, ys, yz = F(rng.uniform(0.01, 0.1)), int(rng.integers(lo, hi + 1)), F(rng.uniform(0.01, 0.1)), int(rng.integers(lo, hi + 1))
        p = {"xs": f32(xs), "xz": np.array(xz, dt), "ys": f32(ys), "yz": np.array(yz, dt)}
        real = (x.astype(np.float64) - xz) * xs
        y = run(node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], "com.microsoft", channels_last=0), {"x": x}, p)
        exact = np.clip(rne(real.mean(axis=(2, 3), keepdims=True) / ys) + yz, lo, hi)
        counts["QLinearGlobalAveragePool"][0] += int((y != exact).sum())
        counts["QLinearGlobalAveragePool"][1] += y.size
        y = run(node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], "com.microsoft", kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1], count_include_pad=1), {"x": x}, p)
        padded = np.pad(real, ((0, 0), (0, 0), (1, 1), (1, 1)))
        mean = np.stack([np.stack([padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].mean(axis=(2, 3)) for j in range(5)], -1) for i in range(4)], -2)
        exact = np.clip(rne(mean / ys) + yz, lo, hi)
        counts["QLinearAveragePool"][0] += int((y != exact).sum())
        counts["QLinearAveragePool"][1] += y.size
        x2 = rng.integers(lo, hi + 1, (2, 3, 7, 9)).astype(dt)
        s2, z2 = F(rng.uniform(0.01, 0.1)), int(rng.integers(lo, hi + 1))
        y = run(node("QLinearConcat", ["ys", "yz", "x", "xs", "xz", "x2", "s2", "z2"], "com.microsoft", axis=1), {"x": x, "x2": x2},
                {**p, "s2": f32(s2), "z2": np.array(z2, dt)})
        exact = np.clip(rne(np.concatenate([real, (x2.astype(np.float64) - z2) * s2], 1) / ys) + yz, lo, hi)
        counts["QLinearConcat"][0] += int((y != exact).sum())
        counts["QLinearConcat"][1] += y.size
    for op, (d, n) in counts.items():
        print(f"  {dt.__name__} {op}: {d} of {n} outputs differ from RNE(exact)")


def main():
    print(f"ONNX Runtime {ort.__version__}, CPUExecutionProvider, default session options")
    saturation()
    conv_pairs()
    requantization()
    quantize_linear()
    dynamic_quantize()
    elementwise()


if __name__ == "__main__":
    main()
