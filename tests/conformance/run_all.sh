#!/usr/bin/env bash
# The conformance checks CI runs: ONNX Runtime parity on the fixtures and on
# the committed real, vision and quantized models (tests/models/real,
# tests/models/vision, tests/models/quant) and on every quantized operator,
# the convolution chains the runtime fuses, tokenizers, chat templates and
# text generation (tests/models/tokenizers), the prepared cache's
# companion model against onnx.checker, and the
# ONNX backend node tests (SIMD kernels, then --portable scalar kernels,
# then the AVX2 families where the CPU's best is AVX-512).
# Builds nothing: pass the built binary and the make-fixtures output dir.
#
#   tests/conformance/run_all.sh BIN FIXTURES_DIR
#
# Python: $PYTHON, else target/venv/bin/python (tools/requirements.txt), else
# python3. compare_speed.py is not run here: timings are too noisy for CI.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 BIN FIXTURES_DIR" >&2
    exit 2
fi
bin=$1
fixtures=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

if [[ -n ${PYTHON:-} ]]; then
    python=$PYTHON
elif [[ -x $root/target/venv/bin/python ]]; then
    python=$root/target/venv/bin/python
else
    python=python3
fi
if [[ ! -x $bin ]]; then
    echo "error: $bin is not an executable" >&2
    exit 2
fi
if [[ ! -d $fixtures ]]; then
    echo "error: $fixtures is not a directory" >&2
    exit 2
fi

failed=()
run() {
    local name=$1
    shift
    echo "== $name"
    if "$python" "$@"; then
        echo "== $name: ok"
    else
        echo "== $name: FAILED"
        failed+=("$name")
    fi
    echo
}

run "parity" "$here/parity.py" --bin "$bin" --fixtures "$fixtures"
run "real models" "$here/real_models.py" --bin "$bin"
run "vision models" "$here/vision_models.py" --bin "$bin"
run "quantized models" "$here/quantized_models.py" --bin "$bin"
run "convolution chains" "$here/conv_fusion.py" --bin "$bin"
run "text" "$here/text.py" --bin "$bin"
run "windowed attention" "$here/windowed_attention.py" --bin "$bin"
run "prepared cache" "$here/prepared_cache.py" --bin "$bin" --fixtures "$fixtures"
run "node tests" "$here/node_tests.py" --bin "$bin"
run "node tests (portable)" "$here/node_tests.py" --bin "$bin" --portable
if grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx2 /proc/cpuinfo; then
    # The AVX2 kernel families too, on a machine whose best is AVX-512.
    run "node tests (avx2)" "$here/node_tests.py" --bin "$bin" --isa avx2
fi

if [[ ${#failed[@]} -ne 0 ]]; then
    echo "conformance FAILED: ${failed[*]}"
    exit 1
fi
echo "conformance ok"
