#!/usr/bin/env bash
# The prepared real-GPU check (issue 15; docs/gpu-check.md says how to run it on the lent machine).
#
#   scripts/gpu-check.sh build [--out DIR]   # CUDA llama-server, llama-fit-params, ggml-rpc-server
#   scripts/gpu-check.sh run   [--out DIR]   # records, matrix, 6 GiB laptop, first-decode OOM
#   scripts/gpu-check.sh all   [--out DIR]   # both, in one call (resumable: run it again to continue)
#   scripts/gpu-check.sh --dry-run [...]     # CPU only, on tests/data/gpu_check/ samples
#
# Offline: the Python dependencies and the llama.cpp sdist travel in .whl/ (see docs/gpu-check.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

dry=0
for arg in "$@"; do
    if [[ "$arg" == "--dry-run" ]]; then dry=1; fi
done

if [[ $dry -eq 1 ]]; then
    PY="${PYTHON:-}"
    if [[ -z "$PY" ]]; then
        if [[ -x "$ROOT/.venv/bin/python" ]]; then PY="$ROOT/.venv/bin/python"; else PY="python3"; fi
    fi
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    PY="${PYTHON:-python3}"
    SITE="${GPU_CHECK_SITE:-/tmp/gpu-check-site}"
    if [[ ! -f "$SITE/.installed" ]]; then
        shopt -s nullglob
        wheels=("$ROOT"/.whl/*.whl)
        shopt -u nullglob
        if [[ ${#wheels[@]} -eq 0 ]]; then
            echo "gpu-check: no wheels in .whl/ (carry .whl; docs/gpu-check.md lists them)" >&2
            exit 2
        fi
        timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "${wheels[@]}"
        touch "$SITE/.installed"
    fi
    export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
exec "$PY" -m bench.gpu_check "$@"
