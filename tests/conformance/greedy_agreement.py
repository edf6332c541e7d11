#!/usr/bin/env python3
"""Greedy tokens of the int4 GenAI models against an f32 reference.

    python tests/conformance/greedy_agreement.py --bin target/release/onnx-prepared [--tokens 32] [--prompts 8]

For each family with both a `-genai-fp32` and a `-genai-int4` folder among
the committed real models (the same checkpoint, exported by the ONNX
Runtime GenAI builder at fp32 and at int4), greedy-decodes `--tokens`
tokens after each of `--prompts` random 12-token prompts with:

* the fp32 folder (the f32 reference);
* the int4 folder, exact f32 activations;
* the int4 folder, `--int8-activations` (onnxruntime-genai's default mode).

Reports, per family and mode, the tokens equal to the reference at the
same position and the mean length of the common prefix, and the same for
the int8-activation tokens against the int4 folder's exact ones (the
activation quantization alone) (greedy decoding
diverges for good at the first differing token). Random-weight models
have small logit margins, so this is a lower bound of what trained
weights give. It reports and does not judge.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np

REAL = Path(__file__).resolve().parents[2] / "tests" / "models" / "real"


def generate(binary: str, folder: Path, prompt: list[int], tokens: int, int8: bool) -> list[int]:
    cmd = [binary, "generate", str(folder), "--prompt-ids", *map(str, prompt), "--max-new-tokens", str(tokens),
           "--greedy", "--ignore-eos", "--json", "--threads", "1"]  # fmt: skip
    if int8:
        cmd.append("--int8-activations")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tokens"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=8)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 256, size=12).tolist() for _ in range(args.prompts)]
    print(f"{'family':8s} {'mode':22s} {'equal tokens':>14s} {'mean common prefix':>20s}")
    for fp32 in sorted(REAL.glob("*-genai-fp32")):
        family = fp32.name.removesuffix("-genai-fp32")
        int4 = REAL / f"{family}-genai-int4"
        if not int4.is_dir():
            continue
        runs = {
            "fp32": [generate(args.bin, fp32, p, args.tokens, False) for p in prompts],
            "int4": [generate(args.bin, int4, p, args.tokens, False) for p in prompts],
            "int8": [generate(args.bin, int4, p, args.tokens, True) for p in prompts],
        }
        for mode, got, reference in (
            ("int4, exact f32", runs["int4"], runs["fp32"]),
            ("int4, int8 activations", runs["int8"], runs["fp32"]),
            ("int8 vs int4 exact", runs["int8"], runs["int4"]),
        ):
            equal = sum(a == b for g, r in zip(got, reference) for a, b in zip(g, r))
            prefixes = [next((i for i, (a, b) in enumerate(zip(g, r)) if a != b), len(r)) for g, r in zip(got, reference)]
            total = args.tokens * len(prompts)
            print(f"{family:8s} {mode:22s} {equal:5d}/{total:<5d} {equal / total:5.1%} {np.mean(prefixes):10.1f} of {args.tokens}")


if __name__ == "__main__":
    main()
