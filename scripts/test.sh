#!/usr/bin/env bash
# The one gate, the same locally and in CI: install, lint, type-check, test.
#   bash scripts/test.sh            # everything but the long chaos/scale runs
#   bash scripts/test.sh -m slow    # only the long ones (pytest args pass through)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[dev]'
# The HTML report's render test needs a system Chromium; without one it is skipped (nothing here needs root).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && [ -z "${REGEN_CHROMIUM:-}" ]; then
  echo "scripts/test.sh: no chromium on PATH: the HTML report's render test will be skipped (apt-get install chromium, or set REGEN_CHROMIUM)" >&2
fi
python3 -m ruff format --check pipeline tests scripts
python3 -m ruff check pipeline tests scripts
python3 -m mypy
if [ "$#" -eq 0 ]; then set -- -m "not slow"; fi
# Three pytest workers on two cores: most tests wait on simulators running at scaled real durations (the serial
# suite used ~0.6 of a core over ~11 min); worksteal keeps the long integration tests from queueing on one worker.
python3 -m pytest -q -n 3 --dist worksteal "$@"
