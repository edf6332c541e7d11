#!/usr/bin/env python3
"""Steady-state speed of tiny-llm in ONNX Runtime and in onnx-prepared.

    python tests/conformance/compare_speed.py --bin PATH --fixtures DIR
        [--threads 1,2] [--repeat 20] [--warmup 3] [--rounds 1] [--json PATH]
        [--int8-activations] [--statistic median|min] [--feeds X.npz]

Cases: prefill (T=128, P=0) and one decode step (T=1, P=128, the cache being
ORT's prefill presents; the values do not change the work).
  * ORT: one InferenceSession per thread count (CPUExecutionProvider,
    intra_op_num_threads=N, inter_op_num_threads=1, default graph
    optimizations), --warmup untimed runs, then the median of --repeat timed
    session.run calls.
  * onnx-prepared: `run MODEL --inputs X.npz --repeat R --threads N`; its
    JSON line's median_ms (the first run, which prepares shapes and buffers,
    is excluded from the median and reported separately).
With --rounds K (default 1) each case is measured K times, ORT and ours
alternating, and the table gives the median over the rounds of each side's
median and the median of the rounds' ratios: on a machine whose speed
drifts, a ratio of two measurements taken seconds apart is steadier than
one of two medians taken minutes apart.
With --statistic min each side's fastest run stands for it (per round, and
the fastest over the rounds; ratios of those minimums): on a machine whose
speed switches between modes within seconds, the minimum is the time an
undisturbed run takes, where the median mixes the modes.
With --int8-activations our runs pass `--int8-activations` (MatMulNBits
nodes with accuracy_level = 4 quantize activations as ORT does); with
--model, ours is then timed both ways in the same run.
Prints a table (case, threads, ORT ms, ours ms, ours/ORT) and writes it as
JSON to --json PATH if given. It reports; it does not judge: exit 0 unless a
run fails. Timings on a shared or busy machine are noisy: compare ratios from
the same run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # keep tests/conformance free of __pycache__
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RunFailed, binary_exists, parse_timing, run_cli, write_npz  # noqa: E402
from parity import PREFILL_T, presents_as_past, tiny_llm_feeds  # noqa: E402


def ort_session(model: Path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])


def time_ort(sess, feeds: dict, warmup: int, repeat: int) -> tuple[float, float]:
    names = [o.name for o in sess.get_outputs()]
    for _ in range(warmup):
        sess.run(names, feeds)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        sess.run(names, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), min(times)


# Each ratio field and the (numerator, denominator) times it divides.
RATIOS = {"ratio": ("ours_ms", "ort_ms"), "ratio_level0": ("ours_ms", "ort_level0_ms"),
          "ratio_int8": ("ours_int8_ms", "ort_ms")}


def pick(statistic: str, median: float, minimum: float) -> float:
    """The per-run statistic --statistic asks for."""
    return minimum if statistic == "min" else median


def over_rounds(per_round: list[dict], statistic: str = "median") -> dict:
    """Each field's median over the rounds (a ratio: the median of the
    rounds' ratios, not the ratio of medians), or with statistic "min" each
    time's minimum over the rounds and the ratios of those minimums; the
    rounds themselves under "rounds" when there are several."""
    if statistic == "min":
        out = {k: min(r[k] for r in per_round) for k in per_round[0] if k not in RATIOS}
        for k, (num, den) in RATIOS.items():
            if k in per_round[0]:
                out[k] = out[num] / out[den]
    else:
        out = {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}
    if len(per_round) > 1:
        out["rounds"] = per_round
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, help="the onnx-prepared binary")
    parser.add_argument("--fixtures", type=Path, help="the make-fixtures output dir (tiny-llm)")
    parser.add_argument("--model", type=Path,
                        help="a decoder model instead of tiny-llm (e.g. a GenAI-builder int4 model); "
                             "inputs by role as real_models.py makes them")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per case (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed ORT runs first (default 3)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure each case this many times, ORT and ours alternating (default 1)")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    parser.add_argument("--int8-activations", action="store_true",
                        help="pass --int8-activations to our runs (with --model: time ours both ways)")
    parser.add_argument("--feeds", type=Path,
                        help="with --model: the inputs as an .npz (default: drawn at the declared shapes)")
    parser.add_argument("--statistic", choices=("median", "min"), default="median",
                        help="what stands for a side in a round: its median run or its fastest (default median)")
    args = parser.parse_args()

    if not binary_exists(args.bin):
        print(f"error: {args.bin} not found", file=sys.stderr)
        return 2
    if args.model is not None:
        import onnxruntime as ort

        inputs = ort.InferenceSession(str(args.model), providers=["CPUExecutionProvider"]).get_inputs()
        if args.feeds or not any("input_ids" in i.name for i in inputs):
            return feed_forward_model(args)
        return decoder_model(args)
    if args.fixtures is None:
        print("error: give --fixtures or --model", file=sys.stderr)
        return 2
    model = args.fixtures / "tiny-llm.onnx"
    if not model.exists():
        print(f"error: {model} not found", file=sys.stderr)
        return 2
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    repeat = max(1, args.repeat)

    rows = []
    with tempfile.TemporaryDirectory(prefix="speed-") as tmp:
        tmp = Path(tmp)
        sess = ort_session(model, 1)
        prefill = tiny_llm_feeds(sess, PREFILL_T, 0, seed=11, past=None)
        names = [o.name for o in sess.get_outputs()]
        past = presents_as_past(dict(zip(names, sess.run(names, prefill))))
        decode = tiny_llm_feeds(sess, 1, PREFILL_T, seed=12, past=past)
        del sess
        cases = [(f"prefill T={PREFILL_T} P=0", prefill), (f"decode T=1 P={PREFILL_T}", decode)]
        for i, (_, feeds) in enumerate(cases):
            write_npz(tmp / f"case{i}.npz", feeds)

        for n in threads:
            sess = ort_session(model, n)
            for i, (label, feeds) in enumerate(cases):
                per_round = []
                for _ in range(max(1, args.rounds)):
                    ort_median, ort_min = time_ort(sess, feeds, args.warmup, repeat)
                    try:
                        stdout = run_cli(args.bin, model, tmp / f"case{i}.npz", threads=n, repeat=repeat,
                                         extra=("--int8-activations",) if args.int8_activations else ())
                        ours = parse_timing(stdout)
                    except (RunFailed, ValueError) as e:
                        print(f"error: {label}, threads={n}: {e}", file=sys.stderr)
                        return 1
                    ort_t = pick(args.statistic, ort_median, ort_min)
                    ours_t = pick(args.statistic, ours["median_ms"], ours["min_ms"])
                    per_round.append({
                        "ort_ms": ort_t,
                        "ort_min_ms": ort_min,
                        "ours_ms": ours_t,
                        "ours_min_ms": ours["min_ms"],
                        "ours_first_run_ms": ours["first_run_ms"],
                        "ours_load_ms": ours["load_ms"],
                        "ratio": ours_t / ort_t,
                    })
                rows.append({"case": label, "threads": n, **over_rounds(per_round, args.statistic),
                             "runs": repeat})
            del sess

    print(f"{'case':<20} {'threads':>7} {'ORT ms':>10} {'ours ms':>10} {'ours/ORT':>9}")
    for r in rows:
        print(f"{r['case']:<20} {r['threads']:>7} {r['ort_ms']:>10.3f} {r['ours_ms']:>10.3f} {r['ratio']:>9.2f}")
    print(f"({args.statistic} of {repeat} timed runs each; ours excludes its first run; "
          f"--json adds min, our load and first-run times)")
    print_rounds_note(args)
    if args.json:
        args.json.write_text(json.dumps({"model": str(model), "rows": rows}, indent=2) + "\n")
    return 0


def print_rounds_note(args) -> None:
    """How the rounds were combined (printed under the table)."""
    if args.rounds <= 1:
        return
    if args.statistic == "min":
        print(f"(fastest over {args.rounds} rounds, ORT and ours alternating; ratios of those minimums)")
    else:
        print(f"(medians over {args.rounds} rounds, ORT and ours alternating; ratios: medians of the rounds' ratios)")


def feed_forward_model(args) -> int:
    """--model with no token ids (a vision or audio encoder): one case, each
    float input standard normal at its declared shape (symbolic dims 1),
    against ORT as users run it (default graph optimizations)."""
    import numpy as np

    model = args.model
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    repeat = max(1, args.repeat)
    rows = []
    with tempfile.TemporaryDirectory(prefix="speed-") as tmp:
        tmp = Path(tmp)
        rng = np.random.default_rng(11)
        probe = ort_session(model, 1)
        types = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
        ranges = {"tensor(uint8)": (0, 256, np.uint8), "tensor(int8)": (-128, 128, np.int8)}

        def draw(i):
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            if i.type in ranges:
                lo, hi, dt = ranges[i.type]
                return rng.integers(lo, hi, shape, dtype=dt)
            return rng.standard_normal(shape).astype(types[i.type])

        if args.feeds:
            with np.load(args.feeds) as saved:
                feeds = {k: saved[k] for k in saved.files}
        else:
            feeds = {i.name: draw(i) for i in probe.get_inputs()}
        del probe
        write_npz(tmp / "case.npz", feeds)
        label = "x".join(str(d) for d in next(iter(feeds.values())).shape)
        for n in threads:
            sess = ort_session(model, n)
            per_round = []
            for _ in range(max(1, args.rounds)):
                ort_t = pick(args.statistic, *time_ort(sess, feeds, args.warmup, repeat))
                try:
                    ours = parse_timing(run_cli(args.bin, model, tmp / "case.npz", threads=n, repeat=repeat))
                except (RunFailed, ValueError) as e:
                    print(f"error: threads={n}: {e}", file=sys.stderr)
                    return 1
                ours_t = pick(args.statistic, ours["median_ms"], ours["min_ms"])
                per_round.append({"ort_ms": ort_t, "ours_ms": ours_t,
                                  "ours_first_run_ms": ours["first_run_ms"], "ratio": ours_t / ort_t})
            rows.append({"case": label, "threads": n, **over_rounds(per_round, args.statistic), "runs": repeat})
            del sess
    print(f"{model}")
    print(f"{'case':<20} {'threads':>7} {'ORT ms':>9} {'ours ms':>9} {'/ORT':>6}")
    for r in rows:
        print(f"{r['case']:<20} {r['threads']:>7} {r['ort_ms']:>9.3f} {r['ours_ms']:>9.3f} {r['ratio']:>6.2f}")
    print(f"({args.statistic} of {repeat} timed runs each)")
    print_rounds_note(args)
    if args.json:
        args.json.write_text(json.dumps({"model": str(model), "rows": rows}, indent=2) + "\n")
    return 0


def decoder_model(args) -> int:
    """--model: prefill T=128 P=0 and decode T=1 P=128 on a decoder model,
    against ORT as users run it (default graph optimizations; int4 MatMuls
    with int8 activations where the model asks for them) and against ORT
    with int8 activations off (accuracy level 0, the exact fp32 reference)."""
    import onnxruntime as ort

    from real_models import head_size, make_inputs, ort_session as exact_session, present_to_past, vocab_of

    model = args.model
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    repeat = max(1, args.repeat)
    rows = []
    with tempfile.TemporaryDirectory(prefix="speed-") as tmp:
        tmp = Path(tmp)
        exact = exact_session(model, tmp)
        head = head_size(model)
        rng = __import__("numpy").random.default_rng(11)
        ids = rng.integers(0, vocab_of(exact), size=PREFILL_T)
        prefill = make_inputs(exact, PREFILL_T, 0, ids, None, head)
        names = [o.name for o in exact.get_outputs()]
        outs = dict(zip(names, exact.run(names, prefill)))
        pairs = present_to_past(exact)
        decode = make_inputs(exact, 1, PREFILL_T, ids[:1], {pairs[o]: outs[o] for o in pairs}, head)
        cases = [(f"prefill T={PREFILL_T} P=0", prefill), (f"decode T=1 P={PREFILL_T}", decode)]
        for i, (_, feeds) in enumerate(cases):
            write_npz(tmp / f"case{i}.npz", feeds)
        for n in threads:
            default = ort_session(model, n)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = n
            opts.inter_op_num_threads = 1
            opts.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
            level0_path = model
            copy = tmp / model.parent.name / model.name
            if copy.exists():
                level0_path = copy  # real_models.ort_session's rewritten copy
            level0 = ort.InferenceSession(str(level0_path), opts, providers=["CPUExecutionProvider"])
            for i, (label, feeds) in enumerate(cases):
                per_round = []
                for _ in range(max(1, args.rounds)):
                    ort_t = pick(args.statistic, *time_ort(default, feeds, args.warmup, repeat))
                    exact_t = pick(args.statistic, *time_ort(level0, feeds, args.warmup, repeat))
                    try:
                        ours = parse_timing(run_cli(args.bin, model, tmp / f"case{i}.npz", threads=n,
                                                    repeat=repeat))
                        int8 = parse_timing(run_cli(args.bin, model, tmp / f"case{i}.npz", threads=n,
                                                    repeat=repeat, extra=("--int8-activations",))) \
                            if args.int8_activations else None
                    except (RunFailed, ValueError) as e:
                        print(f"error: {label}, threads={n}: {e}", file=sys.stderr)
                        return 1
                    ours_t = pick(args.statistic, ours["median_ms"], ours["min_ms"])
                    r = {
                        "ort_ms": ort_t, "ort_level0_ms": exact_t,
                        "ours_ms": ours_t, "ours_first_run_ms": ours["first_run_ms"],
                        "ratio": ours_t / ort_t, "ratio_level0": ours_t / exact_t,
                    }
                    if int8 is not None:
                        r["ours_int8_ms"] = pick(args.statistic, int8["median_ms"], int8["min_ms"])
                        r["ratio_int8"] = r["ours_int8_ms"] / ort_t
                    per_round.append(r)
                rows.append({"case": label, "threads": n, **over_rounds(per_round, args.statistic),
                             "runs": repeat})
            del default, level0
    head = f"{'case':<20} {'threads':>7} {'ORT ms':>9} {'ORT lvl0':>9} {'ours ms':>9} {'/ORT':>6} {'/lvl0':>6}"
    print(head + (f" {'int8 ms':>9} {'int8/ORT':>8}" if args.int8_activations else ""))
    for r in rows:
        line = (f"{r['case']:<20} {r['threads']:>7} {r['ort_ms']:>9.3f} {r['ort_level0_ms']:>9.3f} "
                f"{r['ours_ms']:>9.3f} {r['ratio']:>6.2f} {r['ratio_level0']:>6.2f}")
        if "ours_int8_ms" in r:
            line += f" {r['ours_int8_ms']:>9.3f} {r['ratio_int8']:>8.2f}"
        print(line)
    print(f"({args.statistic} of {repeat} timed runs each; ORT lvl0: int8 activations off)")
    print_rounds_note(args)
    if args.json:
        args.json.write_text(json.dumps({"model": str(model), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
