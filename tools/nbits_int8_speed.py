"""Single-node MatMulNBits: ORT (accuracy_level 4 = int8 activations, and 0)
vs onnx-prepared `run --repeat` (f32 and --int8-activations), K x N in
{512 x 2048, 2048 x 512}, block 32, M in {1, 128}, 1 and 2 threads.

    PYTHON tools/nbits_int8_speed.py BIN [REPEAT=200] [OUT_DIR=target/int8-bench]

Needs numpy, onnx and onnxruntime. Writes the models, inputs and
nbits_speed.json to OUT_DIR; prints one line per case."""
import json, statistics, subprocess, sys, time
from pathlib import Path
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort

BIN = sys.argv[1]
here = Path(sys.argv[3]) if len(sys.argv) > 3 else Path("target/int8-bench")
here.mkdir(parents=True, exist_ok=True)
REPEAT = int(sys.argv[2]) if len(sys.argv) > 2 else 200
rng = np.random.default_rng(0)

def model(k, n, level, bs=32):
    blocks = (k + bs - 1) // bs
    b = rng.integers(0, 256, size=(n, blocks, bs // 2), dtype=np.uint8)
    s = (0.01 + 0.01 * rng.random(n * blocks)).astype(np.float32)
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=bs, accuracy_level=level)
    g = helper.make_graph([node], "nbits",
                          [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
                          [numpy_helper.from_array(b, "B"), numpy_helper.from_array(s, "scales")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m

def time_ort(path, a, threads):
    o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
    for _ in range(20): sess.run(None, {"A": a})
    ts = []
    for _ in range(REPEAT):
        t = time.perf_counter(); sess.run(None, {"A": a}); ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts), sess.run(None, {"A": a})[0]

def time_ours(path, npz, threads, int8):
    cmd = [BIN, "run", str(path), "--inputs", str(npz), "--repeat", str(REPEAT), "--threads", str(threads), "--mode", "hot"]
    if int8: cmd.append("--int8-activations")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    return json.loads(line)["median_ms"]

rows = []
for k, n in [(512, 2048), (2048, 512)]:
    p4, p0 = here / f"nbits_{k}x{n}_l4.onnx", here / f"nbits_{k}x{n}_l0.onnx"
    m4 = model(k, n, 4)
    onnx.save(m4, p4)
    m0 = onnx.ModelProto(); m0.CopyFrom(m4)
    for a in m0.graph.node[0].attribute:
        if a.name == "accuracy_level": a.i = 0
    onnx.save(m0, p0)
    for mm in [1, 128]:
        a = rng.standard_normal((mm, k)).astype(np.float32)
        npz = here / f"a_{k}_{mm}.npz"
        np.savez(npz, A=a)
        for th in [1, 2]:
            ort4, y4 = time_ort(p4, a, th)
            ort0, y0 = time_ort(p0, a, th)
            f32 = time_ours(p4, npz, th, False)
            i8 = time_ours(p4, npz, th, True)
            mx = np.abs(y0).max()
            err = float(np.abs(y4 - y0).max() / mx)
            # Our int8 output against ORT's level 4 (the same scheme).
            subprocess.run([BIN, "run", str(p4), "--inputs", str(npz), "--outputs", str(here / "y.npz"),
                            "--int8-activations"], check=True, capture_output=True)
            ours = np.load(here / "y.npz")["Y"]
            parity = float(np.abs(ours - y4).max() / mx)
            rows.append(dict(k=k, n=n, m=mm, threads=th, ort_l4=ort4, ort_l0=ort0, ours_f32=f32, ours_int8=i8,
                             ort_l4_err=err, ours_int8_vs_ort_l4=parity))
            print(f"K={k} N={n} M={mm:<3} t={th}: ORT l4 {ort4:.4f} l0 {ort0:.4f} | ours f32 {f32:.4f} int8 {i8:.4f} | "
                  f"int8/ORT-l4 {i8/ort4:.2f} f32/ORT-l0 {f32/ort0:.2f} int8/f32 {i8/f32:.2f} | "
                  f"ORT l4 vs exact {err:.4f}, ours int8 vs ORT l4 {parity:.1e}", flush=True)
(here / "nbits_speed.json").write_text(json.dumps(rows, indent=1))
