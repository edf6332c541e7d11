#!/usr/bin/env python3
"""The prepared cache against the ONNX tools: a run under build-if-missing
writes a companion model that passes `onnx.checker.check_model(full_check=True)`
(external payloads present, UINT8 initializers, the prepack metadata); a
second process under require-complete reads no source byte, packs nothing,
and its outputs equal the first run's bit for bit (and ONNX Runtime's within
the parity tolerance on tiny-llm).

    prepared_cache.py --bin target/debug/onnx-prepared --fixtures target/fixtures
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bin_command, max_abs, max_abs_err, read_npz, write_npz  # noqa: E402
from parity import ort_run, ort_session, tiny_llm_feeds  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "models" / "real"
# One model per producer family; tests/cache_real_models.rs covers them all.
REAL_MODELS = ["llama-genai-int4", "qwen2-nbits-asym", "phi3-torch-dynamo", "mistral-genai-int4"]
PREPACK_KEYS = [
    "onnx_light.prepack.source_lineage_digest",
    "onnx_light.prepack.source_lineage",
    "onnx_light.prepack.layout",
    "onnx_light.prepack.device",
    "onnx_light.prepack.kernel_abi",
    "onnx_light.prepack.format_version",
]


def run(binary: str, model: Path, cache: Path, policy: str, out: Path, inputs: Path | None):
    out.mkdir(parents=True, exist_ok=True)
    cmd = bin_command(binary) + [
        "run", str(model),
        "--cache", str(cache), "--cache-policy", policy,
        "--outputs", str(out / "out.npz"), "--stats", str(out / "stats.json"),
    ]
    if inputs is not None:
        cmd += ["--inputs", str(inputs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip()}")
    return read_npz(out / "out.npz"), json.loads((out / "stats.json").read_text())


def check_companions(cache: Path) -> list[str]:
    import onnx

    problems = []
    companions = sorted(cache.glob("*.prepared.onnx"))
    if len(companions) != 1:
        return [f"{len(companions)} companion models in {cache}"]
    for path in companions:
        try:
            onnx.checker.check_model(str(path), full_check=True)
        except Exception as e:  # noqa: BLE001 - report any checker failure
            problems.append(f"{path.name}: onnx.checker: {e}")
            continue
        m = onnx.load(str(path), load_external_data=False)
        props = {p.key: p.value for p in m.metadata_props}
        if "onnx_prepared.cache_format_version" not in props:
            problems.append(f"{path.name}: no cache format version")
        if not m.graph.initializer:
            problems.append(f"{path.name}: no initializer")
        for t in m.graph.initializer:
            meta = {p.key: p.value for p in t.metadata_props}
            ext = {p.key: p.value for p in t.external_data}
            if t.data_type != onnx.TensorProto.UINT8 or t.data_location != onnx.TensorProto.EXTERNAL:
                problems.append(f"{t.name}: not an external UINT8 tensor")
            if not t.name.startswith("prepared/"):
                problems.append(f"{t.name}: not named prepared/<key>")
            missing = [k for k in PREPACK_KEYS if k not in meta]
            if missing:
                problems.append(f"{t.name}: missing {missing}")
            if int(ext.get("offset", "-1")) % 64 != 0:
                problems.append(f"{t.name}: payload not 64-byte aligned")
            payload = path.parent / ext.get("location", "")
            if not payload.is_file() or payload.stat().st_size != int(ext.get("length", "-1")):
                problems.append(f"{t.name}: payload {payload} missing or of another size")
    return problems


def check(binary: str, model: Path, tmp: Path, inputs: Path | None, ort_ref: dict | None) -> list[str]:
    cache = tmp / "cache"
    first, s1 = run(binary, model, cache, "build-if-missing", tmp / "first", inputs)
    problems = [f"first run: {d}" for d in s1["cache_diagnostics"]]
    if s1["cache_writes"] == 0:
        problems.append("the first run wrote nothing")
    problems += check_companions(cache)
    second, s2 = run(binary, model, cache, "require-complete", tmp / "second", inputs)
    for key in ("source_bytes_read", "prepacks"):
        if s2[key] != 0:
            problems.append(f"cached run: {key} = {s2[key]}")
    if s2["packed_bytes_read"] == 0:
        problems.append("cached run read no packed byte")
    for name, value in first.items():
        if not np.array_equal(value, second[name]):
            problems.append(f"{name}: the cached run's output differs from the first run's")
    if ort_ref is not None:
        for name, ref in ort_ref.items():
            err = max_abs_err(second[name], ref)
            if err > 1e-4 * max(1.0, max_abs(ref)):
                problems.append(f"{name}: {err:.3g} from ONNX Runtime")
    print(
        f"  first: {s1['source_bytes_read']} source bytes, {s1['prepacks']} prepacks, "
        f"{s1['cache_writes']} writes; cached: {s2['source_bytes_read']} source bytes, "
        f"{s2['prepacks']} prepacks, {s2['packed_bytes_read']} packed bytes, {s2['cache_hits']} hits"
    )
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--fixtures", required=True, type=Path)
    args = ap.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tiny = args.fixtures / "tiny-llm.onnx"
        sess = ort_session(tiny)
        feeds = tiny_llm_feeds(sess, 4, 0, seed=21, past=None)
        write_npz(tmp / "tiny-inputs.npz", feeds)
        cases = [("tiny-llm", tiny, tmp / "tiny-inputs.npz", ort_run(sess, feeds))]
        cases += [(name, REAL / name / "model.onnx", None, None) for name in REAL_MODELS]
        for name, model, inputs, ref in cases:
            print(name)
            try:
                problems = check(args.bin, model, tmp / name, inputs, ref)
            except RuntimeError as e:
                problems = [str(e)]
            for p in problems:
                print(f"  FAILED: {p}")
            failures += bool(problems)
    print(f"prepared cache: {len(cases) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
