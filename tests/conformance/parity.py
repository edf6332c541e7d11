#!/usr/bin/env python3
"""Output parity of `onnx-prepared run` with ONNX Runtime on the fixtures.

    python tests/conformance/parity.py --bin PATH --fixtures DIR [--threads N]

For every *.onnx in DIR (sorted), deterministic inputs (numpy default_rng,
fixed seeds) go through ONNX Runtime (CPUExecutionProvider, default session
options) and through `onnx-prepared run --inputs X.npz --outputs Y.npz`, in
three modes: `--threads N` (default 1), `--threads N --portable` (scalar
kernels) and `--threads 2` (skipped when N is 2). Every output of every mode
is compared with ORT's under the same tolerance, so the modes also agree with
each other to within twice that.

Scenarios:
  * gemm-* and other generic models: each symbolic dim (`batch`) set to 1 and
    to 7 (one row, and a count that is not a multiple of a SIMD width);
    inputs standard normal.
  * tiny-llm (recognized by its `input_ids` input): prefill T=128, P=0 with
    random token ids and the causal bias, then ONE decode step T=1, P=128
    whose past_key_i / past_value_i are the prefill's present_key_i /
    present_value_i. The decode step is checked twice:
      - "decode own cache": each runtime is fed its OWN prefill presents (ours
        ours, ORT ORT's) - the end-to-end result a user of either runtime
        gets, prefill error included;
      - "decode ORT cache": we are fed ORT's prefill presents - the decode
        step's own error, so a prefill error that the cache carries forward
        cannot hide (or be blamed for) a decode error.

Tolerance, relative to the output's magnitude: for each output,
    max |ours - ORT| <= rtol * max |ORT|
  * rtol 1e-4 for the f32 Gemm models and many-small-nodes: K <= 256 f32 dot
    products summed in a different order differ by ~1e-6 relative (measured:
    ORT vs a float64 numpy evaluation of the same graphs, 5e-7 to 1.1e-6);
    1e-4 leaves room for FMA vs mul+add and blocked or threaded summation,
    and still catches any indexing, transpose or bias mistake (those give
    O(1) relative errors).
  * rtol 2e-4 for tiny-llm: both runtimes dequantize the same 4-bit weights
    exactly (integer nibble - 8, times an f32 scale), so the only differences
    are f32 summation order (K up to 2048) and the exp/sqrt/sigmoid
    approximations, compounded through 4 blocks (RMSNorm, softmax over up to
    129 keys, SiLU MLP) and, for "decode own cache", through the prefill's
    cache. Measured: ORT vs a float64 numpy evaluation differs by 1.1e-6
    relative on the prefill logits, 1.6e-7 on the decode logits; a factor of
    ~200 above that allows for a coarser exp or rsqrt approximation, while a
    wrong scale, mask, rotation or cache offset moves the outputs by >1e-2.
Relative-to-max (not element-wise) because logits and attention values cross
zero: element-wise relative error is meaningless near zero.

Prints one line per output (name, shape, max abs err, relative err, tolerance,
OK/FAIL), then `N passed, N failed`; exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # keep tests/conformance free of __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RunFailed,
    binary_exists,
    causal_bias,
    max_abs,
    max_abs_err,
    read_npz,
    run_cli,
    write_npz,
)

RTOL_F32 = 1e-4
RTOL_TINY_LLM = 2e-4
GENERIC_SIZES = (1, 7)
PREFILL_T = 128
DECODE_P = PREFILL_T


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.model = ""
        # model -> [passed, failed, worst relative error]
        self.per_model: dict[str, list] = {}

    def start(self, model: str):
        self.model = model
        self.per_model[model] = [0, 0, None]

    def ok(self, rel: float):
        self.passed += 1
        entry = self.per_model[self.model]
        entry[0] += 1
        entry[2] = rel if entry[2] is None else max(entry[2], rel)

    def fail(self, label: str, reason: str = "", rel: float | None = None):
        self.failed += 1
        entry = self.per_model[self.model]
        entry[1] += 1
        if rel is not None:
            entry[2] = rel if entry[2] is None else max(entry[2], rel)
        if reason:
            print(f"  FAIL  {label}: {reason}")

    def summary(self):
        print("per fixture: checks passed/failed, worst relative error")
        for model, (p, f, worst) in self.per_model.items():
            shown = "n/a (nothing compared)" if worst is None else f"{worst:.3e}"
            print(f"  {model:<26} {p:>4} passed {f:>4} failed   worst rel_err {shown}")


def compare(tally: Tally, ours: dict, ref: dict, rtol: float, indent="  ") -> dict:
    """Checks every output of `ref` against `ours`; returns name -> ok."""
    oks = {}
    for name, r in ref.items():
        o = ours.get(name)
        if o is None:
            tally.fail(name, "missing from our outputs")
            oks[name] = False
            continue
        shape = list(r.shape)
        if list(o.shape) != shape:
            tally.fail(name, f"shape {list(o.shape)}, ORT {shape}")
            oks[name] = False
            continue
        if o.dtype != r.dtype:
            tally.fail(name, f"dtype {o.dtype}, ORT {r.dtype}")
            oks[name] = False
            continue
        err = max_abs_err(o, r)
        scale = max_abs(r)
        rel = err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))
        tol = rtol * scale
        ok = err <= tol
        status = "OK  " if ok else "FAIL"
        print(
            f"{indent}{status}  {name:<18} {str(shape):<16} max_abs_err={err:.3e}  "
            f"rel_err={rel:.3e}  tol={tol:.3e} (rtol {rtol:.0e})"
        )
        if ok:
            tally.ok(rel)
        else:
            tally.fail(name, rel=rel)
        oks[name] = ok
    extra = sorted(set(ours) - set(ref))
    if extra:
        tally.fail("outputs", f"extra outputs {extra}")
    return oks


class Runner:
    """Runs ORT and ours; every input/output .npz goes to a temp dir."""

    def __init__(self, binary: str, workdir: Path):
        self.binary = binary
        self.workdir = workdir
        self.count = 0

    def ours(self, model: Path, feeds: dict, threads: int, portable: bool) -> dict:
        self.count += 1
        inp = self.workdir / f"in{self.count}.npz"
        out = self.workdir / f"out{self.count}.npz"
        write_npz(inp, feeds)
        run_cli(self.binary, model, inp, out, threads=threads, portable=portable)
        return read_npz(out)


def ort_session(model: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])


def ort_run(sess, feeds: dict) -> dict:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def modes(threads: int):
    out = [(f"threads={threads}", threads, False), (f"threads={threads} portable", threads, True)]
    if threads != 2:
        out.append(("threads=2", 2, False))
    return out


def random_feeds(sess, dims: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in sess.get_inputs():
        shape = [d if isinstance(d, int) else dims[d] for d in inp.shape]
        if inp.type == "tensor(float)":
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
        elif inp.type == "tensor(int64)":
            feeds[inp.name] = rng.integers(0, 10, size=shape, dtype=np.int64)
        else:
            raise ValueError(f"{inp.name}: no generator for {inp.type}")
    return feeds


def check_generic(model: Path, runner: Runner, tally: Tally, threads: int):
    sess = ort_session(model)
    symbolic = sorted({d for i in sess.get_inputs() for d in i.shape if not isinstance(d, int)})
    sizes = GENERIC_SIZES if symbolic else (None,)
    for size in sizes:
        dims = {d: size for d in symbolic}
        feeds = random_feeds(sess, dims, seed=1 + (size or 0))
        ref = ort_run(sess, feeds)
        scenario = ", ".join(f"{k}={v}" for k, v in dims.items()) or "fixed shapes"
        for label, n, portable in modes(threads):
            print(f"{model.name} {scenario} [{label}]")
            try:
                ours = runner.ours(model, feeds, n, portable)
            except RunFailed as e:
                tally.fail("run", str(e))
                continue
            compare(tally, ours, ref, RTOL_F32)


def tiny_llm_feeds(sess, t: int, p: int, seed: int, past: dict | None) -> dict:
    """input_ids uniform over the vocabulary, the causal bias, and the past
    cache (`past` maps past_* names to arrays; zeros-length when P=0)."""
    rng = np.random.default_rng(seed)
    logits = next(o for o in sess.get_outputs() if o.name == "logits")
    vocab = logits.shape[2]
    feeds = {}
    for inp in sess.get_inputs():
        if inp.name == "input_ids":
            feeds[inp.name] = rng.integers(0, vocab, size=(1, t), dtype=np.int64)
        elif inp.name == "attn_bias":
            feeds[inp.name] = causal_bias(t, p)
        elif inp.name.startswith("past_"):
            if past is None:
                shape = [p if d == "P" else d for d in inp.shape]
                feeds[inp.name] = np.zeros(shape, dtype=np.float32)
            else:
                feeds[inp.name] = np.ascontiguousarray(past[inp.name])
        else:
            raise ValueError(f"tiny-llm: unexpected input {inp.name}")
    return feeds


def presents_as_past(outputs: dict) -> dict:
    return {
        "past_" + name[len("present_"):]: value
        for name, value in outputs.items()
        if name.startswith("present_")
    }


def check_tiny_llm(model: Path, runner: Runner, tally: Tally, threads: int):
    sess = ort_session(model)
    prefill = tiny_llm_feeds(sess, PREFILL_T, 0, seed=11, past=None)
    ort_prefill = ort_run(sess, prefill)
    ort_past = presents_as_past(ort_prefill)
    decode_ort_cache = tiny_llm_feeds(sess, 1, DECODE_P, seed=12, past=ort_past)
    ort_decode = ort_run(sess, decode_ort_cache)
    for label, n, portable in modes(threads):
        print(f"{model.name} prefill T={PREFILL_T} P=0 [{label}]")
        try:
            ours_prefill = runner.ours(model, prefill, n, portable)
            compare(tally, ours_prefill, ort_prefill, RTOL_TINY_LLM)
        except RunFailed as e:
            tally.fail("run", str(e))
            ours_prefill = None

        print(f"{model.name} decode T=1 P={DECODE_P}, own cache [{label}]")
        if ours_prefill is None:
            tally.fail("run", "not run: our prefill failed")
        else:
            past = presents_as_past(ours_prefill)
            missing = sorted(set(ort_past) - set(past))
            if missing:
                tally.fail("run", f"not run: our prefill lacks {missing}")
            else:
                # Same seed: same token id as ORT's decode, only the cache differs.
                feeds = tiny_llm_feeds(sess, 1, DECODE_P, seed=12, past=past)
                try:
                    compare(tally, runner.ours(model, feeds, n, portable), ort_decode, RTOL_TINY_LLM)
                except RunFailed as e:
                    tally.fail("run", str(e))

        print(f"{model.name} decode T=1 P={DECODE_P}, ORT cache [{label}]")
        try:
            ours = runner.ours(model, decode_ort_cache, n, portable)
            compare(tally, ours, ort_decode, RTOL_TINY_LLM)
        except RunFailed as e:
            tally.fail("run", str(e))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="the onnx-prepared binary")
    parser.add_argument("--fixtures", required=True, type=Path, help="the make-fixtures output dir")
    parser.add_argument("--threads", type=int, default=1, help="--threads of the main mode (default 1)")
    args = parser.parse_args()

    if not binary_exists(args.bin):
        print(f"error: {args.bin} not found", file=sys.stderr)
        return 2
    models = sorted(args.fixtures.glob("*.onnx"))
    if not models:
        print(f"error: no *.onnx in {args.fixtures}", file=sys.stderr)
        return 2
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="parity-") as tmp:
        runner = Runner(args.bin, Path(tmp))
        for model in models:
            tally.start(model.name)
            try:
                names = {i.name for i in ort_session(model).get_inputs()}
                if "input_ids" in names:
                    check_tiny_llm(model, runner, tally, args.threads)
                else:
                    check_generic(model, runner, tally, args.threads)
            except Exception as e:  # noqa: BLE001 - a harness or ORT error fails the model
                tally.fail(model.name, f"{type(e).__name__}: {e}")
    tally.summary()
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 1 if tally.failed else 0


if __name__ == "__main__":
    sys.exit(main())
