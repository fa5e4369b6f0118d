#!/usr/bin/env bash
# The one gate, the same locally and in CI: install, lint, type-check, test.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[dev]'
python3 -m ruff format --check pipeline tests scripts
python3 -m ruff check pipeline tests scripts
python3 -m mypy
python3 -m pytest -q -m "not slow" "$@"
