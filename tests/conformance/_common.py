"""Shared helpers of the conformance scripts (not a script itself).

Only numpy and the standard library here, so that every script can import
this module without pulling in onnx or onnxruntime.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

# The additive mask value of the fixtures' causal attention bias (the same
# value tools/check_fixtures.py uses).
MASK = -10000.0

# NumPy dtype descriptors the runtime's .npz reader and writer handle
# (src/npz.rs); anything else (strings, bfloat16, float8, 4-bit, complex,
# object) cannot cross the file interface.
NPZ_DESCRS = {
    "<f4", "<f8", "<f2",
    "|i1", "<i2", "<i4", "<i8",
    "|u1", "<u2", "<u4", "<u8",
    "|b1",
}


def npz_representable(array: np.ndarray) -> bool:
    return isinstance(array, np.ndarray) and array.dtype.str in NPZ_DESCRS


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Writes named arrays as an uncompressed .npz (what np.savez writes).

    Written by hand rather than with np.savez(path, **arrays) so that an
    input called `file` or `allow_pickle` cannot collide with np.savez's own
    parameters.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, array in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(
                    f, np.asarray(array, order="C"), allow_pickle=False
                )


def read_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def causal_bias(t: int, p: int) -> np.ndarray:
    """[1, 1, T, P+T] additive mask: 0 where key j <= P + i, MASK after.

    Same construction as tools/check_fixtures.py.
    """
    bias = np.zeros((1, 1, t, p + t), dtype=np.float32)
    for i in range(t):
        bias[0, 0, i, p + i + 1 :] = MASK
    return bias


def bin_command(binary: str) -> list[str]:
    """The command prefix for --bin: a .py file (e.g. ort_cli.py, the
    harness self-test stand-in) runs under this interpreter."""
    if binary.endswith(".py"):
        return [sys.executable, binary]
    return [binary]


def binary_exists(binary: str) -> bool:
    import shutil

    return Path(binary).is_file() or shutil.which(binary) is not None


class RunFailed(Exception):
    """`onnx-prepared run` exited non-zero (or timed out)."""

    def __init__(self, rc: int | None, stderr: str):
        self.rc = rc
        self.stderr = stderr
        super().__init__(f"exit {rc}: {last_error_line(stderr)}")


def last_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error:"):
            return line
    return lines[-1] if lines else "(no stderr)"


def run_cli(
    binary: str,
    model: Path,
    inputs: Path | None = None,
    outputs: Path | None = None,
    threads: int | None = None,
    portable: bool = False,
    repeat: int | None = None,
    timeout: float = 600.0,
    mode: str | None = None,
    extra: tuple[str, ...] = (),
) -> str:
    """Runs `onnx-prepared run` (with `extra` flags appended); returns its
    stdout; raises RunFailed."""
    cmd = bin_command(binary) + ["run", str(model)]
    if inputs is not None:
        cmd += ["--inputs", str(inputs)]
    if outputs is not None:
        cmd += ["--outputs", str(outputs)]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    if repeat is not None:
        cmd += ["--repeat", str(repeat)]
    if portable:
        cmd.append("--portable")
    if mode is not None:
        cmd += ["--mode", mode]
    cmd += list(extra)
    env = dict(os.environ)
    env.setdefault("RUST_BACKTRACE", "1")
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise RunFailed(None, err + f"\ntimed out after {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise RunFailed(proc.returncode, proc.stderr)
    return proc.stdout


def parse_timing(stdout: str) -> dict:
    """The one JSON line `run --repeat N` prints."""
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in the output: {stdout!r}")


def max_abs_err(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| in float64; inf when out is non-finite where ref is
    finite (or vice versa); 0 for empty arrays."""
    if out.size == 0:
        return 0.0
    a = out.astype(np.float64)
    b = ref.astype(np.float64)
    same_nonfinite = ~np.isfinite(a) & ~np.isfinite(b) & ((a == b) | (np.isnan(a) & np.isnan(b)))
    diff = np.where(same_nonfinite, 0.0, np.abs(a - b))
    diff = np.where(np.isnan(diff), np.inf, diff)
    return float(np.max(diff))


def max_abs(ref: np.ndarray) -> float:
    if ref.size == 0:
        return 0.0
    finite = np.abs(ref.astype(np.float64))
    finite = finite[np.isfinite(finite)]
    return float(np.max(finite)) if finite.size else 0.0
