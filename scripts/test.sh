#!/usr/bin/env bash
# Set up everything and run the whole test suite (the README's test command; CI runs it too).
# Needs Python >= 3.11 with venv, pip, a C++ compiler and cmake; installs tmux (for the end-to-end TUI
# test) with apt when it is missing, builds and caches llama-server on first use (about 6 min).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v tmux >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
    ($SUDO apt-get update -qq && $SUDO apt-get install -y -qq tmux) \
        || echo "warning: tmux could not be installed; the end-to-end TUI test will fail" >&2
fi

python3 -m venv .venv
.venv/bin/pip install -q -e '.[test]'
.venv/bin/mtp-tune doctor --build
.venv/bin/python -m pytest -q -ra "$@"
