#!/usr/bin/env bash
# The one gate, the same locally and in CI: install, lint, type-check, test.
#   bash scripts/test.sh            # everything but the long chaos/scale runs
#   bash scripts/test.sh -m slow    # only the long ones (pytest args pass through)
#   REGEN_REAL_SERVER=1 bash scripts/test.sh   # also build the real vLLM server's environment (CI always does)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[dev]'
# The HTML report's render test needs a system Chromium; without one it is skipped (nothing here needs root).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 && [ -z "${REGEN_CHROMIUM:-}" ]; then
  echo "scripts/test.sh: no chromium on PATH: the HTML report's render test will be skipped (apt-get install chromium, or set REGEN_CHROMIUM)" >&2
fi
python3 -m ruff format --check pipeline regen tests scripts
python3 -m ruff check pipeline regen tests scripts
python3 -m mypy
real=0
if [ "$#" -eq 0 ]; then set -- -m "not slow and not real_server"; real=1; fi
# Three pytest workers on two cores: most tests wait on simulators running at scaled real durations (the serial
# suite used ~0.6 of a core over ~11 min); worksteal keeps the long integration tests from queueing on one worker.
python3 -m pytest -q -n 3 --dist worksteal "$@"
# Then the tests against a real vLLM server (tests/real, marked real_server), apart: one server for the session,
# no workers. CI builds their environment first (scripts/real_server.sh: ~3-10 min on a new machine, then cached);
# elsewhere REGEN_REAL_SERVER=1 builds it, and without it they skip saying how (in CI they fail saying what is
# missing). REGEN_REAL_SERVER=0 leaves them out.
if [ "$real" = 1 ] && [ "${REGEN_REAL_SERVER:-}" != 0 ]; then
  if [ -n "${CI:-}" ] || [ "${REGEN_REAL_SERVER:-}" = 1 ]; then
    bash scripts/real_server.sh build >/dev/null || echo "scripts/test.sh: the real-server environment did not build" >&2
  fi
  python3 -m pytest -q -m real_server tests/real
fi
