#!/usr/bin/env bash
# Generates include/onnx_prepared.h from capi/src with cbindgen, or with
# `--check` fails when the checked-in header differs from what cbindgen
# generates now. Needs `cbindgen` on PATH (`cargo install --locked cbindgen`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

header=include/onnx_prepared.h
generate() {
    cbindgen --quiet --config capi/cbindgen.toml --crate onnx-prepared-capi --output "$1" capi
}

case "${1:-}" in
    --check)
        fresh=$(mktemp)
        trap 'rm -f "$fresh"' EXIT
        generate "$fresh"
        if ! diff -u "$header" "$fresh"; then
            echo "$header is stale: run bash tools/c_header.sh and commit it" >&2
            exit 1
        fi
        echo "$header is current"
        ;;
    "")
        generate "$header"
        echo "wrote $header"
        ;;
    *)
        echo "usage: $0 [--check]" >&2
        exit 2
        ;;
esac
